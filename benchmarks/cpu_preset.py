"""Train CPU presets and report entropy MAE against wall time.

    python benchmarks/cpu_preset.py                         # the `cpu` preset on bijection V=20, L=19
    python benchmarks/cpu_preset.py --variant hard-labels   # the same model with the paper's hard labels
    python benchmarks/cpu_preset.py --task hmm              # the `cpu` preset on HMM K=20
    python benchmarks/cpu_preset.py --task regression --variant 2-layers-d96 --minutes 9
    python benchmarks/cpu_preset.py --report runs/bench-*   # table + figure from finished runs
    python benchmarks/cpu_preset.py --report RUN... --by-step   # the figure against steps (runs timed on different machines)

Each variant is a real `interp train` run in runs/bench-TASK-NAME (bijection: runs/bench-NAME);
``--minutes`` stops each after that much time (a stopped run continues with the same command).
Run one at a time on an idle machine: two trainings on two cores slow each other down several-fold.
Targets (issue 16): MAE <= 0.01 bits within 20 minutes on bijection, <= 0.005 within 60 minutes on
HMM, <= 0.05 bits with a relative mean error <= 0.1 on regression. The report prints the MAE at fixed
minutes (and the relative mean error, E[(mu - mu_Bayes)^2 / var_Bayes], where the task has one) and
writes figures/readme/cpu-preset-curves[-TASK].{pdf,png} and the table as .json (with the command).
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

from interp.files import RunFolder

HMM_FLOAT32_EAGER = ["--no-compile", "--no-bf16"]  # how the HMM probes before --compile and --bf16 ran
VARIANTS = {
    "cpu": [],  # the task's preset as shipped (bijection: d=96, 2 layers, 4 heads, batch 128, lr 3e-3, soft targets)
    "hard-labels": ["--loss", "hard"],
    "d64-4layers": ["-M", "d_model=64", "-M", "n_layers=4", "--batch-size", "64", "--lr", "2e-3"],
    # regression, around its preset (6 layers of width 64, 4 heads, first 10 then 20 examples, lr 1e-3):
    "2-layers-d96": ["-M", "d_model=96", "-M", "n_layers=2", "--curriculum", "[]"],  # the preset before issue 16
    "2-layers-d64-curriculum": ["-M", "n_layers=2"],
    "6-layers-no-curriculum": ["--curriculum", "[]"],
    # HMM. The preset is 4 layers of d=96 (8 heads), 25k steps compiled under bf16 autocast.
    "4-layers-d96": [*HMM_FLOAT32_EAGER, "--steps", "15000"],  # the preset's model in float32, eager: 0.0074 bits
    # ... starting on peaky tables (Dirichlet 0.3), where the first plateau's memoryless filter is 2.4x
    # further from Bayes, so the earlier observations are worth more (hmm_window_baseline.py --concentration 0.3)
    "peaky-start": [*HMM_FLOAT32_EAGER, "--steps", "10000", "--curriculum", '[[1000, {"concentration": 0.3}]]'],
    # compiled, float32 (160 ms a step on an Intel CPU, 190 ms on an AMD EPYC): more steps in an hour than eager
    "4-layers-d96-compiled": ["--no-bf16", "--steps", "20000"],
    # the preset with a longer schedule (9.5 steps/s on an Intel CPU with AMX: 30k steps in 53 minutes)
    "4-layers-d96-bf16": ["--steps", "30000"],
    # deeper and narrower (each step of the filtering recursion composes one more observation)
    "8-layers-d64": ["-M", "n_layers=8", "-M", "d_model=64", "-M", "n_heads=4", "--steps", "7500", *HMM_FLOAT32_EAGER],
    # the preset before this one (shipped at 0.0061 bits in 58.6 minutes)
    "8-layers-d68-compiled": ["-M", "n_layers=8", "-M", "d_model=68", "-M", "n_heads=4", "--steps", "18000", "--no-bf16"],
}
MARKS_MIN = (2, 5, 10, 15, 20, 30, 45, 60)
BUDGET_MIN = {"bijection": 20, "hmm": 60, "regression": 60}
TARGET_BITS = {"bijection": 0.01, "hmm": 0.005, "regression": 0.05}


def train(task: str, name: str, extra: list[str], minutes: float | None = None) -> Path:
    out = Path("runs") / (f"bench-{name}" if task == "bijection" else f"bench-{task}-{name}")
    cmd = [sys.executable, "-m", "interp", "train", "--task", task, "--preset", "cpu", "--out", str(out), *extra]
    if RunFolder(out).record.exists():
        cmd = [sys.executable, "-m", "interp", "train", "--out", str(out), "--resume"]
    try:
        subprocess.run(cmd, check=True, timeout=None if minutes is None else minutes * 60)
    except subprocess.TimeoutExpired:
        print(f"stopped {out} after {minutes:g} minutes; the same command continues it")
    return out


def curve(run: Path) -> list[tuple[float, int, float, float | None]]:
    """(minutes, step, MAE, relative mean error or None) at every evaluation of a run."""
    rows = RunFolder(run).logged_lines()
    return [(r["elapsed_s"] / 60, r["step"], r["eval_entropy_mae_bits"], r.get("eval_relative_mean_error"))
            for r in rows if "eval_entropy_mae_bits" in r]


def at_minutes(points, minutes: float):
    before = [p for p in points if p[0] <= minutes]
    return before[-1] if before else None


MAX_SERIES = 6  # more runs than this are drawn in two panels
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")


def shape(record: dict) -> tuple:
    return tuple(record["model"].get(k) for k in ("n_layers", "d_model", "n_heads"))


def figure(task: str, drawn: dict[str, tuple[dict, list]], by_step: bool = False):
    """Entropy MAE against minutes (or steps) of every run, each in a colour of its own; more than MAX_SERIES runs
    in two panels: the first run's model shape, and the other shapes with the first run again for reference."""
    from plotly.subplots import make_subplots

    from analyses import style

    names = list(drawn)
    first = shape(drawn[names[0]][0])
    groups = [names]
    if len(names) > MAX_SERIES:
        same = [n for n in names if shape(drawn[n][0]) == first]
        groups = [same, [names[0]] + [n for n in names if n not in same]]
    titles = [f"{first[0]} layers, d={first[1]}, as {names[0]}", "other shapes"] if len(groups) == 2 else [""]
    fig = make_subplots(rows=1, cols=len(groups), shared_yaxes=True, horizontal_spacing=0.04, subplot_titles=titles)
    for col, group in enumerate(groups, start=1):
        for name in group:
            points, colour = drawn[name][1], COLOURS[names.index(name) % len(COLOURS)]
            fig.add_scatter(x=[p[1 if by_step else 0] for p in points], y=[p[2] for p in points], mode="lines+markers",
                            name=name, legendgroup=name, showlegend=col == 1 or name != names[0], row=1, col=col,
                            line=dict(color=colour), marker=dict(size=5))
    fig.update_yaxes(type="log")  # first: the reference labels are placed on the axis' own scale
    target, budget = TARGET_BITS.get(task, 0.01), BUDGET_MIN.get(task, 20)
    style.reference_line(fig, target, f"target {target:g} bits", color="black")
    for col in range(2, len(groups) + 1):
        fig.add_hline(y=target, line_dash="dash", line_color="black", row=1, col=col)
    if not by_step:
        style.reference_line(fig, budget, f"{budget} min", axis="x", dash="dot", color="black")
    fig.update_xaxes(title_text="training step" if by_step else "minutes")
    fig.update_yaxes(title_text="entropy MAE (bits)", row=1, col=1)
    fig.update_layout(title=f"{task}: entropy MAE against training " + ("steps" if by_step else "wall time (2-core CPU)"),
                      width=760 if len(groups) == 1 else 900, height=460 if len(groups) == 1 else 520)
    style.apply(fig)
    if len(groups) == 2:  # the panels on one axis, so that runs compare across them; the legend below them
        fig.update_xaxes(matches="x", tickangle=0, nticks=5, tickmode="auto")
        fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.22, xanchor="left", x=0))
    return fig


