"""Crash-proof training: `interp train` killed with SIGKILL at random moments, then resumed.

After every kill: each checkpoint on disk loads and equals the uninterrupted run's checkpoint of
the same step bit for bit, run.json parses, and `--resume` starts from the last complete resume
state. At the end the resumed run's checkpoints, final weights and metrics log equal the
uninterrupted run's exactly (CPU, 2 threads in both: CI's machine's default count).

The kill moments come from a seeded RNG (set CRASH_SEED to try others; a failure prints it).
Each killed `interp train` is a child running the real CLI entry point on 2 threads, forked from a
fork server that has imported everything (tests.cli.threaded_cli): a fresh Python would spend ~10 s
importing transformer-lens per start, while a fork starts training at once, so several kills fit in
a few seconds.
"""
from __future__ import annotations

import json
import os
import random
import signal
import time

import pytest
import torch
from safetensors.torch import load_file

from interp import checkpoint
from interp.recipe import stated
from interp.train import Trainer
from tests.cli import run_cli, threaded_cli

# 600 steps: checkpoints (and resume states) every 40 steps, 15 of them, enough for six kills to land at any moment;
# the whole test takes 49 s alone on two threads (with 1,500 steps it took 71 s alone and 258 s beside another CI
# worker, a tenth of CI's slow suite, for no more kills).
ARGS = ["--device", "cpu", "--steps", "600", "--checkpoint-every", "40", "--batch-size", "16", "--warmup", "10", "-T", "V=6", "-T", "L=5",
        "-M", "d_model=16", "-M", "n_layers=1", "-M", "n_heads=2"]
KILLS = 6
SEED = int(os.environ.get("CRASH_SEED", "0"))
THREADS = 2


def wait_for_new_checkpoint(run_dir, timeout: float = 60) -> None:
    known = len(checkpoint.list_checkpoints(run_dir))
    deadline = time.time() + timeout
    while len(checkpoint.list_checkpoints(run_dir)) <= known and time.time() < deadline:
        time.sleep(0.005)


def same_tensors(a, b) -> bool:
    a, b = load_file(a), load_file(b)
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def metrics(run_dir):
    """The metrics log without wall-clock times, which differ between runs."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "elapsed_s"} for line in lines]


def check_after_kill(run_dir, reference, note: str) -> int | None:
    """Everything on disk is whole; returns the step --resume must continue from (None: start afresh)."""
    reference_files = dict(checkpoint.list_checkpoints(reference))
    for step, path in checkpoint.list_checkpoints(run_dir):
        checkpoint.load(path)  # a complete, loadable checkpoint (raises otherwise)
        assert same_tensors(path, reference_files[step]), f"{note}: {path.name} differs from the uninterrupted run"
    if not (run_dir / "run.json").exists():
        return None
    json.loads((run_dir / "run.json").read_text())
    resume = run_dir / "resume.safetensors"
    return int(checkpoint.read(resume)[0]["step"]) if resume.exists() else 0


@pytest.mark.slow  # 600 steps twice, one run killed and resumed six times: crawls on a busy machine
def test_random_sigkills_then_resume_equal_an_uninterrupted_run(tmp_path, capsys):
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)  # as the killed children: same thread count, same bits
    try:
        sigkill_and_resume(tmp_path, capsys)
    finally:
        torch.set_num_threads(threads)


def sigkill_and_resume(tmp_path, capsys):
    reference = tmp_path / "straight"
    assert run_cli(capsys, "train", "--out", reference, *ARGS).code == 0

    run_dir = tmp_path / "killed"
    rng = random.Random(SEED)
    history = []  # (delay, resumed-from step, killed while running) for the failure message
    for _ in range(KILLS):
        note = f"CRASH_SEED={SEED}, kills so far {history}"
        start = check_after_kill(run_dir, reference, note)
        if start is not None:
            record = json.loads((run_dir / "run.json").read_text())
            if record["status"] == "finished":
                break
            # What --resume will do: continue from the last complete resume state.
            assert Trainer.resume(run_dir, progress=False).step == start, note
        log = tmp_path / f"child-{len(history)}.log"
        child = threaded_cli(log, "train", "--out", run_dir, *(ARGS if start is None else ["--resume", "--device", "cpu"]), threads=THREADS)
        # Even kills: any moment from the start (start-up included). Odd kills: just after the
        # next checkpoint appears, where a checkpoint, its resume state and the log are written.
        if len(history) % 2:
            wait_for_new_checkpoint(run_dir)
        delay = rng.uniform(0.0, 2.5 if len(history) % 2 == 0 else 0.3)
        time.sleep(delay)
        if child.is_alive():
            os.kill(child.pid, signal.SIGKILL)
        child.join(120)
        assert child.exitcode is not None, f"{note}: the child hung: {log.read_text()[-2000:]}"
        killed = child.exitcode == -signal.SIGKILL
        assert killed or child.exitcode == 0, f"{note}: the child failed: {log.read_text()[-2000:]}"
        history.append((round(delay, 3), start, killed))
    note = f"CRASH_SEED={SEED}, kills {history}"
    assert sum(k for *_, k in history) >= 3, f"{note}: too few kills landed while training ran"
    assert any(start for _, start, _ in history), f"{note}: no kill came late enough to resume from a saved state"

    start = check_after_kill(run_dir, reference, note)
    if json.loads((run_dir / "run.json").read_text())["status"] != "finished":
        outcome = run_cli(capsys, "train", "--out", run_dir, "--resume", "--device", "cpu")
        assert outcome.code == 0, f"{note}: {outcome.err}"
    assert [s for s, _ in checkpoint.list_checkpoints(run_dir)] == [s for s, _ in checkpoint.list_checkpoints(reference)]
    check_after_kill(run_dir, reference, note)  # every checkpoint, the final one included, bit for bit
    assert metrics(run_dir) == metrics(reference), f"{note}: the resumed log is not the uninterrupted one"
    assert json.loads((run_dir / "run.json").read_text())["final"] == json.loads(
        (reference / "run.json").read_text())["final"]
    assert not (run_dir / "resume.safetensors").exists()
    assert not [p.name for p in run_dir.rglob("*.tmp")], f"{note}: temp files of cut-short writes were left behind"


def test_resume_removes_the_temp_files_of_cut_short_writes(tmp_path):
    from interp.train import TrainSettings

    settings = TrainSettings(steps=10, batch_size=4, warmup=1, eval_every=10, eval_size=10)
    Trainer.start(tmp_path / "run",
                  stated(dict(name="bijection", V=4, L=3), "transformer", dict(d_model=8, n_layers=1, n_heads=2),
                         settings), progress=False)  # run.json only, as if killed
    stale = [tmp_path / "run" / ".run.json.x1.tmp", tmp_path / "run" / "checkpoints" / ".step-00000000.safetensors.x2.tmp"]
    for path in stale:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"half")
    Trainer.resume(tmp_path / "run", progress=False)
    assert not any(path.exists() for path in stale)
