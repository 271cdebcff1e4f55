"""A residual multi-layer LSTM with hooks on every layer's hidden states, cell states and output.

Each block is ``resid + out_proj(LSTM(LayerNorm(resid)))``: a one-layer LSTM of hidden size
``d_hidden`` (default d_model) whose hidden states are projected back to the residual width. Stacking
them as residual blocks gives the LSTM the same ``blocks.{l}.hook_resid_*`` stream as every other
architecture, so layer ablation and residual-stream analyses treat it the same way.

Hooks, per block l (``blocks.{l}.mixer.``): ``hook_gates`` (the four gate pre-activations i, f, g, o,
[B, T, 4H]), ``hook_hidden`` (h_t, [B, T, H]), ``hook_cell`` (c_t, [B, T, H]) and ``hook_out`` (the
projected output added to the residual stream). The recurrence is PyTorch's own ``nn.LSTM``
(``blocks.{l}.mixer.lstm``), fast on CPU and GPU; it returns only the last cell state, so when
``hook_gates``, ``hook_hidden`` or ``hook_cell`` is hooked the gates and cells of every position are
recomputed from the hidden states. A hidden or cell state a hook changes is carried on: the recurrence
continues from the changed (h_t, c_t), so patching one step's state is an intervention on the recurrence
(``LSTMMixer.carried``), and the gradient a hooked state gets is the total derivative through every later
step. ``hook_gates`` is for reading: editing it does not change the output.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformer_lens.hook_points import HookPoint


from .base import HookedSequenceModel, ModelConfig


@dataclass
class LSTMConfig(ModelConfig):
    d_model: int | None = None  # None: the width that matches the transformer preset on the task
    n_layers: int = 2
    d_hidden: int | None = None  # default d_model
    shift: int | None = None  # a causal token shift of this width on the embeddings (models.base.TokenShift)

    ARCH = "lstm"


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
        if self.hook_hidden.fwd_hooks or self.hook_cell.fwd_hooks:
            hidden = self.carried(x, hidden)
        elif self.hook_gates.fwd_hooks:
            self.hook_gates(self.gates_and_cells(x, hidden)[0])
        else:
            hidden = self.hook_hidden(hidden)
        return self.hook_out(self.out_proj(hidden))

    def carried(self, x: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """The hidden states after ``hook_hidden``'s and ``hook_cell``'s hooks, with what they return carried on:
        where a hook changes (h_t, c_t), the recurrence continues from the changed pair and the hooks see the
        new later states, so patching one step's state is an intervention on the recurrence. The hooks are
        called once more per changed step, each time on the states as they were before any hook up to the
        last committed step (a hook that adds to a state adds once) and the recomputed ones after it; a
        call can change only steps after the last one committed.

        Gradients follow the same reading (when autograd records): the gradient the hooks' outputs receive at
        step t is the total derivative through every later step (``read_through``), not only through h_t's
        own read-out; what the hooks receive has gradient paths only into its own step (``step_only``), so the
        weights' gradients are those of the unhooked model, counted once."""
        gates, cell = self.gates_and_cells(x, hidden)
        grads = torch.is_grad_enabled()
        local = grads and (x.requires_grad or any(p.requires_grad for p in self.lstm.parameters()))
        done, T = 0, x.shape[1]
        while True:
            seen = self.step_only(x, hidden, cell) if local else (hidden, cell)
            new_h, new_c = self.hook_hidden(seen[0]), self.hook_cell(seen[1])
            moved = ((new_h[:, done:] != hidden[:, done:]).any(-1) | (new_c[:, done:] != cell[:, done:]).any(-1))
            moved = moved.any(0).nonzero()
            if not len(moved) or done + int(moved[0]) == T - 1:
                break
            t = done + int(moved[0])
            start = (new_h[:, t][None].contiguous(), new_c[:, t][None].contiguous())
            tail, _ = self.lstm(x[:, t + 1:], start)
            tail_gates, tail_cell = self.gates_and_cells(x[:, t + 1:], tail, *(s[0] for s in start))
            # the next call sees the steps up to t as the first did (a hook that adds is applied once), then the tail
            hidden, done = torch.cat([hidden[:, :t + 1], tail], 1), t + 1
            cell, gates = torch.cat([cell[:, :t + 1], tail_cell], 1), torch.cat([gates[:, :t + 1], tail_gates], 1)
        self.hook_gates(gates)
        if grads and (new_h.requires_grad or new_c.requires_grad):
            return self.read_through(x, new_h, new_c)
        return new_h

    def step(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor,
             weights=None) -> tuple[torch.Tensor, torch.Tensor]:
        """One LSTM step from (h, c) = (h_{t-1}, c_{t-1}) on input x_t, over any leading dimensions; ``weights``
        (w_ih, w_hh, bias) in place of the module's own."""
        lstm = self.lstm
        w_ih, w_hh, bias = weights or (lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0 + lstm.bias_hh_l0)
        i, f, g, o = (x @ w_ih.T + h @ w_hh.T + bias).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c

    def step_only(self, x: torch.Tensor, hidden: torch.Tensor, cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden, cell)'s values with gradient paths only into each step's own x_t and weights ((h_{t-1},
        c_{t-1}) held fixed): the path back through earlier steps is the one ``read_through`` gives."""
        hidden, cell = hidden.detach(), cell.detach()
        previous = lambda s: torch.cat([torch.zeros_like(s[:, :1]), s[:, :-1]], 1)  # noqa: E731
        h, c = self.step(x, previous(hidden), previous(cell))
        return hidden + (h - h.detach()), cell + (c - c.detach())

    def read_through(self, x: torch.Tensor, new_h: torch.Tensor, new_c: torch.Tensor) -> torch.Tensor:
        """``new_h``'s values exactly, read so that the gradient (new_h, new_c) get at step t is the total
        derivative through the recurrence: r_t = new_t + step(r_{t-1}) - step(new_{t-1}) equals new_t and
        carries r_{t-1}'s gradient back through one step (weights and inputs held fixed here: their own
        gradients come through ``step_only``)."""
        lstm = self.lstm
        weights = (lstm.weight_ih_l0.detach(), lstm.weight_hh_l0.detach(), (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach())
        x, held_h, held_c = x.detach(), new_h.detach(), new_c.detach()
        r_h, r_c, out = new_h[:, 0], new_c[:, 0], [new_h[:, 0]]
        for t in range(1, x.shape[1]):
            moved_h, moved_c = self.step(x[:, t], r_h, r_c, weights)
            still_h, still_c = self.step(x[:, t], held_h[:, t - 1], held_c[:, t - 1], weights)
            r_h, r_c = new_h[:, t] + (moved_h - still_h), new_c[:, t] + (moved_c - still_c)
            out.append(r_h)
        r = torch.stack(out, 1)
        return held_h + (r - r.detach())

    def gates_and_cells(self, x: torch.Tensor, hidden: torch.Tensor, h0: torch.Tensor | None = None,
                        c0: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Every position's gate pre-activations and cell state, recovered from the hidden states (and the
        state (h0, c0) before the first position, zero by default).

        With h_{t-1} known from the output, all gates come from one matrix product; only the cell
        update c_t = f_t c_{t-1} + i_t g_t remains sequential (``nn.LSTM`` returns the last cell state only).
        """
        lstm = self.lstm
        first = hidden.new_zeros(hidden[:, :1].shape) if h0 is None else h0[:, None]
        previous = torch.cat([first, hidden[:, :-1]], dim=1)
        gates = x @ lstm.weight_ih_l0.T + previous @ lstm.weight_hh_l0.T + lstm.bias_ih_l0 + lstm.bias_hh_l0
        i, f, g, _ = gates.chunk(4, dim=-1)
        write, keep = torch.sigmoid(i) * torch.tanh(g), torch.sigmoid(f)
        cells, c = [], torch.zeros_like(write[:, 0]) if c0 is None else c0
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
