"""Binding's long runs as curves: content-addressing accuracy on the paper's recall format against
training sequences, for the plain transformer and Mamba trained on dense answers over a mixture of
table sizes, with the chance level 1/n beside every table size, and their training loss.

Reads what the runs and their measurements left in figures/readme/equal-footing/binding-dense-mix/
(``<run>/content-addressing-step-N.json``
from ``interp run content-addressing --sizes 1,4,16,64 --queries 3 --n 1024``, each ``<run>`` a run folder
from ``interp train``) and writes ``curve.pdf``, ``curve.png`` and ``curve.json`` there (the plotted numbers).
The figure is the lineages' history: each lineage one line, its runs chained where one started from another's
checkpoint (LINEAGES), and the runs that branched off a lineage and were not continued in grey:

    python experiments/binding_lineage_curve.py
"""
import json
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analyses import style
from interp.export import PNG_WIDTH, figure_image, figure_pdf
from interp.files import RunFolder, atomic_write_bytes, atomic_write_json

HERE = Path(__file__).resolve().parent.parent / "figures" / "readme" / "equal-footing" / "binding-dense-mix"
RUNS = {"mamba": "Mamba", "transformer-plain": "plain transformer",
        # the same recipe started from the learning-rate probe's Mamba (../binding-lr-probe/ beside HERE, 1.28M sequences
        # of 8-pair tables on a GPU before this run's first): its sequences count from its own start
        "mamba-from8": "Mamba from the probe's model",
        # continued on an H100 at batch 256 from its step 5,000 (binding-gpu-mixture-and-transformer-recipes.sh), at its rate and at twice it, and the
        # first of those continued on the CPU again: their sequences count on from where they started
        "mamba-from8-gpu": "Mamba from the probe's model, on a GPU",
        "mamba-from8-gpu-lr3.2e-3": "the same at lr 3.2e-3",
        "mamba-from8-gpu-cpu": "Mamba from the probe's model, on the CPU again",
        # Mamba with its convolution alone (the paper's Mamba), from its 8-pair probe (../binding-lr-probe/
        # cpu-mamba-noshift-lr3.2e-3, step 5,000: 1.28M sequences of 1-8 pairs), on an H100 (binding-gpu-mixture-and-transformer-recipes.sh)
        "mamba-noshift-gpu": "Mamba, its convolution alone, from its probe, on a GPU",
        # the paper's transformer (learned positions, untied), a first stage of 3,000 steps on 8-pair tables from
        # pools of 16 keys (../binding-transformer-recipe/), then this mixture; measured from step 4,000
        "transformer-pool16": "the paper's transformer after a stage on pools of 16",
        # a third H100 call (binding-gpu-mixture-latest-checkpoints.sh): each lineage's latest checkpoint, at batch 256
        "mamba-from8-gpu2": "Mamba from the probe's model, on a GPU again",
        "mamba-noshift-gpu2": "Mamba, its convolution alone, on a GPU again",
        "mamba-noshift-gpu2-lr3.2e-3": "the same at lr 3.2e-3",
        "transformer-pool16-gpu": "the paper's transformer, on a GPU",
        "transformer-pool16-gpu-lr2e-3": "the same at lr 2e-3",
        # both Mambas on the CPU again at batch 64 and the GPU's rates (they lost ground; stopped at step 1,300)
        "mamba-from8-gpu2-cpu": "Mamba from the probe's model, on the CPU a second time",
        "mamba-noshift-gpu2-cpu": "Mamba, its convolution alone, on the CPU again",
        # the same two at the GPU's rates scaled by sqrt(64/256) for the smaller batch (binding-lineage-runs.sh)
        "mamba-from8-gpu2-cpu-lr8e-4": "the shifted one at lr 8e-4",
        "mamba-noshift-gpu2-cpu-lr1.6e-3": "the paper's at lr 1.6e-3",
        # the shifted one from its step 3,000 at 8e-4, the rate annealed to zero over 1,500 steps (binding-lineage-runs.sh)
        "mamba-from8-gpu2-anneal": "the shifted one, its rate annealed",
        # a second cycle from the end of that anneal: lr 4e-4 to zero over 6,000 steps (shipped as recall-mamba-shift-mix)
        "mamba-from8-gpu2-anneal2": "the shifted one, a second cycle",
        # the paper's from its step 10,000 at 1.6e-3, the rate annealed to zero over 3,000 steps (binding-lineage-runs.sh)
        "mamba-noshift-anneal": "the paper's, its rate annealed",
        # the shifted one's third cycle, on the paper's schedule (1.6e-3 to zero over 3,000 steps)
        "mamba-from8-gpu2-anneal3": "the shifted one, a third cycle"}
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
# each lineage as the chain of runs it continued through (each run from its predecessor's checkpoint, AFTER), and
# its colour; a run in no chain branched off one (another rate or machine) and was not continued
LINEAGES = {"Mamba from scratch": (("mamba",), "#1f77b4"),
            "plain transformer from scratch": (("transformer-plain",), "#d62728"),
            "Mamba with the shift, from its probe": (("mamba-from8", "mamba-from8-gpu", "mamba-from8-gpu-cpu",
                                                      "mamba-from8-gpu2", "mamba-from8-gpu2-cpu-lr8e-4",
                                                      "mamba-from8-gpu2-anneal", "mamba-from8-gpu2-anneal2",
                                                      "mamba-from8-gpu2-anneal3"), "#2ca02c"),
            "the paper's Mamba (its convolution alone), from its probe": (
                ("mamba-noshift-gpu", "mamba-noshift-gpu2-lr3.2e-3", "mamba-noshift-gpu2-cpu-lr1.6e-3",
                 "mamba-noshift-anneal"), "#ff7f0e"),
            "the paper's transformer, after a stage on pools of 16": (("transformer-pool16", "transformer-pool16-gpu"),
                                                                      "#9467bd")}
