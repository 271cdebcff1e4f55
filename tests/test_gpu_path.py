"""The GPU path, tested where it can be: Mamba's parallel scan (exact against the sequential reference,
forward and gradients, on the CPU in float64), which scan runs where, the precision rule (bf16 autocast
on CUDA by default, float32 on the CPU, a flag for either), and benchmarks/gpu_check.py without a GPU.
Tests marked ``cuda`` need a GPU and are skipped without one; ``python benchmarks/gpu_check.py`` runs them."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformer_lens.hook_points import HookPoint

import models
import models.mamba as mamba
import tasks
from models.mamba import linear_scan, parallel_scan, reference_scan, selective_scan
from tests.test_architectures import SMALL, scan_inputs, values_and_grads

ROOT = Path(__file__).resolve().parents[1]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def sequential(a, b, reverse=False):
    """h_t = a_t h_{t-1} + b_t (or, reversed, g_t = a_t g_{t+1} + b_t), one position at a time."""
    order = range(b.shape[1] - 1, -1, -1) if reverse else range(b.shape[1])
    h, out = torch.zeros_like(b[:, 0]), torch.empty_like(b)
    for t in order:
        h = a[:, t] * h + b[:, t]
        out[:, t] = h
    return out


@pytest.mark.parametrize("reverse", [False, True])
def test_a_constant_decay_gives_the_geometric_series(reverse):
    """a = 1/2, b = 1: h_t = 2 - 2^-t, t counted from the start (or from the end, reversed)."""
    T = 11
    h = linear_scan(torch.full((1, T, 1), 0.5, dtype=torch.float64), torch.ones(1, T, 1, dtype=torch.float64), reverse)
    steps = torch.arange(T, dtype=torch.float64)
    expected = 2 - 0.5 ** (T - 1 - steps if reverse else steps)
    torch.testing.assert_close(h[0, :, 0], expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("reverse", [False, True])
def test_the_pairwise_scan_is_the_recurrence_at_every_length(reverse):
    """Every T from 1 to 70 (odd and even at every level of the recursion), with some decays exactly 0 and 1."""
    g = torch.Generator().manual_seed(0)
    for T in range(1, 71):
        a = torch.rand(2, T, 3, 2, generator=g, dtype=torch.float64)
        a[:, ::7] = 0.0
        a[:, 3::5] = 1.0
        b = torch.randn(2, T, 3, 2, generator=g, dtype=torch.float64)
        torch.testing.assert_close(linear_scan(a, b, reverse), sequential(a, b, reverse), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("T", [1, 2, 7, 64, 97])
def test_the_parallel_scan_matches_the_reference_with_gradients(T):
    inputs = scan_inputs(seed=T, batch=2, T=T, E=6, N=4)
    expected = values_and_grads(reference_scan, inputs)
    got = values_and_grads(parallel_scan, inputs)
    for e, g in zip(expected, got):  # y, h, then the gradients of x, delta, A, B, C, D
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


def test_extreme_steps_stay_finite_and_exact():
    """delta up to 1e4 (decays underflow to exactly 0: the state restarts) and down to 1e-8 (decays of 1:
    nothing forgotten): no inf or NaN anywhere, forward or backward, and still the reference's numbers."""
    x, delta, A, B, C, D = (t.detach() for t in scan_inputs(seed=5, batch=2, T=40, E=6, N=4))
    delta = torch.where(torch.rand(delta.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64) < 0.5,
                        torch.full_like(delta, 1e4), torch.full_like(delta, 1e-8))
    A = A * 16
    inputs = [t.requires_grad_() for t in (x, delta, A, B, C, D)]
    expected = values_and_grads(reference_scan, inputs)
    got = values_and_grads(parallel_scan, inputs)
    for e, g in zip(expected, got):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-10)


def test_float32_parallel_scan_matches_the_float64_reference():
    inputs = scan_inputs(seed=3, batch=4, T=329, E=8, N=16)
    expected = values_and_grads(reference_scan, inputs)
    got = values_and_grads(parallel_scan, [t.detach().float().requires_grad_() for t in inputs])
    for e, g in zip(expected, got):
        assert ((g.double() - e).abs().max() / e.abs().max()).item() < 1e-5


