"""What holds the plain transformer on recall: its held-out accuracy against training sequences for four
recipes (rotary or learned positions, tied or untied unembedding) on 8-pair tables drawn from pools of 16
keys and values, the paper's recipe (learned positions, untied) on pools of 256 and on the compact layout,
and five recipes on pools of 256 trained side by side on an H100.

Reads the runs' records in figures/readme/equal-footing/binding-transformer-recipe/ (``<run>/metrics.jsonl``
and ``run.json`` from ``interp train``;
each folder's name says its cell and recipe, its run.json the whole command) and writes ``curve.pdf``,
``curve.png`` and ``curve.json`` there (the plotted numbers, and the first evaluation at or above 90% per run):

    python experiments/binding_transformer_recipe_curve.py
"""
import importlib.util
from pathlib import Path

import plotly.graph_objects as go

from analyses import style
from interp.export import PNG_WIDTH, figure_image, figure_pdf
from interp.files import atomic_write_bytes, atomic_write_json

HERE = Path(__file__).resolve().parent.parent / "figures" / "readme" / "equal-footing" / "binding-transformer-recipe"
# the learning-rate probe's reader of a run's records (evaluations and windowed loss), one definition for both
_spec = importlib.util.spec_from_file_location("lr_probe_curve", Path(__file__).resolve().parent / "binding_lr_probe_curve.py")
lr_probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lr_probe)

RUNS = {  # folder: (legend, colour, dash)
    "pools16-rotary-tied": ("pools of 16: rotary, tied (the CPU preset without its shift)", "#ef553b", "solid"),
    "pools16-rotary-untied": ("pools of 16: rotary, untied", "#ffa15a", "solid"),
    "pools16-learned-tied": ("pools of 16: learned positions, tied", "#ab63fa", "solid"),
    "pools16-learned-untied": ("pools of 16: learned positions, untied (the paper's)", "#00cc96", "solid"),
    "compact4-pools16-rotary-tied": ("compact, 4 pairs, pools of 16: rotary, tied", "#ef553b", "dot"),
    "compact4-pools16-learned-untied": ("compact, 4 pairs, pools of 16: the paper's", "#00cc96", "dot"),
    "compact8-pools256-learned-untied": ("compact, 8 pairs, pools of 256: the paper's", "#636efa", "dot"),
    "pools256-learned-untied": ("pools of 256: the paper's", "#636efa", "solid"),
    # the same run with a first stage on pools of 16 (steps 0-3,000, `-T pool=16`), evaluated on pools of 256 throughout
    "pools256-learned-untied-after-pools16": ("pools of 256 after a stage on pools of 16: the paper's", "#19d3f3",
                                              "solid"),
    # on an H100 at batch 256 (binding-gpu-mixture-and-transformer-recipes.sh), side by side for the same eight minutes
    "gpu-pools256-learned-tied": ("pools of 256, GPU: learned positions, tied", "#ab63fa", "dash"),
    "gpu-pools256-rotary-untied": ("pools of 256, GPU: rotary, untied", "#ffa15a", "dash"),
    "gpu-pools256-rotary-tied-wide": ("pools of 256, GPU: rotary, tied, width 128, 4 heads", "#ef553b", "dash"),
    "gpu-pools256-rotary-tied-4layers": ("pools of 256, GPU: rotary, tied, 4 layers", "#b6e880", "dash"),
    "gpu-compact8-pools256-rotary-tied": ("compact, 8 pairs, pools of 256, GPU: rotary, tied", "#ef553b", "dashdot"),
}


def first_at(accuracy: list[float], sequences: list[int], level: float = 0.9) -> int | None:
    return next((s for a, s in zip(accuracy, sequences) if a >= level), None)


def main() -> None:
    data = {}
    for run in RUNS:
        if (HERE / run).is_dir():
            d = lr_probe.curves(run=run, root=HERE)
            data[run] = dict(d, first_at_90=first_at(d["accuracy"], d["sequences"]))
    fig = go.Figure()
    for run, d in data.items():
        name, colour, dash = RUNS[run]
        fig.add_scatter(x=d["sequences"], y=d["accuracy"], mode="lines", name=name, line=dict(color=colour, dash=dash))
    fig.update_xaxes(title_text="training sequences", type="log")
    fig.update_yaxes(title_text="held-out accuracy", range=[0, 1.02])
    fig.update_layout(title="The plain transformer on recall, by recipe and key pool<br><sup>8-pair tables of the "
                            "paper's layout unless 'compact'; lr 1e-3, batch 64 (GPU: 256); 256-512 held-out sequences per "
                            "point</sup>", width=PNG_WIDTH, height=620)
    fig = style.apply(fig)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0))
    atomic_write_bytes(HERE / "curve.pdf", figure_pdf(fig))
    atomic_write_bytes(HERE / "curve.png", figure_image(fig, "png"))
    atomic_write_json(HERE / "curve.json", {"runs": data})
    for run, d in data.items():
        print(f"{run}: {d['sequences'][-1]:,} sequences, {d['accuracy'][-1]:.1%}; 90% first at {d['first_at_90']}")


if __name__ == "__main__":
    main()
