"""The wind-tunnel transformer: a small GPT-style transformer on TransformerLens's ``HookedRootModule``.

No pretrained weights and no tokenizer: the vocabulary, context length and answer classes come
from the task. Every activation has TransformerLens's usual hook names (``hook_embed``,
``blocks.0.attn.hook_k``, ``blocks.0.attn.hook_pattern``, ``blocks.3.hook_resid_post``,
``ln_final.hook_scale``, ...), the weights TransformerLens's names and shapes (``W_E``, ``W_pos``,
``blocks.0.attn.W_Q`` [heads, d_model, d_head], ``W_O`` [heads, d_head, d_model], ``b_*``, ``W_U``), so
``run_with_cache`` and ``run_with_hooks`` work as usual.

Why ``HookedRootModule`` and not ``TransformerBridge.boot_native``: TransformerLens 4 removed
``HookedTransformer`` (which this model subclassed until 3.x) and its component tree. ``boot_native``
builds a *new* native module and wraps it in a bridge whose parameter names are the wrapped module's,
not TransformerLens's, so the shipped checkpoints (written with HookedTransformer's names) would need a
conversion, and the bridge's forward adds a layer of indirection on a model trained on a 2-core CPU.
``HookedRootModule`` + ``HookPoint`` are the part of TransformerLens 4 kept for "hooking arbitrary
modules" (its ``__init__`` says so), the same machinery Mamba, the LSTM and the MLP use here. The
components below are HookedTransformer's arithmetic, operation for operation, so the shipped checkpoints
load unchanged and give the same numbers (tests/test_transformer_replay.py replays outputs recorded under
TransformerLens 3.9 to 1e-5). A TransformerBridge over any model still runs the analyses (models/language_model.py).

Presets
- ``paper``: the reference model of the paper (d=192, 6 layers, 6 heads of 32, pre-norm RMSNorm,
  MLP 4d, GELU, learned positions). Attention and MLP keep their biases, and this preset
  leaves the unembedding untied, so it has about 2.69M parameters against the paper's 2,677,440.
  ``tied=True`` reads the answer logits off the token embeddings (W_U = W_E^T), as the paper's
  parameter count implies.
- ``cpu``: the small model that reaches the paper's calibration regime on a 2-core CPU in about
  20 minutes (see benchmarks/cpu_preset.py and docs/results/training.md for the measured curve).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from tasks import ConfigError, Task

from .base import AnswerHead, InputProjection, ModelConfig, Provenance, TokenShift, output_sizes

EPS = 1e-5  # LayerNorm / RMSNorm epsilon (HookedTransformer's default, which the shipped models trained with)
ROTARY_BASE = 10_000
ROTARY_CACHE = 2048  # rotary tables are precomputed for min(n_ctx, this) positions, as HookedTransformer did


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gelu_fast(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


# The activation functions offered, each HookedTransformer's formula (so trained weights mean the same thing).
ACTIVATIONS = {
    "gelu": F.gelu, "gelu_new": gelu_new, "gelu_fast": gelu_fast,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu, "silu": F.silu,
}
ACT_FNS = tuple(ACTIVATIONS)


@dataclass
class TransformerConfig(ModelConfig):
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_mlp: int | None = None  # default 4 * d_model
    act_fn: str = "gelu"
    normalization: str = "LN"  # "LN" or "RMS" (pre-norm)
    n_ctx: int | None = None  # default: the task's sequence length
    # "learned": a learned absolute position table (the paper's); "rotary": rotary embeddings in
    # every head, so "the token k positions back" is one rule for every position rather than one to
    # learn per row of the table (what long recall tables need on a CPU budget; see tasks/recall.py).
    positional: str = "learned"
    # Tied unembedding (W_U = W_E^T, discrete tasks): copying a token to the output is then one map
    # for every token, not one per token learned from that token's own labels (recall's 256 values).
    tied: bool = False
    # A causal token shift of this width on the embeddings (None: none): position t also receives learned
    # per-channel multiples of the ``shift`` embeddings before it (see TokenShift). What lets a small
    # transformer learn recall on a CPU budget: without it no probe left the copy-any-value plateau
    # (models/pretrained/recall-transformer-cpu/README.md).
    shift: int | None = None
    # Train with every sequence's stream moved by a random offset in [0, n_ctx - length] (learned
    # positions only; a task's fixed header, such as the HMM's tables, keeps its rows): every row of
    # the position table is trained, so the model must read the stream's positions relative to each
    # other, and a sequence longer than the training length meets no untrained row (randomised
    # positions, Ruoss et al. 2023). Evaluation uses offset 0.
    position_offsets: bool = False

    ARCH = "transformer"
    CHOICES = {"act_fn": ACT_FNS, "normalization": ("LN", "RMS"), "positional": ("learned", "rotary")}

    def check(self) -> None:
        if self.position_offsets and self.positional != "learned":
            raise ConfigError("transformer: position_offsets=true moves a learned position table; rotary positions "
                              "are relative already (drop one of -M positional=rotary, -M position_offsets=true)")
        if self.d_model % self.n_heads:
            raise ConfigError(f"transformer: d_model={self.d_model} is not divisible by n_heads={self.n_heads}")


class LayerNorm(nn.Module):
    """Pre-norm LayerNorm with TransformerLens's parameter (``w``, ``b``) and hook names."""

    def __init__(self, d: int, bias: bool = True):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))
        self.b = nn.Parameter(torch.zeros(d)) if bias else None
        self.eps = EPS
        self.hook_scale = HookPoint()  # [batch, pos, 1]: freezing it linearises the norm (patching, DLA)
        self.hook_normalized = HookPoint()

    def centre(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(-1, keepdim=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.centre(x)
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        x = self.hook_normalized(x / scale) * self.w
        return x if self.b is None else x + self.b


class RMSNorm(LayerNorm):
    """RMSNorm: LayerNorm without centring or bias."""

    def __init__(self, d: int):
        super().__init__(d, bias=False)

    def centre(self, x: torch.Tensor) -> torch.Tensor:
        return x


def heads_linear(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[batch, pos, d_model] through per-head weights W [heads, d_model, d_head]: [batch, pos, heads, d_head]."""
    heads, d_model, d_head = W.shape
    return F.linear(x, W.permute(0, 2, 1).reshape(heads * d_head, d_model), b.reshape(-1)).unflatten(-1, (heads, d_head))


def rotary_tables(n_positions: int, d_head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """sin and cos [n_positions, d_head] of HookedTransformer's rotary embedding (base 10,000, halves paired)."""
    positions = torch.arange(n_positions, dtype=torch.float32)
    freq = ROTARY_BASE ** (torch.arange(d_head // 2, dtype=torch.float32) / (d_head / 2))
    angles = positions[:, None] / freq.repeat(2)[None, :]
    return torch.sin(angles), torch.cos(angles)


class Attention(nn.Module):
    """Causal multi-head attention, TransformerLens's layout: W_Q/W_K/W_V [heads, d_model, d_head],
    W_O [heads, d_head, d_model], hooks q, k, v (rot_q, rot_k with rotary positions), attn_scores
    (scaled, masked), pattern and z."""

    def __init__(self, d_model: int, n_heads: int, n_ctx: int, rotary: bool):
        super().__init__()
        d_head = d_model // n_heads
        # Registered in HookedTransformer's order: the seeded initialisation draws in parameter order.
        self.W_Q = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_O = nn.Parameter(torch.empty(n_heads, d_head, d_model))
        self.b_Q = nn.Parameter(torch.zeros(n_heads, d_head))
        self.b_O = nn.Parameter(torch.zeros(d_model))
        self.W_K = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.W_V = nn.Parameter(torch.empty(n_heads, d_model, d_head))
        self.b_K = nn.Parameter(torch.zeros(n_heads, d_head))
        self.b_V = nn.Parameter(torch.zeros(n_heads, d_head))
        # Buffers HookedTransformer kept in its state dict: kept (with the same shapes) so that checkpoints
        # written under TransformerLens 3 load unchanged, and new ones load in older versions of the toolkit.
        self.register_buffer("mask", torch.empty((0, 0), dtype=torch.bool))
        self.register_buffer("IGNORE", torch.tensor(-torch.inf))
        self.attn_scale = math.sqrt(d_head)
        self.rotary = rotary
        for name in ("k", "q", "v", "z", "attn_scores", "pattern") + (("rot_k", "rot_q") if rotary else ()):
            setattr(self, f"hook_{name}", HookPoint())
        if rotary:  # tables for the first positions (checkpoints carry them); longer inputs compute their own
            sin, cos = rotary_tables(min(n_ctx, ROTARY_CACHE), d_head)
            self.register_buffer("rotary_sin", sin)
            self.register_buffer("rotary_cos", cos)

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        """Rotary positions on every dimension of each head, the first half paired with the second (GPT-NeoX's
        layout)."""
        length, d_head = x.size(1), x.size(-1)
        sin, cos = ((self.rotary_sin, self.rotary_cos) if length <= self.rotary_sin.size(0)
                    else (t.to(x.device) for t in rotary_tables(length, d_head)))
        half = d_head // 2
        flipped = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos[None, :length, None, :] + flipped * sin[None, :length, None, :]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.hook_q(heads_linear(x, self.W_Q, self.b_Q))
        k = self.hook_k(heads_linear(x, self.W_K, self.b_K))
        v = self.hook_v(heads_linear(x, self.W_V, self.b_V))
        if self.rotary:
            q, k = self.hook_rot_q(self.rotate(q)), self.hook_rot_k(self.rotate(k))
        scores = q.permute(0, 2, 1, 3) @ k.permute(0, 2, 3, 1) / self.attn_scale  # [batch, head, query, key]
        length = scores.size(-1)
        causal = torch.ones(length, length, dtype=torch.bool, device=scores.device).tril()
        scores = self.hook_attn_scores(torch.where(causal, scores, self.IGNORE))
        pattern = self.hook_pattern(scores.softmax(-1))
        z = self.hook_z((pattern @ v.permute(0, 2, 1, 3)).permute(0, 2, 1, 3))  # [batch, pos, head, d_head]
        heads, d_head, d_model = self.W_O.shape
        return F.linear(z.reshape(*z.shape[:2], heads * d_head), self.W_O.reshape(heads * d_head, d_model).T, self.b_O)


class MLP(nn.Module):
    def __init__(self, d_model: int, d_mlp: int, act_fn: str):
        super().__init__()
        self.W_in = nn.Parameter(torch.empty(d_model, d_mlp))
        self.b_in = nn.Parameter(torch.zeros(d_mlp))
        self.W_out = nn.Parameter(torch.empty(d_mlp, d_model))
        self.b_out = nn.Parameter(torch.zeros(d_model))
        self.act_fn = ACTIVATIONS[act_fn]
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        post = self.hook_post(self.act_fn(self.hook_pre(x @ self.W_in + self.b_in)))
        return post @ self.W_out + self.b_out


class TransformerBlock(nn.Module):
    """Pre-norm: resid_mid = resid_pre + attn(ln1(resid_pre)); resid_post = resid_mid + mlp(ln2(resid_mid))."""

    def __init__(self, cfg, norm: type[LayerNorm]):
        super().__init__()
        self.ln1, self.ln2 = norm(cfg.d_model), norm(cfg.d_model)
        self.attn = Attention(cfg.d_model, cfg.n_heads, cfg.n_ctx, cfg.positional_embedding_type == "rotary")
        self.mlp = MLP(cfg.d_model, cfg.d_mlp, cfg.act_fn)
        for name in ("resid_pre", "attn_out", "resid_mid", "mlp_out", "resid_post"):
            setattr(self, f"hook_{name}", HookPoint())

    def forward(self, resid: torch.Tensor) -> torch.Tensor:
        resid = self.hook_resid_pre(resid)
        resid = self.hook_resid_mid(resid + self.hook_attn_out(self.attn(self.ln1(resid))))
        return self.hook_resid_post(resid + self.hook_mlp_out(self.mlp(self.ln2(resid))))


class Embed(nn.Module):
    def __init__(self, d_vocab: int, d_model: int):
        super().__init__()
        self.W_E = nn.Parameter(torch.empty(d_vocab, d_model))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.embedding(tokens, self.W_E)  # not W_E[tokens]: see models.base.TokenEmbedding


class PosEmbed(nn.Module):
    """The learned position table; while training with ``stream_start`` set, the stream is read from a random
    offset per sequence (positions before ``stream_start``, a task's header, stay where they are)."""

    def __init__(self, n_ctx: int, d_model: int, stream_start: int | None = None):
        super().__init__()
        self.W_pos = nn.Parameter(torch.empty(n_ctx, d_model))
        self.stream_start = stream_start

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        batch, length = tokens.size(0), tokens.size(-1)
        rows = torch.arange(length, device=self.W_pos.device)
        if self.stream_start is None or not self.training:
            return self.W_pos[:length].expand(batch, -1, -1).clone()
        # torch's global generator: the trainer seeds it from (seed, step), so a run still replays itself
        offsets = torch.randint(0, self.W_pos.size(0) - length + 1, (batch, 1), device=self.W_pos.device)
        return F.embedding(rows + offsets * (rows >= self.stream_start), self.W_pos)


class Unembed(nn.Module):
    def __init__(self, d_model: int, d_vocab_out: int):
        super().__init__()
        self.W_U = nn.Parameter(torch.empty(d_model, d_vocab_out))
        self.b_U = nn.Parameter(torch.zeros(d_vocab_out))
        self.hook_in = HookPoint()
        self.hook_out = HookPoint()

    def forward(self, residual: torch.Tensor) -> torch.Tensor:
        return self.hook_out(F.linear(self.hook_in(residual), self.W_U.T, self.b_U))


class TiedUnembed(nn.Module):
    """The unembedding with W_U the transpose of the token embedding (shared, not copied)."""

    def __init__(self, embed: nn.Module, b_U: nn.Parameter):
        super().__init__()
        object.__setattr__(self, "embed", embed)  # a reference, not a second registration of W_E
        self.b_U = b_U

    @property
    def W_U(self):
        return self.embed.W_E.T

    def forward(self, residual):
        return residual @ self.W_U + self.b_U


class WindTunnelTransformer(AnswerHead, HookedRootModule):
    """A hooked transformer that knows its task and reads beliefs off the answer classes."""

    arch, order, label = "transformer", 0, "A transformer"
    config_class = TransformerConfig
    presets = {
        "paper": TransformerConfig(d_model=192, n_layers=6, n_heads=6, normalization="RMS"),
        "cpu": TransformerConfig(d_model=96, n_layers=2, n_heads=4),
    }
    attention = positions = capacity_reference = True

    def __init__(self, config: TransformerConfig, task: Task, seed: int = 0):
        super().__init__()
        n_ctx = config.n_ctx or task.seq_len
        if n_ctx < task.seq_len:
            raise ConfigError(f"transformer: n_ctx={n_ctx} is shorter than the task's sequences "
                              f"({task.seq_len} tokens)")
        # A continuous task has no vocabulary: the token embedding is an input projection, and the
        # unembedding has two outputs, the Gaussian's mean and log-variance.
        if config.tied and task.continuous:
            raise ConfigError("transformer: tied=True needs a discrete task (a Gaussian head has no token embedding "
                              "to tie); drop -M tied=true")
        if config.position_offsets and n_ctx == task.seq_len:
            raise ConfigError(f"transformer: position_offsets=true needs a position table longer than the "
                              f"training sequences ({task.seq_len} tokens): set -M n_ctx to the longest "
                              f"sequence it should read, e.g. -M n_ctx={2 * task.seq_len}")
        d_vocab, d_vocab_out = output_sizes(task)
        # The config fields analyses read, under HookedTransformerConfig's names.
        self.cfg = SimpleNamespace(
            n_layers=config.n_layers, d_model=config.d_model, n_heads=config.n_heads,
            d_head=config.d_model // config.n_heads, d_mlp=config.d_mlp or 4 * config.d_model, n_ctx=n_ctx,
            d_vocab=d_vocab, d_vocab_out=d_vocab_out, act_fn=config.act_fn, normalization_type=config.normalization,
            positional_embedding_type="standard" if config.positional == "learned" else "rotary",
            eps=EPS, dtype=torch.float32, device="cpu", seed=seed)
        self.config, self.task, self.provenance = config, task, Provenance(seed=seed)
        cfg = self.cfg
        norm = RMSNorm if config.normalization == "RMS" else LayerNorm
        self.embed = Embed(d_vocab, cfg.d_model)
        self.hook_embed = HookPoint()
        if config.positional == "learned":
            self.pos_embed = PosEmbed(n_ctx, cfg.d_model, task.stream_start if config.position_offsets else None)
            self.hook_pos_embed = HookPoint()
        self.blocks = nn.ModuleList(TransformerBlock(cfg, norm) for _ in range(cfg.n_layers))
        self.ln_final = norm(cfg.d_model)
        self.unembed = Unembed(cfg.d_model, d_vocab_out)
        with torch.random.fork_rng(devices=[]):  # seeded, without touching the caller's generator
            torch.manual_seed(seed)
            # HookedTransformer's "gpt2" initialisation, in its parameter order: the same seed, the same weights
            for name, param in self.named_parameters():
                if "W_" in name:
                    nn.init.normal_(param, std=0.8 / math.sqrt(cfg.d_model))
            if task.continuous:
                self.embed = InputProjection(task.input_dim, cfg.d_model)
        if config.tied:
            self.unembed = TiedUnembed(self.embed, self.unembed.b_U)
        if config.shift:
            self.token_shift = TokenShift(config.shift, config.d_model, seed)
            self.hook_token_shift = HookPoint()  # the embeddings after the shift: the residual stream's start
        self.setup()  # index the hook points by name

    # HookedTransformer's whole-model views of the embedding and unembedding.
    W_E = property(lambda self: self.embed.W_E)
    W_pos = property(lambda self: self.pos_embed.W_pos)
    W_U = property(lambda self: self.unembed.W_U)
    b_U = property(lambda self: self.unembed.b_U)

    def input_to_embed(self, input: torch.Tensor) -> torch.Tensor:
        """The residual stream's start: token (or projected input) embeddings plus positions; refuses
        sequences longer than the position table."""
        if input.dim() == (2 if self.task.continuous else 1):
            input = input[None]
        length = input.shape[1]
        if length > self.cfg.n_ctx:
            raise ConfigError(f"a sequence of {length} positions is longer than this model's context "
                              f"(n_ctx={self.cfg.n_ctx}); learned positions exist only up to n_ctx. Train "
                              f"with -M n_ctx={length} to size them (rows past the training length stay untrained)")
        residual = self.hook_embed(self.embed(input))
        if self.config.positional == "learned":  # rotary: positions enter inside attention
            residual = residual + self.hook_pos_embed(self.pos_embed(input if input.dim() == 2 else input[..., 0]))
        if self.config.shift:
            residual = self.hook_token_shift(self.token_shift(residual))
        return residual

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        residual = self.input_to_embed(input)
        for block in self.blocks:
            residual = block(residual)
        return self.unembed(self.ln_final(residual))
