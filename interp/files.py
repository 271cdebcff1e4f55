"""Atomic file output, files opened without following links, and safe reading of weight files.

Every file the toolkit writes goes to a temporary file in the same folder, is fsynced, and is then
renamed over the target, so a crash or a full disk never leaves a half-written file behind, and an
existing file is only replaced by a complete new one.

No file the toolkit writes, appends to or locks is opened through a symbolic link, and none is
taken when something other than a regular file (a link, a pipe, a folder, a device) stands in its
place: a link planted at ``RUN/.lock`` or ``RUN/metrics.jsonl`` would otherwise make the toolkit
overwrite whatever file the link points to, and a pipe would block it forever. ``open_regular``
opens with ``O_NOFOLLOW`` (and ``O_NONBLOCK``, so a pipe cannot block the open) and checks what it
opened; ``refuse_special`` checks a path before it is replaced.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import tempfile
import time
from pathlib import Path

from .errors import UserError

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def special(mode: int) -> str | None:
    """What a file of this mode is, in words, when it is not a regular file; None for a regular file."""
    return next((kind for test, kind in _KINDS if test(mode)), None if stat.S_ISREG(mode) else "not a regular file")


def not_regular(path: Path, kind: str) -> UserError:
    why = ("the toolkit never writes through a link (it would change the file the link points to)"
           if kind == "a symbolic link" else "the toolkit only writes regular files there")
    return UserError(f"{path} is {kind}, not a regular file; {why}: remove it, or write elsewhere")


def refuse_special(path: str | Path) -> None:
    """A UserError when something other than a regular file stands at ``path`` (checked without
    following a link); nothing there, or a regular file, passes."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError:
        return  # e.g. a name too long: the write itself says so
    if (kind := special(mode)) is not None:
        raise not_regular(Path(path), kind)


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


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    refuse_special(path)  # replacing a link would be harmless, but it was put there by someone: say so
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


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | Path, obj) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


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


class RunLock:
    """An exclusive lock on a run folder for the life of one training process.

    ``flock`` on ``FOLDER/.lock``: the kernel drops it when the process ends however it ends (a
    SIGKILL too), so it never goes stale. The lock file is opened without following a link and must
    be a regular file (a link planted there is refused, never written through). The file holds the holder's pid, which a refused second
    process names. It is removed on release; a process that locked a file another one had just
    removed checks that its file is still the one at the path, and tries again if not. A folder the
    lock created is removed again if it is still empty when the lock is released.
    """

    NAME = ".lock"

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.path = self.folder / self.NAME
        self.made: Path | None = None  # the topmost folder this lock created
        self.fd: int | None = None

    def acquire(self) -> "RunLock":
        try:
            self.made = next((p for p in (*reversed(self.folder.parents), self.folder) if not os.path.exists(p)), None)
            while True:
                self.folder.mkdir(parents=True, exist_ok=True)
                fd = open_regular(self.path, os.O_RDWR | os.O_CREAT)  # never a planted link or pipe
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = os.pread(fd, 32, 0) or (time.sleep(0.1), os.pread(fd, 32, 0))[1]  # written just after locking
                    holder = holder.decode(errors="replace").strip() or "unknown"
                    os.close(fd)
                    self._undo_folder()
                    raise UserError(f"{self.folder} is in use by another training process (pid {holder}); wait "
                                    f"for it to end, or stop it first") from None
                if os.path.exists(self.path) and os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    break
                os.close(fd)  # the holder removed it as we opened it: lock the new one
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
            self.fd = fd
        except OSError as err:
            self._undo_folder()
            raise unwritable(self.folder, err) from None
        except UserError:
            self._undo_folder()
            raise
        return self

    def release(self) -> None:
        if self.fd is not None:
            Path(self.path).unlink(missing_ok=True)  # while still held, so no one locks it in between
            os.close(self.fd)
            self.fd = None
        self._undo_folder()

    def _undo_folder(self) -> None:
        if self.made is None:
            return
        for folder in (self.folder, *self.folder.parents):  # only empty ones: a run that wrote something stays
            try:
                folder.rmdir()
            except OSError:
                return
            if folder == self.made:
                return

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
