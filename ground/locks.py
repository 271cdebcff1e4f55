"""The one lock: a kernel build, a training run's folder, a search's study, a sweep's claim on a point and a
cache being written are each guarded by a ``Lock`` on one file, ``PATH``, and nothing else.

    with Lock(folder / ".lock", wait_s=60) as lock:   # Busy after 60 s of another holder
        ...

What it guarantees, and why each part is as it is:

- Exclusive, and never left held by a process that ended. The lock is an ``flock`` on ``PATH``, which the
  kernel drops when the holding process ends however it ends (SIGKILL, a crash, a power-off of a client of
  a network file system): there is no lock file to clean up by hand and no age after which a lock is
  guessed to be stale. Two ``Lock`` objects exclude each other even inside one process (an ``flock`` belongs
  to the open file, not to the process).
- The file names its holder: ``PID HOST``, written before any other process can read it (below). A process
  that waits or is refused names the holder (``Holder``: ``4242``, or ``4242 on other-host``).
- A holder that has ended is taken over. An ``flock`` is shared by every process that inherited its
  descriptor by ``fork`` without ``exec`` (a forked worker of a data loader, a test's forked child), so the
  lock can stay held after the process named in the file has ended. Such a descendant never does the
  holder's work (the toolkit writes what a lock guards only from the process that took it), so when the
  named pid is a process of this machine that has ended, the lock is taken over: a new file, already
  locked and naming the new holder, is renamed over ``PATH`` (atomically), and the descendant keeps a lock
  on a file no one looks at any more. A pid of another machine cannot be asked, so such a holder is
  always waited for (or refused); a pid reused by an unrelated process looks alive, which only makes the
  lock wait longer, never lets two in.
- Every change to ``PATH`` is made under a gate. Creating the file, writing a holder into a file left by
  a killed one, and a takeover each happen while holding ``PATH.gate`` (an ``flock`` held for
  microseconds), and a process reads the holder of a busy lock under the same gate. Without it, one
  process could find the file of a killed holder, lock it and be about to write its own pid, while a
  second reads the dead pid still in it and takes the lock over: two holders.
- Nothing is left behind. ``release`` removes ``PATH`` while still holding it, and the gate is removed
  the same way. That is safe because an acquirer checks, after its ``flock``, that ``PATH`` is still the
  file it locked, and starts again if not (the holder removed it in between). Only the process that took
  the lock removes its file (a forked child that releases a copy of the object closes its descriptor).
- Never through a link, never blocked by a pipe. Both files are opened with ``O_NOFOLLOW`` and
  ``O_NONBLOCK``, and what was opened must be a regular file (``NotALockFile`` otherwise): a link planted
  at ``PATH`` would make the lock write its holder into whatever file the link points to.
- Waits are bounded and said. ``wait_s``: how long to wait for another holder (0: refuse at once);
  then ``Busy``. ``waiting(holder, waited_s)`` is called when a wait starts and every ``TICK_S`` seconds,
  for a caller that says so on the terminal.
- Across machines that share a folder. Linux's NFS client passes an ``flock`` to the server as a lock
  on the whole file (NFSv4, or v3 with its lock manager), so processes on two machines exclude each
  other; that emulation needs the file open for writing, which it always is here. The server drops the
  locks of a client that is gone when its lease ends. Two caveats of that emulation: there, two ``Lock``
  objects of one process do not exclude each other (the toolkit takes each lock once per process), and a
  file system mounted with local locks only (``local_lock=flock``) shares no lock between machines at all.
"""
from __future__ import annotations

import errno
import fcntl
import os
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

TICK_S = 15.0  # how often a wait is said
POLL_S = 0.1  # how often a busy lock is tried again
GATE_S = 2.0  # how long the gate is waited for (it is held for microseconds)


def alive(pid) -> bool:
    """Whether ``pid`` is a process of this machine that still runs: one that ended but is not yet reaped (a
    zombie) does not; another user's process does (``kill`` is refused, but it exists). Not a positive whole
    number: False (``kill(0)`` and ``kill(-1)`` would ask about whole process groups)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:  # the state after the command name, which may itself hold ") "
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (macOS): kill's answer stands
    return state not in ("Z", "X")


@dataclass(frozen=True)
class Holder:
    """The process a lock file names; ``host`` is "" where the file names none (written by hand, or by an
    older version)."""

    pid: int
    host: str = ""

    def __str__(self) -> str:
        return str(self.pid) if self.host in ("", socket.gethostname()) else f"{self.pid} on {self.host}"

    def ended(self) -> bool:
        """Known to have ended: a process of this machine that no longer runs. Another machine's, or one of an
        unknown machine, is never known to have ended."""
        return self.host == socket.gethostname() and not alive(self.pid)

    @classmethod
    def read(cls, fd: int) -> "Holder | None":
        try:
            pid, _, host = os.pread(fd, 300, 0).decode().strip().partition(" ")
            return cls(int(pid), host)
        except (ValueError, UnicodeDecodeError, OSError):
            return None

    @classmethod
    def this_process(cls) -> "Holder":
        return cls(os.getpid(), socket.gethostname())


class Busy(Exception):
    """Another process held the lock for longer than the wait; ``holder`` is None where its file named none."""

    def __init__(self, path: Path, holder: Holder | None):
        super().__init__(f"{path} is held by {f'pid {holder}' if holder else 'another process'}")
        self.path, self.holder = path, holder


class NotALockFile(Exception):
    """Something other than a regular file stands where a lock file goes; ``mode`` is its ``st_mode``."""

    def __init__(self, path: Path, mode: int):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
        super().__init__(f"{path} is {kind}, not a lock file")
        self.path, self.mode = path, mode


def open_lock_file(path: Path) -> int:
    """A descriptor of the regular file ``path`` (created if missing), opened for writing (an NFS lock needs
    it), never through a link and never blocking on a pipe; ``NotALockFile`` for anything else there."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise NotALockFile(path, stat.S_IFLNK) from None
        if err.errno in (errno.EISDIR, errno.ENXIO):  # a folder; a socket
            raise NotALockFile(path, os.lstat(path).st_mode) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotALockFile(path, mode)
    return fd


