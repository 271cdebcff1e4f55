"""The one owner of every file and folder the toolkit writes from user input: names, links, locks, clean-up.

Why one module (this one, not a second ``paths`` module beside it): the run folder, the search folder
and its trials, result folders and the caches all need the same five answers, and two modules would
give two of each. (1) A name from user input becomes one path component (``component``; ``child``
refuses one that climbs out of its parent). (2) Nothing is written, appended to or locked through a
symbolic link, nor where a pipe, a socket, a device or a folder stands in place of a file
(``open_regular``: ``O_NOFOLLOW`` | ``O_NONBLOCK``, then a check of what was opened; ``refuse_special``
before a file is replaced), at every level below the folder the user named (``check_writes``). (3) Locks
are taken one way (``Lock``; ``RunLock`` is a run folder's). (4) Clean-up removes only what this process
created (``make_folders`` returns the folders it made; ``remove_made`` removes those, when empty, and
nothing else). (5) A whole write set is checked before its first byte (``check_writes``: links and
special files at every level, and the folder really writable, found by writing a probe file).

Every file goes to a temporary file in the same folder, is fsynced, and is then renamed over the
target, so a crash or a full disk never leaves a half-written file behind, and an existing file is
only replaced by a complete new one. A link planted at ``RUN/.lock`` or ``RUN/metrics.jsonl`` would
otherwise make the toolkit overwrite whatever file the link points to, and a pipe would block it forever.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import tempfile
from pathlib import Path
from urllib.parse import quote

from ground import locks
from ground.terminal import say

from .errors import UserError

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def special(mode: int) -> str | None:
    """What a file of this mode is, in words, when it is not a regular file; None for a regular file."""
    return next((kind for test, kind in _KINDS if test(mode)), None if stat.S_ISREG(mode) else "not a regular file")


def not_regular(path: Path, kind: str, wanted: str = "a regular file") -> UserError:
    why = ("the toolkit never writes through a link (it would change the file the link points to)"
           if kind == "a symbolic link" else f"the toolkit only writes {wanted.removeprefix('a ')}s there")
    return UserError(f"{path} is {kind}, not {wanted}; {why}: remove it, or write elsewhere")


def open_regular(path: str | Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` of a regular file that is never a link: ``O_NOFOLLOW`` refuses a link at the last
    component, ``O_NONBLOCK`` keeps a named pipe from blocking the open, and what was opened is
    checked to be a regular file. Anything else is a UserError; other OS errors are raised as they are."""
    path = Path(path)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise not_regular(path, "a symbolic link") from None
        if err.errno in (errno.EISDIR, errno.ENXIO):  # a folder opened for writing; a socket
            refuse_special(path)
        raise
    kind = special(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise not_regular(path, kind)
    os.set_blocking(fd, True)
    return fd


def read_regular(path: str | Path) -> bytes:
    """The bytes of a regular file, opened without following a link (see ``open_regular``)."""
    fd = open_regular(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def append_regular(path: str | Path, data: bytes) -> None:
    """Append ``data`` to a regular file (created if missing), never through a link."""
    fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666 & ~_umask())
    with os.fdopen(fd, "ab") as handle:
        handle.write(data)


def atomic_write_bytes(path: str | Path, data: bytes, root: str | Path | None = None) -> Path:
    """Write ``data`` to ``path`` whole or not at all. With ``root`` (the folder the user named), no level
    from ``root`` down to ``path`` may be a link: a link planted at ``root/RUN`` or ``RUN/checkpoints``
    would carry the write out of the folder the user named."""
    path = Path(path)
    refuse_in_the_way(path, root)  # replacing a link would be harmless, but it was put there by someone: say so
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise unwritable(path.parent, err) from None
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual permissions
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"could not write {path}: {err.strerror or err}; it was left as it was "
                        f"(free some space, or write elsewhere with --out)") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def unwritable(folder: Path, err: OSError) -> UserError:
    """The one line for a folder that cannot be made or written to (os.path's checks, unlike Path's,
    never raise, e.g. on a name too long)."""
    blocker = next((p for p in (folder, *folder.parents) if os.path.exists(p) and not os.path.isdir(p)), None)
    reason = f"{blocker} is a file, not a folder" if blocker else err.strerror or str(err)
    return UserError(f"cannot write to {_short(folder)}: {reason}; choose another folder with --out")


