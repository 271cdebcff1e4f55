"""Every shipped model's held-out score against the training compute it had, one figure per task.

    python benchmarks/training_compute.py                      # the shipped models
    python benchmarks/training_compute.py runs/my-hmm-run ...  # and these runs too

The x axis is training tokens (sequences x their length, curriculum stages at their own length, and,
for a run started from another checkpoint, what that one had seen), the y axis the trainer's own
held-out evaluations (the task's primitive metric: recall's accuracy, otherwise the entropy MAE in
bits). Where the budgets differ, the figure shows each architecture at the budget of the cheapest
one (a dotted line): ``compute.json`` lists, per task, each model's budget, its final score and its
score at its last evaluation within that common budget. A score read off a longer run's curve at the
common budget is taken mid-schedule (its learning rate not yet annealed), so it favours the cheaper
run; the JSON says which scores are read that way.

Writes figures/readme/equal-footing/compute-TASK.{pdf,png} and compute.json.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

OUT = Path("figures/readme/equal-footing")


def curve(folder: Path, metric: str) -> tuple[dict, list[tuple[int, int, float]]]:
    """A run's record and its (step, tokens, score) at every held-out evaluation."""
    from analyses.base import training_tokens
    from interp.checkpoint import budget
    from interp.files import RunFolder

    run = RunFolder(folder)
    record = run.read_record()
    before = budget(run, 0)["init_tokens"]  # what a run started from another checkpoint had seen
    rows = run.logged_lines()
    points = [(r["step"], before + training_tokens(record, r["step"]), r[f"eval_{metric}"]) for r in rows
              if f"eval_{metric}" in r]
    return record, points


def main() -> None:
    import plotly.graph_objects as go

    import tasks
    from analyses import style
    from interp import checkpoint
    from interp.catalog import shipped
    from interp.files import RunFolder
    from interp.export import figure_image, figure_pdf

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", type=Path, help="run folders to draw beside the shipped models")
    args = parser.parse_args()
    folders = [path for name, path in shipped().items() if len(RunFolder(path).saved()) < 3] + list(args.runs)
    by_task: dict[str, list[Path]] = {}
    for folder in folders:
        by_task.setdefault(RunFolder(folder).read_record()["task"]["name"], []).append(folder)
    primitive = {task: p.metric for _, (task, p) in tasks.primitives().items()}
    OUT.mkdir(parents=True, exist_ok=True)
    summary = {}
    colours = {"transformer": "#1f77b4", "mamba": "#d62728", "lstm": "#2ca02c", "mlp": "#9467bd"}
    for task in sorted(by_task):
        metric = primitive.get(task, "entropy_mae_bits")
        curves = {folder.name: curve(folder, metric) for folder in sorted(by_task[task])}
        budgets = {folder.name: checkpoint.budget(RunFolder(folder), curves[folder.name][0]["train"]["steps"])
                   for folder in by_task[task]}
        common = min(b["tokens"] for b in budgets.values())
        fig = go.Figure()
        rows = {}
        for name, (record, points) in curves.items():
            within = [p for p in points if p[1] <= common]
            at_common = within[-1] if within else None
            budget = budgets[name]
            rows[name] = dict(arch=record["arch"], steps=budget["steps"], batch_size=budget["batch_size"],
                              sequences=budget["sequences"], tokens=budget["tokens"],
                              init_tokens=budget["init_tokens"], final=record["final"][metric],
                              at_common_budget=at_common and dict(step=at_common[0], tokens=at_common[1],
                                                                   score=at_common[2],
                                                                   mid_schedule=at_common[0] < budget["steps"]))
            fig.add_scatter(x=[t / 1e6 for _, t, _ in points], y=[s for *_, s in points], mode="lines+markers",
                            name=f"{name}: {budget['steps']:,} steps x {budget['batch_size']}"
                                 + (" after another run" if budget["init_tokens"] else ""),
                            line=dict(color=colours.get(record["arch"]), dash="dash" if budget["init_tokens"] else "solid"))
        fig.add_vline(x=common / 1e6, line_dash="dot", line_color="grey", annotation_text="the cheapest budget",
                      annotation_position="bottom right")
        xs = [t / 1e6 for _, points in curves.values() for _, t, _ in points if t]
        span = [math.log10(min(xs)) - 0.1, math.log10(max(xs)) + 0.1]  # explicit: the line's label stretches it
        label = {"accuracy": "held-out accuracy"}.get(metric, "held-out entropy MAE (bits)")
        fig.update_layout(title=f"{task}: held-out score against training compute, every shipped architecture",
                          xaxis=dict(title="training tokens, millions (log)", type="log", range=span),
                          yaxis=dict(title=label, type="log"), height=620, width=940)
        style.apply(fig)
        fig.update_layout(legend=dict(orientation="v", yanchor="top", y=-0.18, xanchor="left", x=0))
        (OUT / f"compute-{task}.pdf").write_bytes(figure_pdf(fig))
        (OUT / f"compute-{task}.png").write_bytes(figure_image(fig, "png"))
        summary[task] = dict(metric=metric, common_budget_tokens=common, models=rows)
        equal = len({(r["steps"], r["batch_size"], r["init_tokens"]) for r in rows.values()}) == 1
        print(f"{task}: {'equal budgets' if equal else 'budgets differ'}; common budget {common / 1e6:.3g}M tokens")
        for name, row in rows.items():
            common_score = row["at_common_budget"]
            print(f"  {name:<28} {row['steps']:>6,} x {row['batch_size']:<4} {row['tokens'] / 1e6:8.3g}M tokens  "
                  f"final {row['final']:.4g}" + (f"  at the common budget {common_score['score']:.4g}"
                                                 if common_score and common_score["mid_schedule"] else ""))
    (OUT / "compute.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {OUT}/compute-*.pdf, .png and compute.json")


if __name__ == "__main__":
    main()
