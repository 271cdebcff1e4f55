"""Belief geometry on the process wind tunnels (Mess3, RRXOR): ship each search's best model, measure, draw.

    experiments/belief-geometry.sh                     # the searches (about 40 minutes on 2 cores)
    python experiments/belief_geometry.py ship         # each search's best trial -> models/pretrained/TASK-ARCH-cpu
    python experiments/belief_geometry.py measure      # calibration and belief-state of each, and the summary

``measure`` runs ``interp run calibration`` and ``interp run belief-state`` on every shipped process model into
figures/readme/belief-geometry/MODEL/, then draws from the same held-out points (belief-state's n and seed, so
every architecture of a task reads the same beliefs):
- simplex-TASK.{pdf,png}: the Bayes beliefs beside each architecture's read-out from all its layers concatenated;
- r2-by-layer.{pdf,png}: the unexplained share of the belief's variance (1 - R², held out) per layer and for the
  concatenation, one line per architecture, with 95% intervals;
- summary.json: per task and architecture, the chosen learning rate, the budget, the parameters, the wall
  time (of runs that shared the machine), the entropy MAE and the read-outs with their intervals (what docs/results/belief-geometry.md cites).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SEARCHES = ROOT / "runs" / "belief-geometry"
OUT = ROOT / "figures" / "readme" / "belief-geometry"
TASKS = ("mess3", "rrxor")
ARCHS = ("transformer", "mamba", "lstm", "mlp")
N, SEED = 500, 1234  # belief-state's defaults: the same held-out sequences for every model of a task
COLOURS = {"transformer": "#1f77b4", "mamba": "#d62728", "lstm": "#2ca02c", "mlp": "#9467bd"}


def name(task: str, arch: str) -> str:
    return f"{task}-{arch}-cpu"


def best_trial(task: str, arch: str) -> tuple[Path, dict]:
    """The search's best trial folder and its tune.json summary."""
    summary = json.loads((SEARCHES / f"{task}-{arch}" / "tune.json").read_text())["metrics"]
    return SEARCHES / f"{task}-{arch}" / "trials" / summary["best"]["name"], summary


def ship() -> None:
    from interp.pretrained import ship as ship_run

    for task in TASKS:
        for arch in ARCHS:
            folder, _ = best_trial(task, arch)
            print(ship_run(folder, name(task, arch)))


def measure() -> None:
    for task in TASKS:
        for arch in ARCHS:
            for analysis, formats in (("calibration", "json"), ("belief-state", "json")):
                subprocess.run(["interp", "run", analysis, "--ckpt", name(task, arch), "--out",
                                str(OUT.relative_to(ROOT)), "--format", formats], cwd=ROOT, check=True)
    draw()


