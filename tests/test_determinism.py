"""Same seed, same thread count, same weights: training is bit-for-bit reproducible on the CPU.

At 2 threads (CI's machine's default) the token embedding's accumulating index backward raced:
two identical runs ended 2e-5 apart after 60 steps. Training now runs under deterministic kernels
(interp.train.deterministic); these runs are sized so that they differ without them (checked by
hand: with `deterministic` made a no-op, every architecture's pair differed in every tensor, by up
to 1e-4).
The SIGKILL-and-resume half of the guarantee is tests/test_crash.py, also at 2 threads.
"""
from __future__ import annotations

import pytest
import torch

import models
from interp.recipe import stated
from interp.train import Trainer, TrainSettings, deterministic

THREADS = 2
TASK = dict(name="bijection", V=10, L=9)
SETTINGS = TrainSettings(steps=25, batch_size=64, lr=3e-3, warmup=5, eval_every=1000, eval_size=16, seed=5)


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(before)


def trained(folder, arch):
    trainer = Trainer.start(folder, stated(TASK, arch, None, SETTINGS), device="cpu",
                            progress=False)  # bit for bit: a CPU claim
    trainer.run()
    return trainer.model.state_dict()


@pytest.mark.slow  # trains every architecture twice: 20-30 s each on a busy machine
@pytest.mark.parametrize("arch", models.ARCHS)
def test_two_runs_with_one_seed_are_bit_identical_on_two_threads(tmp_path, arch, two_threads):
    first, second = trained(tmp_path / "a", arch), trained(tmp_path / "b", arch)
    differ = {name: (first[name] - second[name]).abs().max().item() for name in first
              if not torch.equal(first[name], second[name])}
    worst = max(differ, key=differ.get, default=None)
    assert not differ, (f"{arch}: same seed, same {THREADS} threads, {len(differ)} of {len(first)} tensors differ "
                        f"(most: {worst}, by {differ.get(worst)})")


def test_the_run_records_its_thread_count_and_a_resume_on_another_says_so(tmp_path, two_threads):
    settings = TrainSettings(steps=4, batch_size=8, warmup=1, eval_every=1000, eval_size=8, resume_every=2)
    run = tmp_path / "run"
    Trainer.start(run, stated(TASK, "mlp", None, settings), device="cpu",
                  progress=False)  # run.json written, as if killed at once
    torch.set_num_threads(1)
    resumed = Trainer.resume(run, device="cpu", progress=False)
    assert len(resumed.notes) == 1 and "threads 2 -> 1" in resumed.notes[0]
    assert "OMP_NUM_THREADS=2" in resumed.notes[0]
    resumed.run()
    import json

    record = json.loads((run / "run.json").read_text())
    assert record["threads"] == THREADS and record["resumes"] == [dict(threads=1, device="cpu")]
    torch.set_num_threads(THREADS)


def test_deterministic_restores_the_callers_setting():
    assert not torch.are_deterministic_algorithms_enabled()
    with deterministic("cpu"):
        assert torch.are_deterministic_algorithms_enabled()
    assert not torch.are_deterministic_algorithms_enabled()
