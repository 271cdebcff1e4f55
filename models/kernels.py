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
``build.json`` is complete, whatever was killed when. Builds are serialised by a lock file beside the
folder (``NAME-VERSION-KEY.lock``): an ``flock``, which the kernel drops when its holder ends however
it ends, so a build killed half way leaves no lock held; the file names its holder's pid. A process
that finds the lock held waits (saying so every few seconds) at most ``$INTERP_BUILD_WAIT`` seconds
(default 600), then runs eager; when the pid the lock names is no longer alive (the lock is held
only by a process it forked), it stops waiting and builds on its own, which is safe because
publishing is atomic: whichever build is renamed into place first is the one every process loads.
The lock file is opened without following a link and must be a regular file.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import socket
import stat
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

DEFAULT_WAIT_S = 600.0
TICK_S = 15.0  # how often progress is printed while building or waiting


class NotALock(Exception):
    """Something other than a regular file stands where a build lock goes (a planted link, a pipe)."""


def say(text: str) -> None:
    print(f"interp: {text}", file=sys.stderr, flush=True)


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


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


class BuildLock:
    """The build lock of one folder (see the module docstring); ``acquire`` returns "held", "stale"
    (the named holder is dead: build without the lock) or "timeout"."""

    def __init__(self, path: Path, wait_s: float, what: str):
        self.path, self.wait_s, self.what = path, wait_s, what
        self.fd: int | None = None

    def acquire(self) -> str:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise NotALock(f"{self.path} is a symbolic link, not a lock file") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotALock(f"{self.path} is not a regular file, not a lock file")
        started, told = time.monotonic(), 0.0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            holder = self.holder(fd)
            waited = time.monotonic() - started
            if holder is not None and holder[1] == socket.gethostname() and not alive(holder[0]):
                os.close(fd)
                say(f"the lock of the {self.what} names pid {holder[0]}, which has ended; building without it")
                return "stale"
            if waited >= self.wait_s:
                os.close(fd)
                return "timeout"
            if waited - told >= TICK_S or told == 0.0:
                who = f"pid {holder[0]}" if holder else "another process"
                say(f"waiting for {who} to finish building the {self.what} ({waited:.0f} s of at most "
                    f"{self.wait_s:.0f} s)...")
                told = waited or 1e-9
            time.sleep(min(0.2, self.wait_s))
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}".encode(), 0)
        self.fd = fd
        return "held"

    @staticmethod
    def holder(fd: int) -> tuple[int, str] | None:
        try:
            pid, host = os.pread(fd, 300, 0).decode().split(" ", 1)
            return int(pid), host
        except (ValueError, UnicodeDecodeError, OSError):
            return None

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)  # the file stays: removing it could let two processes lock two files
            self.fd = None


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
        lock = BuildLock(folder.with_name(folder.name + ".lock"), wait_s, what)
        state = lock.acquire()
        if state == "timeout":
            say(f"warning: the {what} are still being built by another process after {wait_s:.0f} s; using "
                f"eager torch instead (the same numbers, more slowly); a later run will use the kernels")
            return None
        try:
            if (module := published(folder, name)) is not None:  # built while we waited
                return import_module(name, module)
            if state == "held" and folder.exists():  # an incomplete folder from before builds were atomic
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
        why = first if isinstance(err, NotALock) else f"{type(err).__name__}: {first}"
        say(f"warning: could not build the {what} ({why}); using eager torch instead (the same numbers, more slowly)")
        return None