def draw() -> None:
    import interp
    from analyses import belief_state, style
    from analyses.style import error_bars
    from interp.export import figure_image, figure_pdf
    from interp.files import RunFolder

    from plotly.subplots import make_subplots

    summary = {}
    curves = make_subplots(rows=1, cols=len(TASKS), subplot_titles=[f"{task}" for task in TASKS],
                           horizontal_spacing=0.1)
    figures = {}
    for col, task in enumerate(TASKS, 1):
        fits, labels = [], []
        for arch in ARCHS:
            model = interp.load(name(task, arch))
            fit = belief_state.read_out(model, N, SEED)
            saved = json.loads((OUT / name(task, arch) / "belief-state.json").read_text())["metrics"]
            assert abs(saved["concat"]["r2"] - fit.metrics["concat"]["r2"]) < 1e-9, "the saved result is of other weights"
            calibration = json.loads((OUT / name(task, arch) / "calibration.json").read_text())["metrics"]
            record = RunFolder(ROOT / "models" / "pretrained" / name(task, arch)).read_record()
            _, search = best_trial(task, arch)
            train = record["train"]
            summary.setdefault(task, {})[arch] = dict(
                lr=train["lr"], lrs_searched=[float(v) for v in search["space"]["lr"]],
                search_scores={t["name"]: t["score"] for t in search.get("trials", [])} or None,
                steps=train["steps"], batch_size=train["batch_size"], sequences=train["steps"] * train["batch_size"],
                n_params=record["n_params"], wall_time_s=record["wall_time_s"],  # shared machine: not a speed
                entropy_mae_bits=calibration["entropy_mae_bits"], calibration_sequences=calibration["n_sequences"],
                entropy_mae_interval=calibration["intervals"]["entropy_mae_bits"],
                kl_bits=calibration["kl_bits"],
                r2_final=fit.metrics["r2"], r2_final_interval=fit.metrics["intervals"]["r2"],
                r2_by_layer=fit.metrics["per_layer"]["r2"], r2_by_layer_interval=fit.metrics["per_layer"]["r2_interval"],
                best_layer=fit.metrics["best_layer"],
                r2_best_layer=max(fit.metrics["per_layer"]["r2"]),
                r2_concat=fit.metrics["concat"]["r2"], r2_concat_interval=fit.metrics["concat"]["r2_interval"],
                rmse_concat=fit.metrics["concat"]["rmse"],
                untrained_r2_concat=fit.metrics["concat"]["untrained_r2"],
                untrained_r2_concat_interval=fit.metrics["concat"]["untrained_r2_interval"],
                untrained_r2_final=fit.metrics["untrained_r2"],
                shuffled_r2_concat=fit.metrics["concat"]["shuffled_r2"],
                unexplained_ratio_to_untrained=(1 - fit.metrics["concat"]["r2"])
                / (1 - fit.metrics["concat"]["untrained_r2"]))
            fits.append(fit)
            labels.append(arch)
            r2 = fit.metrics["per_layer"]["r2"] + [fit.metrics["concat"]["r2"]]
            bounds = fit.metrics["per_layer"]["r2_interval"] + [fit.metrics["concat"]["r2_interval"]]
            unexplained = [1 - v for v in r2]
            unexplained_bounds = [[1 - b[1], 1 - b[0]] for b in bounds]
            x = [f"L{l}" for l in fit.metrics["per_layer"]["layer"]] + ["all layers"]
            curves.add_scatter(x=x, y=unexplained, name=arch, legendgroup=arch, showlegend=col == 1,
                               mode="lines+markers", line=dict(color=COLOURS[arch]), row=1, col=col,
                               error_y=error_bars(unexplained, unexplained_bounds),
                               hovertemplate=f"{arch} on {task}<br>%{{x}}: 1 - R² %{{y:.3g}}<extra></extra>")
        first = fits[0]
        assert all(np.allclose(f.beliefs, first.beliefs, rtol=0, atol=1e-12) for f in fits), "not the same held-out points"
        figures[f"simplex-{task}"] = belief_state.layered_simplex_figure(
            first.beliefs, [f.concat for f in fits], [f"{arch}, all layers" for arch in labels],
            [f.metrics["concat"]["r2"] for f in fits], first.metrics["target"], SEED, first.vertices,
            what="each architecture's linear read-out from all its layers")
        style.apply(figures[f"simplex-{task}"], subject=task)
    curves.update_yaxes(type="log", range=[-4.5, 0.3])  # the same decades on both panels
    curves.update_yaxes(title_text="1 - R² (held out; lower is better)", col=1)
    curves.update_xaxes(title_text="residual stream after block")
    curves.update_layout(title="Belief over the hidden states read linearly from each layer, and from all layers "
                               "concatenated<br><sup>the share of the belief's variance left unexplained on held-out "
                               "sequences; bars: 95% bootstrap intervals</sup>", width=1000, height=460)
    style.apply(curves)
    figures["r2-by-layer"] = curves
    OUT.mkdir(parents=True, exist_ok=True)
    for key, fig in figures.items():
        (OUT / f"{key}.pdf").write_bytes(figure_pdf(fig))
        (OUT / f"{key}.png").write_bytes(figure_image(fig, "png"))
    (OUT / "summary.json").write_text(json.dumps(dict(
        command="python experiments/belief_geometry.py measure", n_sequences=N, seed=SEED, models=summary,
        shuffled_r2_concat_max={task: max(m["shuffled_r2_concat"] for m in summary[task].values()) for task in TASKS},
        r2_concat_halfwidth_max=max((m["r2_concat_interval"][1] - m["r2_concat_interval"][0]) / 2
                                    for models in summary.values() for m in models.values())),
        indent=2) + "\n")
    print(f"wrote {OUT}/summary.json and {', '.join(figures)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("ship", "measure", "draw"))
    step = parser.parse_args().step
    sys.path.insert(0, str(ROOT))
    {"ship": ship, "measure": measure, "draw": draw}[step]()
