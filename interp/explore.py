"""The interactive explorer behind ``interp explore --ckpt RUN``: a local Dash app on one model.

Every view is computed by the analyses' own functions and drawn with their figures where they
have one; this file only chooses the inputs (a sequence, a checkpoint, a set of ablations) and
lays the views out:

- sequence: a held-out sequence sampled with a seed (``analyses.base.held_out_batch``), or tokens
  typed by hand, whose exact posterior the task reads back from the tokens
  (``Task.batch_from_tokens``);
- posterior: per query position the model's answer distribution beside the Bayes posterior, and
  model vs Bayes entropy with the gap (``calibration.measure`` and its staircase/error figures);
- calibration on held-out sequences (``calibration.measure``), intact and as ablated;
- attention pattern of one layer and head, every token named on both axes (``Task.position_names``),
  keys naming a feasible or an eliminated hypothesis marked (the task's hypothesis tokens, as in
  ``qk_alignment.hypothesis_group``), and every head of the layer side by side, on a linear or log colour
  scale (``explore_attention``); shown only where the model has attention (or a selective scan);
- geometry: residual-stream and attention-output PCA per layer coloured by Bayes entropy, token position
  or the true latent class (``value_manifold``'s own figures);
- ablation: heads zeroed at ``hook_z`` (``activations.ablation_hook``), blocks skipped
  (``activations.part_hooks``), applied to every view at once; head-ablation's map, whose cells ablate
  their head when clicked;
- activation patching on the sequence shown (``explore_patching``);
- the Python and the ``interp explore --numbers`` command that give the view's numbers;
- a step slider over the checkpoints of a run folder.

Slow views say what they wait for in the page and on the terminal (``waits``); the server prepares the
model and the first views in the background (``prepare_in_background``) and stops at once on Ctrl-C.
"""
from __future__ import annotations

import json
import math
import os
import re
import shlex
import signal
import sys
import threading
import logging
from contextlib import contextmanager
from pathlib import Path

import click
import plotly.graph_objects as go
import torch
from dash import Dash, Input, Output, State, ctx, dcc, html, no_update
from plotly.subplots import make_subplots

from analyses import logit_lens, style, value_manifold
from analyses.base import AnalysisError, answer_probs, held_out_batch
from analyses.calibration import error_figure, measure, staircase_figure
from analyses.activations import ablation_hook, mean_z, needed_hooks, part_hooks, z_hook_name
from models.base import act_name
from analyses.qk_alignment import hypothesis_group
from tasks import ConfigError
from tasks.base import SEED_RANGE, is_seed

from . import explore_attention, explore_patching
from .checkpoint import list_checkpoints, load, resolve
from .errors import UserError
from .ports import check_port
from .requests import explorer_rules, guard
from .waits import Waits, register_status, status_line


def parse_tokens(task, text: str) -> list[int]:
    """Token ids from text: token names as the task prints them (``k3 v7``) or plain ids."""
    if task.continuous:
        raise UserError(f"{task.name} feeds real-valued inputs, which cannot be typed as tokens; sample by seed")
    vocab = range(task.vocab_size)
    by_name = {name: i for i, name in zip(vocab, task.token_names(torch.tensor(list(vocab))))}
    ids = []
    for word in re.split(r"[\s,]+", text.strip()):
        if word in by_name:
            ids.append(by_name[word])
        # not "²" or "٣"; and no more digits than a token id has (int() refuses 4,300 digits with a ValueError)
        elif word.isascii() and word.isdigit() and len(word) <= len(str(task.vocab_size)) and int(word) < task.vocab_size:
            ids.append(int(word))
        elif word:
            shown = word if len(word) <= 40 else f"{word[:20]}...({len(word):,} characters)"
            raise UserError(f"unknown token {shown!r}; write names such as {' '.join(list(by_name)[:3])} "
                            f"or ids 0..{task.vocab_size - 1}")
    if not ids:
        raise UserError("type at least one token")
    return ids


def ablation_hooks(choices: list[str], model, means=None) -> list:
    """Hooks for the chosen ablations: ``"H1.2"`` zeroes head 2 of layer 1, ``"M1.2"`` sets it to its mean
    output (``means()[layer][head]``, head-ablation's mean z), ``"B0"`` skips block 0; anything else, or a
    layer or head ``model`` lacks, is refused."""
    hooks = []
    for choice in sorted(choices or [], key=str):
        match = re.fullmatch(r"([HM])(\d+)\.(\d+)|B(\d+)", choice, re.ASCII) if isinstance(choice, str) else None
        layer, head = int(match[2] or match[4]) if match else 0, int(match[3] or 0) if match else 0
        heads = getattr(model.cfg, "n_heads", 0) if model.has_attention() else 0  # an LSTM or an MLP has none
        if match is None or layer >= model.cfg.n_layers or (match[3] is not None and head >= heads):
            raise UserError(f"unknown ablation {choice!r}; heads are H<layer>.<head> (zero) or M<layer>.<head> "
                            f"(mean), blocks B<layer>, within the model's {model.cfg.n_layers} layers of "
                            f"{heads} heads")
        if match[4] is not None:
            hooks += part_hooks("block", layer)
        elif match[1] == "M" and means is None:
            raise UserError("mean ablation needs the heads' mean outputs, which this view does not have")
        else:
            hooks.append((z_hook_name(layer), ablation_hook(head, means()[layer][head] if match[1] == "M" else None)))
    return hooks


def chosen_ablations(heads: list[str], blocks: list[str], mode: str) -> list[str]:
    """The ablation choices of the controls: the ticked heads ("H<l>.<h>") zeroed or, in mean mode, set to
    their mean output ("M<l>.<h>"), and the ticked blocks."""
    return [("M" + h[1:]) if mode == "mean" else h for h in heads or []] + list(blocks or [])