def locked_at(path: Path, fd: int) -> bool:
    """Whether ``fd``'s file is still the one at ``path`` (its holder may have removed it, or renamed a new
    one over it, between our open and our flock)."""
    try:
        here, ours = os.stat(path, follow_symlinks=False), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (ours.st_dev, ours.st_ino)


def try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


class Gate:
    """``PATH.gate``, held while ``PATH`` is created, written, taken over or read (see the module docstring).
    Another process is inside for microseconds, so ``enter`` waits for it up to ``GATE_S`` whatever the
    lock's own wait (a refusal at once must still name the holder); False only if the gate stays held that
    long (a process that forked while inside: its child keeps the flock), and the caller tries again after
    its poll."""

    def __init__(self, path: Path):
        self.path = path.with_name(path.name + ".gate")
        self.fd: int | None = None

    def enter(self) -> bool:
        deadline = time.monotonic() + GATE_S
        while True:
            fd = open_lock_file(self.path)
            if try_flock(fd):
                if locked_at(self.path, fd):
                    self.fd = fd
                    return True
                os.close(fd)  # removed by the process that left the gate as we opened it: lock the next one
                continue
            os.close(fd)
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)

    def leave(self) -> None:
        if self.fd is not None:
            if locked_at(self.path, self.fd):
                os.unlink(self.path)  # while still held, so no one locks it in between
            os.close(self.fd)
            self.fd = None


class Lock:
    """An exclusive lock on the file ``path`` (see the module docstring). ``wait_s``: seconds to wait for
    another holder before ``Busy``; ``waiting(holder, waited_s)``: called when a wait starts and every
    ``TICK_S`` seconds; ``taking_over(holder)``: called before a lock whose named holder has ended is taken.
    The folder must exist."""

    def __init__(self, path: str | Path, wait_s: float = 0.0,
                 waiting: Callable[[Holder | None, float], None] | None = None,
                 taking_over: Callable[[Holder], None] | None = None):
        self.path, self.wait_s = Path(path), wait_s
        self.waiting, self.taking_over = waiting, taking_over
        self.fd: int | None = None
        self.owner: int | None = None  # the pid that took it: only that process removes the file

    def acquire(self) -> "Lock":
        started, told = time.monotonic(), None
        while True:
            holder = self._try()
            if self.fd is not None:
                return self
            waited = time.monotonic() - started
            if waited >= self.wait_s:
                raise Busy(self.path, holder)
            if self.waiting is not None and (told is None or waited - told >= TICK_S):
                self.waiting(holder, waited)
                told = waited
            time.sleep(min(POLL_S, self.wait_s))

    def _try(self) -> Holder | None:
        """Take the lock (``self.fd`` set), or the holder that has it (None where unknown)."""
        gate = Gate(self.path)
        if not gate.enter():
            return None
        try:
            while True:
                fd = open_lock_file(self.path)
                if try_flock(fd):
                    if locked_at(self.path, fd):
                        self._hold(fd)
                        return None
                    os.close(fd)  # its holder removed it as we opened it: lock the one at the path now
                    continue
                holder = Holder.read(fd)
                os.close(fd)
                if holder is None or not holder.ended():
                    return holder
                if self.taking_over is not None:
                    self.taking_over(holder)
                self._take_over()
                return None
        finally:
            gate.leave()

    def _take_over(self) -> None:
        """A new file, locked and naming this process, renamed over the one a descendant of its ended holder keeps
        locked (under the gate: no one else changes the path meanwhile)."""
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{time.monotonic_ns()}.new")
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a file no one else has opened
            self._hold(fd)
            os.rename(temp, self.path)
        except BaseException:
            os.close(fd)
            self.fd = None
            temp.unlink(missing_ok=True)
            raise

    def _hold(self, fd: int) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}".encode(), 0)
        self.fd, self.owner = fd, os.getpid()

    def release(self) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        if self.owner == os.getpid() and locked_at(self.path, fd):
            os.unlink(self.path)  # while still held, so no one locks it in between
        os.close(fd)

    def __enter__(self) -> "Lock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
