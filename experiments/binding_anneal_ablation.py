"""What the paper's Mamba's anneal depends on: the anneal that took it past the bar (1.6e-3 to zero over
3,000 steps from its constant-rate step 10,000: 84.2% -> 92.9% on full 64-pair tables) run again from the
same checkpoint with one setting changed in each, and with the rate held instead of annealed
(``ABLATE=1 bash experiments/binding-lineage-runs.sh``), measured on the paper's recall format.

Reads ``<run>/content-addressing-step-N.json`` (``interp run content-addressing --sizes 1,4,16,64 --queries 3
--n 1024``: the same 1,024 held-out sequences for every model) in figures/readme/equal-footing/binding-dense-mix/
and writes ``ablation.pdf``, ``ablation.png`` and ``ablation.json`` there (the plotted numbers, and each
setting's difference from the shipped anneal):

    python experiments/binding_anneal_ablation.py
"""
import json
import math
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analyses import style
from analyses.budget import training_tokens
from interp.export import PNG_WIDTH, figure_image, figure_pdf
from interp.files import RunFolder, atomic_write_bytes, atomic_write_json

HERE = Path(__file__).resolve().parent.parent / "figures" / "readme" / "equal-footing" / "binding-dense-mix"
START = ("mamba-noshift-gpu2-cpu-lr1.6e-3", 10000)  # the checkpoint every anneal starts from
SHIPPED = "mamba-noshift-anneal"
SETTINGS = {SHIPPED: ("as shipped (mamba-ssm's decay and eps, the mixture, dense answers, seed 1)", "as shipped", "#e377c2"),
            "mamba-noshift-anneal-seed2": ("another seed: new batches", "another seed", "#7f7f7f"),
            "mamba-noshift-anneal-decay": ("weight decay on A_log and D, torch's RMSNorm eps", "decay on A_log, D", "#1f77b4"),
            "mamba-noshift-anneal-sparse": ("the paper's format alone: 3 answers per sequence", "3 answers", "#ff7f0e"),
            "mamba-noshift-anneal-dense64": ("dense full tables alone: no smaller tables", "full tables alone", "#2ca02c"),
            "mamba-noshift-anneal-lr3.2e-4": ("annealed from 3.2e-4, a fifth of the peak", "from 3.2e-4", "#9467bd"),
            # the rate held at 1.6e-3 instead (a 100,000-step schedule stopped at step 3,000): the same batches
            "mamba-noshift-const-control": ("not annealed: the rate held at 1.6e-3", "not annealed", "#17becf")}
Z95 = 1.959964


def full_tables(path: Path) -> dict:
    metrics = json.loads(path.read_text())["metrics"]
    return dict(accuracy=metrics["accuracy_full_table"], interval=metrics["accuracy_full_table_interval"],
                per_slot=metrics["per_slot_accuracy"], per_slot_min=metrics["per_slot_min"],
                moved_pair_min=metrics["moved_pair_min"])


def measured(run: str) -> list[dict]:
    """The anneal's points, its shared starting point first (step 0)."""
    points = [dict(step=0, **full_tables(HERE / START[0] / f"content-addressing-step-{START[1]}.json"))]
    for path in (HERE / run).glob("content-addressing-step-*.json"):
        points.append(dict(step=json.loads(path.read_text())["step"], **full_tables(path)))
    return sorted(points, key=lambda p: p["step"])


def difference(end: dict, shipped_end: dict) -> dict:
    """End accuracy minus the shipped anneal's, with a normal 95% interval from the two bootstrap intervals
    taken as independent: conservative, since both are measured on the same held-out sequences."""
    se = math.hypot(*((p["interval"][1] - p["interval"][0]) / (2 * Z95) for p in (end, shipped_end)))
    delta = end["accuracy"] - shipped_end["accuracy"]
    return dict(difference=delta, interval=[delta - Z95 * se, delta + Z95 * se])


def figure(data: list[dict]) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.16, column_widths=[0.55, 0.45],
                        subplot_titles=("64 pairs, during the anneal", "64 pairs, at its end"))
    for d in data:
        name, short, colour = SETTINGS[d["run"]]
        points = d["measured"]
        y = [p["accuracy"] for p in points]
        fig.add_scatter(x=[p["step"] for p in points], y=y, mode="lines+markers", name=name, legendgroup=d["run"],
                        line=dict(color=colour), error_y=style.error_bars(y, [p["interval"] for p in points]),
                        row=1, col=1)
        end = d["end"]
        fig.add_scatter(x=[end["accuracy"]], y=[short], mode="markers", name=name, legendgroup=d["run"],
                        showlegend=False, marker=dict(color=colour, size=10),
                        error_x=style.error_bars([end["accuracy"]], [end["interval"]]), row=1, col=2)
    fig.add_hline(y=0.9, line=dict(color="grey", dash="dash", width=1), row=1, col=1)
    fig.add_vline(x=0.9, line=dict(color="grey", dash="dash", width=1), row=1, col=2)
    fig.update_xaxes(title_text="step of the anneal (64 sequences each)", row=1, col=1)
    fig.update_xaxes(title_text="accuracy at step 3,000", tickformat=".0%", row=1, col=2)
    fig.update_yaxes(tickformat=".0%", title_text="accuracy", row=1, col=1)
    fig.update_yaxes(autorange="reversed", row=1, col=2)  # the shipped one on top, in the legend's order
    fig.update_layout(title="The paper's Mamba: what its anneal depends on<br><sup>the same 3,000 steps from one "
                            "checkpoint (step 0), one setting changed; bars: 95% bootstrap intervals over 1,024 "
                            "held-out sequences (3 queries each); grey at the bar, 90%</sup>",
                      width=PNG_WIDTH, height=560)
    fig = style.apply(fig)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0))
    return fig


def main() -> None:
    data = [dict(run=run, setting=SETTINGS[run][0], measured=measured(run)) for run in SETTINGS
            if list((HERE / run).glob("content-addressing-*.json"))]
    shipped_end = next(d for d in data if d["run"] == SHIPPED)["measured"][-1]
    for d in data:
        d["end"] = d["measured"][-1]
        # the anneal's own training tokens to its last measurement (a step takes 64 sequences of any length)
        d["tokens"] = training_tokens(RunFolder(HERE / d["run"]).read_record(), d["end"]["step"])
        d["against_shipped"] = None if d["run"] == SHIPPED else difference(d["end"], shipped_end)
    fig = figure(data)
    atomic_write_bytes(HERE / "ablation.pdf", figure_pdf(fig))
    atomic_write_bytes(HERE / "ablation.png", figure_image(fig, "png"))
    atomic_write_json(HERE / "ablation.json", dict(start=dict(run=START[0], step=START[1]), settings=data))
    for d in data:
        end, diff = d["end"], d["against_shipped"]
        against = diff and f", {diff['difference']:+.1%} ({diff['interval'][0]:+.1%} to {diff['interval'][1]:+.1%}) against the shipped"
        print(f"{d['run']}: step {end['step']}: {end['accuracy']:.1%} ({end['interval'][0]:.1%}-{end['interval'][1]:.1%})"
              + (against or ""))


if __name__ == "__main__":
    main()
