"""Binding's long runs as curves: content-addressing accuracy on the paper's recall format against
training sequences, for the plain transformer and Mamba trained on dense answers over a mixture of
table sizes, with the chance level 1/n beside every table size, and their training loss.

Reads what the runs and their measurements left in figures/readme/equal-footing/binding-dense-mix/
(``<run>/content-addressing-step-N.json``
from ``interp run content-addressing --sizes 1,4,16,64 --queries 3 --n 1024``, ``<run>/metrics.jsonl``
from ``interp train``) and writes ``curve.pdf``, ``curve.png`` and ``curve.json`` there (the plotted numbers).
The figure is the lineages' history, every run in one picture:

    python experiments/binding_lineage_curve.py
"""
import json
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analyses import style
from interp.export import PNG_WIDTH, figure_image, figure_pdf
from interp.files import atomic_write_bytes, atomic_write_json

HERE = Path(__file__).resolve().parent.parent / "figures" / "readme" / "equal-footing" / "binding-dense-mix"
RUNS = {"mamba": ("Mamba", "#636efa"), "transformer-plain": ("plain transformer", "#ef553b"),
        # the same recipe started from the learning-rate probe's Mamba (../binding-lr-probe/ beside HERE, 1.28M sequences
        # of 8-pair tables on a GPU before this run's first): its sequences count from its own start
        "mamba-from8": ("Mamba from the probe's model", "#00cc96"),
        # continued on an H100 at batch 256 from its step 5,000 (binding-gpu-mixture-and-transformer-recipes.sh), at its rate and at twice it, and the
        # first of those continued on the CPU again: their sequences count on from where they started
        "mamba-from8-gpu": ("Mamba from the probe's model, on a GPU", "#00cc96"),
        "mamba-from8-gpu-lr3.2e-3": ("the same at lr 3.2e-3", "#b6e880"),
        "mamba-from8-gpu-cpu": ("Mamba from the probe's model, on the CPU again", "#00cc96"),
        # Mamba with its convolution alone (the paper's Mamba), from its 8-pair probe (../binding-lr-probe/
        # cpu-mamba-noshift-lr3.2e-3, step 5,000: 1.28M sequences of 1-8 pairs), on an H100 (binding-gpu-mixture-and-transformer-recipes.sh)
        "mamba-noshift-gpu": ("Mamba, its convolution alone, from its probe, on a GPU", "#19d3f3"),
        # the paper's transformer (learned positions, untied), a first stage of 3,000 steps on 8-pair tables from
        # pools of 16 keys (../binding-transformer-recipe/), then this mixture; measured from step 4,000
        "transformer-pool16": ("the paper's transformer after a stage on pools of 16", "#ab63fa"),
        # a third H100 call (binding-gpu-mixture-latest-checkpoints.sh): each lineage's latest checkpoint, at batch 256
        "mamba-from8-gpu2": ("Mamba from the probe's model, on a GPU again", "#00cc96"),
        "mamba-noshift-gpu2": ("Mamba, its convolution alone, on a GPU again", "#19d3f3"),
        "mamba-noshift-gpu2-lr3.2e-3": ("the same at lr 3.2e-3", "#fecb52"),
        "transformer-pool16-gpu": ("the paper's transformer, on a GPU", "#ab63fa"),
        "transformer-pool16-gpu-lr2e-3": ("the same at lr 2e-3", "#ff6692"),
        # both Mambas on the CPU again at batch 64 and the GPU's rates (they lost ground; stopped at step 1,300)
        "mamba-from8-gpu2-cpu": ("Mamba from the probe's model, on the CPU a second time", "#00cc96"),
        "mamba-noshift-gpu2-cpu": ("Mamba, its convolution alone, on the CPU again", "#fecb52"),
        # the same two at the GPU's rates scaled by sqrt(64/256) for the smaller batch (binding-lineage-runs.sh)
        "mamba-from8-gpu2-cpu-lr8e-4": ("the shifted one at lr 8e-4", "#2ca02c"),
        "mamba-noshift-gpu2-cpu-lr1.6e-3": ("the paper's at lr 1.6e-3", "#ff7f0e"),
        # the shifted one from its step 3,000 at 8e-4, the rate annealed to zero over 1,500 steps (binding-lineage-runs.sh)
        "mamba-from8-gpu2-anneal": ("the shifted one, its rate annealed", "#d62728"),
        # a second cycle from the end of that anneal: lr 4e-4 to zero over 6,000 steps (shipped as recall-mamba-shift-mix)
        "mamba-from8-gpu2-anneal2": ("the shifted one, a second cycle", "#8c564b"),
        # the paper's from its step 10,000 at 1.6e-3, the rate annealed to zero over 3,000 steps (binding-lineage-runs.sh)
        "mamba-noshift-anneal": ("the paper's, its rate annealed", "#e377c2"),
        # the shifted one's third cycle, on the paper's schedule (1.6e-3 to zero over 3,000 steps)
        "mamba-from8-gpu2-anneal3": ("the shifted one, a third cycle", "#7f7f7f")}
