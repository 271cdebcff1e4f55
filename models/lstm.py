"""A residual multi-layer LSTM with hooks on every layer's hidden states, cell states and output.

Each block is ``resid + out_proj(LSTM(LayerNorm(resid)))``: a one-layer LSTM of hidden size
``d_hidden`` (default d_model) whose hidden states are projected back to the residual width. Stacking
them as residual blocks gives the LSTM the same ``blocks.{l}.hook_resid_*`` stream as every other
architecture, so layer ablation and residual-stream analyses treat it the same way.

Hooks, per block l (``blocks.{l}.mixer.``): ``hook_gates`` (the four gate pre-activations i, f, g, o,
[B, T, 4H]), ``hook_hidden`` (h_t, [B, T, H]), ``hook_cell`` (c_t, [B, T, H]) and ``hook_out`` (the
projected output added to the residual stream). The recurrence is PyTorch's own ``nn.LSTM``
(``blocks.{l}.mixer.lstm``), fast on CPU and GPU; it returns only the last cell state, so when
``hook_gates`` or ``hook_cell`` is hooked the gates and cells of every position are recomputed from
the hidden states (for reading: patching them does not change the output; patch ``hook_hidden``).
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


class LSTMMixer(nn.Module):
    def __init__(self, d_model: int, d_hidden: int):
        super().__init__()
        self.lstm = nn.LSTM(d_model, d_hidden, batch_first=True)  # gate order i, f, g, o
        with torch.no_grad():  # forget-gate bias 1: remember by default early in training
            self.lstm.bias_ih_l0[d_hidden:2 * d_hidden] = 1.0
            self.lstm.bias_hh_l0.zero_()
        self.out_proj = nn.Linear(d_hidden, d_model)
        for name in ("gates", "hidden", "cell", "out"):
            setattr(self, f"hook_{name}", HookPoint())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(x)  # PyTorch's fused recurrence (cuDNN on GPU)
        if self.hook_gates.fwd_hooks or self.hook_cell.fwd_hooks:
            gates, cell = self.gates_and_cells(x, hidden)
            self.hook_gates(gates)
            self.hook_cell(cell)
        return self.hook_out(self.out_proj(self.hook_hidden(hidden)))

    def gates_and_cells(self, x: torch.Tensor, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every position's gate pre-activations and cell state, recovered from the hidden states.

        With h_{t-1} known from the output, all gates come from one matrix product; only the cell
        update c_t = f_t c_{t-1} + i_t g_t remains sequential. For hooks to read (``nn.LSTM``
        returns the last cell state only); editing them does not change the output.
        """
        lstm = self.lstm
        previous = torch.cat([hidden.new_zeros(hidden[:, :1].shape), hidden[:, :-1]], dim=1)
        gates = x @ lstm.weight_ih_l0.T + previous @ lstm.weight_hh_l0.T + lstm.bias_ih_l0 + lstm.bias_hh_l0
        i, f, g, _ = gates.chunk(4, dim=-1)
        write, keep = torch.sigmoid(i) * torch.tanh(g), torch.sigmoid(f)
        cells, c = [], torch.zeros_like(write[:, 0])
        for t in range(x.shape[1]):
            c = keep[:, t] * c + write[:, t]
            cells.append(c)
        return gates, torch.stack(cells, 1)


class WindTunnelLSTM(HookedSequenceModel):
    arch, order, label = "lstm", 2, "An LSTM"
    config_class = LSTMConfig
    presets = {"paper": LSTMConfig(n_layers=6), "cpu": LSTMConfig(n_layers=2)}

    def make_mixer(self, layer: int) -> nn.Module:
        return LSTMMixer(self.config.d_model, self.config.d_hidden or self.config.d_model)
