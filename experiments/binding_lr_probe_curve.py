"""Binding's learning-rate probe as curves: held-out accuracy on the 8-pair dense cell (tables of 1-8 pairs
from pools of 256 keys and 256 values, every bound key queried) against training sequences, for every
probed architecture and learning rate, with chance (a value of the table, 1/n, averaged over the table sizes
1-8: H_8 / 8), and their training loss.

Reads the runs' records in figures/readme/equal-footing/binding-lr-probe/ (``<arch>-lr<lr>/``, run folders from
``binding-lr-probe.sh`` and ``binding-lr-probe-more-variants.sh`` on a lent H100) and writes
``curve.pdf``, ``curve.png`` and ``curve.json`` (the plotted numbers) there:

    python experiments/binding_lr_probe_curve.py
"""
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analyses import style
from interp.export import PNG_WIDTH, figure_image, figure_pdf
from interp.files import RunFolder, atomic_write_bytes, atomic_write_json

HERE = Path(__file__).resolve().parent.parent / "figures" / "readme" / "equal-footing" / "binding-lr-probe"
# run folder prefix: (panel, line dash, what the dash means there); one panel per architecture, one colour per rate
PANELS = ["Mamba, shift 3", "Mamba, its convolution alone (dashed: on a CPU, float32)", "plain transformer",
          "controls: transformer with shift 3 (solid), LSTM (dotted)"]
ARCHS = {"mamba": (0, "solid"), "mamba-noshift": (1, "solid"), "transformer": (2, "solid"),
         "transformer-shift": (3, "solid"), "lstm": (3, "dot"),
         # the GPU's run of Mamba with its conv alone at 3.2e-3 repeated on one CPU thread, in float32 (the GPU: bf16)
         "cpu-mamba-noshift": (1, "dash")}
LRS = {"3.2e-4": "#9467bd", "1e-3": "#1f77b4", "3.2e-3": "#2ca02c", "1e-2": "#d62728"}
CHANCE = sum(1 / n for n in range(1, 9)) / 8  # a random value of the table, tables of 1..8 pairs equally often


def curves(run: str, every: int = 250, root: Path = HERE) -> dict:
    """Held-out accuracy at every evaluation, and the training loss averaged over windows of ``every`` steps
    (``root``: the folder that holds the run's records; binding_transformer_recipe_curve.py reads its own)."""
    folder = RunFolder(root / run)
    batch = folder.read_record()["train"]["batch_size"]
    rows = folder.logged_lines()
    evals = [r for r in rows if "eval_accuracy" in r]
    windows: dict[int, list[float]] = {}
    for r in rows:
        windows.setdefault((r["step"] - 1) // every, []).append(r["loss"])
    return dict(batch=batch, sequences=[r["step"] * batch for r in evals], accuracy=[r["eval_accuracy"] for r in evals],
                loss_sequences=[(k + 1) * every * batch for k in sorted(windows)],
                loss=[sum(windows[k]) / len(windows[k]) for k in sorted(windows)])


def figure(data: dict) -> go.Figure:
    """One row per architecture (accuracy, then training loss), one colour per learning rate: at most three
    curves share a panel."""
    fig = make_subplots(rows=len(PANELS), cols=2, shared_xaxes=True, horizontal_spacing=0.1, vertical_spacing=0.06,
                        column_widths=[0.55, 0.45],
                        subplot_titles=[t for panel in PANELS for t in (panel, "training loss")])
    shown = set()
    for run, d in data.items():
        arch, lr = run.split("-lr")
        row, dash = ARCHS[arch]
        line = dict(color=LRS[lr], dash=dash)
        fig.add_scatter(x=d["sequences"], y=d["accuracy"], mode="lines", name=f"lr {lr}", row=row + 1, col=1,
                        line=line, legendgroup=lr, showlegend=lr not in shown)
        shown.add(lr)
        fig.add_scatter(x=d["loss_sequences"], y=d["loss"], mode="lines", row=row + 1, col=2, line=line,
                        legendgroup=lr, showlegend=False)
    for row in range(1, len(PANELS) + 1):
        fig.add_hline(y=CHANCE, line=dict(color="grey", dash="dash", width=1), row=row, col=1)
        fig.update_yaxes(title_text="accuracy", range=[0, 1.02], row=row, col=1)
        fig.update_yaxes(title_text="nats (log)", type="log", row=row, col=2)
    fig.update_xaxes(title_text="training sequences", tickformat="~s", row=len(PANELS))
    fig.update_layout(title="Binding's learning-rate probe: 8-pair dense tables, batch 256, one H100 (and one CPU)"
                            "<br><sup>held-out accuracy on 512 sequences (8 queries each) every 100-250 steps, grey at "
                            "chance (a value of the table); loss: mean of each 250 steps</sup>",
                      width=PNG_WIDTH, height=1350, legend_title_text="learning rate")
    fig = style.apply(fig)
    # the shared axis spans every row's runs, not the last row's few evaluations
    fig.update_xaxes(tickformat="~s", tickangle=0, tickmode="auto", nticks=8)
    return fig


def main() -> None:
    runs = [f"{arch}-lr{lr}" for arch in ARCHS for lr in LRS]
    data = {run: curves(run) for run in runs if RunFolder(HERE / run).record.is_file()}
    fig = figure(data)
    atomic_write_bytes(HERE / "curve.pdf", figure_pdf(fig))
    atomic_write_bytes(HERE / "curve.png", figure_image(fig, "png"))
    atomic_write_json(HERE / "curve.json", dict(chance=CHANCE, runs=data))
    for run, d in data.items():
        print(f"{run}: {d['sequences'][-1]:,} sequences, accuracy {d['accuracy'][-1]:.1%} (chance {CHANCE:.1%})")


if __name__ == "__main__":
    main()
