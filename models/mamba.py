"""Mamba-1 as a hooked residual stack, with its own CPU selective scan and mamba-ssm's kernels on CUDA.

The mixer (Gu & Dao 2023), per position t and channel e of the expanded width E = expand * d_model:

    x, z   = in_proj(u)                       two halves, each [B, T, E]
    x      = SiLU(causal depthwise conv(x))   kernel d_conv
    dt, B, C = x_proj(x)                       dt rank R, B and C of size N = d_state
    delta  = softplus(dt_proj(dt))             [B, T, E]
    h_t    = exp(delta_t A) h_{t-1} + delta_t B_t x_t      A = -exp(A_log), [E, N]; h_t [E, N]
    y_t    = C_t . h_t + D x_t
    out    = out_proj(y * SiLU(z))

Parameter names and initialisation follow mamba-ssm's ``Mamba`` module (in_proj, conv1d, x_proj,
dt_proj, A_log, D, out_proj), so weights move between the two.

Hooks, per block l (``blocks.{l}.mixer.``): ``hook_in_proj`` (x and z, [B, T, 2E]), ``hook_conv``
(the conv output before SiLU, [B, T, E]), ``hook_delta`` (after softplus), ``hook_B``, ``hook_C``
([B, T, N]), ``hook_h`` (the state at every position, [B, T, E, N]; y is read from the hooked
states, so patching them changes the output), ``hook_y`` (scan output with the
D skip, before the gate) and ``hook_out_proj``.

Scan. On CPU (and whenever ``hook_h`` is hooked) the recurrence runs as one custom autograd function:
a loop over positions of fused multiply-adds on contiguous [B, E, N] slices forward, and the reverse
recurrence backward, so autograd records one node per layer instead of one per position. On CUDA with
mamba-ssm installed, ``selective_scan_fn`` computes the same y (it never materialises h, which is why a
hooked ``hook_h`` falls back to our scan). tests/test_mamba.py checks our scan against a direct
sequential reference; the CUDA equivalence test runs where a GPU and mamba-ssm exist.
"""
from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

from tasks import ConfigError

from .base import HookedSequenceModel, ModelConfig

try:  # the CUDA kernels; mamba-ssm does not import at all without its CUDA extension
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
except Exception:  # noqa: BLE001 - ImportError, or the extension failing to load
    selective_scan_fn = None


@dataclass
class MambaConfig(ModelConfig):
    d_model: int | None = None  # None: the width that matches the transformer preset on the task
    n_layers: int = 2
    d_state: int = 16
    d_conv: int = 4
    expand: int = 2
    dt_rank: int | None = None  # default ceil(d_model / 16)

    ARCH = "mamba"

    def check(self) -> None:
        if self.d_model is None:
            raise ConfigError("mamba: d_model is not set (presets fill it in by capacity matching)")


PRESETS = {
    "paper": MambaConfig(n_layers=6),
    "cpu": MambaConfig(n_layers=2),
}
TASK_PRESETS = {("hmm", "cpu"): MambaConfig(n_layers=4)}


