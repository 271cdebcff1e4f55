"""The numbers behind the wind-tunnel explorer's views: the download (JSON) and the Python and ``interp explore
--numbers`` command that give the same numbers without the page (in the sequence panel: places "sequence row" and
"sequence").
"""
from __future__ import annotations

import json
import shlex

import torch
from dash import Input, Output, State, dcc, html, no_update

from analyses.calibration import ratio_interval

from .common import CLICKS, REFUSED, plain
from .computed import held_out_calibration, held_out_sums, sequence_numbers
from .hooks import CONTROLS, chosen_ablations
from .page import View


def numbers(state, index: int, tokens: list, seed: int | None, choices: list[str]) -> dict:
    """The numbers behind the current views, JSON-ready, with the equivalent Python and CLI calls."""
    seq = sequence_numbers(state, index, tokens, seed, choices)
    batch, rows = seq["batch"], seq["batch"].query_mask[0].nonzero().flatten().tolist()
    out = dict(checkpoint=str(state.checkpoints[index][1]), step=state.steps[index], task=state.task.config(),
               tokens=list(tokens), token_names=state.task.token_names(torch.tensor(tokens)), seed=seed,
               ablations=sorted(choices), query_positions=rows,
               this_sequence={k: v for k, v in seq["curves"].items() if k != "per_position"},
               per_position=seq["curves"]["per_position"],
               held_out_calibration=dict(n=state.n_calibration, seed=state.seed, **{
                   k: v for k, v in held_out_calibration(state, index, choices).items() if k != "per_position"}))
    if choices:
        out["held_out_calibration_intact"] = {k: v for k, v in held_out_calibration(state, index, []).items()
                                              if k != "per_position"}
        # the paired 95% interval of MAE ablated / intact over the same sequences (as head-ablation reports it)
        out["held_out_mae_ratio_interval"] = ratio_interval(held_out_sums(state, index, choices),
                                                            held_out_sums(state, index, []))
    if seq["probs"] is not None:
        out["answer_classes"] = state.class_names()
        out["model_distribution"] = seq["probs"][rows].tolist()
        out["bayes_posterior"] = batch.posterior[0, rows].tolist()
        out["logit_lens"] = [p[0, rows].tolist() for p in seq["lens"]]
    else:
        out["model_predictive_mean"], out["model_predictive_var"] = (t[rows].tolist() for t in seq["predictive"])
        out["bayes_predictive_mean"] = batch.posterior_mean[0, rows].tolist()
        out["bayes_predictive_var"] = batch.posterior_var[0, rows].tolist()
    out["python"] = equivalent_code(state, index, tokens, seed, choices)
    return plain(out)


def equivalent_code(state, index: int, tokens: list, seed: int | None, choices: list[str]) -> str:
    """The Python (and CLI) that computes this view's numbers without the explorer."""
    ckpt = str(state.checkpoints[index][1])
    sequence = (f"held_out_batch(model.task, 1, {seed})" if seed is not None else
                f"model.task.batch_from_tokens(torch.tensor([{list(tokens)}]))")
    discrete = not state.task.continuous
    lines = ["import torch", "import interp",
             "from analyses.base import answer_probs, held_out_batch" if discrete else
             "from analyses.base import held_out_batch",
             "from analyses.calibration import measure",
             "from interp.explore import ablation_hooks" if choices else None,
             f"model = interp.load({ckpt!r})",
             f"batch = {sequence}"]
    body = ["numbers = measure(model, batch)  # this sequence; ['per_position'] holds the entropy curves",
            f"held_out = measure(model, held_out_batch(model.task, {state.n_calibration}, {state.seed}), "
            f"intervals=True)"
            f"  # held-out calibration, ['intervals'] its 95% bootstrap intervals over the sequences"]
    if discrete:
        body.append("probs = answer_probs(model, batch.tokens)[0]  # the answer distribution at every position")
    if choices:
        means = any(c.startswith("M") for c in choices)
        if means:
            lines += ["from analyses.activations import mean_z",
                      f"means = mean_z(model, held_out_batch(model.task, {state.n_calibration}, {state.seed}).tokens)"]
        lines += [f"with model.hooks(fwd_hooks=ablation_hooks({sorted(choices)!r}, model"
                  f"{', means=lambda: means' if means else ''})):"] + ["    " + line for line in body]
    else:
        lines += body
    info = state.layout_info(index)
    what = (f"--seed {seed}" if seed is not None else
            "--tokens " + shlex.quote(" ".join(state.task.token_names(torch.tensor(tokens)))))
    ablate = f" --ablate {','.join(sorted(choices))}" if choices else ""
    lines += ["", "# these numbers (and the download's), from the terminal:",
              f"#   interp explore --ckpt {shlex.quote(ckpt)} --numbers {what}{ablate}",
              "# held-out calibration of the intact model:",
              f"#   interp run calibration --ckpt {shlex.quote(ckpt)} --n {state.n_calibration} --seed {state.seed}"]
    if info["attention"]:
        lines.append(f"#   interp run head-ablation --ckpt {shlex.quote(ckpt)} --n {state.n_calibration} --seed "
                     f"{state.seed}   (every head, one at a time: the page's map)")
    if info["blocks"]:
        lines.append(f"#   interp run layer-ablation --ckpt {shlex.quote(ckpt)}   (every block, one at a time)")
    return "\n".join(line for line in lines if line is not None)


def download_part(state, at) -> list:
    return [html.Button("download numbers (JSON)", id="download-button", n_clicks=0, style=dict(float="right")),
            dcc.Download(id="download")]


def code_part(state, at) -> html.Details:
    return html.Details([html.Summary("the same numbers from Python or the terminal"),
                         html.Pre(id="code", style=dict(background="#f6f6f6", padding="6px", fontSize="12px",
                                                        whiteSpace="pre-wrap"))], style=dict(marginTop="6px"))


def register(app, state) -> None:
    """The Python panel's callback and the download's."""

    @app.callback(Output("code", "children"), Input("step", "value"), Input("sequence", "data"), *CONTROLS)
    def code(index, sequence, heads, blocks, mode):
        try:
            return equivalent_code(state, index, sequence["tokens"], sequence["seed"],
                                   chosen_ablations(heads, blocks, mode))
        except REFUSED as err:
            return str(err)

    @app.callback(Output("download", "data"), Output("message", "children", allow_duplicate=True),
                  Input("download-button", "n_clicks"), State("step", "value"), State("sequence", "data"),
                  *[State(i.component_id, i.component_property) for i in CONTROLS], prevent_initial_call=True)
    def download(_clicks, index, sequence, heads, blocks, mode):
        try:
            shown = numbers(state, index, sequence["tokens"], sequence["seed"], chosen_ablations(heads, blocks, mode))
        except REFUSED as err:
            return no_update, str(err)
        name = f"{state.source.name}-step{state.steps[index]}-numbers.json"
        return dcc.send_string(json.dumps(shown, indent=1), name), ""


VIEW = View("numbers", {"sequence row": download_part, "sequence": code_part}, register,
            lambda state: {("download-button", "n_clicks"): CLICKS})