class Explorer:
    """The models of one checkpoint or run folder and every view of them, as plotly figures.

    Views are computed under one lock: a Dash server answers callbacks on several threads, and
    ablation hooks live on the (shared) model while a view runs.
    """

    def __init__(self, source, n_calibration: int = 100, n_geometry: int = 150, seed: int = 1234):
        source = Path(source)
        self.source = source
        self.checkpoints = list_checkpoints(source) if source.is_dir() else []
        if not self.checkpoints:
            self.checkpoints = [(None, resolve(source))]
        self.n_calibration, self.n_geometry, self.seed = n_calibration, n_geometry, seed
        self._models, self._cache = {}, {}
        self.lock = threading.RLock()
        self.waits = Waits()  # what a slow view is waiting on, said in the page and on the terminal
        last = self.model(len(self.checkpoints) - 1)  # fails here, before the server starts, on a bad file
        self.task = last.task
        self.steps = [step if step is not None else last.step for step, _ in self.checkpoints]

    def model(self, index: int):
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.checkpoints):
            raise UserError(f"no checkpoint at slider position {index!r}; there are {len(self.checkpoints)}")
        if index not in self._models:
            self._models[index] = load(self.checkpoints[index][1], device="cpu")
        return self._models[index]

    def layout_info(self, index: int) -> dict:
        """What can be ablated and looked at in this model: layers, heads, attention."""
        model = self.model(index)
        n_layers = model.cfg.n_layers
        attention = model.has_attention() and all(
            z_hook_name(l) in model.hook_dict for l in range(n_layers))
        blocks = [l for l in range(n_layers) if all(n in model.hook_dict for n in needed_hooks("block", l))]
        return dict(n_layers=n_layers, n_heads=model.cfg.n_heads if attention else 0, attention=attention,
                    scan=not attention and model.has_patterns(),
                    attention_out=all(act_name("attn_out", l) in model.hook_dict for l in range(n_layers)),
                    blocks=blocks, arch=getattr(model, "arch", type(model).__name__))

    def ablated_by_controls(self, index: int, heads: list[str], blocks: list[str], mode: str):
        """``ablated`` with the choices as the page's ablation controls give them."""
        return self.ablated(index, chosen_ablations(heads, blocks, mode))

    @contextmanager
    def ablated(self, index: int, choices: list[str]):
        with self.lock:
            model = self.model(index)
            hooks = ablation_hooks(choices, model, means=lambda: self.mean_outputs(index))
            if any(name not in model.hook_dict for name, _ in hooks):
                raise UserError(f"ablations {sorted(choices)} name a part this model does not have")
            with model.hooks(fwd_hooks=hooks):
                yield model

    def mean_outputs(self, index: int) -> list:
        """Per layer and head, the intact model's mean z over the held-out batch (for mean ablation)."""
        key = ("mean-z", index)
        if key not in self._cache:
            with self.lock, self.waits.on(f"mean head outputs on {self.n_calibration} held-out sequences"):
                # called under ``ablated`` before its hooks are on, so the model is intact
                self._cache[key] = mean_z(self.model(index), self.held_out().tokens)
        return self._cache[key]

    # --- sequences ---------------------------------------------------------------------------
    def typed(self, text: str) -> list[int]:
        """The token ids of a typed sequence, refused (UserError) if the model or the task cannot take it."""
        tokens = parse_tokens(self.task, text)
        model = self.model(len(self.checkpoints) - 1)
        # Only an architecture with a learned position table has a longest input; recurrent ones take any length.
        if model.positions and len(tokens) > model.cfg.n_ctx:
            raise UserError(f"{len(tokens)} tokens is longer than the model's context ({model.cfg.n_ctx})")
        self.batch(tokens, None)  # refuse a sequence the task cannot give a posterior for
        return tokens

    def sample(self, seed: int) -> list:
        return held_out_batch(self.task, 1, seed).tokens[0].tolist()

    def batch(self, tokens: list, seed: int | None):
        """The batch of one sequence: the sampled one (with its true answers) or a typed one."""
        if seed is not None:
            return held_out_batch(self.task, 1, seed)
        try:
            return self.task.batch_from_tokens(torch.tensor([tokens]))
        except ConfigError as err:
            raise UserError(str(err)) from None

    def names(self, tokens) -> list[str]:
        """Position-tagged token names, unique so they can label heat-map axes."""
        tensor = torch.as_tensor(tokens)
        return [f"{i}:{name}" for i, name in enumerate(self.task.position_names(tensor))]

    def class_names(self) -> list[str]:
        offset = self.task.answer_token_offset
        return self.task.token_names(torch.arange(offset, offset + self.task.n_classes))

    # --- views ---------------------------------------------------------------------------------
    def sequence_numbers(self, index: int, tokens: list, seed: int | None, choices: list[str]) -> dict:
        """What the model does on one sequence: calibration curves, answer distribution, logit lens (discrete)
        or predictive mean and variance (continuous); cached per (checkpoint, sequence, ablation), so the views
        and the download share one computation."""
        key = ("sequence", index, tuple(tokens) if seed is None else seed, tuple(sorted(choices)))
        if key not in self._cache:
            batch = self.batch(tokens, seed)
            with self.ablated(index, choices) as model, self.waits.on("the model on this sequence"):
                continuous = self.task.continuous
                self._cache[key] = dict(
                    batch=batch, curves=measure(model, batch),
                    probs=None if continuous else answer_probs(model, batch.tokens)[0],
                    lens=None if continuous else logit_lens.lens_probs(model, batch.tokens),
                    predictive=[t[0].float() for t in model.predictive(batch.tokens)] if continuous else None)
            while len([k for k in self._cache if k[0] == "sequence"]) > 64:  # keep the newest only
                del self._cache[next(k for k in self._cache if k[0] == "sequence")]
        return self._cache[key]

    def posterior_views(self, index: int, tokens: list, seed: int | None, choices: list[str]) -> dict:
        """Posterior heat maps and the per-position entropies of one sequence, and held-out calibration; with
        ablations, the intact model's entropies drawn beside the ablated ones."""
        seq = self.sequence_numbers(index, tokens, seed, choices)
        batch, curves, probs = seq["batch"], seq["curves"], seq["probs"]
        held_out = self.held_out_calibration(index, choices)
        intact = self.held_out_calibration(index, [])
        mark = " (ablated)" if choices else ""
        views = dict(
            entropy=staircase_figure(curves["per_position"], f"this sequence: model{mark} vs Bayes entropy"
                                     f"<br><sup>MAE {curves['entropy_mae_bits']:.4f} bits</sup>",  # fits half a page
                                     intact=self.sequence_numbers(index, tokens, seed, [])["curves"]["per_position"]
                                     if choices else None),
            gap=error_figure(curves["per_position"]),
            calibration=staircase_figure(held_out["per_position"], f"{self.n_calibration} held-out sequences: "
                                         f"MAE {held_out['entropy_mae_bits']:.4f} bits{mark}",
                                         intact=intact["per_position"] if choices else None),
            summary=(f"held-out calibration ({self.n_calibration} sequences): entropy MAE "
                     f"{held_out['entropy_mae_bits']:.4f} bits, KL {held_out['kl_bits']:.4f} bits"
                     + ("" if not choices else f"; intact model: MAE {intact['entropy_mae_bits']:.4f}, "
                        f"KL {intact['kl_bits']:.4f} bits")),
        )
        for fig in views.values():
            if isinstance(fig, go.Figure):
                fig.update_layout(width=None, height=320, margin=dict(t=60, b=40))
        views["posterior"] = (self.posterior_figure(batch, probs, tokens) if probs is not None else
                              _message_figure("a continuous task: its predictive is a Gaussian; see the entropies"))
        views["lens"] = (self.lens_figure(batch, seq["lens"], tokens) if seq["lens"] is not None else
                         _message_figure("a continuous task: no answer classes to decode each layer into"))
        views["latent"] = (self.predictive_figure(batch, seq["predictive"], tokens) if seq["predictive"] is not None
                           else self.latent_figure(batch, probs, tokens))
        for fig in views.values():
            if isinstance(fig, go.Figure):  # no bar on a log axis, no SI prefix in a tick or a hover
                style.dots_on_log_axes(fig)
                style.plain_numbers(style.use_template(fig))
        return views

    def numbers(self, index: int, tokens: list, seed: int | None, choices: list[str]) -> dict:
        """The numbers behind the current views, JSON-ready, with the equivalent Python and CLI calls."""
        seq = self.sequence_numbers(index, tokens, seed, choices)
        batch, rows = seq["batch"], seq["batch"].query_mask[0].nonzero().flatten().tolist()
        out = dict(checkpoint=str(self.checkpoints[index][1]), step=self.steps[index], task=self.task.config(),
                   tokens=list(tokens), token_names=self.task.token_names(torch.tensor(tokens)), seed=seed,
                   ablations=sorted(choices), query_positions=rows,
                   this_sequence={k: v for k, v in seq["curves"].items() if k != "per_position"},
                   per_position=seq["curves"]["per_position"],
                   held_out_calibration=dict(n=self.n_calibration, seed=self.seed, **{
                       k: v for k, v in self.held_out_calibration(index, choices).items() if k != "per_position"}))
        if choices:
            out["held_out_calibration_intact"] = {k: v for k, v in self.held_out_calibration(index, []).items()
                                                  if k != "per_position"}
        if seq["probs"] is not None:
            out["answer_classes"] = self.class_names()
            out["model_distribution"] = seq["probs"][rows].tolist()
            out["bayes_posterior"] = batch.posterior[0, rows].tolist()
            out["logit_lens"] = [p[0, rows].tolist() for p in seq["lens"]]
        else:
            out["model_predictive_mean"], out["model_predictive_var"] = (t[rows].tolist() for t in seq["predictive"])
            out["bayes_predictive_mean"] = batch.posterior_mean[0, rows].tolist()
            out["bayes_predictive_var"] = batch.posterior_var[0, rows].tolist()
        out["python"] = self.equivalent_code(index, tokens, seed, choices)
        return _plain(out)

    def equivalent_code(self, index: int, tokens: list, seed: int | None, choices: list[str]) -> str:
        """The Python (and CLI) that computes this view's numbers without the explorer."""
        ckpt = str(self.checkpoints[index][1])
        sequence = (f"held_out_batch(model.task, 1, {seed})" if seed is not None else
                    f"model.task.batch_from_tokens(torch.tensor([{list(tokens)}]))")
        discrete = not self.task.continuous
        lines = ["import torch", "import interp",
                 "from analyses.base import answer_probs, held_out_batch" if discrete else
                 "from analyses.base import held_out_batch",
                 "from analyses.calibration import measure",
                 "from interp.explore import ablation_hooks" if choices else None,
                 f"model = interp.load({ckpt!r})",
                 f"batch = {sequence}"]
        body = ["numbers = measure(model, batch)  # this sequence; ['per_position'] holds the entropy curves",
                f"held_out = measure(model, held_out_batch(model.task, {self.n_calibration}, {self.seed}))"
                f"  # held-out calibration"]
        if discrete:
            body.append("probs = answer_probs(model, batch.tokens)[0]  # the answer distribution at every position")
        if choices:
            means = any(c.startswith("M") for c in choices)
            if means:
                lines += ["from analyses.activations import mean_z",
                          f"means = mean_z(model, held_out_batch(model.task, {self.n_calibration}, {self.seed}).tokens)"]
            lines += [f"with model.hooks(fwd_hooks=ablation_hooks({sorted(choices)!r}, model"
                      f"{', means=lambda: means' if means else ''})):"] + ["    " + line for line in body]
        else:
            lines += body
        info = self.layout_info(index)
        what = (f"--seed {seed}" if seed is not None else
                "--tokens " + shlex.quote(" ".join(self.task.token_names(torch.tensor(tokens)))))
        ablate = f" --ablate {','.join(sorted(choices))}" if choices else ""
        lines += ["", "# these numbers (and the download's), from the terminal:",
                  f"#   interp explore --ckpt {shlex.quote(ckpt)} --numbers {what}{ablate}",
                  "# held-out calibration of the intact model:",
                  f"#   interp run calibration --ckpt {shlex.quote(ckpt)} --n {self.n_calibration} --seed {self.seed}"]
        if info["attention"]:
            lines.append(f"#   interp run head-ablation --ckpt {shlex.quote(ckpt)}   (every head, one at a time)")
        if info["blocks"]:
            lines.append(f"#   interp run layer-ablation --ckpt {shlex.quote(ckpt)}   (every block, one at a time)")
        return "\n".join(line for line in lines if line is not None)

    def predictive_figure(self, batch, predictive: list[torch.Tensor], tokens: list) -> go.Figure:
        """A continuous task: the model's predictive mean +- one sigma beside the exact Bayes predictive."""
        rows = batch.query_mask[0].nonzero().flatten().tolist()
        labels = [self.names(tokens)[i] for i in rows]
        fig = go.Figure()
        for name, mean, var, color in (("Bayes", batch.posterior_mean[0], batch.posterior_var[0], "#2ca02c"),
                                       ("model", predictive[0], predictive[1], "#1f77b4")):
            mean, sigma = mean[rows].float(), var[rows].float().sqrt()
            fig.add_scatter(x=labels, y=mean.tolist(), name=f"{name} mean ± σ", mode="lines+markers",
                            line_color=color, error_y=dict(type="data", array=sigma.tolist(), visible=True),
                            hovertemplate=f"%{{x}}<br>{name}: %{{y:.3f}} ± %{{error_y.array:.3f}}<extra></extra>")
        fig.update_layout(title="predictive at each query: model against the exact Bayes predictive",
                          xaxis_title="query position", yaxis_title="prediction", 
                          width=None, height=360, margin=dict(t=60, b=40))
        return fig

    def latent_figure(self, batch, probs: torch.Tensor, tokens: list) -> go.Figure:
        """The task's latent truth for this sequence (its tables, and its true class at each query beside the
        Bayes-MAP class and the model's arg-max), as the task declares them."""
        tables = self.task.latent_tables(batch, 0)
        path = self.task.latent_path(batch, 0)
        panels = list(tables) + ([path[0] + "<br>vs Bayes MAP"] if path else [])  # two lines: no overlap
        if not panels:
            typed = bool((batch.targets[batch.query_mask] == -100).all())  # typed: its true answers are unknown
            return _message_figure("a typed sequence keeps no latent truth: sample one by seed to see it" if typed
                                   else f"task {self.task.name!r} declares no latent table or path to draw")
        fig = make_subplots(rows=1, cols=len(panels), subplot_titles=panels, horizontal_spacing=0.12)
        for col, (title, (matrix, row_names, col_names)) in enumerate(tables.items(), start=1):
            fig.add_heatmap(z=matrix.float().tolist(), x=col_names, y=row_names, coloraxis="coloraxis", row=1,
                            col=col, hovertemplate=f"{title}<br>%{{y}} → %{{x}}: %{{z:.2f}}<extra></extra>")
            fig.update_yaxes(autorange="reversed", title_text="from" if col == 1 else None, row=1, col=col)
        if path:
            rows = batch.query_mask[0].nonzero().flatten().tolist()
            labels = [self.names(tokens)[i] for i in rows]
            classes = self.class_names()
            lines = (("true", path[1], "#000000", "circle"),
                     ("Bayes MAP", batch.posterior[0, rows].argmax(-1).tolist(), "#2ca02c", "x"),
                     ("model arg-max", probs[rows].argmax(-1).tolist(), "#1f77b4", "diamond-open"))
            for name, values, color, symbol in lines:
                fig.add_scatter(x=labels, y=[classes[v] for v in values], mode="markers", name=name, row=1,
                                col=len(panels), marker=dict(color=color, symbol=symbol, size=9))
            fig.update_yaxes(categoryorder="array", categoryarray=classes, row=1, col=len(panels),
                             title_text="class")
            fig.update_xaxes(title_text="query position", showticklabels=False, row=1, col=len(panels))
        fig.update_layout(title="latent truth of this sequence", width=None, height=360,
                          coloraxis=dict(colorscale="Blues", cmin=0, colorbar=dict(title="p", x=1.02)),
                          legend=dict(orientation="h", y=-0.15), margin=dict(t=70, b=60))
        return fig

    def lens_figure(self, batch, lens: list[torch.Tensor], tokens: list) -> go.Figure:
        """logit-lens on this sequence: KL(Bayes || the answer distribution decoded from each layer), per query."""
        rows = batch.query_mask[0].nonzero().flatten().tolist()
        labels = [self.names(tokens)[i] for i in rows]
        bayes = batch.posterior[0, rows].float()
        classes = self.class_names()
        kl = [logit_lens.compare(p[0, rows], bayes)["kl_bits"].tolist() for p in lens]
        top = [[classes[c] for c in p[0, rows].argmax(-1).tolist()] for p in lens]
        fig = go.Figure(go.Heatmap(z=kl, x=labels, y=[f"layer {l}" for l in range(len(lens))], customdata=top,
                                   colorscale="Magma_r", zmin=0, colorbar=dict(title="KL, bits"),
                                   hovertemplate="%{y}, position %{x}<br>KL(Bayes || lens) %{z:.4f} bits"
                                                 "<br>lens arg-max %{customdata}<extra></extra>"))
        fig.update_layout(title="logit lens: each layer's residual decoded, against Bayes",
                          xaxis_title="query position", yaxis=dict(title="layer", autorange="reversed"),
                          width=None, height=200 + 30 * len(lens), margin=dict(t=60, b=40))
        return fig

    def held_out_calibration(self, index: int, choices: list[str]) -> dict:
        """Calibration on the held-out batch, which does not depend on the sequence shown: computed once per
        checkpoint and ablation (the slowest part of a view on a large model)."""
        key = ("held-out", index, tuple(sorted(choices)))
        if key not in self._cache:
            with self.ablated(index, choices) as model, self.waits.on(
                    f"held-out calibration on {self.n_calibration} sequences" + (" (ablated)" if choices else "")):
                self._cache[key] = measure(model, self.held_out())
        return self._cache[key]

    def held_out(self):
        """The held-out calibration batch, sampled once (every checkpoint shares the task)."""
        if "held_out" not in self._cache:
            self._cache["held_out"] = held_out_batch(self.task, self.n_calibration, self.seed)
        return self._cache["held_out"]

    def posterior_figure(self, batch, probs: torch.Tensor, tokens: list) -> go.Figure:
        """Bayes posterior and model distribution over the answer classes, one row per query position."""
        rows = batch.query_mask[0].nonzero().flatten().tolist()
        labels = [self.names(tokens)[i] for i in rows]
        classes = self.class_names()
        bayes, model = batch.posterior[0, rows].float(), probs[rows].float()
        fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                            subplot_titles=("exact Bayes posterior", "model"))
        for col, (z, what) in enumerate(((bayes, "Bayes"), (model, "model")), start=1):
            fig.add_heatmap(z=z.tolist(), x=classes, y=labels, coloraxis="coloraxis", row=1, col=col,
                            hovertemplate=f"position %{{y}}<br>answer %{{x}}<br>{what} p = %{{z:.4f}}<extra></extra>")
        fig.update_layout(title="answer distribution at each query position", coloraxis=dict(colorscale="Blues",
                          cmin=0, colorbar=dict(title="p")), yaxis=dict(autorange="reversed", title="query position"),
                          height=160 + 18 * len(rows), margin=dict(t=70, b=40))
        return fig

    def patterns(self, index: int, tokens: list, seed: int | None, choices: list[str]) -> list[torch.Tensor]:
        """Per layer, this sequence's [head, query, key] attention patterns (a selective scan's effective attention
        as the one head of its layer: models/mamba.py writes it as |M| averaged over channels, every row
        normalised), cached per (checkpoint, sequence, ablation); refused for a model without either."""
        info = self.layout_info(index)
        if not info["attention"] and not info["scan"]:
            raise UserError(f"this {info['arch']} model has no attention: there are no attention patterns to show "
                            f"(every other view works)")
        key = ("patterns", index, tuple(tokens) if seed is None else seed, tuple(sorted(choices)))
        if key not in self._cache:
            batch = self.batch(tokens, seed)
            what = "the effective attention of the scan" if info["scan"] else "the attention patterns"
            with self.ablated(index, choices) as model, self.waits.on(f"{what} of this sequence"):
                self._cache[key] = [p[0].float() for p in model.attention_patterns(batch.tokens)]
            while len([k for k in self._cache if k[0] == "patterns"]) > 16:  # keep the newest only
                del self._cache[next(k for k in self._cache if k[0] == "patterns")]
        return self._cache[key]

    def attention_view(self, index: int, tokens: list, seed: int | None, choices: list[str],
                       layer: int, head: int, log: bool = False) -> go.Figure:
        """One head's pattern, every token named on both axes, keys naming a feasible or an eliminated
        hypothesis marked; ``log``: coloured by log10 of the weight."""
        info = self.layout_info(index)
        scan = info["scan"]
        if not info["attention"] and not scan:
            return _message_figure(f"this {info['arch']} model has no attention: there are no attention "
                                   f"patterns to show (every other view works)")
        heads = info["n_heads"] if info["attention"] else 1
        if not all(isinstance(v, int) and 0 <= v < top for v, top in ((layer, info["n_layers"]), (head, heads))):
            raise UserError(f"layer {layer!r}, head {head!r} is not in this model ({info['n_layers']} layers of "
                            f"{heads} heads)")
        pattern = self.patterns(index, tokens, seed, choices)[layer][head]
        labels = self.names(tokens)
        title = (f"effective attention of the selective scan, layer {layer}<br><sup>mean |M| over channels, rows "
                 f"normalised</sup>" if scan else f"attention pattern, layer {layer}, head {head}")
        fig = explore_attention.pattern_figure(pattern, labels, title, log)
        batch = self.batch(tokens, seed)
        for kind, symbol, color, label in (("eliminated", "x-thin", "#d62728", "key names an eliminated hypothesis"),
                                           ("feasible", "circle-open", "#2ca02c", "key names a feasible hypothesis")):
            marks = self.hypothesis_marks(batch, kind)
            fig.add_scatter(x=[labels[k] for _, k in marks], y=[labels[q] for q, _ in marks], mode="markers",
                            name=label, hoverinfo="skip",
                            marker=dict(symbol=symbol, size=6, color=color, opacity=0.8, line=dict(width=1.5, color=color)))
        fig.update_layout(showlegend=True, legend=dict(orientation="h", x=0, xanchor="left", y=0, yanchor="bottom",
                                                       xref="container", yref="container"))
        fig.update_layout(margin=dict(b=fig.layout.margin.b + 40))
        return fig

    def heads_view(self, index: int, tokens: list, seed: int | None, choices: list[str], layer: int,
                   log: bool = False) -> go.Figure:
        """Every head of ``layer`` side by side (a selective scan: every layer's effective attention)."""
        info = self.layout_info(index)
        patterns = self.patterns(index, tokens, seed, choices)
        if not isinstance(layer, int) or not 0 <= layer < info["n_layers"]:
            raise UserError(f"layer {layer!r} is not in this model ({info['n_layers']} layers)")
        labels = self.names(tokens)
        if info["scan"]:
            return explore_attention.heads_figure(torch.stack([p[0] for p in patterns]), labels,
                                                  "effective attention of every layer (click one to see it above)",
                                                  log, names=[f"layer {l}" for l in range(len(patterns))])
        return explore_attention.heads_figure(patterns[layer], labels, f"every head of layer {layer} (click one to "
                                              f"see it named token by token)", log)

    def ablation_map_view(self, index: int, kind: str) -> go.Figure:
        """head-ablation's heat map of ``kind`` ("zero" or "mean"): every head ablated in turn on the held-out
        sequences, computed by the analysis itself once per checkpoint (both kinds at once)."""
        from analyses import head_ablation

        info = self.layout_info(index)
        if not info["attention"]:
            return _message_figure(f"this {info['arch']} model has no attention heads to ablate")
        if kind not in head_ablation.KINDS:
            raise UserError(f"ablation kind {kind!r}; the map has {' and '.join(head_ablation.KINDS)}")
        key = ("head-ablation", index)
        if key not in self._cache:
            with self.lock, self.waits.on(f"head-ablation: each of {info['n_layers'] * info['n_heads']} heads "
                                          f"zeroed and mean-ablated in turn on {self.n_calibration} sequences"):
                result = head_ablation.compute(self.model(index), n=self.n_calibration, seed=self.seed)
                for fig in result.figures.values():
                    style.apply(fig, subject=self.task.name, replaces=self.task.name)
                    fig.update_layout(width=None)
                self._cache[key] = result.figures
        return self._cache[key][f"{kind}-ablation"]

    def hypothesis_marks(self, batch, kind: str) -> list[tuple[int, int]]:
        """(query, key) cells where the key token names a hypothesis the posterior at the query keeps
        (feasible, p > 0) or rules out (eliminated, p = 0); bijection: revealed values are eliminated."""
        try:
            _, ids = hypothesis_group(self.task)
        except AnalysisError:  # the task has no tokens naming its answer classes
            return []
        tokens = batch.tokens[0]
        where = {int(t): c for c, t in enumerate(ids.tolist())}
        keys = [(k, where[int(t)]) for k, t in enumerate(tokens.tolist()) if int(t) in where]
        marks = []
        for q in batch.query_mask[0].nonzero().flatten().tolist():
            for k, c in keys:
                if k <= q and (batch.posterior[0, q, c] > 0) == (kind == "feasible"):
                    marks.append((q, k))
        return marks

    def geometry_view(self, index: int, choices: list[str], stream: str, colour: str = "entropy") -> go.Figure:
        """value-manifold's PCA figure of one stream, coloured by Bayes entropy, by token position
        (``colour="position"``) or by the task's true latent class (``"latent"``), cached per checkpoint and
        ablation; a figure is styled the first time it is shown (value-manifold draws several)."""
        key = ("geometry", index, tuple(sorted(choices or [])))
        if key not in self._cache:
            with self.ablated(index, choices) as model, self.waits.on(
                    f"geometry: the PCA of every layer on {self.n_geometry} sequences"):
                self._cache[key] = (value_manifold.measure(model, n=self.n_geometry, seed=self.seed, max_points=1500,
                                                           readout=False).figures, set())
        figures, styled = self._cache[key]
        name = f"{stream.replace('_', '-')}-pca"
        if colour == "latent" and self.task.query_latent is not None:
            name += f"-by-{self.task.query_latent}"
        elif colour == "position" and f"{name}-by-position" in figures:
            name += "-by-position"
        if name not in figures:
            return _message_figure("this model has no attention output to look at; see the residual stream")
        if name not in styled:
            style.apply(figures[name], subject=self.task.name)  # as the analysis's own run would
            figures[name].update_layout(width=None, height=460, margin=dict(t=80))  # the page's size, not a PDF's
            styled.add(name)
        return figures[name]  # cached as shown: views never change a figure they return