# where a run started from another's checkpoint: (that run, its step); sequences count on from there
AFTER = {"mamba-from8-gpu": ("mamba-from8", 5000), "mamba-from8-gpu-lr3.2e-3": ("mamba-from8", 5000),
         "mamba-from8-gpu-cpu": ("mamba-from8-gpu", 1750), "mamba-from8-gpu2": ("mamba-from8-gpu-cpu", 4000),
         "mamba-noshift-gpu2": ("mamba-noshift-gpu", 1750), "mamba-noshift-gpu2-lr3.2e-3": ("mamba-noshift-gpu", 1750),
         "transformer-pool16-gpu": ("transformer-pool16", 4000), "transformer-pool16-gpu-lr2e-3": ("transformer-pool16", 4000),
         "mamba-from8-gpu2-cpu": ("mamba-from8-gpu2", 2400), "mamba-noshift-gpu2-cpu": ("mamba-noshift-gpu2-lr3.2e-3", 2400),
         "mamba-from8-gpu2-cpu-lr8e-4": ("mamba-from8-gpu2", 2400),
         "mamba-noshift-gpu2-cpu-lr1.6e-3": ("mamba-noshift-gpu2-lr3.2e-3", 2400),
         "mamba-from8-gpu2-anneal": ("mamba-from8-gpu2-cpu-lr8e-4", 3000),
         "mamba-from8-gpu2-anneal2": ("mamba-from8-gpu2-anneal", 1500),
         "mamba-noshift-anneal": ("mamba-noshift-gpu2-cpu-lr1.6e-3", 10000),
         "mamba-from8-gpu2-anneal3": ("mamba-from8-gpu2-anneal2", 6000)}
SIZES = (64, 16, 4)  # pairs per table, as measured (the paper's format holds 64)


def batch_size(run: str) -> int:
    return json.loads((HERE / run / "run.json").read_text())["train"]["batch_size"]


def start(run: str) -> int:
    """Training sequences the run's lineage had seen on the mixture before its own first step."""
    if run not in AFTER:
        return 0
    parent, step = AFTER[run]
    return start(parent) + step * batch_size(parent)


def measurements(run: str) -> list[dict]:
    """One entry per measured checkpoint: training sequences, accuracy by table size with intervals."""
    found = []
    for path in sorted((HERE / run).glob("content-addressing-step-*.json")):
        record = json.loads(path.read_text())
        metrics, steps = record["metrics"], record["step"]
        found.append(dict(step=steps, sequences=start(run) + steps * batch_size(run), n_sequences=metrics["n_sequences"],
                          accuracy={n: metrics["accuracy_by_table_size"][str(n)] for n in SIZES},
                          interval={n: metrics["accuracy_by_table_size_interval"][str(n)] for n in SIZES}))
    return sorted(found, key=lambda m: m["step"])