def _short(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]}"


def remove_stale_temps(folder: str | Path) -> None:
    """Delete the temp files of writes a crash cut short (only call when nothing writes there)."""
    for temp in Path(folder).glob(".*.tmp"):
        temp.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str, root: str | Path | None = None) -> Path:
    return atomic_write_bytes(path, text.encode(), root)


def atomic_write_json(path: str | Path, obj, root: str | Path | None = None) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n", root)


def sniff_weights(path: Path) -> None:
    """Refuse anything that is not a safetensors file, before any byte of it is deserialised.

    A safetensors file starts with an 8-byte little-endian header length followed by a JSON
    object. Pickles start with the protocol opcode 0x80; torch ``.pt`` files are zip archives.
    """
    if not path.exists():
        raise UserError(f"checkpoint not found: {path}")
    if path.is_dir():
        raise UserError(f"{path} is a folder without checkpoints; pass a run folder or a .safetensors file")
    if not path.is_file():  # a FIFO or a device would block or never end
        raise UserError(f"{path} is not a regular file (a pipe or a device?); it is not a checkpoint")
    try:
        with open(path, "rb") as handle:
            head = handle.read(9)
            size = path.stat().st_size
    except OSError as err:
        raise UserError(f"cannot read checkpoint {path}: {err.strerror or err}") from None
    header_len = int.from_bytes(head[:8], "little")
    if len(head) == 9 and head[8:9] == b"{" and header_len + 8 <= size:
        return  # a safetensors header; safetensors itself never unpickles, so this is safe to parse
    # Checked only after the header test: a safetensors header length can itself begin with 0x80
    # (any length = 128 mod 256) or spell "PK".
    if head[:2] == b"PK" or head[:1] == b"\x80" or path.suffix in (".pt", ".pth", ".pkl", ".pickle", ".bin"):
        raise UserError(f"{path} looks like a pickle/torch.save file; pickles can run arbitrary code when "
                        f"loaded, so only .safetensors checkpoints are accepted (re-save with safetensors)")
    if len(head) < 9:
        raise UserError(f"{path} is empty or truncated; it is not a safetensors checkpoint")
    raise UserError(f"{path} is not a valid safetensors file (corrupt or truncated header)")


def read_json(path: str | Path, what: str = "file") -> dict:
    """A JSON object read from ``path``; anything else (unreadable, not UTF-8, not JSON, nested too
    deeply, not an object) is a UserError naming the file."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise UserError(f"{path} is not a regular file; it cannot be read as a {what}")
    try:
        document = json.loads(path.read_bytes().decode())
    except (OSError, ValueError, RecursionError) as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        reason = "nested too deeply" if isinstance(err, RecursionError) else getattr(err, "strerror", None) or err
        raise UserError(f"cannot read {path} ({reason})") from None
    if not isinstance(document, dict):
        raise UserError(f"{path} is not a valid {what} (a JSON object is expected, got {type(document).__name__})")
    return document


MAX_NAME = 200  # bytes of one name the toolkit makes (file systems allow 255: room for a temp file's affixes)


def component(text: str) -> str:
    """``text`` (e.g. a value typed into ``--space``) as one safe file or folder name: ``/``, ``%``, control
    characters and anything outside printable ASCII percent-encoded, so no two texts give one name and
    none climbs out of its folder (``../x`` becomes ``..%2Fx``); a leading dot encoded too (no ``..`` or
    hidden names); a name too long for a file system cut short, with a hash of the whole appended."""
    name = quote(text, safe=" !#$&'()*+,-.:;=@[]^_`{}~")
    name = "%2E" + name[1:] if name.startswith(".") else name
    if len(name) > MAX_NAME:
        name = f"{name[:MAX_NAME - 17]}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    return name


def child(parent: str | Path, name: str, what: str = "name") -> Path:
    """``parent / name`` where ``name`` is one name that stays in ``parent`` (no ``/``, ``.`` or ``..``)."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise UserError(f"{what} {name!r} is not the name of one file or folder in {parent} (no /, . or ..)")
    return Path(parent) / name