@pytest.mark.parametrize("forced, hooked, expected", [
    ("auto", False, "kernel"),  # the CPU: the C++ kernel
    ("parallel", False, "parallel"),
    ("loop", False, "loop"),
    ("parallel", True, "hooked"),  # hooks on hook_h see (and may change) the states: always materialised
    ("auto", True, "hooked"),
])
def test_which_scan_runs(forced, hooked, expected, monkeypatch):
    monkeypatch.setenv("INTERP_MAMBA_SCAN", forced)
    inputs = scan_inputs()
    hook = HookPoint()
    if hooked:
        hook.add_hook(lambda h, hook: h)
    assert mamba.scan_method(inputs[0], hooked) == expected
    y, h = selective_scan(*inputs, hook_h=hook)
    ran = {"kernel": "CompiledScan", "parallel": "ParallelRecurrence", "loop": "LinearRecurrence",
           "hooked": "LinearRecurrence"}[expected]
    if expected == "kernel":
        assert h is None and ran in type(y.grad_fn).__name__
    else:
        assert any(ran in str(node) for node in graph_nodes(h))


def test_mamba_ssm_is_chosen_on_cuda_only_and_never_over_hooks_or_a_forced_scan(monkeypatch):
    """The one choice (``scan_method``) holds mamba-ssm's place too: first on CUDA, never on the CPU."""
    monkeypatch.setattr(mamba, "selective_scan_fn", lambda *args: None)  # as if installed: only the choice is asked
    monkeypatch.setenv("INTERP_MAMBA_SCAN", "auto")
    x = scan_inputs()[0]
    assert mamba.scan_method(x, False) == "kernel"
    if torch.cuda.is_available():
        x = x.cuda()
        assert mamba.scan_method(x, False) == "mamba-ssm" and mamba.scan_method(x, True) == "hooked"
        monkeypatch.setenv("INTERP_MAMBA_SCAN", "parallel")
        assert mamba.scan_method(x, False) == "parallel"


def test_the_mamba_ssm_path_hands_its_kernel_the_layout_it_takes(monkeypatch):
    """mamba-ssm's ``selective_scan_fn`` takes x and delta as [B, E, T], B and C as [B, N, T], and gives y as
    [B, E, T]: the reference scan in that layout stands in for it, so the path is checked without a GPU."""
    def kernel(u, delta, A, B, C, D):
        y, _ = reference_scan(u.transpose(1, 2), delta.transpose(1, 2), A, B.transpose(1, 2), C.transpose(1, 2), D)
        return y.transpose(1, 2)

    monkeypatch.setattr(mamba, "selective_scan_fn", kernel)
    monkeypatch.setattr(mamba, "scan_method", lambda *args: "mamba-ssm")
    inputs = [t.detach() for t in scan_inputs()]
    y, h = selective_scan(*inputs)
    assert h is None
    torch.testing.assert_close(y, reference_scan(*inputs)[0], rtol=1e-6, atol=1e-6)  # D goes over as float32


def graph_nodes(tensor):
    """Every autograd node behind ``tensor``."""
    seen, todo = set(), [tensor.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo.extend(next_node for next_node, _ in node.next_functions)
    return seen


def test_a_misspelt_scan_is_one_line(monkeypatch):
    monkeypatch.setenv("INTERP_MAMBA_SCAN", "fast")
    with pytest.raises(tasks.ConfigError, match="INTERP_MAMBA_SCAN must be one of auto, parallel, loop, got 'fast'"):
        selective_scan(*scan_inputs())


def test_a_mamba_model_gives_the_same_numbers_on_every_scan(monkeypatch):
    """The whole model, gradients included: the parallel scan or the loop in place of the CPU kernel."""
    task = tasks.make("bijection", V=6, L=5)
    tokens = task.sample(8, generator=torch.Generator().manual_seed(0)).tokens
    model = models.build("mamba", task, SMALL, seed=0).double()
    outputs = {}
    for scan in ("auto", "parallel", "loop"):
        monkeypatch.setenv("INTERP_MAMBA_SCAN", scan)
        model.zero_grad()
        out = model(tokens)
        out.square().sum().backward()
        outputs[scan] = [out.detach(), *(p.grad.clone() for p in model.parameters())]
    for scan in ("parallel", "loop"):
        for e, g in zip(outputs["auto"], outputs[scan]):
            torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-10)


