"""Our Mamba-1 against the equations of the official implementation (state-spaces/mamba, mamba-ssm).

The reference below is written from mamba-ssm's ``Mamba`` module (its slow path, which runs the
``nn.Conv1d`` and ``selective_scan_ref``), its ``Block`` and its ``MixerModel``, in its own layout
(channels first, [B, E, T]) and its own order of operations: the causal convolution is ``conv1d``
with d_conv - 1 zeros on both sides and the output cut to the first T positions; the dt bias is added
inside the scan, before the softplus; the gate is applied to the scan output with the D skip; the
residual stack is mamba-ssm's "add, then norm, then mixer" form. Nothing here calls models.mamba's
own scan, convolution or gate, so it checks every CPU path (the C++ kernels and the eager fallback),
forward and gradients, in float64. The initialisation is checked against mamba-ssm's defaults too.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import models
import tasks
from models.mamba import cpu_kernels, selective_scan
from transformer_lens.hook_points import HookPoint


def reference_scan(u, delta, A, B, C, D, z=None, delta_bias=None):
    """mamba-ssm's selective scan: u, delta, z [B, E, T]; A [E, N]; B, C [B, N, T]; D, delta_bias [E]."""
    if delta_bias is not None:
        delta = F.softplus(delta + delta_bias[:, None])
    decay = torch.exp(delta[..., None] * A[None, :, None, :])  # [B, E, T, N]
    drive = (delta * u)[..., None] * B.transpose(1, 2)[:, None]  # [B, E, T, N]
    state = torch.zeros(u.shape[0], A.shape[0], A.shape[1], dtype=u.dtype)
    ys = []
    for t in range(u.shape[2]):
        state = decay[:, :, t] * state + drive[:, :, t]
        ys.append(torch.einsum("ben,bn->be", state, C[:, :, t]))
    y = torch.stack(ys, -1) + D[:, None] * u
    return y if z is None else y * F.silu(z)


def reference_mixer(hidden, p, d_state, dt_rank):
    """mamba-ssm ``Mamba.forward`` (no fused kernels) on [B, T, d_model]; p: its state dict."""
    T = hidden.shape[1]
    xz = torch.einsum("od,btd->bot", p["in_proj.weight"], hidden)  # [B, 2E, T]
    x, z = xz.chunk(2, dim=1)
    k = p["conv1d.weight"].shape[-1]
    x = F.silu(F.conv1d(x, p["conv1d.weight"], p["conv1d.bias"], padding=k - 1, groups=x.shape[1])[..., :T])
    x_dbl = torch.einsum("oe,bet->bto", p["x_proj.weight"], x)  # [B, T, R + 2N]
    dt, B, C = x_dbl.split([dt_rank, d_state, d_state], dim=-1)
    dt = torch.einsum("er,btr->bet", p["dt_proj.weight"], dt)  # no bias here: it goes into the scan
    A = -torch.exp(p["A_log"])
    y = reference_scan(x, dt, A, B.transpose(1, 2), C.transpose(1, 2), p["D"], z=z, delta_bias=p["dt_proj.bias"])
    return torch.einsum("de,bet->btd", p["out_proj.weight"], y)


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def reference_model(model, tokens):
    """mamba-ssm's ``MixerModel`` (Block: residual += hidden; hidden = mixer(norm(residual))), then our head."""
    p = dict(model.named_parameters())
    eps = model.ln_final.eps if model.ln_final.eps is not None else torch.finfo(torch.float64).eps
    E, N, R = model.blocks[0].mixer.sizes
    hidden, residual = p["embed.W_E"][tokens], None
    for layer in range(len(model.blocks)):
        pre = f"blocks.{layer}."
        residual = hidden if residual is None else hidden + residual
        mixer = {k.removeprefix(pre + "mixer."): v for k, v in p.items() if k.startswith(pre + "mixer.")}
        hidden = reference_mixer(rms_norm(residual, p[pre + "ln.weight"], eps), mixer, N, R)
    final = rms_norm(hidden + residual, p["ln_final.weight"], eps)
    return final @ p["unembed.weight"].T + p["unembed.bias"]


@pytest.fixture(scope="module")
def model():
    task = tasks.make("recall", N=3, n_keys=6, n_values=6, queries=2, fillers=1, gap=1)
    m = models.build("mamba", task, dict(d_model=24, n_layers=2, d_state=5), seed=3).double()
    with torch.no_grad():  # move every weight off its initial value, so a swapped or unused weight shows
        g = torch.Generator().manual_seed(4)
        for p in m.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return m


