"""C++ kernels built once per machine and version, shared safely by every process and checkout.

``build("interp_mamba_kernels", [source], ...)`` returns the compiled module, or None (after one
warning line) where it cannot be had: no compiler, a failed build, or another process that has
been building it for longer than the wait allows. Callers then run eager torch.

Where. ``$INTERP_BUILD_DIR``, else ``$XDG_CACHE_HOME/interp/builds``, else ``~/.cache/interp/builds``,
one folder per build: ``NAME-VERSION-KEY``, VERSION the package's version and KEY a hash of the
sources, the flags, torch's and Python's versions and this CPU (the kernels are compiled for the
CPU they run on). Two checkouts of different versions, or of the same version with edited sources,
never share (or rebuild) each other's folder; two of the same code share one build.

How. A build runs in a temporary folder next to its final one and is published by renaming that
folder into place, after ``build.json`` (the record of what it holds) is written: a folder with a
``build.json`` is complete, whatever was killed when. Builds are serialised by the toolkit's one lock
(``ground.locks.Lock``) on a file beside the folder (``NAME-VERSION-KEY.lock``): a build killed half way
leaves no lock held, and one whose named holder has ended (the lock kept only by a process it forked) is
taken over. A process that finds the lock held waits (saying so every few seconds) at most
``$INTERP_BUILD_WAIT`` seconds (default 600), then runs eager. Publishing is atomic besides, so even two
builds of one key at once (on a file system that shares no lock between machines) leave one complete
folder: whichever is renamed into place first is the one every process loads.
"""
from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from ground.locks import TICK_S, Busy, Lock, NotALockFile
from ground.terminal import say

DEFAULT_WAIT_S = 600.0


class NotALock(Exception):
    """A link where a folder of the build cache goes (a build there would be written, and loaded, wherever it
    points)."""


def build_root() -> Path:
    return named_root() / ("" if os.environ.get("INTERP_BUILD_DIR") else "interp/builds")


def named_root() -> Path:
    """The folder the user named for builds: INTERP_BUILD_DIR, else the cache's base (XDG_CACHE_HOME)."""
    return Path(os.environ.get("INTERP_BUILD_DIR") or os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def link_below(root: Path, path: Path) -> Path | None:
    """The first level below ``root`` down to ``path`` that is a symbolic link (a build there would be written, and
    later loaded, wherever it points), else None."""
    rest = path.relative_to(root).parts
    return next((level for level in (root.joinpath(*rest[:i]) for i in range(1, len(rest) + 1))
                 if os.path.islink(level)), None)


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bayesian-wind-tunnels")
    except PackageNotFoundError:
        return "0"


def build_key(sources: list[Path], flags: list[str]) -> str:
    """A hash of everything the compiled module depends on."""
    import torch

    digest = hashlib.sha256()
    for source in sources:
        digest.update(Path(source).read_bytes())
    cpu = ""
    try:  # -march=native: a build is for this CPU's instruction set
        cpu = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        pass
    for part in (*flags, torch.__version__, sys.implementation.cache_tag, platform.machine(), cpu):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def folder_for(name: str, sources: list[Path], flags: list[str]) -> Path:
    return build_root() / f"{name}-{package_version()}-{build_key(sources, flags)}"


def published(folder: Path, name: str) -> Path | None:
    """The module file of a complete build in ``folder`` (its build.json written last names it), else None."""
    try:
        record = json.loads((folder / "build.json").read_text())
        module = folder / record["module"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return module if record.get("name") == name and module.is_file() else None


def import_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_lock(folder: Path, wait_s: float, what: str) -> Lock:
    """The lock of one build folder, which says its waits and a takeover on the terminal."""
    def waiting(holder, waited):
        who = f"pid {holder}" if holder else "another process"
        say(f"waiting for {who} to finish building the {what} ({waited:.0f} s of at most {wait_s:.0f} s)...")

    def taking_over(holder):
        say(f"the lock of the {what} names pid {holder}, which has ended; taking it over")

    return Lock(folder.with_name(folder.name + ".lock"), wait_s, waiting, taking_over)


@contextmanager
def ticking(text: str):
    """Print ``text``, then the seconds taken every TICK_S seconds until the block ends."""
    say(f"{text}...")
    started, done = time.monotonic(), threading.Event()

    def tick():
        while not done.wait(TICK_S):
            say(f"{text}: {time.monotonic() - started:.0f} s so far...")

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    say(f"{text}: done in {time.monotonic() - started:.0f} s")


def compile_into(folder: Path, name: str, sources: list[Path], cflags: list[str], ldflags: list[str]):
    """Build into ``folder`` (which must not exist yet) through a temporary folder renamed into place;
    returns the module (loaded from the temporary build) and whether this build was the one published."""
    from torch.utils.cpp_extension import load

    temp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".building", dir=folder.parent))
    try:
        module = load(name, [str(s) for s in sources], extra_cflags=cflags, extra_ldflags=ldflags,
                      build_directory=str(temp), verbose=False)
        so = Path(module.__file__).name
        (temp / "build.json").write_text(json.dumps(dict(name=name, module=so, sources=[str(s) for s in sources],
                                                         flags=cflags, built=time.strftime("%Y-%m-%dT%H:%M:%S%z"))))
        try:
            os.rename(temp, folder)  # atomic: the folder appears complete or not at all
            return module, True
        except OSError as err:
            if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            return module, False  # another build was published first; this one is dropped
    finally:
        shutil.rmtree(temp, ignore_errors=True)  # gone after a publish; a loaded module needs no file


def build(name: str, sources: list[Path], cflags: list[str], ldflags: list[str], what: str,
          wait_s: float | None = None):
    """The compiled module ``name`` of ``sources``, built at most once per key (see the module docstring),
    or None after one warning line when it cannot be had."""
    try:
        wait_s = float(os.environ.get("INTERP_BUILD_WAIT", DEFAULT_WAIT_S)) if wait_s is None else wait_s
    except ValueError:
        wait_s = DEFAULT_WAIT_S
    try:
        folder = folder_for(name, sources, cflags)
        if (link := link_below(named_root(), folder)) is not None:
            raise NotALock(f"{link} is a symbolic link, not a folder of the build cache")
        if (module := published(folder, name)) is not None:
            return import_module(name, module)
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock = build_lock(folder, wait_s, what)
        try:
            lock.acquire()
        except Busy:
            say(f"warning: the {what} are still being built by another process after {wait_s:.0f} s; using "
                f"eager torch instead (the same numbers, more slowly); a later run will use the kernels")
            return None
        try:
            if (module := published(folder, name)) is not None:  # built while we waited
                return import_module(name, module)
            if folder.exists():  # an incomplete folder from before builds were atomic
                shutil.rmtree(folder)
            # Temporary folders of builds that were killed before their own cleanup (SIGKILL, or Ctrl-C in
            # the explorer, which exits at once): nobody else builds this key while we hold its lock.
            for leftover in folder.parent.glob(f".{folder.name}.*.building"):
                shutil.rmtree(leftover, ignore_errors=True)
            with ticking(f"compiling the {what} (once per machine and version, about a minute)"):
                module, _ = compile_into(folder, name, sources, cflags, ldflags)
            return module
        finally:
            lock.release()
    except Exception as err:  # noqa: BLE001 - no compiler, no ninja, a failed build, an unwritable cache
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        why = first if isinstance(err, (NotALock, NotALockFile)) else f"{type(err).__name__}: {first}"
        say(f"warning: could not build the {what} ({why}); using eager torch instead (the same numbers, more slowly)")
        return None