def kind_of(path: str | Path) -> str | None:
    """What stands at ``path`` (not following a link): None when nothing, "a regular file", or ``special``'s words."""
    try:
        return special(os.lstat(path).st_mode) or "a regular file"
    except FileNotFoundError:
        return None
    except OSError:
        return None  # e.g. a name too long, or a file in the way: the write itself says so


def _levels(path: Path, root: Path | None) -> list[Path]:
    """The levels of ``path`` below ``root`` (the folder a user named, taken as it is), topmost first."""
    if root is None:
        return [path]
    try:
        rest = path.relative_to(root).parts
    except ValueError:
        raise UserError(f"{path} is not inside {root}") from None
    if ".." in rest:
        raise UserError(f"{path} climbs out of {root} (a name holds ..); the toolkit only writes inside {root}")
    return [root.joinpath(*rest[:i]) for i in range(1, len(rest) + 1)]


def refuse_in_the_way(path: str | Path, root: str | Path | None = None, folder: bool = False) -> None:
    """A UserError when any level of ``path`` below ``root`` is a link, a level above the last is not a
    folder, or the last is not what is meant to be written there (a regular file, or with ``folder`` a
    folder); nothing there passes."""
    levels = _levels(Path(path), None if root is None else Path(root))
    for level in levels:
        kind = kind_of(level)
        wanted = "a folder" if folder or level != levels[-1] else "a regular file"
        if kind not in (None, wanted):
            raise not_regular(level, kind, wanted)


def refuse_special(path: str | Path) -> None:
    """A UserError when something other than a regular file stands at ``path`` (checked without
    following a link); nothing there, or a regular file, passes."""
    refuse_in_the_way(path)


def check_writes(root: str | Path, files=(), folders=()) -> None:
    """Check a whole write set before its first byte: ``files`` and ``folders`` (paths relative to ``root``,
    the folder the user named) may not climb out of it, be or lie below a link, or be anything but what
    they are meant to be; and the folder must take a file (a probe file is written and removed there, or
    in its nearest existing parent: permission bits are not the whole story, e.g. for root on a read-only
    file system)."""
    root = Path(root)
    for rel, folder in [(f, False) for f in files] + [(f, True) for f in folders]:
        refuse_in_the_way(root / rel, root, folder)
    probe_writable(root)


def probe_writable(folder: str | Path) -> None:
    """A UserError unless ``folder`` (or, where it does not exist yet, its nearest existing parent) takes a new file."""
    folder = Path(folder)
    existing = next((p for p in (folder, *folder.parents) if os.path.isdir(p)), Path("."))
    try:
        fd, probe = tempfile.mkstemp(prefix=".probe.", suffix=".tmp", dir=existing)
    except OSError as err:
        raise unwritable(folder, err) from None
    os.close(fd)
    os.unlink(probe)


def make_folders(folder: str | Path, root: str | Path | None = None) -> list[Path]:
    """Create ``folder`` and its missing parents one at a time, after checking its levels below ``root``
    (``refuse_in_the_way``); the folders made, topmost first, which are all ``remove_made`` may remove."""
    folder = Path(folder)
    refuse_in_the_way(folder, root, folder=True)
    made: list[Path] = []
    for level in (*reversed(folder.parents), folder):
        try:
            os.mkdir(level)
        except FileExistsError:
            continue
        except OSError as err:
            remove_made(made)
            raise unwritable(folder, err) from None
        made.append(level)
    return made