def tokens_for(model, seed=5):
    return torch.randint(0, model.cfg.d_vocab, (2, 11), generator=torch.Generator().manual_seed(seed))


def values_and_grads(fn, params):
    out = fn()
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(6), dtype=out.dtype)
    return [out.detach(), *torch.autograd.grad((out * weights).sum(), params)]


@pytest.mark.parametrize("path", ["kernel", "fallback"])
def test_the_whole_model_matches_mamba_ssm_equations(model, path, monkeypatch):
    """Embedding, pre-norm residual blocks, mixers and final norm, forward and every weight's gradient."""
    if path == "kernel" and cpu_kernels() is None:
        pytest.skip("the C++ kernels cannot be built here")
    if path == "fallback":
        monkeypatch.setitem(models.mamba._KERNELS, "module", None)
    tokens, params = tokens_for(model), list(model.parameters())
    got = values_and_grads(lambda: model(tokens), params)
    expected = values_and_grads(lambda: reference_model(model, tokens), params)
    for (name, _), e, g in zip([("logits", None), *model.named_parameters()], expected, got):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-10, msg=lambda m: f"{name} ({path}): {m}")


def test_the_selective_scan_matches_mamba_ssm_s_reference_scan():
    g = torch.Generator().manual_seed(7)
    batch, T, E, N = 2, 9, 19, 4  # E: a full block of 16 channels and a partial one in the C++ kernel
    x, dt = (torch.randn(batch, T, E, generator=g, dtype=torch.float64) for _ in range(2))
    B, C = (torch.randn(batch, T, N, generator=g, dtype=torch.float64) for _ in range(2))
    A = -torch.exp(torch.randn(E, N, generator=g, dtype=torch.float64))
    D, bias = (torch.randn(E, generator=g, dtype=torch.float64) for _ in range(2))
    expected = reference_scan(x.transpose(1, 2), dt.transpose(1, 2), A, B.transpose(1, 2), C.transpose(1, 2), D,
                              delta_bias=bias).transpose(1, 2)
    hooked = HookPoint()
    hooked.add_hook(lambda h, hook: h)  # the materialised states
    for hook in (None, hooked):
        y, _ = selective_scan(x, F.softplus(dt + bias), A, B, C, D, hook_h=hook)
        torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-12)


def test_the_initialisation_is_mamba_ssm_s_default():
    task = tasks.make("recall", N=3, n_keys=6, n_values=6, queries=2, fillers=1, gap=1)
    d_model, N = 64, 16
    m = models.build("mamba", task, dict(d_model=d_model, n_layers=2, d_state=N), seed=0)
    for block in m.blocks:
        mixer = block.mixer
        E, n, R = mixer.sizes
        assert (E, n, R) == (2 * d_model, N, math.ceil(d_model / 16))
        assert mixer.conv1d.weight.shape == (E, 1, 4) and mixer.conv1d.bias is not None
        assert mixer.in_proj.bias is None and mixer.x_proj.bias is None and mixer.out_proj.bias is None
        # A = -(1..N) on every channel (S4D-real), D = 1
        torch.testing.assert_close(-torch.exp(mixer.A_log), -torch.arange(1., N + 1).expand(E, N))
        assert torch.equal(mixer.D.detach(), torch.ones(E))
        # dt_proj: weights uniform in +-R^-1/2, softplus(bias) log-uniform in [1e-3, 1e-1]
        w = mixer.dt_proj.weight.detach()
        assert w.abs().max() <= R ** -0.5 and w.abs().max() > 0.8 * R ** -0.5
        dt = F.softplus(mixer.dt_proj.bias.detach().double())
        assert dt.min() >= 1e-3 * (1 - 1e-6) and dt.max() <= 1e-1 * (1 + 1e-6)
        assert abs(dt.log10().mean().item() + 2) < 0.15  # log-uniform: mean log10 dt = -2
        assert abs(dt.log10().std().item() - 2 / math.sqrt(12)) < 0.1
    assert abs(m.embed.W_E.std().item() - 0.02) < 0.002
    assert isinstance(m.blocks[0].ln, torch.nn.RMSNorm) and isinstance(m.ln_final, torch.nn.RMSNorm)
