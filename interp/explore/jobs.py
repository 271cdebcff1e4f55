"""Long explorer work in the background: progress, an estimate of the time left, and a cancel.

A view whose work takes minutes (activation patching on a language model: every site of every layer, on
several input pairs) does not run inside the page's request: ``Jobs.start`` runs it in a thread and answers at
once; the page polls the job (``Job.line``: steps done, seconds so far, about how many left) and may cancel it.
The work reports each finished step through ``Job.step``, which is where a cancel takes effect (``Cancelled``)
and where, on a ``TakingTurns`` lock, a view waiting for the model runs before the next step: the other views,
and a second tab, are served while the job runs, never blanked until it ends.
"""
from __future__ import annotations

import itertools
import math
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable

_IDS = itertools.count(1)
TURN_WAIT_S = 0.005  # how long a job, between two of its steps, leaves the lock to a waiting view


class Cancelled(Exception):
    """Raised inside a job's work, at its next step, once the job is cancelled."""


class TakingTurns:
    """A re-entrant lock (``threading.RLock``'s interface) that counts who waits for it, so that its holder can let
    them take a turn between steps of a long job (``let_waiting_in``)."""

    def __init__(self):
        self._lock = threading.RLock()
        self._count = threading.Lock()
        self._waiting = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        with self._count:
            self._waiting += 1
        try:
            return self._lock.acquire(blocking, timeout)
        finally:
            with self._count:
                self._waiting -= 1

    def release(self) -> None:
        self._lock.release()

    __enter__ = acquire

    def __exit__(self, *_exc) -> None:
        self.release()

    def waiting(self) -> int:
        return self._waiting

    def let_waiting_in(self, turns: int = 100) -> None:
        """Called by the holder (holding it once, with nothing of its own on the model): while another thread waits,
        let it have the lock, then take it back; at most ``turns`` turns, so the job always gets on."""
        for _ in range(turns):
            if not self._waiting:
                return
            self._lock.release()
            time.sleep(TURN_WAIT_S)  # the waiting thread wakes and takes the lock
            self._lock.acquire()


class Job:
    """One piece of background work: ``done`` of ``total`` steps, its state ("running", "done", "failed",
    "cancelled"), its result or its error's one line."""

    def __init__(self, key, what: str, unit: str, after: "Job | None" = None):
        self.key, self.what, self.unit, self.id = key, what, unit, next(_IDS)
        self.after = after  # a cancelled job still finishing its step: this one starts when it has stopped
        self.delivering = 0  # presses drawing its result now (``delivered``)
        self.delivered = None  # when a press last drew its result
        self.done, self.total = 0, None
        self.state, self.result, self.error = "running", None, None
        self.started, self.ended = time.monotonic(), None
        self._cancel, self._ended = threading.Event(), threading.Event()
        self._turns: Callable[[], None] | None = None

    def cancel(self) -> None:
        self._cancel.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the job to end (at most ``timeout`` seconds; None: however long); whether it has."""
        return self._ended.wait(timeout)

    def step(self, n: int = 1) -> None:
        """``n`` more steps done; a cancel takes effect here (``Cancelled``), and views waiting for the model run."""
        self.done += n
        if self._cancel.is_set():
            raise Cancelled
        if self._turns is not None:
            self._turns()

    def seconds(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    def left_s(self) -> float | None:
        """About how many seconds are left: the time so far per step, times the steps to go (None before the first)."""
        if not self.done or not self.total:
            return None
        return self.seconds() / self.done * max(self.total - self.done, 0)

    def line(self) -> str:
        """What the page shows: the work, its progress, the time so far and about how much is left."""
        if self.state == "done":
            return f"{self.what}: done in {duration(self.seconds())}"
        if self.state == "cancelled":
            return f"{self.what}: cancelled after {self.done} of {self.total or '?'} {self.unit}"
        if self.state == "failed":
            return f"{self.what}: {self.error}"
        if self.after is not None and not self.after.wait(0):
            return (f"{self.what}: starts once the cancelled one stops at the end of its step… "
                    f"{duration(self.seconds())}")
        if self.total is None:
            return f"{self.what}: preparing… {duration(self.seconds())}"
        left = self.left_s()
        estimate = (f", about {duration(left)} left" if left is not None else
                    f"; the first of them is running (an estimate of the time left follows it)")
        cancelling = " (cancelling at the next step)" if self._cancel.is_set() else ""
        return (f"{self.what}: {self.done} of {self.total} {self.unit} ({self.done / self.total:.0%}), "
                f"{duration(self.seconds())} so far{estimate}{cancelling}")

    @contextmanager
    def delivery(self):
        """A press waits for the job and draws its result in the block (``quiet``)."""
        self.delivering += 1
        try:
            yield
        finally:
            self.delivered = time.monotonic()
            self.delivering -= 1

    def quiet(self, for_s: float) -> bool:
        """Ended ``for_s`` seconds ago and no press has drawn its result since (nor is drawing it): the page's tick
        may say so, and draw its result where no press did, without drawing it twice in a tab whose press did."""
        last = max(self.ended or math.inf, self.delivered or 0)
        return self.state != "running" and not self.delivering and time.monotonic() - last >= for_s

    def cancelling(self) -> bool:
        """Cancelled while it runs: it stops at the end of its step."""
        return self.state == "running" and self._cancel.is_set()


def duration(seconds: float) -> str:
    """A time as a person reads it: "42 s", "5 min 07 s", "5 h 07 min"."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min"