class LinearRecurrence(torch.autograd.Function):
    """h_t = a_t * h_{t-1} + b_t with h_{-1} = 0, over the first dimension (positions) of a and b."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        h = torch.empty_like(b)
        h[0] = b[0]
        for t in range(1, len(b)):
            torch.addcmul(b[t], a[t], h[t - 1], out=h[t])
        ctx.save_for_backward(a, h)
        return h

    @staticmethod
    def backward(ctx, grad_h: torch.Tensor):
        a, h = ctx.saved_tensors
        grad_b = grad_h.clone()  # dL/dh_t, accumulated backwards: g_t += a_{t+1} g_{t+1}
        for t in range(len(grad_b) - 1, 0, -1):
            grad_b[t - 1].addcmul_(a[t], grad_b[t])
        grad_a = torch.zeros_like(a)
        torch.mul(grad_b[1:], h[:-1], out=grad_a[1:])
        return grad_a, grad_b


def scan_step(h_prev, drive_t, delta_t, A, B_t, C_t, h_out, y_out):
    """One position of the scan: h_t = exp(delta_t A) h_{t-1} + drive_t B_t; y_t = C_t . h_t (in place)."""
    h = torch.exp(delta_t[:, :, None] * A) * h_prev + drive_t[:, :, None] * B_t[:, None, :]
    h_out.copy_(h)
    y_out.copy_((h * C_t[:, None, :]).sum(-1))


def scan_step_backward(g, grad_y_t, C_t, h_t, h_prev, delta_t, A, B_t, drive_t,
                       grad_C_t, grad_drive_t, grad_B_t, grad_delta_t, grad_dA):
    """The reverse of ``scan_step``. ``g`` holds dL/dh_t from later positions on entry and the
    gradient reaching h_{t-1} on exit; the other gradients are written (grad_dA accumulated) in place."""
    g_t = g + grad_y_t[:, :, None] * C_t[:, None, :]  # all of dL/dh_t
    grad_C_t.copy_((h_t * grad_y_t[:, :, None]).sum(1))
    grad_drive_t.copy_((g_t * B_t[:, None, :]).sum(-1))
    grad_B_t.copy_((g_t * drive_t[:, :, None]).sum(1))
    carry = torch.exp(delta_t[:, :, None] * A) * g_t  # a_t dL/dh_t: what reaches h_{t-1}
    q = carry * h_prev  # dL/d(delta_t A)
    grad_delta_t.copy_((q * A).sum(-1))
    grad_dA.add_(q * delta_t[:, :, None])
    g.copy_(carry)


class Kernel:
    """A function run through ``torch.compile``, which fuses a step's elementwise work into one loop
    (about 2x faster on CPU than op by op), falling back to plain PyTorch where compiling is
    unavailable or fails (no C++ compiler, say), or when INTERP_COMPILE=0. Compiling costs ~20 s
    once per machine (inductor caches it on disk), so it is used for training only: a forward pass
    that will not be differentiated runs uncompiled."""

    def __init__(self, fn):
        self.fn, self.compiled, self.failed = fn, None, False

    def __call__(self, *args, compile: bool = True):
        if compile and not self.failed and os.environ.get("INTERP_COMPILE", "1") != "0":
            try:
                if self.compiled is None:
                    self.compiled = torch.compile(self.fn, dynamic=None)
                return self.compiled(*args)
            except Exception as err:  # noqa: BLE001 - any compiler failure: run uncompiled instead
                self.failed = True
                warnings.warn(f"torch.compile of the Mamba scan failed ({type(err).__name__}); "
                              f"running it uncompiled, which is slower")
        return self.fn(*args)


STEP, STEP_BACKWARD = Kernel(scan_step), Kernel(scan_step_backward)


class FusedScan(torch.autograd.Function):
    """The whole selective scan, position by position, without materialising the [T, B, E, N] decay
    and drive tensors: every step works on one cache-sized [B, E, N] slice. Inputs are positions-first
    (x, delta [T, B, E]; B, C [T, B, N]); returns y [T, B, E] (without the D skip) and the states h
    [T, B, E, N] (an observation only: gradients flow through y). Backward runs the reverse
    recurrence and recomputes each decay from delta instead of storing it."""

    @staticmethod
    def forward(ctx, x, delta, A, B, C):
        T, batch, E = x.shape
        drive = delta * x  # [T, B, E]
        h = x.new_empty(T, batch, E, A.shape[1])
        y = torch.empty_like(x)
        zeros = x.new_zeros(batch, E, A.shape[1])
        training = any(ctx.needs_input_grad)
        for t in range(T):
            STEP(h[t - 1] if t else zeros, drive[t], delta[t], A, B[t], C[t], h[t], y[t], compile=training)
        ctx.save_for_backward(x, delta, A, B, C, h)
        ctx.mark_non_differentiable(h)
        ctx.set_materialize_grads(False)  # else autograd zero-fills a [T, B, E, N] gradient for h
        return y, h

    @staticmethod
    def backward(ctx, grad_y, _grad_h):
        if grad_y is None:  # y did not reach the loss (grads are not materialised as zeros)
            return None, None, None, None, None
        x, delta, A, B, C, h = ctx.saved_tensors
        drive = delta * x
        grad_drive, grad_delta = torch.empty_like(x), torch.empty_like(x)
        grad_B, grad_C = torch.empty_like(B), torch.empty_like(C)
        grad_dA = torch.zeros_like(h[0])  # dL/d(delta A) * delta summed over positions, per batch row
        g = torch.zeros_like(h[0])
        zeros = torch.zeros_like(h[0])
        grad_y = grad_y.contiguous()
        for t in range(x.shape[0] - 1, -1, -1):
            STEP_BACKWARD(g, grad_y[t], C[t], h[t], h[t - 1] if t else zeros, delta[t], A, B[t], drive[t],
                          grad_C[t], grad_drive[t], grad_B[t], grad_delta[t], grad_dA)
        grad_x = grad_drive * delta
        grad_delta += grad_drive * x
        return grad_x, grad_delta, grad_dA.sum(0), grad_B, grad_C


def selective_scan(x, delta, A, B, C, D, hook_h=None):
    """The selective scan on [B, T, ...] inputs: returns y [B, T, E] and the states h [B, T, E, N].

    Internally positions come first, so each step of the recurrence touches one contiguous slice.
    When ``hook_h`` (a HookPoint) has hooks, they see the states as [B, T, E, N] and may replace
    them, and y is read from what they return; otherwise the fused scan runs.
    """
    x_t, delta_t = x.transpose(0, 1).contiguous(), delta.transpose(0, 1).contiguous()  # [T, B, E]
    B_t, C_t = B.transpose(0, 1).contiguous(), C.transpose(0, 1).contiguous()  # [T, B, N]
    if hook_h is None or not hook_h.fwd_hooks:
        y, h = FusedScan.apply(x_t, delta_t, A, B_t, C_t)
    else:
        decay = torch.exp(delta_t.unsqueeze(-1) * A)  # [T, B, E, N]
        drive = (delta_t * x_t).unsqueeze(-1) * B_t.unsqueeze(-2)  # [T, B, E, N]
        h = hook_h(LinearRecurrence.apply(decay, drive).transpose(0, 1)).transpose(0, 1)
        y = (h @ C_t.unsqueeze(-1)).squeeze(-1)
    y = y + D * x_t  # [T, B, E]
    return y.transpose(0, 1), h.transpose(0, 1)


def reference_scan(x, delta, A, B, C, D):
    """The textbook sequential scan, one position at a time (the ground truth in tests)."""
    h = x.new_zeros(x.shape[0], x.shape[2], A.shape[1])
    ys, hs = [], []
    for t in range(x.shape[1]):
        h = torch.exp(delta[:, t, :, None] * A) * h + delta[:, t, :, None] * B[:, t, None, :] * x[:, t, :, None]
        ys.append((h * C[:, t, None, :]).sum(-1) + D * x[:, t])
        hs.append(h)
    return torch.stack(ys, 1), torch.stack(hs, 1)


def causal_depthwise_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``conv1d``'s causal depthwise convolution on [B, T, E] (weight [E, 1, k]) as k shifted
    multiply-adds: the same numbers, without the transposes, and several times faster to
    differentiate on a CPU than the grouped convolution's backward."""
    k, T = weight.shape[-1], x.shape[1]
    padded = F.pad(x, (0, 0, k - 1, 0))  # k-1 zeros before the first position
    out = bias + padded[:, k - 1:] * weight[:, 0, k - 1]
    for j in range(k - 1):
        out = out + padded[:, j:j + T] * weight[:, 0, j]
    return out