def remove_made(made: list[Path]) -> None:
    """Remove the folders ``make_folders`` made, deepest first, while they are empty: a folder that holds
    something (a run that wrote a file) stays, and so do its parents; nothing else is ever removed."""
    for folder in reversed(made):
        try:
            os.rmdir(folder)
        except OSError:
            return
    made.clear()


class Lock(locks.Lock):
    """The toolkit's one lock (``ground.locks.Lock``: an ``flock`` that dies with its holder, a file naming the
    holder, a holder that has ended taken over, nothing left behind) on ``FOLDER/NAME``, a name from user input
    (``child``). What it adds for the folders a user names: the folders it makes are removed again on release
    if they are still empty, and every failure is one line (a ``UserError``): a link or a pipe planted at the
    lock (the words of ``not_regular``), an unwritable folder, and a holder that keeps it past the wait.

    ``wait``: seconds to wait for another holder (0: refuse at once); ``busy(holder)``: the refusal's words.
    """

    NAME = ".lock"

    def __init__(self, folder: str | Path, name: str | None = None, wait: float = 0.0, busy=None):
        self.folder = Path(folder)
        super().__init__(child(self.folder, name or self.NAME), wait, taking_over=self.taking_over_message)
        self.busy = busy or self.busy_message
        self.made: list[Path] = []

    def busy_message(self, holder: str) -> str:
        return f"{self.path} is held by another process (pid {holder}); wait for it to end, or stop it first"

    def taking_over_message(self, holder: locks.Holder) -> None:
        say(f"{self.path} names pid {holder}, which has ended (a process it started still held the file); "
            f"taking it over")

    def acquire(self) -> "Lock":
        try:
            self.made = make_folders(self.folder, self.folder)
            return super().acquire()
        except locks.Busy as err:
            self._undo_folder()
            raise UserError(self.busy(str(err.holder or "unknown"))) from None
        except locks.NotALockFile as err:
            self._undo_folder()
            raise not_regular(err.path, special(err.mode)) from None
        except OSError as err:
            self._undo_folder()
            raise unwritable(self.folder, err) from None
        except UserError:
            self._undo_folder()
            raise

    def release(self) -> None:
        super().release()
        self._undo_folder()

    def _undo_folder(self) -> None:
        remove_made(self.made)


class RunLock(Lock):
    """A run folder's lock, held for the life of one training process: a second trainer is refused at once."""

    def busy_message(self, holder: str) -> str:
        return (f"{self.folder} is in use by another training process (pid {holder}); wait for it to end, or "
                f"stop it first")


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}.safetensors"


