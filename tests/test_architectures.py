"""Mamba, LSTM and MLP: ground truth for their computations, and one hooked surface for all four."""

import pytest
import torch
from transformer_lens.hook_points import HookPoint

import models
import tasks
from models.mamba import causal_depthwise_conv, cpu_kernels, gate, reference_scan, selective_scan
from tasks import ConfigError

SMALL = dict(d_model=16, n_layers=2)


def scan_inputs(seed=0, batch=3, T=7, E=5, N=4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, T, E, generator=g, dtype=torch.float64)
    delta = torch.nn.functional.softplus(torch.randn(batch, T, E, generator=g, dtype=torch.float64))
    A = -torch.rand(E, N, generator=g, dtype=torch.float64) * 3
    B, C = (torch.randn(batch, T, N, generator=g, dtype=torch.float64) for _ in range(2))
    D = torch.randn(E, generator=g, dtype=torch.float64)
    return [t.requires_grad_() for t in (x, delta, A, B, C, D)]


def values_and_grads(fn, inputs, seed=1):
    y, h = fn(*inputs)
    weights = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(y)  # y's device too (CUDA in the GPU tests)
    return [y.detach(), None if h is None else h.detach(), *torch.autograd.grad((y * weights).sum(), inputs)]


def test_the_cpp_kernels_build_here():
    assert cpu_kernels() is not None  # else every Mamba here silently runs the slower fallback


# E=37: two full blocks of 16 channels and a partial one; T=7 positions
@pytest.mark.parametrize("path", ["kernel", "hooked-states", "fallback"])
def test_selective_scan_matches_the_sequential_reference(path, monkeypatch):
    inputs = scan_inputs(E=37)
    expected = values_and_grads(reference_scan, inputs)
    hook = HookPoint()
    if path == "hooked-states":
        hook.add_hook(lambda h, hook: h)
    if path == "fallback":
        monkeypatch.setitem(models.mamba._KERNELS, "module", None)
    got = values_and_grads(lambda *a: selective_scan(*a, hook_h=hook), inputs)
    if path == "kernel":
        assert got[1] is None  # the kernel never forms the states
        got[1] = expected[1]
    for e, g in zip(expected, got):  # y, h, then the gradients of x, delta, A, B, C, D
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


def test_the_float32_kernel_matches_the_float64_reference():
    """float32 uses a polynomial exp (relative error 5e-9); everything should agree to float rounding."""
    inputs = scan_inputs(seed=3, batch=4, T=40, E=40, N=16)
    expected = values_and_grads(reference_scan, inputs)
    single = [t.detach().float().requires_grad_() for t in inputs]
    got = values_and_grads(lambda *a: selective_scan(*a), single)
    for e, g in zip(expected[:1] + expected[2:], got[:1] + got[2:]):
        assert ((g.double() - e).abs().max() / e.abs().max()).item() < 2e-6


def test_patching_the_states_changes_the_output():
    inputs = [t.detach() for t in scan_inputs()]
    hook = HookPoint()
    hook.add_hook(lambda h, hook: torch.zeros_like(h))
    y, _ = selective_scan(*inputs, hook_h=hook)
    x, D = inputs[0], inputs[-1]
    torch.testing.assert_close(y, D * x)  # no state left: only the D skip


def test_lstm_gates_and_cells_match_a_step_by_step_lstm():
    from models.lstm import LSTMMixer
    torch.manual_seed(0)
    mixer = LSTMMixer(d_model=6, d_hidden=5).double()
    with torch.no_grad():
        mixer.lstm.bias_hh_l0.normal_()
    lstm, x = mixer.lstm, torch.randn(3, 8, 6, dtype=torch.float64)
    h = c = torch.zeros(3, 5, dtype=torch.float64)
    hidden, cell, gates = [], [], []
    for t in range(8):  # the textbook LSTM cell
        z = x[:, t] @ lstm.weight_ih_l0.T + lstm.bias_ih_l0 + h @ lstm.weight_hh_l0.T + lstm.bias_hh_l0
        i, f, g, o = z.chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        hidden.append(h), cell.append(c), gates.append(z)
    cache = {}
    for name in ("hook_gates", "hook_hidden", "hook_cell"):
        getattr(mixer, name).add_hook(lambda t, hook, name=name: cache.__setitem__(name, t))
    mixer(x)
    torch.testing.assert_close(cache["hook_hidden"], torch.stack(hidden, 1))
    torch.testing.assert_close(cache["hook_cell"], torch.stack(cell, 1))
    torch.testing.assert_close(cache["hook_gates"], torch.stack(gates, 1))


def test_the_mlp_never_mixes_positions():
    task = tasks.make("bijection", V=6, L=5)
    model = models.build("mlp", task, SMALL, seed=0).eval()
    tokens = task.sample(4, generator=torch.Generator().manual_seed(0)).tokens
    changed = tokens.clone()
    changed[:, :4] = (changed[:, :4] + 1) % task.vocab_size  # earlier context changes, position 4 does not
    with torch.no_grad():
        torch.testing.assert_close(model(tokens)[:, 4:], model(changed)[:, 4:])


