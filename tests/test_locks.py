"""The one lock (ground/locks.py) and what waits on it: known answers for two holders, a release, a holder
killed (its flock gone with it), a holder that ended while a process it forked keeps the file (taken over,
by exactly one of several waiters), a holder of another machine (never judged), a link or a pipe planted
at the lock; then its users: the Mamba kernels' build (a lock left by a killed build never hangs a later
process, one held too long ends in eager torch with one warning), a run folder's lock (it removes only
the folders it made) and the language models' conversion cache (a conversion under way is waited for).
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from ground.locks import Busy, Holder, Lock, NotALockFile, alive
from tests.cli import fork_cli, wait_for

MAMBA = ["--arch", "mamba", "-T", "V=6", "-T", "L=5", "-M", "d_model=16", "-M", "n_layers=1", "--steps", "3",
         "--batch-size", "4", "--warmup", "1"]


def hold(path: Path, then) -> int:
    """Fork a process that takes the lock on ``path`` and then calls ``then()``; its pid, once it holds it."""
    pid = os.fork()
    if pid == 0:
        try:
            Lock(path).acquire()
            then()
        finally:
            os._exit(0)
    deadline = time.time() + 30
    while time.time() < deadline and not (path.exists() and path.read_text().startswith(f"{pid} ")):
        time.sleep(0.02)
    return pid


def held_by_a_forked_child(path: Path) -> tuple[int, int]:
    """A lock whose named holder has ended while a process it forked keeps the file open: (holder, child)."""
    note = path.with_name("child-pid")

    def fork_and_end():
        child = os.fork()
        if child == 0:
            time.sleep(120)
            os._exit(0)
        note.write_text(str(child))

    holder = hold(path, fork_and_end)
    wait_for(holder)
    child = int(note.read_text())
    note.unlink()
    return holder, child


# -- the lock itself -----------------------------------------------------------------------------------
def test_alive_knows_this_process_an_ended_one_and_no_pid_at_all():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    deadline = time.time() + 30
    while time.time() < deadline and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.01)
    assert not alive(pid)  # ended, not yet reaped (a zombie)
    os.waitpid(pid, 0)
    assert alive(os.getpid()) and alive(1) and not alive(pid)
    assert not any(alive(p) for p in (0, -1, None, True, "1", 1.0))  # never kill(0)'s process group


def test_two_holders_one_refused_naming_the_other_then_a_release(tmp_path):
    first = Lock(tmp_path / ".lock").acquire()
    assert (tmp_path / ".lock").read_text() == f"{os.getpid()} {socket.gethostname()}"
    with pytest.raises(Busy) as refused:
        Lock(tmp_path / ".lock").acquire()  # the same process, a second lock: an flock belongs to the open file
    assert refused.value.holder == Holder(os.getpid(), socket.gethostname()) and str(refused.value.holder) == str(
        os.getpid())
    first.release()
    assert os.listdir(tmp_path) == []  # nothing left behind: neither the lock nor its gate
    with Lock(tmp_path / ".lock") as second:
        assert second.fd is not None
    assert os.listdir(tmp_path) == []


def test_a_wait_is_said_then_ends_in_busy(tmp_path):
    holder = hold(tmp_path / ".lock", lambda: time.sleep(60))
    said = []
    try:
        with pytest.raises(Busy) as refused:
            Lock(tmp_path / ".lock", wait_s=0.5, waiting=lambda who, waited: said.append((who, waited))).acquire()
    finally:
        os.kill(holder, signal.SIGKILL)
        wait_for(holder)
    assert refused.value.holder.pid == holder and [who.pid for who, _ in said] == [holder] and said[0][1] < 0.5


def test_a_lock_is_had_once_its_holder_lets_go_within_the_wait(tmp_path):
    holder = hold(tmp_path / ".lock", lambda: time.sleep(0.5))
    with Lock(tmp_path / ".lock", wait_s=60):
        assert (tmp_path / ".lock").read_text().startswith(f"{os.getpid()} ")
    wait_for(holder)


def test_a_killed_holder_leaves_its_file_and_no_lock(tmp_path):
    killed = hold(tmp_path / ".lock", lambda: os.kill(os.getpid(), signal.SIGKILL))
    wait_for(killed)
    assert (tmp_path / ".lock").read_text().startswith(f"{killed} ")
    taken = []
    with Lock(tmp_path / ".lock", taking_over=taken.append):
        assert (tmp_path / ".lock").read_text().startswith(f"{os.getpid()} ")
    assert taken == []  # not a takeover: the flock died with its holder


def test_a_holder_that_ended_while_its_child_keeps_the_file_is_taken_over(tmp_path):
    holder, child = held_by_a_forked_child(tmp_path / ".lock")
    try:
        taken = []
        with Lock(tmp_path / ".lock", taking_over=taken.append):
            assert taken == [Holder(holder, socket.gethostname())]
            assert (tmp_path / ".lock").read_text() == f"{os.getpid()} {socket.gethostname()}"
            with pytest.raises(Busy):  # held for real: the next one waits for this process
                Lock(tmp_path / ".lock").acquire()
        assert os.listdir(tmp_path) == []
    finally:
        os.kill(child, signal.SIGKILL)


def test_of_several_waiters_on_an_ended_holder_exactly_one_takes_it_over(tmp_path):
    """The gate: all four find the same dead pid at the same instant; one holds, three are refused."""
    _, child = held_by_a_forked_child(tmp_path / ".lock")
    moment = time.time() + 0.5
    waiters = []
    try:
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    time.sleep(max(0.0, moment - time.time()))
                    try:
                        Lock(tmp_path / ".lock").acquire()
                        code = 0
                        time.sleep(2)  # held while the others try
                    except Busy:
                        code = 3
                finally:
                    os._exit(code)
            waiters.append(pid)
        codes = sorted(os.WEXITSTATUS(wait_for(pid)) for pid in waiters)
    finally:
        os.kill(child, signal.SIGKILL)
    assert codes == [0, 3, 3, 3]


def test_a_holder_on_another_machine_or_none_named_is_never_taken_over(tmp_path):
    """A pid of another machine cannot be asked (nor one of an unknown machine: a file an older version
    wrote): such a lock is waited for, however dead the pid would look here."""
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    for written, named in ((f"{dead} elsewhere", f"{dead} on elsewhere"), (f"{dead}", f"{dead}")):
        with open(tmp_path / ".lock", "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            held.write(written)
            held.flush()
            with pytest.raises(Busy) as refused:
                Lock(tmp_path / ".lock", taking_over=pytest.fail).acquire()
            assert str(refused.value.holder) == named
        (tmp_path / ".lock").unlink()


def test_a_forked_child_releasing_its_copy_leaves_the_parents_lock(tmp_path):
    lock = Lock(tmp_path / ".lock").acquire()
    pid = os.fork()
    if pid == 0:
        lock.release()  # a forked worker that ends through the parent's clean-up
        os._exit(0)
    wait_for(pid)
    assert (tmp_path / ".lock").read_text().startswith(f"{os.getpid()} ")
    with pytest.raises(Busy):
        Lock(tmp_path / ".lock").acquire()
    lock.release()
    assert not (tmp_path / ".lock").exists()


def test_a_link_or_a_pipe_at_the_lock_is_refused_never_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / ".lock").symlink_to(victim)
    with pytest.raises(NotALockFile, match="is a symbolic link, not a lock file"):
        Lock(tmp_path / ".lock").acquire()
    assert victim.read_text() == "precious\n"
    (tmp_path / ".lock").unlink()
    os.mkfifo(tmp_path / ".lock")
    with pytest.raises(NotALockFile, match="is not a regular file, not a lock file"):
        Lock(tmp_path / ".lock").acquire()  # and never blocks on the pipe
    assert sorted(os.listdir(tmp_path)) == [".lock", "victim.txt"]  # the gate is gone again


# -- the Mamba kernels' build lock -----------------------------------------------------------------
def kernel_build(**kwargs):
    """``models.kernels.build`` of the Mamba kernels as ``cpu_kernels`` calls it."""
    import models.mamba
    from models.kernels import build

    return build(models.mamba.KERNELS_NAME, [models.mamba.KERNELS_SOURCE], *models.mamba.KERNELS_FLAGS,
                 what="Mamba CPU kernels", **kwargs)


def lock_path() -> Path:
    import models.mamba
    from models.kernels import folder_for

    folder = folder_for(models.mamba.KERNELS_NAME, [models.mamba.KERNELS_SOURCE], models.mamba.KERNELS_FLAGS[0])
    return folder.with_name(folder.name + ".lock")


def hold_lock(then) -> int:
    """Fork a process that takes the build lock (as a build does) and then calls ``then()``; its pid."""
    lock_path().parent.mkdir(parents=True, exist_ok=True)
    return hold(lock_path(), then)


@pytest.fixture
def fresh_builds(tmp_path, monkeypatch):
    """An empty build folder, and a compiler that fails at once (a real failing build, in a second)."""
    monkeypatch.setenv("INTERP_BUILD_DIR", str(tmp_path / "builds"))
    monkeypatch.setenv("CXX", "/bin/false")
    return tmp_path / "builds"


def warnings_in(err: str) -> list[str]:
    return [line for line in err.splitlines() if "warning" in line]


def test_a_lock_left_by_a_killed_build_never_hangs_training(fresh_builds, tmp_path):
    """The issue's hang: a build killed half way left its lock; the next `interp train --arch mamba`
    waited forever after its header. Now the lock (an flock) died with its holder: training goes on at
    once (here the build itself fails, as without a compiler: eager torch, one warning line)."""
    killed = hold_lock(lambda: os.kill(os.getpid(), signal.SIGKILL))
    wait_for(killed)
    assert lock_path().read_text().startswith(str(killed))  # the lock file is left behind, naming the dead pid

    def fresh_kernels():
        import models.mamba
        models.mamba._KERNELS.clear()

    log = tmp_path / "train.log"
    started = time.time()
    status = wait_for(fork_cli(log, "train", "--out", tmp_path / "run", *MAMBA, prepare=fresh_kernels), timeout=120)
    output = log.read_text()
    assert os.WEXITSTATUS(status) == 0, output
    assert time.time() - started < 60, "it waited on the dead build's lock"
    assert "waiting" not in output
    assert warnings_in(output) == [line for line in output.splitlines() if "could not build the Mamba CPU kernels" in line]
    assert len(warnings_in(output)) == 1 and "using eager torch instead" in warnings_in(output)[0]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "finished"


def test_the_temporary_folder_of_a_killed_build_is_removed_by_the_next_build(fresh_builds, capfd):
    import models.mamba
    from models.kernels import folder_for

    folder = folder_for(models.mamba.KERNELS_NAME, [models.mamba.KERNELS_SOURCE], models.mamba.KERNELS_FLAGS[0])
    folder.parent.mkdir(parents=True, exist_ok=True)
    left = folder.parent / f".{folder.name}.k1ll3d.building"  # what a build killed half way leaves
    (left / "objects").mkdir(parents=True)
    other = folder.parent / ".another-key.k1ll3d.building"  # another key's build may be running: kept
    other.mkdir()
    assert kernel_build() is None  # the compiler fails at once here: eager torch
    assert not left.exists() and other.exists()


def test_a_lock_held_too_long_ends_in_eager_torch_with_one_warning(fresh_builds, capfd):
    holder = hold_lock(lambda: time.sleep(60))
    try:
        started = time.monotonic()
        assert kernel_build(wait_s=1.5) is None
        took = time.monotonic() - started
    finally:
        os.kill(holder, signal.SIGKILL)
        wait_for(holder)
    err = capfd.readouterr().err
    assert 1.4 < took < 10
    assert f"waiting for pid {holder} to finish building the Mamba CPU kernels" in err  # progress while waiting
    assert warnings_in(err) == ["interp: warning: the Mamba CPU kernels are still being built by another process "
                                "after 2 s; using eager torch instead (the same numbers, more slowly); a later run "
                                "will use the kernels"]


def test_a_build_lock_whose_named_holder_is_dead_is_taken_over(fresh_builds, capfd):
    """The lock is held (a process the builder forked kept it open) but the pid it names has ended: no
    build is going on, so the waiter takes the lock over and builds."""
    grandchild = []

    def fork_and_die():
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        Path(str(lock_path()) + ".child").write_text(str(child))

    builder = hold_lock(fork_and_die)
    wait_for(builder)
    grandchild.append(int(Path(str(lock_path()) + ".child").read_text()))
    try:
        started = time.monotonic()
        assert kernel_build(wait_s=60) is None  # the build itself fails here (CXX=/bin/false)
        assert time.monotonic() - started < 30
    finally:
        os.kill(grandchild[0], signal.SIGKILL)
    err = capfd.readouterr().err
    assert f"names pid {builder}, which has ended; taking it over" in err
    assert len(warnings_in(err)) == 1 and "could not build the Mamba CPU kernels" in warnings_in(err)[0]


def test_an_incomplete_build_folder_is_never_loaded(fresh_builds, capfd):
    """A folder without its build.json (the record written last) is not a build: it is rebuilt (here the
    rebuild fails: one warning, None), never imported."""
    from models.kernels import published

    folder = lock_path().with_name(lock_path().name.removesuffix(".lock"))
    folder.mkdir(parents=True)
    (folder / "interp_mamba_kernels.so").write_bytes(b"half a library")
    assert published(folder, "interp_mamba_kernels") is None
    assert kernel_build(wait_s=5) is None
    assert len(warnings_in(capfd.readouterr().err)) == 1
    assert not folder.exists()  # removed under the lock before the rebuild


@pytest.mark.slow
def test_a_killed_first_build_then_a_real_build_and_a_reuse(tmp_path, monkeypatch):
    """For real (about a minute on 2 cores): a lock left by a killed build, then `interp train --arch
    mamba` builds the kernels (with progress lines), publishes them, and a second process loads them
    without building."""
    monkeypatch.setenv("INTERP_BUILD_DIR", str(tmp_path / "builds"))
    killed = hold_lock(lambda: os.kill(os.getpid(), signal.SIGKILL))
    wait_for(killed)

    def fresh_kernels():
        import models.mamba
        models.mamba._KERNELS.clear()

    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    for i, log in enumerate(logs):
        status = wait_for(fork_cli(log, "train", "--out", tmp_path / f"run{i}", *MAMBA, prepare=fresh_kernels),
                          timeout=600)
        assert os.WEXITSTATUS(status) == 0, log.read_text()
    first, second = (log.read_text() for log in logs)
    assert "compiling the Mamba CPU kernels" in first and "done in" in first and "warning" not in first
    assert "compiling" not in second and "warning" not in second
    built = [p for p in (tmp_path / "builds").iterdir() if p.is_dir()]
    assert len(built) == 1 and (built[0] / "build.json").exists()  # published; no temporary folder left


# -- a run folder's lock ----------------------------------------------------------------------------
def test_a_lock_removes_only_the_folders_it_made(tmp_path):
    """A name that climbs (``trials/init=../../x``) resolves to a folder that was there: the lock's clean-up
    must leave it, and remove only the folder it made on the way."""
    from interp.files import RunLock

    (tmp_path / "out" / "trials").mkdir(parents=True)
    (tmp_path / "out" / "x").mkdir()  # there before: trials/init=.. is made, then ../.. lands here
    lock = RunLock(tmp_path / "out" / "trials" / "init=.." / ".." / ".." / "x").acquire()
    lock.release()
    assert (tmp_path / "out" / "x").is_dir() and not (tmp_path / "out" / "trials" / "init=..").exists()


# -- a cache: the language models' conversions -------------------------------------------------------------
def test_a_conversion_another_process_is_making_is_waited_for_not_made_twice(tmp_path, monkeypatch):
    from models import gguf_model

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"a stand-in: check_gguf and convert are replaced")
    monkeypatch.setattr(gguf_model, "check_gguf", lambda path: None)
    converted_here = []

    def convert(path, folder, progress=True, report=None):  # a conversion that takes 2 s
        converted_here.append(os.getpid())
        time.sleep(2)
        folder.mkdir()
        (folder / "parity.json").write_text(json.dumps(dict(format=gguf_model.FORMAT)))

    monkeypatch.setattr(gguf_model, "convert", convert)
    folder = gguf_model.cache_folder() / f"m-{gguf_model.file_digest(gguf)[:16]}"
    first = os.fork()
    if first == 0:
        try:
            gguf_model.converted(gguf, progress=False)
        finally:
            os._exit(0)
    lock = folder.with_name(folder.name + ".lock")
    deadline = time.time() + 60
    while time.time() < deadline and not (lock.exists() and lock.read_text().startswith(f"{first} ")):
        time.sleep(0.01)
    said = []
    assert gguf_model.converted(gguf, progress=False, report=lambda text, done, total: said.append(text)) == folder
    assert os.WEXITSTATUS(wait_for(first)) == 0
    assert converted_here == []  # this process waited for the other's conversion and used it
    assert said[:2] == ["reading m.gguf", f"waiting for pid {first} to finish converting m.gguf"]
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]  # the lock and its gate are gone