class RunFolder:
    """A training run's folder, and the one place that knows its files: ``run.json`` (the record: the recipe, the
    machine, the outcome), ``metrics.jsonl`` (the curve), ``resume.safetensors`` (weights and optimizer, to
    continue), ``checkpoints/step-*.safetensors`` (the series), and the lock that keeps a second trainer out.

    Every question about a run's files is asked here. The trainer asks for paths, to check them before the first
    byte (no link or special file among them), to clear a killed write's temp files and to undo a fresh run that
    failed before its first resume state (only the files a run writes, never others); everything else asks for
    the record (``read_record``), the checkpoints (``saved``, ``latest``, ``of_checkpoint``: the run a checkpoint
    file belongs to) and the evaluations logged (``logged_lines``)."""

    RECORD, METRICS, RESUME, CHECKPOINTS = "run.json", "metrics.jsonl", "resume.safetensors", "checkpoints"
    SERIES = "step-*.safetensors"  # every checkpoint's name (``checkpoint_name``)
    STEP_FILE = re.compile(r"step-(\d{8})\.safetensors$")

    def __init__(self, root: str | Path, named: str | Path | None = None):
        self.root = Path(root)
        # The folder the user named (a search's or a sweep's folder, holding this run below it; by default the
        # run folder itself): every level below it is checked, the run's own subfolders included.
        self.named = self.root if named is None else Path(named)
        self.record, self.metrics = self.root / self.RECORD, self.root / self.METRICS
        self.resume, self.checkpoints = self.root / self.RESUME, self.root / self.CHECKPOINTS
        self.lock = RunLock(self.root)

    # -- the checkpoints -------------------------------------------------------------------------
    @classmethod
    def of_checkpoint(cls, path: str | Path) -> "RunFolder | None":
        """The run a checkpoint file belongs to (it lies in a run's checkpoints folder); None for a file on its own."""
        path = Path(path)
        return cls(path.parent.parent) if path.parent.name == cls.CHECKPOINTS else None

    @classmethod
    def step_named(cls, path: str | Path) -> int | None:
        """The step a checkpoint's file name says (``checkpoint_name``); None for any other name."""
        found = cls.STEP_FILE.search(Path(path).name)
        return int(found.group(1)) if found else None

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / checkpoint_name(step)

    def saved(self) -> list[tuple[int, Path]]:
        """(step, path) of every checkpoint of the run, in step order (the step its name says)."""
        return sorted((step, path) for path in self.checkpoints.glob(self.SERIES)
                      if (step := self.step_named(path)) is not None)

    def latest(self) -> Path | None:
        """The run's last checkpoint; None when it has none."""
        saved = self.saved()
        return saved[-1][1] if saved else None

    # -- the record and the curve ----------------------------------------------------------------
    def has_record(self) -> bool:
        """Whether something stands where the record goes: a run was started here (a link or a folder in its place
        counts too, and is refused when it is read or written)."""
        return kind_of(self.record) is not None

    def read_record(self) -> dict:
        """The run's record; a UserError naming the file when there is none or it is not one."""
        return read_json(self.record, "run record")

    def record_if_readable(self) -> dict | None:
        """The run's record, or None when there is none that reads as one (a lone checkpoint's folder, a broken file)."""
        try:
            return self.read_record()
        except (UserError, OSError):
            return None

    def logged_lines(self) -> list[dict]:
        """The evaluations and losses in the run's metrics log (none without a log), read without following a link;
        a line a kill cut short is skipped (a resume drops it too)."""
        if kind_of(self.metrics) is None:
            return []
        lines = []
        for line in read_regular(self.metrics).decode(errors="replace").splitlines():
            try:
                logged = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(logged, dict) and isinstance(logged.get("step"), int):
                lines.append(logged)
        return lines

    # -- what the trainer asks -------------------------------------------------------------------
    def own_files(self) -> list[Path]:
        """Every file this run writes (besides the lock and temp files)."""
        return [self.record, self.metrics, self.resume] + sorted(self.checkpoints.glob(self.SERIES))

    def check(self) -> None:
        """No level from the named folder down to any of the run's files (``checkpoints/`` included) may be a
        link, and none of the files a pipe: checked before anything is read or written."""
        refuse_in_the_way(self.checkpoints, self.named, folder=True)
        for path in self.own_files():
            refuse_in_the_way(path, self.named)

    def clear_temps(self) -> None:
        """A SIGKILL mid-write leaves its temp file: removed before a run continues."""
        for folder in (self.root, self.checkpoints):
            remove_stale_temps(folder)

    def undo_fresh(self) -> None:
        """Undo a fresh run that failed before its first resume state, as far as the file system lets it: each
        removal is tried on its own (a checkpoints folder that cannot be read or written must not keep run.json,
        marked running, from going), and run.json goes first, so that whatever cannot be removed is at worst a
        stray file, never a run that blocks the next one."""
        for path in (self.record, self.metrics, self.checkpoint(0)):
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass
        try:
            remove_stale_temps(self.checkpoints)
            self.checkpoints.rmdir()  # only when empty
        except OSError:
            pass
