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
    from analyses.budget import training_tokens
    from interp.checkpoint import budget
    from interp.files import RunFolder

    run = RunFolder(folder)
    record = run.read_record()
    before = budget(run, 0)["init_tokens"]  # what a run started from another checkpoint had seen
    rows = run.logged_lines()
    points = [(r["step"], before + training_tokens(record, r["step"]), r[f"eval_{metric}"]) for r in rows
              if f"eval_{metric}" in r]
    return record, points


COLOURS = {"transformer": "#1f77b4", "mamba": "#d62728", "lstm": "#2ca02c", "mlp": "#9467bd"}
SPARE = ("#17becf", "#8c564b", "#e377c2", "#bcbd22")  # a second model of an architecture in one panel


def panels(budgets: dict[str, dict]) -> list[list[str]]:
    """The models of one task split into the panels they are drawn in: where an architecture has several models
    (the equal search's and its preset's), the left panel holds each architecture's model at one budget (a model
    named *-equal, or for an architecture without one, its model trained at the equal search's budget; with no
    search, the budget most models share) and the right one the rest (longer presets, runs continued from
    another); otherwise one panel."""
    arch = {name: b["arch"] for name, b in budgets.items()}
    if len(set(arch.values())) == len(arch):
        return [list(budgets)]
    fresh = [(b["steps"], b["batch_size"]) for b in budgets.values() if not b["init_tokens"]]
    equal = {(b["steps"], b["batch_size"]) for name, b in budgets.items() if name.endswith("-equal")} or \
        {max(fresh, key=fresh.count)}
    searched = {arch[name] for name in budgets if name.endswith("-equal")}
    left = [name for name, b in budgets.items() if name.endswith("-equal") or arch[name] not in searched
            and (b["steps"], b["batch_size"]) in equal and not b["init_tokens"]]
    right = [name for name in budgets if name not in left]
    return [left, right] if left and right else [list(budgets)]


def figure(task: str, metric: str, curves: dict[str, list], budgets: dict[str, dict], common: float):
    """Every model's held-out score against its training tokens: one colour per architecture (a legend entry
    naming its models and budgets), a second model of an architecture in a panel in a colour of its own; the
    cheapest budget dotted."""
    from plotly.subplots import make_subplots

    from analyses import style

    def order(name: str):  # the architectures in COLOURS' order, each one's equal-search model first
        arch = budgets[name]["arch"]
        return (list(COLOURS).index(arch) if arch in COLOURS else len(COLOURS), budgets[name]["init_tokens"],
                not name.endswith("-equal"), name)

    groups = [sorted(group, key=order) for group in panels(budgets)]
    shared = "the equal search's" if any(name.endswith("-equal") for name in budgets) else "the shared"
    titles = ([f"at {shared} budget",
               "presets and continued runs"]
              if len(groups) == 2 else [""])
    fig = make_subplots(rows=1, cols=len(groups), shared_yaxes=True, shared_xaxes=True, horizontal_spacing=0.04,
                        subplot_titles=titles)
    colour_of: dict[str, str] = {}
    for group in groups:
        taken: set[str] = set()
        for name in group:
            own = COLOURS.get(budgets[name]["arch"], SPARE[0])
            colour_of[name] = own if own not in taken else next(c for c in SPARE if c not in taken)
            taken.add(colour_of[name])
    legend: dict[str, list[str]] = {}  # colour -> what its models are
    for name in sorted(budgets, key=order):
        b = budgets[name]
        legend.setdefault(colour_of[name], []).append(f"{name} {b['steps']:,} x {b['batch_size']}"
                                                      + (" after another run" if b["init_tokens"] else ""))
    for col, group in enumerate(groups, start=1):
        for name in sorted(group, key=lambda n: list(legend).index(colour_of[n])):
            points, colour = curves[name], colour_of[name]
            first = legend[colour][0].startswith(f"{name} ")  # the legend entry rides on the colour's first model
            fig.add_scatter(x=[t / 1e6 for _, t, _ in points], y=[s for *_, s in points], mode="lines+markers",
                            name=f"{budgets[name]['arch']}: " + "; ".join(legend[colour]), legendgroup=colour,
                            showlegend=first, line=dict(color=colour), marker=dict(size=5),
                            hovertemplate=f"{name}: %{{y:.4g}} at %{{x:.3g}}M tokens<extra></extra>", row=1, col=col)
    xs = [t / 1e6 for points in curves.values() for _, t, _ in points if t]
    span = [math.log10(min(xs)) - 0.1, math.log10(max(xs)) + 0.1]  # explicit: the line's label stretches it
    label = {"accuracy": "held-out accuracy"}.get(metric, "held-out entropy MAE (bits)")
    decades = [10.0 ** k for k in range(math.ceil(span[0]), math.floor(span[1]) + 1)]  # the same ticks in every panel
    fig.update_xaxes(title_text="training tokens, millions (log)", type="log", range=span, tickvals=decades,
                     ticktext=[f"{d:g}" for d in decades])
    fig.update_yaxes(type="log")
    fig.update_yaxes(title_text=label, row=1, col=1)
    for col in range(1, len(groups) + 1):
        fig.add_vline(x=common / 1e6, line_dash="dot", line_color="grey", row=1, col=col)
    fig.update_layout(title=f"{task}: held-out score against training compute, every shipped architecture<br>"
                            f"<sup>dotted: the cheapest model's budget, {common / 1e6:.3g}M tokens</sup>",
                      height=560, width=900)
    style.apply(fig)
    fig.update_layout(legend=dict(orientation="v", yanchor="top", y=-0.2, xanchor="left", x=0))
    return fig


def measured(folders: list[Path], metric: str) -> tuple[dict, dict, int]:
    """The runs of one task: each one's record and curve, its budget (with its architecture), and the tokens of the
    cheapest budget."""
    from interp import checkpoint
    from interp.files import RunFolder

    curves = {folder.name: curve(folder, metric) for folder in sorted(folders)}
    budgets = {folder.name: checkpoint.budget(RunFolder(folder), curves[folder.name][0]["train"]["steps"])
               | dict(arch=curves[folder.name][0]["arch"]) for folder in folders}
    return curves, budgets, min(b["tokens"] for b in budgets.values())


def main() -> None:
    import tasks
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
    for task in sorted(by_task):
        metric = primitive.get(task, "entropy_mae_bits")
        curves, budgets, common = measured(by_task[task], metric)
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
        fig = figure(task, metric, {name: points for name, (_, points) in curves.items()}, budgets, common)
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