def loss_curve(run: str, every: int = 500) -> tuple[list[int], list[float]]:
    """Training loss averaged over windows of ``every`` steps (single 50-step logs are noisy: the
    mixture changes the table size from step to step)."""
    batch = batch_size(run)
    windows: dict[int, list[float]] = {}
    for line in (HERE / run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "loss" in row:
            windows.setdefault((row["step"] - 1) // every, []).append(row["loss"])
    keys = sorted(windows)
    return [start(run) + (k + 1) * every * batch for k in keys], [sum(windows[k]) / len(windows[k]) for k in keys]


def figure(data: dict) -> go.Figure:
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.07, column_widths=[0.4, 0.33, 0.27],
                        subplot_titles=("accuracy (log): 64, 16, 4 pairs", "64 pairs, above 50%", "training loss"))
    dashes = {64: "solid", 16: "dash", 4: "dot"}
    for run, d in data.items():
        (name, colour), points = RUNS[run], d["measured"]
        if run in AFTER and AFTER[run][0] in data:  # drawn on from the point it started at, so lineages read as lines
            parent, step = AFTER[run]
            points = [p for p in data[parent]["measured"] if p["step"] == step] + points
        for n in SIZES:
            x = [p["sequences"] for p in points]
            y = [p["accuracy"][n] for p in points]
            fig.add_scatter(x=x, y=y, mode="lines+markers", name=name, row=1, col=1, showlegend=n == SIZES[0],
                            line=dict(color=colour, dash=dashes[n]), legendgroup=run,
                            error_y=style.error_bars(y, [p["interval"][n] for p in points]))
        # the full tables again on a linear scale, where the long runs now differ by points, not decades
        high = [p for p in points if p["accuracy"][64] >= 0.5]
        if high:
            y = [p["accuracy"][64] for p in high]
            fig.add_scatter(x=[p["sequences"] for p in high], y=y, mode="lines+markers", name=name, row=1, col=2,
                            showlegend=False, line=dict(color=colour), legendgroup=run,
                            error_y=style.error_bars(y, [p["interval"][64] for p in high]))
        x, y = d["loss"]
        fig.add_scatter(x=x, y=y, mode="lines", name=f"{name}, loss", row=1, col=3, line=dict(color=colour),
                        legendgroup=run, showlegend=False)
    for n in SIZES:
        fig.add_hline(y=1 / n, line=dict(color="grey", dash="dash", width=1), row=1, col=1)
    fig.update_yaxes(title_text="accuracy (log)", type="log", row=1, col=1)
    fig.add_hline(y=0.9, line=dict(color="grey", dash="dash", width=1), row=1, col=2)
    fig.update_yaxes(range=[0.5, 1.0], tickformat=".0%", row=1, col=2)
    fig.update_yaxes(title_text="cross-entropy (nats)", row=1, col=3)
    fig.update_xaxes(title_text="training sequences", tickformat="~s")
    fig.update_layout(title="Binding's long runs: dense answers, mixture of table sizes<br><sup>bars: 95% "
                            "bootstrap intervals over 1,024 held-out sequences per point (3 queries each); left: 64 pairs "
                            "solid, 16 dashed, 4 dotted, grey at chance (1/n); middle: grey at the bar, 90%; "
                            "loss: mean of each 500 steps</sup>",
                      width=PNG_WIDTH, height=640)
    fig = style.apply(fig)
    # below the plots, so that six runs' names do not squeeze them
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.22, xanchor="left", x=0))
    fig.update_xaxes(tickformat="~s", tickangle=0, tickmode="auto", nticks=9)
    return fig


def main() -> None:
    data = {run: dict(measured=measurements(run), loss=loss_curve(run)) for run in RUNS
            if (HERE / run).is_dir() and measurements(run)}  # a run's folder appears before its first measurement
    fig = figure(data)
    atomic_write_bytes(HERE / "curve.pdf", figure_pdf(fig))
    atomic_write_bytes(HERE / "curve.png", figure_image(fig, "png"))
    atomic_write_json(HERE / "curve.json", data)
    for run, d in data.items():
        last = d["measured"][-1]
        print(f"{run}: step {last['step']} ({last['sequences']:,} sequences): "
              + ", ".join(f"{n} pairs {last['accuracy'][n]:.1%}" for n in SIZES))


if __name__ == "__main__":
    main()
