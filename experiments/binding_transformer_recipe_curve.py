"""What holds the plain transformer on recall: its held-out accuracy against training sequences for four
recipes (rotary or learned positions, tied or untied unembedding) on 8-pair tables drawn from pools of 16
keys and values, the paper's recipe (learned positions, untied) on pools of 256 and on the compact layout,
and five recipes on pools of 256 trained side by side on an H100.

Reads the runs' records in figures/readme/equal-footing/binding-transformer-recipe/ (``<run>/``, run folders
from ``interp train``; each folder's name says its cell and recipe, its record the whole command) and writes
``curve.pdf``, ``curve.png`` and ``curve.json`` there (the plotted numbers, and the first evaluation at or above
90% per run):

    python experiments/binding_transformer_recipe_curve.py
"""
import importlib.util
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analyses import style
from interp.export import PNG_WIDTH, figure_image, figure_pdf
from interp.files import atomic_write_bytes, atomic_write_json

HERE = Path(__file__).resolve().parent.parent / "figures" / "readme" / "equal-footing" / "binding-transformer-recipe"
# the learning-rate probe's reader of a run's records (evaluations and windowed loss), one definition for both
_spec = importlib.util.spec_from_file_location("lr_probe_curve", Path(__file__).resolve().parent / "binding_lr_probe_curve.py")
lr_probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lr_probe)

# one panel per layout and key pool; one colour per recipe; the line says where it ran: solid, the CPU on pools of 16;
# dotted, the CPU on pools of 256; dashed, a GPU (H100, batch 256, binding-gpu-mixture-and-transformer-recipes.sh)
PANELS = ["the paper's layout, pools of 16", "the compact layout (no markers or fillers): 4 pairs from pools of 16, 8 from pools of 256",
          "the paper's layout, pools of 256"]
RECIPES = {"rotary, tied (the CPU preset without its shift)": "#d62728", "rotary, untied": "#ff7f0e",
           "learned positions, tied": "#9467bd", "learned positions, untied (the paper's)": "#2ca02c",
           "the paper's, after a stage on pools of 16": "#17becf", "rotary, tied, width 128, 4 heads": "#8c564b",
           "rotary, tied, 4 layers": "#e377c2"}
RUNS = {  # folder: (panel, recipe, dash)
    "pools16-rotary-tied": (0, "rotary, tied (the CPU preset without its shift)", "solid"),
    "pools16-rotary-untied": (0, "rotary, untied", "solid"),
    "pools16-learned-tied": (0, "learned positions, tied", "solid"),
    "pools16-learned-untied": (0, "learned positions, untied (the paper's)", "solid"),
    "compact4-pools16-rotary-tied": (1, "rotary, tied (the CPU preset without its shift)", "solid"),
    "compact4-pools16-learned-untied": (1, "learned positions, untied (the paper's)", "solid"),
    "compact8-pools256-learned-untied": (1, "learned positions, untied (the paper's)", "dot"),
    "pools256-learned-untied": (2, "learned positions, untied (the paper's)", "dot"),
    # the same run with a first stage on pools of 16 (steps 0-3,000, `-T pool=16`), evaluated on pools of 256 throughout
    "pools256-learned-untied-after-pools16": (2, "the paper's, after a stage on pools of 16", "dot"),
    # on an H100 at batch 256, side by side for the same eight minutes
    "gpu-pools256-learned-tied": (2, "learned positions, tied", "dash"),
    "gpu-pools256-rotary-untied": (2, "rotary, untied", "dash"),
    "gpu-pools256-rotary-tied-wide": (2, "rotary, tied, width 128, 4 heads", "dash"),
    "gpu-pools256-rotary-tied-4layers": (2, "rotary, tied, 4 layers", "dash"),
    "gpu-compact8-pools256-rotary-tied": (1, "rotary, tied (the CPU preset without its shift)", "dash"),
}


def first_at(accuracy: list[float], sequences: list[int], level: float = 0.9) -> int | None:
    return next((s for a, s in zip(accuracy, sequences) if a >= level), None)


def main() -> None:
    data = {}
    for run in RUNS:
        if (HERE / run).is_dir():
            d = lr_probe.curves(run=run, root=HERE)
            data[run] = dict(d, first_at_90=first_at(d["accuracy"], d["sequences"]))
    fig = make_subplots(rows=len(PANELS), cols=1, shared_xaxes=True, vertical_spacing=0.07, subplot_titles=PANELS)
    shown = set()
    for run, d in data.items():
        panel, recipe, dash = RUNS[run]
        fig.add_scatter(x=d["sequences"], y=d["accuracy"], mode="lines", name=recipe, row=panel + 1, col=1,
                        line=dict(color=RECIPES[recipe], dash=dash), legendgroup=recipe, showlegend=recipe not in shown)
        shown.add(recipe)
    fig.update_xaxes(type="log")
    fig.update_xaxes(title_text="training sequences", row=len(PANELS))
    fig.update_yaxes(title_text="held-out accuracy", range=[0, 1.02])
    fig.update_layout(title="The plain transformer on recall, by recipe and key pool<br><sup>8-pair tables of the "
                            "paper's layout unless compact; lr 1e-3; solid: the CPU (batch 64) on pools of 16; dotted: the CPU on pools of "
                            "256; dashed: a GPU (batch 256) on pools of 256; 256-512 held-out sequences per point</sup>",
                      width=PNG_WIDTH, height=1100)
    fig = style.apply(fig)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.08, xanchor="left", x=0))
    atomic_write_bytes(HERE / "curve.pdf", figure_pdf(fig))
    atomic_write_bytes(HERE / "curve.png", figure_image(fig, "png"))
    atomic_write_json(HERE / "curve.json", {"runs": data})
    for run, d in data.items():
        print(f"{run}: {d['sequences'][-1]:,} sequences, {d['accuracy'][-1]:.1%}; 90% first at {d['first_at_90']}")


if __name__ == "__main__":
    main()