class MambaMixer(nn.Module):
    def __init__(self, d_model: int, d_state: int, d_conv: int, expand: int, dt_rank: int | None,
                 dt_min: float = 0.001, dt_max: float = 0.1):
        super().__init__()
        E, N = expand * d_model, d_state
        R = dt_rank or math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, 2 * E, bias=False)
        self.conv1d = nn.Conv1d(E, E, d_conv, groups=E, padding=d_conv - 1)
        self.x_proj = nn.Linear(E, R + 2 * N, bias=False)
        self.dt_proj = nn.Linear(R, E)
        self.out_proj = nn.Linear(E, d_model, bias=False)
        # mamba-ssm's initialisation: dt_proj weights uniform in +-R^-1/2, its bias so that
        # softplus(bias) is log-uniform in [dt_min, dt_max], A = -(1..N) per channel (S4D-real), D = 1.
        nn.init.uniform_(self.dt_proj.weight, -R ** -0.5, R ** -0.5)
        dt = torch.exp(torch.rand(E) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)).clamp(min=1e-4)
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
        self.A_log = nn.Parameter(torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(E, 1))
        self.D = nn.Parameter(torch.ones(E))
        self.sizes = (E, N, R)
        for name in ("in_proj", "conv", "delta", "B", "C", "h", "y", "out_proj"):
            setattr(self, f"hook_{name}", HookPoint())

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        E, N, R = self.sizes
        x, z = self.hook_in_proj(self.in_proj(u)).chunk(2, dim=-1)
        x = F.silu(self.hook_conv(causal_depthwise_conv(x, self.conv1d.weight, self.conv1d.bias)))
        dt, B, C = self.x_proj(x).split([R, N, N], dim=-1)
        delta = self.hook_delta(F.softplus(self.dt_proj(dt)))
        B, C = self.hook_B(B), self.hook_C(C)
        A = -torch.exp(self.A_log.float())
        if u.is_cuda and selective_scan_fn is not None and not self.hook_h.fwd_hooks:
            y = selective_scan_fn(x.transpose(1, 2).contiguous(), delta.transpose(1, 2).contiguous(), A,
                                  B.transpose(1, 2).contiguous(), C.transpose(1, 2).contiguous(),
                                  self.D.float()).transpose(1, 2)
        else:
            y, _ = selective_scan(x, delta, A, B, C, self.D, hook_h=self.hook_h)
        y = self.hook_y(y)
        return self.hook_out_proj(self.out_proj(y * F.silu(z)))


class WindTunnelMamba(HookedSequenceModel):
    """Mamba-1 blocks (pre-norm RMSNorm residual, as in mamba-ssm's MixerModel) on a wind tunnel."""

    arch = "mamba"
    norm = nn.RMSNorm

    def make_mixer(self, layer: int) -> nn.Module:
        c = self.config
        return MambaMixer(c.d_model, c.d_state, c.d_conv, c.expand, c.dt_rank)