HOOKS = {
    "mamba": ["blocks.1.mixer.hook_in_proj", "blocks.1.mixer.hook_conv", "blocks.1.mixer.hook_delta",
              "blocks.1.mixer.hook_B", "blocks.1.mixer.hook_C", "blocks.1.mixer.hook_h", "blocks.1.mixer.hook_y",
              "blocks.1.mixer.hook_out_proj"],
    "lstm": ["blocks.1.mixer.hook_gates", "blocks.1.mixer.hook_hidden", "blocks.1.mixer.hook_cell",
             "blocks.1.mixer.hook_out"],
    "mlp": ["blocks.1.mixer.hook_pre", "blocks.1.mixer.hook_post", "hook_pos_embed"],
}


@pytest.mark.parametrize("arch", HOOKS)
def test_each_mixer_exposes_its_own_hooks(arch):
    """The mixer-level hook points each of these modules documents (the shared residual hooks are
    tested for every architecture in test_every_architecture.py)."""
    task = tasks.make("hmm", K=5)
    model = models.build(arch, task, SMALL, seed=0).eval()
    batch = task.sample(3, generator=torch.Generator().manual_seed(0))
    _, cache = model.run_with_cache(batch.tokens)
    T = batch.tokens.shape[1]
    for name in ["hook_embed", *(f"blocks.{l}.hook_mixer_out" for l in range(2)), *HOOKS[arch]]:
        assert name in cache and cache[name].shape[:2] == (3, T), name
    torch.testing.assert_close(cache["blocks.1.hook_resid_post"],
                               cache["blocks.1.hook_resid_pre"] + cache["blocks.1.hook_mixer_out"])
    if arch == "mamba":
        assert cache["blocks.0.mixer.hook_h"].shape == (3, T, 2 * SMALL["d_model"], 16)


def test_same_seed_same_init_and_no_global_rng_side_effect():
    task = tasks.make("bijection", V=6, L=5)
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = models.build("mamba", task, SMALL, seed=5)
    after = torch.rand(1)
    b = models.build("mamba", task, SMALL, seed=5)
    assert before == after
    for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), k


def test_paper_mamba_is_capacity_matched_to_the_paper_transformer():
    task = tasks.make("bijection")
    reference = models.n_params(models.build("transformer", task, models.model_config("transformer", "paper", task)))
    with torch.device("meta"):
        count = models.n_params(models.build("mamba", task, models.model_config("mamba", "paper", task)))
    assert abs(count / reference - 1) <= 0.05


def test_explicit_width_is_not_rematched():
    assert models.model_config("lstm", "cpu", "bijection", d_model=40)["d_model"] == 40


@pytest.mark.parametrize("settings, message", [
    (dict(d_model=16, n_layers=0), "n_layers must be a positive integer"),
    (dict(d_model="wide"), "d_model must be a positive integer"),
    (dict(d_model=16, d_state=True), "d_state must be a positive integer"),
    (dict(d_model=16, heads=2), "unknown mamba setting(s) heads"),
    (dict(n_layers=2), "d_model is not set"),
])
def test_bad_mamba_configs_get_one_line_errors(settings, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        models.build("mamba", tasks.make("bijection", V=6, L=5), settings)


@pytest.mark.skipif(not torch.cuda.is_available() or models.mamba.selective_scan_fn is None,
                    reason="needs a GPU and mamba-ssm")
def test_cuda_kernels_match_our_scan():
    task = tasks.make("bijection", V=6, L=5)
    model = models.build("mamba", task, SMALL, seed=0).eval().cuda()
    tokens = task.sample(8, generator=torch.Generator().manual_seed(0)).tokens.cuda()
    with torch.no_grad():
        kernels = model(tokens)  # mamba-ssm's selective_scan_fn
        ours, _ = model.run_with_cache(tokens)  # hooking hook_h routes every block through our scan
    torch.testing.assert_close(kernels, ours, rtol=1e-4, atol=1e-4)


def grads_of(fn, inputs):
    """``values_and_grads`` for a function with one output: [output, *gradients]."""
    out, _, *grads = values_and_grads(lambda *a: (fn(*a), None), inputs)
    return [out, *grads]


# T=2 is shorter than the kernel (4 taps), so every output there sees the zero padding
@pytest.mark.parametrize("path", ["kernel", "fallback"])
@pytest.mark.parametrize("T", [9, 2])
def test_causal_conv_matches_torch_conv1d(path, T, monkeypatch):
    conv = torch.nn.Conv1d(37, 37, 4, groups=37, padding=3).double()
    xz = torch.randn(3, T, 74, dtype=torch.float64, requires_grad=True)  # x is a strided half, as in the mixer
    inputs = [xz, conv.weight, conv.bias]
    expected = grads_of(lambda xz, w, b: torch.nn.functional.conv1d(
        xz[..., :37].transpose(1, 2), w, b, padding=3, groups=37)[..., :T].transpose(1, 2), inputs)
    if path == "fallback":
        monkeypatch.setitem(models.mamba._KERNELS, "module", None)
    got = grads_of(lambda xz, w, b: causal_depthwise_conv(xz[..., :37], w, b), inputs)
    ran = type(causal_depthwise_conv(xz[..., :37], conv.weight, conv.bias).grad_fn).__name__
    assert ("Compiled" in ran) == (path == "kernel")
    for e, g in zip(expected, got):  # output, then the gradients of x, weight, bias
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("path", ["kernel", "fallback"])
def test_gate_matches_y_times_silu_z(path, monkeypatch):
    g = torch.Generator().manual_seed(0)
    y = torch.randn(3, 5, 37, generator=g, dtype=torch.float64, requires_grad=True)
    xz = torch.randn(3, 5, 74, generator=g, dtype=torch.float64) * 4
    xz[0, 0, 37:39] = torch.tensor([-120.0, 120.0], dtype=torch.float64)  # where exp(-z) would overflow
    xz.requires_grad_()
    expected = grads_of(lambda y, xz: y * torch.nn.functional.silu(xz[..., 37:]), [y, xz])
    if path == "fallback":
        monkeypatch.setitem(models.mamba._KERNELS, "module", None)
    got = grads_of(lambda y, xz: gate(y, xz[..., 37:]), [y, xz])
    assert ("Compiled" in type(gate(y, xz[..., 37:]).grad_fn).__name__) == (path == "kernel")
    for e, g in zip(expected, got):  # output, then the gradients of y and z
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


def test_a_bfloat16_mamba_runs_on_cpu_in_eager_torch():
    """The C++ kernels take float32 and float64; other dtypes must fall back, not fail."""
    task = tasks.make("bijection", V=6, L=5)
    model = models.build("mamba", task, SMALL, seed=0).eval()
    tokens = task.sample(4, generator=torch.Generator().manual_seed(0)).tokens
    with torch.no_grad():
        full = model(tokens)
        half = model.to(torch.bfloat16)(tokens)
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), full, rtol=0.1, atol=0.1)