class Jobs:
    """The explorer's background work, one job at a time: a job asked for again (the same key) is the same job,
    running or done; another one while it runs is refused with what is running, until it ends or is cancelled."""

    def __init__(self, lock=None, keep: int = 4):
        self.lock = lock  # a TakingTurns lock: waiting views run between the job's steps
        self._jobs: dict[Any, Job] = {}
        # held while the table changes and while it is read: a new job of a key replaces the old one in two steps,
        # and a reader between them (the page's progress tick) would see no job at all (re-entrant: start reads)
        self._guard = threading.RLock()
        self.keep = keep

    def get(self, key) -> Job | None:
        with self._guard:
            return self._jobs.get(key)

    def latest(self) -> Job | None:
        """The job started last (running or ended)."""
        with self._guard:
            return max(self._jobs.values(), key=lambda j: j.id, default=None)

    def running(self) -> Job | None:
        """The job running (the one started last, where a cancelled one still finishes its step before it)."""
        with self._guard:
            return max((j for j in self._jobs.values() if j.state == "running"), key=lambda j: j.id, default=None)

    def start(self, key, what: str, work: Callable[[Job], Any], unit: str = "steps", take_turns: bool = False) -> Job:
        """The job of ``key``: the one there is (running or done), or a new one running ``work(job)`` in a thread;
        ``take_turns``: the work holds ``self.lock`` once and leaves nothing on the model between steps, so views
        waiting for the lock run between them. A failed or cancelled job is started again, as is one being
        cancelled: the new one waits for it to stop (the end of its step), and the running one being cancelled
        does not refuse another."""
        from ..errors import UserError

        with self._guard:
            job = self._jobs.get(key)
            if job is not None and (job.state == "done" or job.state == "running" and not job.cancelling()):
                return job
            other = self.running()
            if other is not None and not other.cancelling():
                raise UserError(f"{other.what} is still running ({other.line().split(': ', 1)[-1]}); "
                                f"wait for it or cancel it first")
            self._jobs.pop(key, None)  # (a new job of the key is the latest in the order kept)
            job = self._jobs[key] = Job(key, what, unit, after=other)
            if take_turns and isinstance(self.lock, TakingTurns):
                job._turns = self.lock.let_waiting_in
            while len(self._jobs) > self.keep:  # the oldest results go
                del self._jobs[next(iter(self._jobs))]

        def run():
            try:
                if job.after is not None:
                    job.after.wait()
                    if job._cancel.is_set():
                        raise Cancelled
                    job.started = time.monotonic()  # its time and estimate from its own start
                job.result = work(job)
                job.state = "done"
            except Cancelled:
                job.state = "cancelled"
            except Exception as err:  # noqa: BLE001  (said in the page, one line; the server goes on)
                from .common import REFUSED

                # one sentence in the panel (the job's own): a refusal as it is, anything else said to be internal
                first = (str(err).strip().splitlines() or [""])[0]
                job.error = first if isinstance(err, REFUSED) else \
                    f"stopped on an internal error ({type(err).__name__}: {first})"
                job.state = "failed"
            finally:
                job.ended = time.monotonic()
                job._ended.set()

        threading.Thread(target=run, daemon=True, name=f"explorer job: {what}").start()
        return job