def report(runs: list[Path], by_step: bool = False) -> None:
    task = RunFolder(runs[0]).read_record()["task"]["name"]
    budget = BUDGET_MIN.get(task, 20)
    marks = [m for m in MARKS_MIN if m <= budget]
    print("| run | params | steps/s | " + " | ".join(f"MAE @{m} min" for m in marks) + " | final (min) |"
          + (" relative mean error (final) |" if task == "regression" else ""))
    print("|---|---|---|" + "---|" * len(marks) + "---|" + ("---|" if task == "regression" else ""))
    drawn = {}
    table = {}  # the printed table, for the JSON beside the figure (the results pages read it)
    for run in runs:
        record = RunFolder(run).read_record()
        points = curve(run)
        if not points:
            continue
        minutes, step, mae, relative = points[-1]
        cells, marked = [], {}
        for m in marks:
            p = at_minutes(points, m)
            shown = p and m <= minutes + 0.5
            cells.append(f"{p[2]:.4f} ({p[1]})" if shown else "-")
            if shown:
                marked[str(m)] = dict(minutes=p[0], step=p[1], entropy_mae_bits=p[2], relative_mean_error=p[3])
        print(f"| {run.name} | {record['n_params']:,} | {step / (minutes * 60):.1f} | " + " | ".join(cells)
              + f" | {mae:.4f} ({minutes:.1f}) |"
              + ((f" {relative:.3f} |" if relative is not None else " - |") if task == "regression" else ""))
        table[run.name] = dict(path=str(run), n_params=record["n_params"], steps_per_s=step / (minutes * 60),
                               at_minutes=marked, final=dict(minutes=minutes, step=step, entropy_mae_bits=mae,
                                                             relative_mean_error=relative))
        drawn[run.name] = (record, points)
    fig = figure(task, drawn, by_step)
    from interp.export import figure_image, figure_pdf

    out = Path("figures/readme")
    out.mkdir(parents=True, exist_ok=True)
    stem = "cpu-preset-curves" + ("" if task == "bijection" else f"-{task}")
    (out / f"{stem}.pdf").write_bytes(figure_pdf(fig))
    (out / f"{stem}.png").write_bytes(figure_image(fig, "png"))
    # MAE at each mark: the last evaluation at or before it; steps/s: the last evaluation's step over its minutes
    (out / f"{stem}.json").write_text(json.dumps(dict(command=shlex.join(["python", *sys.argv]), task=task,
                                                      marks_min=marks, runs=table), indent=1) + "\n")
    print(f"wrote {out / stem}.pdf, .png and .json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="bijection", help="wind tunnel to train on (default: bijection)")
    parser.add_argument("--variant", action="append", choices=list(VARIANTS), help="variants to train (default: cpu)")
    parser.add_argument("--minutes", type=float, help="stop each variant after this many minutes of training")
    parser.add_argument("--report", nargs="*", type=Path, help="only report on these run folders")
    parser.add_argument("--by-step", action="store_true",
                        help="plot against training steps, not minutes (for runs timed on different machines)")
    args = parser.parse_args()
    if args.report is not None:
        report(args.report, args.by_step)
        return
    runs = [train(args.task, name, VARIANTS[name], args.minutes) for name in (args.variant or ["cpu"])]
    report(runs, args.by_step)


if __name__ == "__main__":
    main()
