"""The wind-tunnel transformer: a TransformerLens ``HookedTransformer`` built from a small config.

No pretrained weights and no tokenizer: the vocabulary, context length and answer classes come
from the task. Every activation has TransformerLens's usual hook names (``blocks.0.attn.hook_k``,
``blocks.3.hook_resid_post``, ...), so ``run_with_cache`` and ``run_with_hooks`` work as usual.

Presets
- ``paper``: the reference model of the paper (d=192, 6 layers, 6 heads of 32, pre-norm RMSNorm,
  MLP 4d, GELU, learned positions). TransformerLens keeps attention and MLP biases, and this preset
  leaves the unembedding untied, so it has about 2.69M parameters against the paper's 2,677,440.
  ``tied=True`` reads the answer logits off the token embeddings (W_U = W_E^T), as the paper's
  parameter count implies.
- ``cpu``: the small model that reaches the paper's calibration regime on a 2-core CPU in about
  20 minutes (see benchmarks/cpu_preset.py and docs/results/training.md for the measured curve).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import nn
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens.components import PosEmbed
from transformer_lens.hook_points import HookPoint

from tasks import ConfigError, Task

from .base import AnswerHead, InputProjection, ModelConfig, Provenance, TokenShift, output_sizes


# Activation functions HookedTransformer implements.
ACT_FNS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "relu", "silu", "solu_ln")


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


class TiedUnembed(nn.Module):
    """TransformerLens's unembedding with W_U the transpose of the token embedding (shared, not copied)."""

    def __init__(self, embed: nn.Module, b_U: nn.Parameter):
        super().__init__()
        object.__setattr__(self, "embed", embed)  # a reference, not a second registration of W_E
        self.b_U = b_U

    @property
    def W_U(self):
        return self.embed.W_E.T

    def forward(self, residual):
        return residual @ self.W_U + self.b_U


class RandomOffsetPosEmbed(PosEmbed):
    """The learned position table, the stream read from a random offset per sequence while training
    (positions before ``stream_start``, a task's header, stay where they are)."""

    def __init__(self, cfg, stream_start: int):
        super().__init__(cfg)
        self.stream_start = stream_start

    def forward(self, tokens, past_kv_pos_offset=0, attention_mask=None):
        batch, length = tokens.size(0), tokens.size(-1)
        if not self.training or past_kv_pos_offset or attention_mask is not None:
            return super().forward(tokens, past_kv_pos_offset, attention_mask)
        # torch's global generator: the trainer seeds it from (seed, step), so a run still replays itself
        offsets = torch.randint(0, self.cfg.n_ctx - length + 1, (batch, 1), device=self.W_pos.device)
        rows = torch.arange(length, device=self.W_pos.device)
        return self.W_pos[rows + offsets * (rows >= self.stream_start)]


class WindTunnelTransformer(AnswerHead, HookedTransformer):
    """A HookedTransformer that knows its task and reads beliefs off the answer classes."""

    arch, order, label = "transformer", 0, "A transformer"
    config_class = TransformerConfig
    presets = {
        "paper": TransformerConfig(d_model=192, n_layers=6, n_heads=6, normalization="RMS"),
        "cpu": TransformerConfig(d_model=96, n_layers=2, n_heads=4),
    }
    attention = positions = capacity_reference = True

    def __init__(self, config: TransformerConfig, task: Task, seed: int = 0):
        n_ctx = config.n_ctx or task.seq_len
        if n_ctx < task.seq_len:
            raise ConfigError(f"transformer: n_ctx={n_ctx} is shorter than the task's sequences "
                              f"({task.seq_len} tokens)")
        # A continuous task has no vocabulary: a 1-row placeholder embedding is swapped for an input
        # projection below, and the unembedding has two outputs, the Gaussian's mean and log-variance.
        if config.tied and task.continuous:
            raise ConfigError("transformer: tied=True needs a discrete task (a Gaussian head has no token embedding "
                              "to tie); drop -M tied=true")
        d_vocab, d_vocab_out = output_sizes(task)
        hooked = HookedTransformerConfig(
            n_layers=config.n_layers, d_model=config.d_model, n_heads=config.n_heads,
            d_head=config.d_model // config.n_heads, d_mlp=config.d_mlp or 4 * config.d_model,
            n_ctx=n_ctx, d_vocab=d_vocab, d_vocab_out=d_vocab_out,
            act_fn=config.act_fn, normalization_type=config.normalization,
            positional_embedding_type="standard" if config.positional == "learned" else "rotary",
            rotary_dim=config.d_model // config.n_heads, default_prepend_bos=False, seed=seed,
            device="cpu",
        )
        with warnings.catch_warnings():  # we use the 3.x HookedTransformer on purpose (see pyproject)
            warnings.filterwarnings("ignore", message="HookedTransformer is deprecated")
            super().__init__(hooked, move_to_device=False)
        self.config, self.task, self.provenance = config, task, Provenance(seed=seed)
        if task.continuous:
            self.embed = InputProjection(task.input_dim, config.d_model)
        elif config.tied:
            self.unembed = TiedUnembed(self.embed, self.unembed.b_U)
        if config.position_offsets:
            if n_ctx == task.seq_len:
                raise ConfigError(f"transformer: position_offsets=true needs a position table longer than the "
                                  f"training sequences ({task.seq_len} tokens): set -M n_ctx to the longest "
                                  f"sequence it should read, e.g. -M n_ctx={2 * task.seq_len}")
            offset_table = RandomOffsetPosEmbed(self.cfg, task.stream_start)
            offset_table.W_pos = self.pos_embed.W_pos  # the same (initialised) parameter, read differently
            self.pos_embed = offset_table
        if config.shift:
            self.token_shift = TokenShift(config.shift, config.d_model, seed)
            self.hook_token_shift = HookPoint()  # the embeddings after the shift: the residual stream's start
        self.setup()  # re-index the hook points after adding or swapping modules

    def input_to_embed(self, input, *args, **kwargs):
        """Refuse sequences longer than the position table, and project continuous inputs."""
        if self.task.continuous and input.dim() == 2:
            input = input[None]
        length = input.shape[1] if input.dim() >= 2 else input.shape[0]
        if length > self.cfg.n_ctx:
            raise ConfigError(f"a sequence of {length} positions is longer than this model's context "
                              f"(n_ctx={self.cfg.n_ctx}); learned positions exist only up to n_ctx. Train "
                              f"with -M n_ctx={length} to size them (rows past the training length stay untrained)")
        if not self.task.continuous:
            residual, *rest = super().input_to_embed(input, *args, **kwargs)
        else:
            residual, rest = self.hook_embed(self.embed(input)), [None, None, None]
            if self.config.positional != "rotary":  # rotary: positions enter inside attention
                residual = residual + self.hook_pos_embed(self.pos_embed(input[..., 0]))
        if self.config.shift:
            residual = self.hook_token_shift(self.token_shift(residual))
        return residual, *rest

    def to(self, device_or_dtype, print_details: bool = False):
        return super().to(device_or_dtype, print_details=print_details)