def _plain(value):
    """Tensors and numpy numbers as JSON-ready lists and floats, recursively."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return value.item() if hasattr(value, "item") else value


REFUSED = (UserError, AnalysisError, ConfigError)  # inputs a view refuses with a message, not a traceback


def page_rules(info: dict) -> dict:
    """The request rules of the attention views' controls, the status line and the head-ablation map (the
    rest are ``requests.explorer_rules``)."""
    from .requests import MAX_CLICKS, Refused, integer, one_of

    def click(value, within: int | None = None):
        points = value.get("points") if isinstance(value, dict) else None
        point = points[0] if isinstance(points, list) and len(points) == 1 and isinstance(points[0], dict) else None
        if value is None:
            return
        if point is None or not all(isinstance(point.get(k), str) and len(point[k]) < 200 for k in ("x", "y")):
            raise Refused("a click on a map is one point with its row and column")
        if within is not None:
            integer(0, within)(point.get("curveNumber"))
    heads = info["n_layers"] if info["scan"] else max(info["n_heads"], 1)
    clicks = integer(0, MAX_CLICKS, optional=True)
    return {("scale", "value"): one_of("linear", "log"), ("tick", "n_intervals"): clicks,
            ("heads", "clickData"): lambda value: click(value, heads), ("ablation-map", "clickData"): click,
            ("ablation-map-run", "n_clicks"): clicks}


def _message_figure(text: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=15))
    return style.use_template(fig.update_layout(xaxis_visible=False, yaxis_visible=False, height=240))


def _panel(title: str, *children, **style):
    return html.Div([html.H3(title, style=dict(margin="4px 0")), *children],
                    style=dict(border="1px solid #ddd", borderRadius="6px", padding="8px", margin="6px", **style))


def build_app(explorer: Explorer):
    """The Dash app: controls on top and left, views on the right; every view follows every control."""
    last = len(explorer.checkpoints) - 1
    info = explorer.layout_info(last)
    first = explorer.sample(0)
    app = Dash(__name__, title=f"interp explore: {explorer.source.name}")
    patching = explore_patching.WindTunnelPairs(explorer)  # the panel's pairs: the sequence shown, corrupted

    head_options = [{"label": f"L{l} H{h}", "value": f"H{l}.{h}"}
                    for l in range(info["n_layers"]) for h in range(info["n_heads"])]
    block_options = [{"label": f"block {l}", "value": f"B{l}"} for l in info["blocks"]]
    inline = dict(display="inline-block", marginRight="10px")
    steps = explorer.steps
    controls = html.Div([
        html.Div([
            html.Label("seed "), dcc.Input(id="seed", type="number", value=0, min=0, step=1, style=dict(width="80px")),
            html.Button("sample", id="sample", n_clicks=0, style=dict(marginLeft="6px")),
            html.Span(" or edit the tokens and ", style=dict(marginLeft="12px")),
            html.Button("apply", id="apply", n_clicks=0),
            html.Span(id="message", style=dict(color="#b00", marginLeft="12px")),
            html.Button("download numbers (JSON)", id="download-button", n_clicks=0, style=dict(float="right")),
            dcc.Download(id="download"),
        ]),
        dcc.Textarea(id="tokens-text", value=" ".join(explorer.task.token_names(torch.tensor(first))),
                     style=dict(width="100%", height="44px", fontFamily="monospace", marginTop="6px")),
        html.Div([html.Label(f"checkpoint ({len(steps)}): "), html.Span(id="step-label")],
                 style=dict(marginTop="6px")),
        html.Div(dcc.Slider(id="step", min=0, max=last, step=None, value=last,
                            marks={i: str(s) for i, s in enumerate(steps)}),
                 style=dict(display="block" if len(steps) > 1 else "none")),
        html.Details([html.Summary("the same numbers from Python or the terminal"),
                      html.Pre(id="code", style=dict(background="#f6f6f6", padding="6px", fontSize="12px",
                                                     whiteSpace="pre-wrap"))], style=dict(marginTop="6px")),
    ])
    ablation = _panel(
        "ablate",
        html.Div("heads: output z set to" if head_options else f"no attention heads in this {info['arch']} model"),
        dcc.RadioItems(id="ablate-mode", options=[{"label": "0", "value": "zero"},
                                                  {"label": "its mean", "value": "mean"}], value="zero", inline=True,
                       inputStyle=dict(marginLeft="6px", marginRight="2px"),
                       style=dict(display="block" if head_options else "none")),
        dcc.Checklist(id="ablate-heads", options=head_options, value=[], inputStyle=dict(marginRight="3px"),
                      labelStyle=dict(display="inline-block", width="70px")),
        html.Div("blocks (skipped: output = input)", style=dict(marginTop="8px")),
        dcc.Checklist(id="ablate-blocks", options=block_options, value=[], inputStyle=dict(marginRight="3px"),
                      labelStyle=dict(display="block")),
        html.Div(id="calibration-summary", style=dict(marginTop="10px", fontSize="13px")),
    )
    # Each graph fills a box of a fixed height and the full width of its panel; until its first figure
    # arrives it says so (not empty axes), and a spinner shows while a view is recomputed.
    graph = lambda id_, height: dcc.Loading(  # noqa: E731
        dcc.Graph(id=id_, figure=_message_figure("computing…"), config=dict(displaylogo=False), responsive=True,
                  style=dict(height=f"{height}px")), type="dot", delay_show=400)
    # a figure that sets its own size (the attention views grow with the sequence: every token is named)
    sized_graph = lambda id_: dcc.Loading(dcc.Graph(  # noqa: E731
        id=id_, figure=_message_figure("computing…"), config=dict(displaylogo=False)), type="dot", delay_show=400)
    n_queries = int(held_out_batch(explorer.task, 1, 0).query_mask.sum())
    ablation_map = html.Details([
        html.Summary("every head ablated in turn (head-ablation on the held-out sequences)"),
        html.Div("A click on a head's cell ablates that head alone (as the map's 0 or mean) in every view, its "
                 "answers beside Bayes's in the posterior view.", style=dict(fontSize="13px", margin="4px 0")),
        html.Button("compute the map", id="ablation-map-run", n_clicks=0),
        graph("ablation-map", 360)], style=dict(display="block" if info["attention"] else "none", marginTop="6px"))
    radios = lambda id_, n, label: html.Div([html.Label(label), dcc.RadioItems(  # noqa: E731
        id=id_, options=[{"label": str(i), "value": i} for i in range(n)], value=0, inline=True,
        inputStyle=dict(marginLeft="8px", marginRight="2px"))], style=inline)
    views = html.Div([
        html.Div([
            _panel("posterior", graph("posterior", min(max(160 + 18 * n_queries, 300), 800)), graph("entropy", 320),
                   graph("gap", 320), minWidth="0"),
            _panel("held-out calibration", graph("calibration", 320), ablation_map,
                   html.H3("this sequence", style=dict(margin="4px 0")), graph("lens", 200 + 30 * info["n_layers"]),
                   graph("latent", 360), minWidth="0"),
        ], style=dict(display="grid", gridTemplateColumns="1fr 1fr", alignItems="start")),
        # a model without attention (LSTM, MLP) has no attention panel at all
        _panel("attention", html.Div([
            radios("layer", info["n_layers"], "layer"),
            html.Div(radios("head", max(info["n_heads"], 1), "head"), style=dict(
                display="inline-block" if info["attention"] else "none")),
            html.Div([html.Label("colour "), dcc.RadioItems(
                id="scale", options=[{"label": "linear", "value": "linear"}, {"label": "log", "value": "log"}],
                value="linear", inline=True, inputStyle=dict(marginLeft="8px", marginRight="2px"))], style=inline)]),
            html.Div(sized_graph("attention"), style=dict(overflowX="auto")),
            sized_graph("heads"), minWidth="0", display="block" if info["attention"] or info["scan"] else "none"),
        _panel("geometry", dcc.RadioItems(id="stream", inline=True, value="residual",
                                          options=[{"label": "residual stream", "value": "residual"}] + (
                                              [{"label": "attention output (value vectors)", "value": "attention_out"}]
                                              if info["attention_out"] else []),
                                          inputStyle=dict(marginLeft="8px", marginRight="2px")),
               dcc.RadioItems(id="colour", inline=True, value="entropy",
                              options=[{"label": "coloured by Bayes entropy", "value": "entropy"},
                                       {"label": "by token position", "value": "position"}] + (
                                  [{"label": f"by the true {explorer.task.query_latent}", "value": "latent"}]
                                  if explorer.task.query_latent else []),
                              inputStyle=dict(marginLeft="8px", marginRight="2px")),
               graph("geometry", 140 + 330 * math.ceil(info["n_layers"] / 3))),
        explore_patching.panel(patching),
    ], style=dict(minWidth="0"))
    app.layout = html.Div([
        html.H2(f"{explorer.source.name}: {explorer.task!r}, {info['arch']}", style=dict(margin="4px 6px")),
        *status_line(),  # what a slow view is waiting on (held-out calibration, a kernel build)
        dcc.Store(id="sequence", data=dict(tokens=first, seed=0)),
        _panel("sequence", controls),
        html.Div([ablation, views], style=dict(display="grid", gridTemplateColumns="250px minmax(0, 1fr)",
                                                alignItems="start")),
    ], style=dict(fontFamily="sans-serif", fontSize="14px"))

    @app.callback(Output("sequence", "data"), Output("tokens-text", "value"), Output("message", "children"),
                  Input("sample", "n_clicks"), Input("apply", "n_clicks"), State("seed", "value"),
                  State("tokens-text", "value"), prevent_initial_call=True)
    def choose_sequence(_sample, _apply, seed, text):
        try:
            if ctx.triggered_id == "sample":
                seed = seed or 0
                if not is_seed(seed):
                    raise UserError(f"the seed must be {SEED_RANGE}, got {seed!r}")
                tokens = explorer.sample(seed)
                return (dict(tokens=tokens, seed=seed),
                        " ".join(explorer.task.token_names(torch.tensor(tokens))), "")
            tokens = explorer.typed(text or "")
            return dict(tokens=tokens, seed=None), no_update, ""
        except UserError as err:
            return no_update, no_update, str(err)

    ablations = [Input("ablate-heads", "value"), Input("ablate-blocks", "value"), Input("ablate-mode", "value")]

    @app.callback(Output("posterior", "figure"), Output("entropy", "figure"), Output("gap", "figure"),
                  Output("calibration", "figure"), Output("lens", "figure"), Output("latent", "figure"),
                  Output("calibration-summary", "children"),
                  Output("step-label", "children"),
                  Input("step", "value"), Input("sequence", "data"), *ablations)
    def posterior(index, sequence, heads, blocks, mode):
        try:
            v = explorer.posterior_views(index, sequence["tokens"], sequence["seed"],
                                           chosen_ablations(heads, blocks, mode))
        except REFUSED as err:  # e.g. the slider onto a corrupt earlier checkpoint: said in the views
            return *[_message_figure(str(err))] * 6, str(err), no_update
        return (v["posterior"], v["entropy"], v["gap"], v["calibration"], v["lens"], v["latent"], v["summary"],
                f"step {steps[index]}")

    @app.callback(Output("code", "children"), Input("step", "value"), Input("sequence", "data"), *ablations)
    def code(index, sequence, heads, blocks, mode):
        try:
            return explorer.equivalent_code(index, sequence["tokens"], sequence["seed"],
                                            chosen_ablations(heads, blocks, mode))
        except REFUSED as err:
            return str(err)

    @app.callback(Output("download", "data"), Output("message", "children", allow_duplicate=True),
                  Input("download-button", "n_clicks"), State("step", "value"), State("sequence", "data"),
                  *[State(i.component_id, i.component_property) for i in ablations], prevent_initial_call=True)
    def download(_clicks, index, sequence, heads, blocks, mode):
        try:
            numbers = explorer.numbers(index, sequence["tokens"], sequence["seed"],
                                       chosen_ablations(heads, blocks, mode))
        except REFUSED as err:
            return no_update, str(err)
        name = f"{explorer.source.name}-step{explorer.steps[index]}-numbers.json"
        return dcc.send_string(json.dumps(numbers, indent=1), name), ""

    @app.callback(Output("attention", "figure"), Input("step", "value"), Input("sequence", "data"), *ablations,
                  Input("layer", "value"), Input("head", "value"), Input("scale", "value"))
    def attention(index, sequence, heads, blocks, mode, layer, head, scale):
        try:
            return explorer.attention_view(index, sequence["tokens"], sequence["seed"],
                                           chosen_ablations(heads, blocks, mode), layer, head, scale == "log")
        except REFUSED as err:
            return _message_figure(str(err))

    @app.callback(Output("heads", "figure"), Input("step", "value"), Input("sequence", "data"), *ablations,
                  Input("layer", "value"), Input("scale", "value"))
    def every_head(index, sequence, heads, blocks, mode, layer, scale):
        try:
            return explorer.heads_view(index, sequence["tokens"], sequence["seed"],
                                       chosen_ablations(heads, blocks, mode), layer, scale == "log")
        except REFUSED as err:
            return _message_figure(str(err))

    @app.callback(Output("layer", "value"), Output("head", "value"), Input("heads", "clickData"),
                  prevent_initial_call=True)
    def pick_head(click):  # a click on one head of the grid (a layer, for a selective scan) shows it above
        if not click:
            return no_update, no_update
        picked = click["points"][0]["curveNumber"]
        return (picked, no_update) if info["scan"] else (no_update, picked)

    register_status(app, explorer.waits)

    @app.callback(Output("ablation-map", "figure"), Input("ablation-map-run", "n_clicks"), Input("ablate-mode", "value"),
                  State("step", "value"), prevent_initial_call=True)
    def ablation_map_view(clicks, mode, index):
        if not clicks:
            return no_update
        try:
            return explorer.ablation_map_view(index, mode)
        except REFUSED as err:
            return _message_figure(str(err))

    @app.callback(Output("ablate-heads", "value"), Output("ablate-blocks", "value"),
                  Input("ablation-map", "clickData"), prevent_initial_call=True)
    def ablate_clicked(click):  # that head alone, ablated as the map shows it (the mode radio stays)
        cell = re.fullmatch(r"L(\d+)", str(click["points"][0].get("y"))) if click else None
        head = re.fullmatch(r"H(\d+)", str(click["points"][0].get("x"))) if click else None
        if not (cell and head):
            return no_update, no_update
        return [f"H{cell[1]}.{head[1]}"], []

    @app.callback(Output("geometry", "figure"), Input("step", "value"), *ablations, Input("stream", "value"),
                  Input("colour", "value"))
    def geometry(index, heads, blocks, mode, stream, colour):
        try:
            return explorer.geometry_view(index, chosen_ablations(heads, blocks, mode), stream, colour)
        except REFUSED as err:
            return _message_figure(str(err))

    explore_patching.register(app, patching)
    guard(app, explorer_rules(explorer, info) | explore_patching.rules(patching) | page_rules(info))  # every request checked before a view runs (interp/requests.py)
    return app


def print_numbers(source, seed: int | None, tokens: str | None, ablate: str | None) -> None:
    """``interp explore --numbers``: one view's numbers as JSON on stdout, the same the page's download holds
    (the last checkpoint of a run folder; the sequence of ``seed`` or the typed ``tokens``; ``ablate`` the
    ablations as the page names them, comma-separated)."""
    if (seed is None) == (tokens is None):
        raise UserError("--numbers needs the sequence: --seed N (a held-out sequence) or --tokens '...', one of them")
    if seed is not None and not is_seed(seed):
        raise UserError(f"the seed must be {SEED_RANGE}, got {seed!r}")
    explorer = Explorer(source)
    index = len(explorer.checkpoints) - 1
    ids = explorer.sample(seed) if seed is not None else explorer.typed(tokens)
    choices = [c.strip() for c in (ablate or "").split(",") if c.strip()]
    click.echo(json.dumps(explorer.numbers(index, ids, seed, choices), indent=1))


def children() -> list[int]:
    """The processes this one started (a kernel build's ninja), from /proc; none where there is no /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def stop_at_once(_signum, _frame) -> None:
    """Ctrl-C: the server ends now, whatever a view or a kernel build is doing, and so do the processes it
    started (a build's ninja stops its compilers); nothing is left half-written: a kernel build publishes
    its folder atomically, and the explorer writes no other file."""
    for pid in children():
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    sys.stderr.write("\ninterp: explorer stopped\n")
    sys.stderr.flush()
    os._exit(130)


def prepare_in_background(explorer: Explorer) -> threading.Thread:
    """The model's warm-up (a first build of its kernels, about a minute, printing its own progress) and then
    the first sequence's views, in a thread that holds the explorer's lock from before this returns: the
    server answers meanwhile, its views wait for the lock, and the page's status line says what they wait for."""
    index = len(explorer.checkpoints) - 1
    model = explorer.model(index)
    held = threading.Event()

    def prepare():
        with explorer.lock:
            held.set()
            warm_up = getattr(model, "warm_up", None)
            if warm_up is not None:
                with explorer.waits.on(f"preparing the {getattr(model, 'arch', 'model')} model (a first build of its "
                                       f"kernels takes about a minute)", terminal=False):
                    warm_up()
            try:  # what the page asks for first: seed 0, nothing ablated
                tokens = explorer.sample(0)
                explorer.posterior_views(index, tokens, 0, [])
                explorer.geometry_view(index, [], "residual")
                info = explorer.layout_info(index)
                if info["attention"] or info["scan"]:
                    explorer.patterns(index, tokens, 0, [])
            except REFUSED:
                pass  # the page's own request says why

    thread = threading.Thread(target=prepare, daemon=True)
    thread.start()
    held.wait()
    return thread


def serve(source, host: str = "127.0.0.1", port: int = 8050) -> None:
    """Check the port, load the model(s), then serve until interrupted; a model's warm-up (a first kernel build,
    about a minute) runs while the server is up, said in the page and on the terminal."""
    check_port(host, port)
    signal.signal(signal.SIGINT, stop_at_once)
    explorer = Explorer(source)
    app = build_app(explorer)
    prepare_in_background(explorer)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request on the terminal
    click.echo(f"explorer for {source} at http://{host}:{port}/ (Ctrl+C stops it)", err=True)
    app.run(host=host, port=port, debug=False)