def test_under_bf16_autocast_the_states_stay_float32():
    inputs = [t.detach() for t in scan_inputs(seed=2, T=33)]
    expected, _ = reference_scan(*inputs)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, h = parallel_scan(*(t.bfloat16() for t in inputs))
    assert h.dtype == torch.float32 and y.dtype == torch.bfloat16
    torch.testing.assert_close(y.double(), expected, rtol=0.05, atol=0.05)  # the inputs' bf16 rounding only


@cuda
@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_cuda_parallel_scan_matches_the_reference(dtype, tolerance, monkeypatch):
    """On the GPU without mamba-ssm (where it runs unforced): the float64 reference on the CPU, forward and
    gradients."""
    monkeypatch.setattr(mamba, "selective_scan_fn", None)  # where mamba-ssm is installed, it would run instead
    inputs = scan_inputs(seed=7, batch=4, T=329, E=16, N=16)
    expected = values_and_grads(reference_scan, inputs)
    assert mamba.scan_method(inputs[0].cuda(), hooked=False) == "parallel"
    got = values_and_grads(lambda *a: selective_scan(*a), [t.detach().to("cuda", dtype).requires_grad_() for t in inputs])
    for e, g in zip(expected, got):
        assert ((g.double().cpu() - e).abs().max() / e.abs().max()).item() < tolerance


@cuda
def test_a_cuda_trainer_trains_in_bf16_by_default_and_in_float32_when_asked(tmp_path):
    from interp.recipe import stated
    from interp.train import Trainer, TrainSettings

    for name, bf16 in (("auto", None), ("off", False)):
        trainer = Trainer.start(tmp_path / name,
                                stated(dict(name="bijection", V=6, L=5), "transformer",
                                       dict(d_model=16, n_layers=1, n_heads=2),
                                       TrainSettings(steps=2, batch_size=8, warmup=1, eval_every=2, eval_size=16,
                                                     bf16=bf16)), device="cuda", progress=False)
        assert trainer.record["bf16"] is (bf16 is None)
        trainer.run()


@pytest.mark.parametrize("bf16, device, expected", [(None, "cpu", False), (None, "cuda", True), (None, "cuda:1", True),
                                                    (False, "cuda", False), (True, "cpu", True)])
def test_bf16_auto_is_on_for_cuda_only(bf16, device, expected):
    from interp.recipe import bf16_on

    assert bf16_on(bf16, device) is expected


def train_briefly(folder, bf16="unset", resume=False):
    """A 2-step tiny run on the CPU; returns (run.json, whether each training forward pass autocast)."""
    import json

    from interp.recipe import stated
    from interp.train import Trainer, TrainSettings

    settings = {} if bf16 == "unset" else dict(bf16=bf16)
    trainer = (Trainer.resume(folder, device="cpu", progress=False) if resume else
               Trainer.start(folder,
                             stated(dict(name="bijection", V=6, L=5), "transformer",
                                    dict(d_model=16, n_layers=1, n_heads=2),
                                    TrainSettings(steps=2, batch_size=8, warmup=1, eval_every=100, eval_size=16,
                                                  **settings)), device="cpu", progress=False))
    seen = []
    trainer.model.register_forward_pre_hook(lambda module, args: seen.append(torch.is_autocast_enabled("cpu"))
                                            if module.training else None)
    trainer.run()
    return json.loads((folder / "run.json").read_text()), seen


