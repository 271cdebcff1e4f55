"""The flat control: residual MLP blocks applied to each position alone, with no mixing along the sequence.

Each block is ``resid + W_out GELU(W_in LayerNorm(resid))``; the input is the token embedding plus a
learned position embedding (so it is the transformer with its attention removed). Whatever the model
predicts at a position depends on that position's token and index only, so it can learn the marginal
answer distribution but not condition on the context: the paper's control that fails.

Hooks, per block l: ``blocks.{l}.mixer.hook_pre`` (pre-activation, [B, T, d_mlp]),
``blocks.{l}.mixer.hook_post`` (after GELU) and the block's output ``blocks.{l}.hook_mixer_out``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens.hook_points import HookPoint

from tasks import ConfigError

from .base import HookedSequenceModel, ModelConfig


@dataclass
class MLPConfig(ModelConfig):
    d_model: int | None = None  # None: the width that matches the transformer preset on the task
    n_layers: int = 2
    d_mlp: int | None = None  # default 4 * d_model
    n_ctx: int | None = None  # default: the task's sequence length
    shift: int | None = None  # a causal token shift of this width on the embeddings (models.base.TokenShift)

    ARCH = "mlp"


class PositionwiseMLP(nn.Module):
    def __init__(self, d_model: int, d_mlp: int):
        super().__init__()
        self.W_in = nn.Linear(d_model, d_mlp)
        self.W_out = nn.Linear(d_mlp, d_model)
        self.hook_pre, self.hook_post = HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.W_out(self.hook_post(F.gelu(self.hook_pre(self.W_in(x)))))


class WindTunnelMLP(HookedSequenceModel):
    arch, order, label = "mlp", 3, "An MLP"
    config_class = MLPConfig
    presets = {"paper": MLPConfig(n_layers=6), "cpu": MLPConfig(n_layers=2)}
    positions = True

    def __init__(self, config: MLPConfig, task, seed: int = 0):
        n_ctx = config.n_ctx or task.seq_len
        if n_ctx < task.seq_len:
            raise ConfigError(f"mlp: n_ctx={n_ctx} is shorter than the task's sequences ({task.seq_len} tokens)")
        super().__init__(config, task, seed, n_ctx=n_ctx)

    def make_mixer(self, layer: int) -> nn.Module:
        return PositionwiseMLP(self.config.d_model, self.config.d_mlp or 4 * self.config.d_model)