BRANCH = "#9a9a9a"


def batch_size(run: str) -> int:
    return RunFolder(HERE / run).read_record()["train"]["batch_size"]


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
    for row in RunFolder(HERE / run).logged_lines():
        if "loss" in row:
            windows.setdefault((row["step"] - 1) // every, []).append(row["loss"])
    keys = sorted(windows)
    return [start(run) + (k + 1) * every * batch for k in keys], [sum(windows[k]) / len(windows[k]) for k in keys]


def chained(data: dict, runs: tuple[str, ...], key: str) -> list:
    """The points (``key``: "measured" or "loss") of a chain of runs, each run's up to where the next one started."""
    points = []
    for run, successor in zip(runs, runs[1:] + (None,)):
        if run not in data:
            break
        own = data[run][key]
        if key == "loss":
            own = list(zip(*own))
        if successor in AFTER:  # the successor started from this run's checkpoint at that step
            limit = start(successor)
            own = [p for p in own if (p["sequences"] if key == "measured" else p[0]) <= limit]
        points += own
    return points


def figure(data: dict) -> go.Figure:
    """Each lineage's accuracy on full 64-pair tables (log, with chance; and again above 50%, with the bar) and its
    training loss against the sequences it trained on; every branch not continued in grey."""
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08, column_widths=[0.36, 0.36, 0.28],
                        subplot_titles=("64 pairs (log)", "64 pairs, above 50%", "training loss"))
    chains = [(name, runs, colour) for name, (runs, colour) in LINEAGES.items()]
    branches = [run for run in data if not any(run in runs for _, runs, _ in chains)]
    lines = [(name, chained(data, runs, "measured"), chained(data, runs, "loss"), colour, "solid")
             for name, runs, colour in chains]
    for run in branches:  # drawn on from the point it started at
        parent, step = AFTER.get(run, (None, None))
        before = [p for p in data.get(parent, {}).get("measured", []) if p["step"] == step]
        lines.append((RUNS[run], before + data[run]["measured"], list(zip(*data[run]["loss"])), BRANCH, "dot"))
    shown = set()
    for name, points, loss, colour, dash in lines:
        if not points:
            continue
        group = "branches" if colour == BRANCH else name
        legend = dict(legendgroup=group, line=dict(color=colour, dash=dash), name=name if group == name else
                      "a run branched off a lineage, not continued", hovertext=[name] * len(points))
        y = [p["accuracy"][64] for p in points]
        fig.add_scatter(x=[p["sequences"] for p in points], y=y, mode="lines+markers", row=1, col=1,
                        showlegend=group not in shown, marker=dict(size=5),
                        error_y=style.error_bars(y, [p["interval"][64] for p in points]), **legend)
        shown.add(group)
        high = [p for p in points if p["accuracy"][64] >= 0.5]
        if high:
            y = [p["accuracy"][64] for p in high]
            fig.add_scatter(x=[p["sequences"] for p in high], y=y, mode="lines+markers", row=1, col=2, showlegend=False,
                            marker=dict(size=5), error_y=style.error_bars(y, [p["interval"][64] for p in high]),
                            **legend)
        if loss:
            fig.add_scatter(x=[x for x, _ in loss], y=[v for _, v in loss], mode="lines", row=1, col=3, showlegend=False,
                            **legend)
    fig.add_hline(y=1 / 64, line=dict(color="black", dash="dash", width=1), row=1, col=1)
    fig.update_yaxes(title_text="accuracy, full 64-pair tables", type="log", row=1, col=1)
    fig.add_hline(y=0.9, line=dict(color="black", dash="dash", width=1), row=1, col=2)
    fig.update_yaxes(range=[0.5, 1.0], tickformat=".0%", row=1, col=2)
    fig.update_yaxes(title_text="cross-entropy (nats)", row=1, col=3)
    fig.update_xaxes(title_text="training sequences")
    fig.update_layout(title="Binding's long runs: dense answers, mixture of table sizes<br><sup>each lineage one line "
                            "through the runs it continued in; bars: 95% bootstrap intervals over 1,024 held-out "
                            "sequences per point (3 queries each); dashed: chance (1/64) and the bar (90%); loss: mean "
                            "of each 500 steps</sup>", width=PNG_WIDTH, height=560)
    fig = style.apply(fig)
    # below the plots, so that the lineages' names do not squeeze them
    fig.update_layout(legend=dict(orientation="v", yanchor="top", y=-0.22, xanchor="left", x=0))
    fig.update_xaxes(tickformat="~s", tickangle=0, tickmode="auto", nticks=5)
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
