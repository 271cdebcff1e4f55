"""Multi-process training: ``torchrun --nproc_per_node 2 -m interp train`` (gloo on CPU) equals one process.

Every process samples the same full batch and trains on its half; DDP averages the two halves'
gradients, which is the full batch's gradient, so the weights must match a single-process run with
the same global batch, up to float rounding (see ``ATOL``).
"""
import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from interp import checkpoint
from tests import tiny

# torchrun starts several Python processes (each importing TransformerLens): slow by nature
pytestmark = pytest.mark.slow

TINY = [*tiny.cli_args(n_layers=1), "--steps", "30"]
ENV = dict(os.environ, OMP_NUM_THREADS="1")

# The all-reduce sums two half-batch mean gradients instead of taking one full-batch mean: the same
# numbers in another summation order, so gradients differ in the last bits (float32 eps 1.2e-7).
# Adam's update m/sqrt(v) is scale-free, so such a relative error stays a relative error of an
# lr-sized step; over 30 steps the weights (|w| < 1) end up a few ulps apart (measured 6e-8 here).
ATOL = 1e-6
# Except where the true gradient is exactly zero: a key bias adds q.b_K to every score of a query,
# which softmax ignores, so b_K's gradient is pure rounding noise, and Adam scales noise up to full
# lr-sized steps of random sign. It differs between any two summation orders and cannot change an
# output, so it is left out of the weight comparison; the outputs are compared instead.
NOISE_ONLY = ("attn.b_K",)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun(out, *args):
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                             "--master_port", str(free_port()), "-m", "interp", "train", "--out", str(out),
                             *args], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc, what):
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, f"{what} failed:\n{err[-3000:]}"
    return out, err


def test_two_processes_with_gloo_equal_one_process_on_the_same_global_batch(tmp_path):
    two = torchrun(tmp_path / "two", *TINY, "--batch-size", "8")
    one = subprocess.Popen([sys.executable, "-m", "interp", "train", "--out", str(tmp_path / "one"), *TINY,
                            "--batch-size", "8"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finish(one, "single-process run")
    finish(two, "torchrun run")

    record = json.loads((tmp_path / "two" / "run.json").read_text())
    assert record["world_size"] == 2 and record["status"] == "finished"
    assert json.loads((tmp_path / "one" / "run.json").read_text())["world_size"] == 1
    # One writer: the files of one run, no leftovers of a second process racing on them.
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == ["checkpoints", "metrics.jsonl", "run.json"]
    assert [s for s, _ in checkpoint.list_checkpoints(tmp_path / "two")] == [0, 30]
    assert len((tmp_path / "two" / "metrics.jsonl").read_text().splitlines()) == 1

    name = checkpoint.checkpoint_name(30)
    a, b = load_file(tmp_path / "one" / "checkpoints" / name), load_file(tmp_path / "two" / "checkpoints" / name)
    assert a.keys() == b.keys()
    start = load_file(tmp_path / "one" / "checkpoints" / checkpoint.checkpoint_name(0))
    worst, moved = 0.0, 0.0
    for key in a:
        if not a[key].is_floating_point() or key.endswith(NOISE_ONLY):
            continue
        worst = max(worst, (a[key] - b[key]).abs().max().item())
        moved = max(moved, (a[key] - start[key]).abs().max().item())
    print(f"max |weight difference| one vs two processes: {worst:.3g} (training moved weights by up to {moved:.3g})")
    assert worst < ATOL
    assert moved > 100 * ATOL  # the comparison is not vacuous: 30 steps changed the weights

    model_a, model_b = checkpoint.load(tmp_path / "one"), checkpoint.load(tmp_path / "two")
    batch = model_a.task.sample(64, generator=torch.Generator().manual_seed(123))
    with torch.no_grad():
        pa, pb = model_a.answer_probs(batch.tokens), model_b.answer_probs(batch.tokens)
    assert (pa - pb).abs().max().item() < ATOL


def test_a_batch_size_not_divisible_by_the_processes_is_refused_by_every_process(tmp_path):
    proc = torchrun(tmp_path / "run", *TINY, "--batch-size", "7")
    _, err = proc.communicate(timeout=240)
    assert proc.returncode != 0
    message = "interp: error: batch-size 7 is not divisible by the 2 training processes"
    # One line from each process (torchrun may stop the second before it prints; it then adds its
    # own report of the failure), and no traceback from our code.
    assert err.count(message) in (1, 2), err[-3000:]
    assert not any(f"interp{os.sep}{name}" in err for name in ("cli.py", "train.py", "distributed.py")), err[-3000:]
    assert not (tmp_path / "run").exists()
