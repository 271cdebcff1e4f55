"""A residual multi-layer LSTM with hooks on every layer's hidden states, cell states and output.

Each block is ``resid + out_proj(LSTM(LayerNorm(resid)))``: a one-layer LSTM of hidden size
``d_hidden`` (default d_model) whose hidden states are projected back to the residual width. Stacking
them as residual blocks gives the LSTM the same ``blocks.{l}.hook_resid_*`` stream as every other
architecture, so layer ablation and residual-stream analyses treat it the same way.

Hooks, per block l (``blocks.{l}.mixer.``): ``hook_gates`` (the four gate pre-activations i, f, g, o,
[B, T, 4H]), ``hook_hidden`` (h_t, [B, T, H]), ``hook_cell`` (c_t, [B, T, H]) and ``hook_out`` (the
projected output added to the residual stream). The recurrence is written out step by step rather
than with ``nn.LSTM`` because ``nn.LSTM`` returns the cell state of the last position only.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformer_lens.hook_points import HookPoint

from tasks import ConfigError

from .base import HookedSequenceModel, ModelConfig


@dataclass
class LSTMConfig(ModelConfig):
    d_model: int | None = None  # None: the width that matches the transformer preset on the task
    n_layers: int = 2
    d_hidden: int | None = None  # default d_model

    ARCH = "lstm"

    def check(self) -> None:
        if self.d_model is None:
            raise ConfigError("lstm: d_model is not set (presets fill it in by capacity matching)")


PRESETS = {"paper": LSTMConfig(n_layers=6), "cpu": LSTMConfig(n_layers=2)}
TASK_PRESETS = {("hmm", "cpu"): LSTMConfig(n_layers=4)}


class LSTMMixer(nn.Module):
    def __init__(self, d_model: int, d_hidden: int):
        super().__init__()
        self.W_ih = nn.Linear(d_model, 4 * d_hidden)  # gate order i, f, g, o as in nn.LSTM
        self.W_hh = nn.Linear(d_hidden, 4 * d_hidden, bias=False)
        nn.init.uniform_(self.W_hh.weight, -d_hidden ** -0.5, d_hidden ** -0.5)
        with torch.no_grad():  # forget-gate bias 1: remember by default early in training
            self.W_ih.bias.zero_()
            self.W_ih.bias[d_hidden:2 * d_hidden] = 1.0
        self.out_proj = nn.Linear(d_hidden, d_model)
        for name in ("gates", "hidden", "cell", "out"):
            setattr(self, f"hook_{name}", HookPoint())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inputs = self.W_ih(x)  # the input half of every gate at once; only h @ W_hh is sequential
        H = inputs.shape[-1] // 4
        h = c = inputs.new_zeros(inputs.shape[0], H)
        gates, hidden, cell = [], [], []
        for t in range(inputs.shape[1]):
            g = inputs[:, t] + self.W_hh(h)
            i, f, u, o = g.chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(u)
            h = torch.sigmoid(o) * torch.tanh(c)
            gates.append(g), hidden.append(h), cell.append(c)
        self.hook_gates(torch.stack(gates, 1))
        self.hook_cell(torch.stack(cell, 1))
        return self.hook_out(self.out_proj(self.hook_hidden(torch.stack(hidden, 1))))


class WindTunnelLSTM(HookedSequenceModel):
    arch = "lstm"

    def make_mixer(self, layer: int) -> nn.Module:
        return LSTMMixer(self.config.d_model, self.config.d_hidden or self.config.d_model)
