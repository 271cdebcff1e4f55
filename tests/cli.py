"""Run the ``interp`` console entry point in-process and capture what a user would see."""
import os
import sys
from dataclasses import dataclass

from interp.cli import entry


@dataclass
class Outcome:
    code: int
    out: str
    err: str


def run_cli(capsys, *args) -> Outcome:
    argv = sys.argv
    sys.argv = ["interp", *map(str, args)]
    try:
        entry()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    finally:
        sys.argv = argv
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err)


def fork_cli(log, *args, prepare=None) -> int:
    """Run ``interp ARGS`` in a forked child (output to the file ``log``) and return its pid.

    The child shares the already-imported modules, so it starts at once where a fresh Python would
    spend ~10 s importing transformer-lens. ``prepare`` runs in the child first (e.g. to set limits).
    The child computes on one thread: a fork keeps none of the parent's OpenMP worker threads, and
    a parallel region in the child would wait for them forever.
    """
    pid = os.fork()
    if pid:
        return pid
    _cli_child(log, [str(a) for a in args], 1, prepare)  # never returns into pytest


def wait_for(pid: int, timeout: float = 120) -> int:
    """The wait status of a forked child; a child still running after ``timeout`` s is killed and fails the test."""
    import signal
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"the forked interp (pid {pid}) hung for {timeout} s and was killed")


def _cli_child(log: str, args: list[str], threads: int, prepare=None) -> None:
    """The body of a child process: ``interp ARGS`` on ``threads`` threads, then exit with its code."""
    import torch

    code = 1
    try:
        torch.set_num_threads(threads)
        sys.stdout = sys.stderr = open(log, "w", buffering=1)
        if prepare:
            prepare()
        sys.argv = ["interp", *args]
        entry()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    finally:
        os._exit(code)


_SERVER = None


def threaded_cli(log, *args, threads: int = 2):
    """Start ``interp ARGS`` (output to ``log``) on ``threads`` threads; returns its multiprocessing.Process.

    fork_cli's children must stay on one thread. These are forked from a fork server: a fresh Python
    that imported interp (and with it torch and transformer-lens, ~10 s, once per test session) but
    never computed, so it holds no OpenMP pool a child could wait on. The children start at once
    and run the kernels a user's `interp train` runs, at the machine's thread count.
    """
    import multiprocessing

    global _SERVER
    if _SERVER is None:
        _SERVER = multiprocessing.get_context("forkserver")
        _SERVER.set_forkserver_preload(["interp.cli", "tests.cli"])
    process = _SERVER.Process(target=_cli_child, args=(str(log), [str(a) for a in args], threads), daemon=True)
    process.start()
    return process