def test_the_token_shift_is_a_causal_depthwise_convolution():
    import torch.nn.functional as F
    from models.transformer import TokenShift

    shift = TokenShift(3, 5, seed=0).double()
    x = torch.randn(2, 7, 5, dtype=torch.float64)
    kernel = torch.cat([shift.W_shift.detach().flip(0), torch.ones(1, 5, dtype=torch.float64)]).T[:, None]  # [d, 1, 4]
    expected = F.conv1d(F.pad(x.transpose(1, 2), (3, 0)), kernel, groups=5).transpose(1, 2)
    torch.testing.assert_close(shift(x), expected, rtol=0, atol=1e-12)
    later = x.clone()
    later[:, 4:] += 1.0
    torch.testing.assert_close(shift(later)[:, :4], shift(x)[:, :4], rtol=0, atol=0)  # nothing flows backwards


def test_a_shifted_transformer_has_the_hook_and_the_same_seed_gives_the_same_shift():
    task = tasks.make("recall", N=2, n_keys=4, n_values=4, queries=1, fillers=0, gap=0)
    build = lambda seed: models.build("transformer", task, config=models.model_config("transformer", "cpu", task, shift=2),
                                      seed=seed)
    model = build(3)
    _, cache = model.run_with_cache(task.sample(2).tokens)
    assert "hook_token_shift" in cache and torch.equal(model.token_shift.W_shift, build(3).token_shift.W_shift)
    assert not torch.equal(model.token_shift.W_shift, build(4).token_shift.W_shift)


def test_the_token_shift_takes_sequences_shorter_than_its_width():
    from models.transformer import TokenShift

    shift = TokenShift(3, 4, seed=0).double()
    x = torch.randn(2, 2, 4, dtype=torch.float64)
    torch.testing.assert_close(shift(x), torch.stack([x[:, 0], x[:, 1] + shift.W_shift[0] * x[:, 0]], dim=1))


@pytest.mark.parametrize("arch", ["transformer", "mamba", "lstm", "mlp"])
def test_token_embeddings_backpropagate_through_the_embedding_kernel(arch):
    """The token (and offset position) lookup is F.embedding, not W_E[tokens]: on CUDA indexing's backward
    sums a repeated token's rows one after another, which took 140 ms of every architecture's backward on a
    recall batch of 1,024 (one filler token repeated ~100k times); the embedding kernel sums them in parallel."""
    task = tasks.make("recall", N=4, slots=4, fillers=2, queries=2, gap=1)
    options = {"position_offsets": True, "positional": "learned", "n_ctx": 64} if arch == "transformer" else {}
    model = models.build(arch, task, {**SMALL, **options}, seed=0).train()
    tokens = task.sample(2, generator=torch.Generator().manual_seed(0)).tokens
    seen = {}
    model.run_with_hooks(tokens, fwd_hooks=[("hook_embed", lambda x, hook: seen.update(embed=x))]
                         + ([("hook_pos_embed", lambda x, hook: seen.update(pos=x))] if arch == "transformer" else []))
    assert seen["embed"].grad_fn.name() == "EmbeddingBackward0"
    if arch == "transformer":  # trained with random offsets, the position table is looked up per sequence too
        assert seen["pos"].grad_fn.name() == "EmbeddingBackward0"