@pytest.mark.parametrize("bf16, autocast", [("unset", False), (None, False), (False, False), (True, True)])
def test_the_cpu_trains_in_float32_unless_asked_and_run_json_says_which(bf16, autocast, tmp_path):
    record, seen = train_briefly(tmp_path / "run", bf16)
    assert seen == [autocast, autocast]
    assert record["bf16"] is autocast and record["train"]["bf16"] == (None if bf16 == "unset" else bf16)


@pytest.mark.parametrize("legacy, autocast", [(False, False), (True, True)])
def test_a_run_json_from_before_auto_resumes_as_it_ran(legacy, autocast, tmp_path):
    """Before "auto", false meant "on CUDA only" and true "everywhere": on the CPU, off and on."""
    import json

    from interp.recipe import recorded_train
    from interp.recipe import stated
    from interp.train import Trainer, TrainSettings

    run = tmp_path / "run"
    Trainer.start(run,
                  stated(dict(name="bijection", V=6, L=5), "transformer", dict(d_model=16, n_layers=1, n_heads=2),
                         TrainSettings(steps=2, batch_size=8, warmup=1, eval_every=100, eval_size=16)), device="cpu",
                  progress=False)
    record = json.loads((run / "run.json").read_text())
    del record["bf16"]
    record["train"]["bf16"] = legacy
    (run / "run.json").write_text(json.dumps(record))
    assert recorded_train(record)["bf16"] == (True if legacy else None)  # a recipe's words for what it meant
    resumed, seen = train_briefly(run, resume=True)
    assert seen == [autocast, autocast] and resumed["bf16"] is autocast and resumed["train"]["bf16"] is legacy


def test_an_explicit_no_bf16_is_not_mistaken_for_an_old_record():
    from interp.recipe import recorded_train

    assert recorded_train(dict(train=dict(bf16=False), bf16=False))["bf16"] is False


def test_bf16_must_be_true_false_or_auto():
    from interp.errors import UserError
    from interp.recipe import TrainSettings

    assert TrainSettings().bf16 is None and TrainSettings(bf16=None).validate().bf16 is None
    with pytest.raises(UserError, match="bf16 must be true or false, got 'yes'"):
        TrainSettings(bf16="yes").validate()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: gpu_check runs in full there")
def test_gpu_check_without_a_gpu_says_so_in_one_line_and_succeeds():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py")], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1 and done.stdout.startswith("gpu_check: no CUDA device here")


def test_gpu_check_names_a_missing_dependency(monkeypatch):
    """Its first row: every pyproject dependency importable, or the missing ones by name (on a lent GPU machine
    where the tree was copied beside a ready-made torch, gguf was missing and the bad-input cases errored)."""
    import importlib.util

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    summary = gpu_check.Summary()
    gpu_check.dependencies(summary)
    assert summary.rows[-1][0] == "dependencies" and summary.rows[-1][2], summary.rows
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("gguf", "sklearn") else
                        find_spec(name, *a))
    gpu_check.dependencies(summary)
    assert summary.rows[-1][1:] == ("missing: scikit-learn, gguf (pip install -e .)", False)


def test_the_backward_profile_names_kernels_without_their_signatures():
    """The H100's profile listed `void (anonymous namespace)::indexing_backward_kernel<float, 4>(long const*, ...)`:
    the summary row keeps the name and drops the return type, namespace, template arguments and signature."""
    from benchmarks.step_profile import backward_ops, kernel_name

    assert kernel_name("void (anonymous namespace)::indexing_backward_kernel<float, 4>(long const*, long const*, "
                       "float const*, float*, long, long, long, long, bool)") == "indexing_backward_kernel"
    assert kernel_name("void at::native::elementwise_kernel<128, 2, Mul>(int, Mul)") == "at::native::elementwise_kernel"
    assert kernel_name("aten::_index_put_impl_") == "aten::_index_put_impl_"
    ops = backward_ops("recall", "mlp", "cpu", 4)  # the CPU rehearsal of the GPU check's section
    assert ops and all("(" not in name and "<" not in name and ms >= 0 for name, ms in ops)
