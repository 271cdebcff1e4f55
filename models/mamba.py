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
states, and a state a hook changes is carried on by the recurrence to every later position, so
patching one step's state is an intervention on the recurrence; likewise the gradient a hooked state
gets is the total derivative through every later step, ``carried``), ``hook_y`` (scan output with the
D skip, before the gate) and ``hook_out_proj``.

Scan. On CPU the recurrence runs in a small C++ kernel (``models/mamba_kernels.cpp``, built on
first use by torch's extension loader and kept per machine and version, see ``models/kernels.py``): per batch row and block of 16
channels, the state stays in a cache-sized buffer, forward and (hand-written) backward, so no
[B, T, E, N] tensor is allocated; backward recomputes the states instead of storing them. When
``hook_h`` is hooked, or the kernel cannot be built, the states are materialised and the recurrence
runs as one autograd function over positions (``LinearRecurrence``). On CUDA with mamba-ssm
installed, ``selective_scan_fn`` computes the same y (it never materialises h either, so a hooked
``hook_h`` takes the materialised path there too). On CUDA without mamba-ssm (it ships source only and
needs a CUDA toolchain to install), an unhooked scan runs ``parallel_scan``: the same recurrence in
about 2 log2(T) whole-tensor steps (``scan_in_place``) instead of one Python step per position, states
in float32 under autocast. INTERP_MAMBA_SCAN=parallel (or loop) forces a path anywhere, so the CPU
tests cover it. ``scan_method`` is the one choice among these five (mamba-ssm, the C++ kernel, the
parallel scan, the loop, the loop for a hooked ``hook_h``). tests/test_architectures.py and
tests/test_gpu_path.py check every path against a direct sequential reference; the CUDA equivalence
tests run where a GPU exists.
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint


from tasks import ConfigError

from .base import HookedSequenceModel, ModelConfig, act_name, at_least_float32

class _NoCudaRuntimeNotice(logging.Filter):
    """Drops the one "No CUDA runtime is found, using CUDA_HOME=..." notice that torch's C++ extension
    loader logs when it is imported on a machine with a CUDA toolkit but no GPU: the CPU kernels built
    here need no CUDA, so on CPU it is noise. Every other message of that logger still shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("No CUDA runtime is found")


# Before anything imports torch.utils.cpp_extension, which logs the notice at import time.
logging.getLogger("torch.utils.cpp_extension").addFilter(_NoCudaRuntimeNotice())

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
    shift: int | None = None  # a causal token shift of this width on the embeddings (models.base.TokenShift)
    # RMSNorm's epsilon (None: torch's default, the machine epsilon of the dtype; mamba-ssm uses 1e-5)
    norm_eps: float | None = None
    # Whether weight decay reaches A_log (a matrix, so the trainer decays it like a weight). mamba-ssm
    # exempts A_log and D (``_no_weight_decay``); D, a vector, is never decayed here. False trains as it does.
    ssm_weight_decay: bool = True

    ARCH = "mamba"


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


def linear_scan(a: torch.Tensor, b: torch.Tensor, reverse: bool = False) -> torch.Tensor:
    """h_t = a_t h_{t-1} + b_t with h_{-1} = 0 along dim 1 of [B, T, ...] (a_0 is never read), in about
    2 log2(T) whole-tensor steps instead of T; ``reverse``: g_t = a_t g_{t+1} + b_t from the end (a_{T-1}
    never read). Returns a new tensor. See ``scan_in_place``."""
    h = b.clone()
    scan_in_place(a.clone(), h, reverse)
    return h


def _pairs(T: int, reverse: bool) -> tuple[slice, slice, slice, slice]:
    """Positions of one level of ``scan_in_place``: (receivers, their givers, the rest, their neighbours).
    Forward a receiver takes its predecessor (1 <- 0, 3 <- 2, ...); in reverse its successor, counted from
    the end (T-2 <- T-1, T-4 <- T-3, ...). The rest are the positions finished from a neighbouring
    receiver afterwards (all but the first one, or the last one in reverse)."""
    if not reverse:
        return slice(1, T, 2), slice(0, T - 1, 2), slice(2, T, 2), slice(1, T - 1, 2)
    odd = T % 2
    return slice(odd, T - 1, 2), slice(odd + 1, T, 2), slice(1 - odd, T - 1, 2), slice(2 - odd, T, 2)


def scan_in_place(a: torch.Tensor, h: torch.Tensor, reverse: bool = False) -> None:
    """``linear_scan`` in place on [B, T, ...] tensors: h (holding b) becomes the states; a is overwritten.

    A recursive pairwise scan (Ladner-Fischer / Blelloch): each receiving position absorbs its neighbour
    (h_t += a_t h_{t-1}, a_t *= a_{t-1}), so the receivers form a recurrence of half the length, scanned the
    same way; then every other position adds its decay times the finished neighbour. Each level touches
    the positions once through strided views (no copies, no [B, T, T] tensors), so the whole scan moves
    a few times the data of the sequential loop, in 2 log2(T) steps rather than T: on the CPU the two take
    about the same time, on a GPU each of the loop's steps is a kernel launch (benchmarks/scan_speed.py).

    Only products of decays are formed, never their logarithms: for 0 <= a <= 1 (Mamba's exp(delta A))
    every factor is at most 1, so nothing overflows, and a product that underflows to 0 is a decay that
    has really died out.
    """
    T = h.shape[1]
    if T < 2:
        return
    receivers, givers, rest, neighbours = _pairs(T, reverse)
    h[:, receivers].addcmul_(a[:, receivers], h[:, givers])
    a[:, receivers].mul_(a[:, givers])
    scan_in_place(a[:, receivers], h[:, receivers], reverse)
    h[:, rest].addcmul_(a[:, rest], h[:, neighbours])


class ParallelRecurrence(torch.autograd.Function):
    """``LinearRecurrence`` over dim 1 of [B, T, ...] by ``linear_scan``: the same h, and gradients from
    the same scan run backwards (g_t = dL/dh_t + a_{t+1} g_{t+1}), so memory is a and h, as for the loop."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        h = linear_scan(a, b)
        ctx.save_for_backward(a, h)
        return h

    @staticmethod
    def backward(ctx, grad_h: torch.Tensor):
        a, h = ctx.saved_tensors
        # g_t = dL/dh_t + a_{t+1} g_{t+1}: a reverse scan with a moved one step back (its unread last
        # step gets the a_0 that rolls round); the roll is the copy the scan overwrites
        grad_b = grad_h.clone()
        scan_in_place(a.roll(-1, 1), grad_b, reverse=True)
        grad_a = torch.zeros_like(a)
        torch.mul(grad_b[:, 1:], h[:, :-1], out=grad_a[:, 1:])
        return grad_a, grad_b


def parallel_scan(x, delta, A, B, C, D):
    """The selective scan's y [B, T, E] and states h [B, T, E, N] by ``ParallelRecurrence``, in at least
    float32 whatever autocast would choose (the state is a sum over up to T steps), y in x's dtype."""
    given, dtype = x.dtype, torch.promote_types(x.dtype, torch.float32)
    x, delta, A, B, C, D = (t.to(dtype) for t in (x, delta, A, B, C, D))
    with torch.autocast(x.device.type, enabled=False):
        decay = torch.exp(delta.unsqueeze(-1) * A)  # [B, T, E, N], each <= 1 (A < 0)
        drive = (delta * x).unsqueeze(-1) * B.unsqueeze(-2)
        h = ParallelRecurrence.apply(decay, drive)
        y = torch.einsum("bten,btn->bte", h, C) + D * x
    return y.to(given), h


KERNELS_SOURCE = Path(__file__).with_name("mamba_kernels.cpp")
KERNELS_NAME = "interp_mamba_kernels"
KERNELS_FLAGS = (["-O3", "-ffast-math", "-fopenmp", "-march=native"], ["-fopenmp"])  # compile, link
_KERNELS = {}  # the compiled C++ module, or None when it cannot be built here


def cpu_kernels():
    """``models/mamba_kernels.cpp`` (the scan, the causal conv and the gate), compiled on first use
    (about a minute, once per machine and version: ``models.kernels`` says where, and how a build is
    shared, locked and published), or None where it cannot be built (no C++ compiler or ninja, a build
    that failed or that another process has held too long) or when INTERP_CPP_KERNELS=0; callers then
    fall back to eager torch (the scan to the materialised recurrence), which gives the same numbers
    more slowly."""
    if "module" not in _KERNELS:
        module = None
        if os.environ.get("INTERP_CPP_KERNELS", "1") != "0":
            from .kernels import build

            module = build(KERNELS_NAME, [KERNELS_SOURCE], *KERNELS_FLAGS, what="Mamba CPU kernels")
        _KERNELS["module"] = module
    return _KERNELS["module"]


class CompiledScan(torch.autograd.Function):
    """y = selective scan of (x, delta, A, B, C) plus D x, on [B, T, ...] inputs, by the C++ kernel.
    Forward keeps only the inputs; backward recomputes each channel block's decays and states in a
    cache-sized buffer, so no [B, T, E, N] tensor is ever allocated."""

    @staticmethod
    def forward(ctx, x, delta, A, B, C, D):
        inputs = [t.contiguous() for t in (x, delta, A, B, C, D)]
        ctx.save_for_backward(*inputs)
        return cpu_kernels().forward(*inputs)

    @staticmethod
    def backward(ctx, grad_y):
        return tuple(cpu_kernels().backward(*ctx.saved_tensors, grad_y.contiguous()))


class CompiledConv(torch.autograd.Function):
    """``causal_depthwise_conv`` by the C++ kernel: one pass forward, one backward (eager torch
    makes a pass per tap, and as many again for each gradient)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return cpu_kernels().conv_forward(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_out):
        return tuple(cpu_kernels().conv_backward(*ctx.saved_tensors, grad_out.contiguous()))


class CompiledGate(torch.autograd.Function):
    """``gate`` by the C++ kernel: one pass forward, one backward."""

    @staticmethod
    def forward(ctx, y, z):
        ctx.save_for_backward(y, z)
        return cpu_kernels().gate_forward(y, z)

    @staticmethod
    def backward(ctx, grad_out):
        return tuple(cpu_kernels().gate_backward(*ctx.saved_tensors, grad_out.contiguous()))


def _use_kernels(*tensors) -> bool:
    """Whether the C++ kernels take these: on CPU, all float32 or all float64 (other dtypes, such
    as bfloat16, run in eager torch), channels contiguous (strided views over batch and position,
    such as halves of in_proj's output, are read in place)."""
    first = tensors[0]
    return (first.device.type == "cpu" and first.dtype in (torch.float32, torch.float64)
            and all(t.dtype == first.dtype and t.stride(-1) == 1 for t in tensors) and cpu_kernels() is not None)


SCANS = ("auto", "parallel", "loop")  # what INTERP_MAMBA_SCAN may say


def forced_scan() -> str:
    """INTERP_MAMBA_SCAN, checked: "auto" (unset: ``scan_method`` chooses) or the scan it forces ("parallel" or
    "loop"); anything else is a ConfigError. The one place the variable is read. It is read at every scan, not
    once at import, because tests (``monkeypatch.setenv``) and benchmarks switch it between forward passes of one
    process; one dictionary look-up is nothing next to a scan."""
    forced = os.environ.get("INTERP_MAMBA_SCAN", "auto")
    if forced not in SCANS:
        raise ConfigError(f"INTERP_MAMBA_SCAN must be one of {', '.join(SCANS)}, got {forced!r}")
    return forced


# One function chooses among the five scans, and ``selective_scan`` is the one place that asks it: when the
# choice was made in two places (the mixer tried mamba-ssm first, reading INTERP_MAMBA_SCAN on its own, then
# this function chose among the rest), a new path or a new reason had to be added to both, and they could
# disagree about what a forced scan or a hooked ``hook_h`` means.
def scan_method(x: torch.Tensor, hooked: bool, *others: torch.Tensor) -> str:
    """Which scan ``selective_scan`` runs on ``x`` (``others``: the rest of the inputs the C++ kernel would read,
    delta, B and C), in this order:

    - "hooked" whenever ``hook_h`` has hooks: the states materialised (``LinearRecurrence``), so the hooks see
      them and what they return is carried on (``carried``), whatever is forced or installed;
    - what INTERP_MAMBA_SCAN forces (``forced_scan``), "parallel" or "loop", on any device: tests and
      benchmarks compare the paths with it;
    - "mamba-ssm" on CUDA where mamba-ssm is installed (its ``selective_scan_fn``);
    - "kernel" where the C++ kernel takes the inputs (CPU, all float32 or all float64: ``_use_kernels``);
    - "loop" on the CPU otherwise (another dtype, or no kernel built): the states materialised, unhooked;
    - "parallel" on any other device (CUDA without mamba-ssm): ``parallel_scan``."""
    forced = forced_scan()
    if hooked:
        return "hooked"
    if forced != "auto":
        return forced
    if x.is_cuda and selective_scan_fn is not None:
        return "mamba-ssm"
    if _use_kernels(x, *others):
        return "kernel"
    return "loop" if x.device.type == "cpu" else "parallel"


def selective_scan(x, delta, A, B, C, D, hook_h=None):
    """The selective scan on [B, T, ...] inputs: returns y [B, T, E] and the states h [B, T, E, N]
    (None when mamba-ssm or the C++ kernel ran, which never form them); ``scan_method`` says which scan runs.

    When ``hook_h`` (a HookPoint) has hooks, they see the states and may replace them, and y is read
    from what they return; so the states are materialised, as they are where no kernel takes the inputs.
    """
    method = scan_method(x, hook_h is not None and bool(hook_h.fwd_hooks), delta, B, C)
    if method == "mamba-ssm":  # its layout is [B, E, T] (B and C [B, N, T]); A float32, as is D here
        y = selective_scan_fn(x.transpose(1, 2).contiguous(), delta.transpose(1, 2).contiguous(), A,
                              B.transpose(1, 2).contiguous(), C.transpose(1, 2).contiguous(), D.float())
        return y.transpose(1, 2), None
    if method == "kernel":
        return CompiledScan.apply(x, delta, A.to(x.dtype), B, C, D.to(x.dtype)), None
    if method == "parallel":
        return parallel_scan(x, delta, A, B, C, D)
    # "loop" or "hooked": one step per position, the states materialised
    decay = torch.exp(delta.unsqueeze(-1) * A).transpose(0, 1).contiguous()  # [T, B, E, N]: positions first,
    drive = ((delta * x).unsqueeze(-1) * B.unsqueeze(-2)).transpose(0, 1).contiguous()  # so each step is one slice
    h = LinearRecurrence.apply(decay, drive).transpose(0, 1)  # [B, T, E, N]
    if hook_h is not None:
        h = carried(h, hook_h, decay, drive)
    y = (h @ C.unsqueeze(-1)).squeeze(-1) + D * x
    return y, h


def carried(h: torch.Tensor, hook_h, decay: torch.Tensor, drive: torch.Tensor) -> torch.Tensor:
    """The states [B, T, E, N] after ``hook_h``'s hooks, with what they return carried on: where a hook changes
    the state at step t, the recurrence continues from the changed state (h_{t+1} = a_{t+1} h'_t + b_{t+1}),
    and the hooks see the new later states. So patching one step's state is an intervention on the
    recurrence, not only on that step's read-out. The hooks are called once more per changed step, each
    time on the states as they were before any hook up to the last committed step (so a hook that adds to
    a state adds once) and the recomputed ones after it; a call can change only steps after the last one
    committed, so this ends within T + 1 calls.

    Gradients follow the same reading (when autograd records): the gradient a hook's output receives at
    step t is the total derivative through every later step, as a change there would be carried on, not
    only through y_t's read-out; and what a hook receives has gradient paths only into its own step's
    decay and drive (``step_only``), so the weights' gradients are those of the unhooked model, counted once.
    """
    done, T = 0, h.shape[1]
    decay_t, drive_t = decay.transpose(0, 1), drive.transpose(0, 1)  # [B, T, E, N]
    grads = bool(hook_h.fwd_hooks) and torch.is_grad_enabled()  # unhooked, y's own graph is the same
    local = grads and (decay.requires_grad or drive.requires_grad)
    while True:
        new = hook_h(step_only(h, decay_t, drive_t) if local else h)
        moved = (new[:, done:] != h[:, done:]).flatten(2).any(-1).any(0).nonzero()
        if not len(moved) or done + int(moved[0]) == T - 1:
            return read_through(new, decay) if grads and new.requires_grad else new
        t = done + int(moved[0])
        start = drive[t + 1:t + 2] + decay[t + 1:t + 2] * new[:, t][None]  # the step after t, from the new h_t
        tail = LinearRecurrence.apply(decay[t + 1:], torch.cat([start, drive[t + 2:]]))
        # the next call sees the steps up to t as the first did (a hook that adds is applied once), then the tail
        h, done = torch.cat([h[:, :t + 1], tail.transpose(0, 1)], 1), t + 1


def _previous(h: torch.Tensor) -> torch.Tensor:
    """h_{t-1} at every t of [B, T, ...] (zero before the first)."""
    return torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], 1)


def step_only(h: torch.Tensor, decay: torch.Tensor, drive: torch.Tensor) -> torch.Tensor:
    """``h``'s values with gradient paths only into each step's own a_t h_{t-1} + b_t (h_{t-1} held fixed):
    the path back through earlier steps is the one ``read_through`` gives the hooked states."""
    h = h.detach()
    one_step = decay * _previous(h) + drive
    return h + (one_step - one_step.detach())


def read_through(new: torch.Tensor, decay: torch.Tensor) -> torch.Tensor:
    """``new``'s values exactly, read so that the gradient ``new`` gets at step t is the total derivative
    through the recurrence: r_t = a_t r_{t-1} + (new_t - a_t new_{t-1}) equals new_t, and carries r_{t-1}'s
    gradient back with a_t (a held fixed: its own gradient comes through ``step_only``)."""
    a = decay.detach()  # [T, B, E, N]
    held = new.detach()
    innovation = (new - a.transpose(0, 1) * _previous(held)).transpose(0, 1).contiguous()
    r = LinearRecurrence.apply(a, innovation).transpose(0, 1)
    return held + (r - r.detach())


def gate(y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """The mixer's output gate, y * SiLU(z)."""
    if _use_kernels(y, z):
        return CompiledGate.apply(y.contiguous(), z)
    return y * F.silu(z)


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
    """``conv1d``'s causal depthwise convolution on [B, T, E] (weight [E, 1, k]): the C++ kernel on
    CPU, elsewhere k shifted multiply-adds (the same numbers, without conv1d's transposes)."""
    if _use_kernels(x, weight, bias):
        return CompiledConv.apply(x, weight, bias)
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
        A = -torch.exp(at_least_float32(self.A_log))  # float32 for the CUDA kernel; float64 kept
        y, _ = selective_scan(x, delta, A, B, C, self.D, hook_h=self.hook_h)  # scan_method chooses the scan
        y = self.hook_y(y)
        return self.hook_out_proj(self.out_proj(gate(y, z)))


class WindTunnelMamba(HookedSequenceModel):
    """Mamba-1 blocks (pre-norm RMSNorm residual, as in mamba-ssm's MixerModel) on a wind tunnel."""

    arch, order, label = "mamba", 1, "A Mamba model"
    config_class = MambaConfig
    presets = {
        "paper": MambaConfig(n_layers=6),
        "cpu": MambaConfig(n_layers=2),
    }
    norm = nn.RMSNorm

    def warm_up(self) -> None:
        """Build (or load) the CPU kernels now, so a first build's progress shows where the caller is
        waiting (the explorer's terminal) rather than inside the first forward pass."""
        if not torch.cuda.is_available():
            cpu_kernels()

    def make_mixer(self, layer: int) -> nn.Module:
        c = self.config
        return MambaMixer(c.d_model, c.d_state, c.d_conv, c.expand, c.dt_rank)

    def make_norm(self, d: int) -> nn.Module:
        return nn.RMSNorm(d, eps=self.config.norm_eps)

    def no_weight_decay(self) -> set[str]:
        """A_log (and D) as mamba-ssm exempts them, when ``ssm_weight_decay`` is false."""
        if self.config.ssm_weight_decay:
            return set()
        return {name for name, _ in self.named_parameters() if name.endswith((".A_log", ".D"))}

    @torch.no_grad()
    def effective_attention(self, tokens: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer ``layer``'s selective scan as matrices (see ``scan_matrix``): (M [B, E, T, T], x [B, T, E]),
        with y = M x + D x reproducing ``blocks.{layer}.mixer.hook_y``."""
        return self._scan_matrices(tokens, [layer])[0]

    def _scan_matrices(self, tokens: torch.Tensor, layers: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(M, x) of ``effective_attention`` for several layers from one forward pass."""
        kinds = ("conv", "delta", "B", "C")
        _, cache = self.run_with_cache(tokens, names_filter=[act_name(f"mixer.{k}", layer) for layer in layers
                                                             for k in kinds])
        out = []
        for layer in layers:
            conv, delta, B, C = (cache[act_name(f"mixer.{k}", layer)] for k in kinds)
            A = -torch.exp(self.blocks[layer].mixer.A_log.to(delta.dtype))
            out.append((scan_matrix(delta, A, B, C), F.silu(conv)))
        return out

    @torch.no_grad()
    def attention_patterns(self, tokens: torch.Tensor, rows: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Each layer's effective attention as one head [B, 1, T, T]: |M| averaged over channels, every row
        normalised to sum to 1 (how much each earlier position feeds position t, whatever the sign); only the
        query positions ``rows`` when given ([B, 1, R, T], built from those rows alone: ``scan_matrix_rows``).

        M itself ([B, E, T, T]) is never held whole: |M| is summed block of channels by block, so long
        sequences (recall's 329 tokens) and large batches fit in memory."""
        kinds, layers = ("delta", "B", "C"), range(self.cfg.n_layers)
        _, cache = self.run_with_cache(tokens, names_filter=[act_name(f"mixer.{k}", layer) for layer in layers
                                                             for k in kinds])
        patterns = []
        for layer in layers:
            delta, B, C = (cache[act_name(f"mixer.{k}", layer)] for k in kinds)
            A = -torch.exp(self.blocks[layer].mixer.A_log.to(delta.dtype))
            blocks = scan_matrix_blocks(delta, A, B, C) if rows is None else scan_matrix_rows(delta, A, B, C, rows)
            weight = sum(block.abs().sum(1, keepdim=True) for block in blocks)
            patterns.append(weight / weight.sum(-1, keepdim=True).clamp_min(1e-30))
        return patterns


def scan_matrix(delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """The selective scan as a data-dependent lower-triangular matrix per channel (Mamba's "hidden attention").

    Unrolling h_t = exp(delta_t A) h_{t-1} + delta_t B_t x_t from h_0 = 0 gives y_t - D x_t = sum_{s<=t} M_ts x_s
    per channel e with

        M[e, t, s] = delta_s[e] * sum_n C_t[n] B_s[n] exp(A[e, n] * (delta_{s+1}[e] + ... + delta_t[e]))

    (Mamba-2's M = L o (C B^T) when A is one scalar per channel). delta [B, T, E], A [E, N], B and C
    [B, T, N]; returns [B, E, T, T], zero above the diagonal (``scan_matrix_blocks`` gives it a block of
    channels at a time).
    """
    return torch.cat(list(scan_matrix_blocks(delta, A, B, C)), 1)


BLOCK_ELEMENTS = 1 << 25  # a block of channels' [B, e, T, T] matrix stays under this many numbers


def scan_matrix_blocks(delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor):
    """``scan_matrix`` as blocks of channels [B, e, T, T], e chosen so a block holds at most ``BLOCK_ELEMENTS``
    numbers (one channel at a time when even that is more).

    Built by running the scan over t with one state per source position s, P_t[s] = delta_s B_s
    exp(A (delta_{s+1} + ... + delta_t)), which step t multiplies by exp(A delta_t): no exponential of a
    [B, e, T, T, N] tensor (what made a 329-token recall batch take minutes), and nothing above the diagonal.
    """
    batch, T, E = delta.shape
    channels = max(1, min(E, BLOCK_ELEMENTS // (batch * T * T)))
    for start in range(0, E, channels):
        d, a = delta[:, :, start:start + channels], A[start:start + channels]  # [B, T, e], [e, N]
        step = torch.exp(d[..., None] * a)  # [B, T, e, N]: exp(A delta_t)
        state = delta.new_zeros(batch, d.shape[2], T, A.shape[1])  # [B, e, s, N]
        M = delta.new_zeros(batch, d.shape[2], T, T)
        for t in range(T):
            state[:, :, :t] *= step[:, t, :, None, :]
            state[:, :, t] = d[:, t, :, None] * B[:, t, None, :]
            M[:, :, t, :t + 1] = torch.einsum("bn,besn->bes", C[:, t], state[:, :, :t + 1])
        yield M


def scan_matrix_rows(delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor, rows: torch.Tensor):
    """Rows ``rows`` ([R] query positions) of ``scan_matrix``, as blocks of channels [B, e, R, T].

    Straight from the closed form, exp(A (S_t - S_s)) with S the running sum of delta (in float64, so the
    difference of two long sums loses nothing that matters): work grows with R x T instead of the T x T of the
    whole matrix, which is what an analysis that reads only a task's query positions needs (recall: 8 of 329).
    """
    batch, T, E = delta.shape
    rows = torch.as_tensor(rows, device=delta.device)
    S = delta.double().cumsum(1)  # [B, T, E]
    causal = (torch.arange(T, device=delta.device)[None, :] <= rows[:, None])  # [R, T]
    CB = torch.einsum("brn,bsn->brsn", C[:, rows].double(), B.double())  # [B, R, T, N]
    channels = max(1, min(E, BLOCK_ELEMENTS // (batch * len(rows) * T * A.shape[1])))
    for start in range(0, E, channels):
        stop = min(E, start + channels)
        gap = (S[:, rows, None, start:stop] - S[:, None, :, start:stop]).clamp_min(0)  # [B, R, T, e]
        decay = torch.exp(gap[..., None] * A[start:stop].double())  # [B, R, T, e, N]
        M = torch.einsum("brsn,brsen->bers", CB, decay) * delta[:, :, start:stop].double().transpose(1, 2)[:, :, None]
        yield (M * causal).to(delta.dtype)
