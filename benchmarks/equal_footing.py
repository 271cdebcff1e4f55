"""The equal-footing searches: every trial's curve against training compute, one figure per task, and the records.

    python benchmarks/equal_footing.py runs/eq-bijection-transformer runs/eq-bijection-mamba ... \
        [--tables CONTENT-ADDRESSING.json ...] [--grids SWEEP ...]

Each argument is an ``interp tune`` folder. Writes figures/readme/equal-footing/curves-TASK.{pdf,png}
for each task searched (every trial's held-out score against the tokens it trained on, a short-table
stage at what its shorter sequences cost; each row's best trial, over all its searches, bold) and
trials-FOLDER.{json,csv} (every trial of each search: settings, state, score, curve, budget), and
prints one line per search with its best trial. ``--tables`` takes ``interp run content-addressing``
results (``--sizes 1,2,4,8,16,32,64 --queries 3``) and draws their accuracy against table size into
table-size.{pdf,png}, beside 1/n (answering with any value of the table). ``--grids`` takes ``interp
sweep`` folders trained over widths and draws their MQAR grids side by side into mqar-grid.{pdf,png}.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

OUT = Path("figures/readme/equal-footing")


def tokens_seen(run: dict, steps) -> dict[int, int]:
    """Training tokens of a run (its run.json) after each of these steps (curriculum stages at their own length)."""
    from analyses.base import training_tokens

    return {int(step): training_tokens(run, int(step)) for step in steps}


def state(trial: dict) -> str:
    if trial["state"] in ("complete", "pruned"):
        return trial["state"]
    if trial.get("run_status") == "finished":
        return "finished"
    return f"stopped at step {trial['steps_trained']}" if trial.get("steps_trained") else trial["state"]


def label(summary: dict, trial: dict) -> str:
    arch = summary["arch"]
    params = dict(trial["params"])
    shift = params.pop("shift", None)
    if shift is not None:
        arch += " plain" if shift == "0" and arch == "transformer" else f" shift {shift}" if shift != "0" else " no shift"
    fixed = {k: v for k, v in summary.get("model_options", {}).items() if k not in trial["params"]}
    if fixed:  # a model setting every trial of the search shares, e.g. the transformer's position offsets
        arch += " (" + ", ".join(f"{k} {v}" for k, v in fixed.items()) + ")"
    return f"{arch}, " + ", ".join(f"{k} {v}" for k, v in params.items())


COLOURS = {"transformer": "#1f77b4", "transformer plain": "#17becf", "mamba": "#d62728", "lstm": "#2ca02c",
           "mlp": "#9467bd"}


def read_search(folder: Path) -> dict:
    """An ``interp tune`` folder's summary, with the curve of every trial that has a run folder (a trial the
    study has not read yet, or one stopped with its worker, from its own log) and the tokens behind each point."""
    from interp import results

    summary = results.read(folder / "tune.json", "tune")["metrics"]
    for trial in summary["trials"]:
        run_file = Path(trial["run"]) / "run.json" if trial["run"] else None
        if run_file is None or not run_file.exists():
            continue
        run = json.loads(run_file.read_text())
        trial["run_status"] = run["status"]
        if not trial["curve"]:
            log = run_file.parent / "metrics.jsonl"
            logged = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
            trial["curve"] = {str(r["step"]): r[f"eval_{summary['metric']}"] for r in logged
                              if f"eval_{summary['metric']}" in r}
            trial["steps_trained"] = max(map(int, trial["curve"]), default=None)
        if run["status"] == "finished":
            trial["run_score"] = run["final"][summary["metric"]]
        if trial["curve"]:
            trial["tokens_seen"] = {str(k): v for k, v in tokens_seen(run, trial["curve"]).items()}
    return summary


def family(summary: dict, trial: dict) -> str:
    """The row a trial belongs to: its architecture, and "transformer plain" for a transformer without the shift."""
    shift = trial["params"].get("shift", summary.get("model_options", {}).get("shift"))
    return "transformer plain" if summary["arch"] == "transformer" and str(shift) == "0" else summary["arch"]


def write_records(folder: Path, summary: dict) -> None:
    """trials-FOLDER.{json,csv}: every trial of the search, its runs named by their place in the search."""
    for trial in summary["trials"]:
        trial["run"] = trial["run"] and str(Path(trial["run"]).relative_to(folder.parent.parent)
                                            if Path(trial["run"]).is_absolute() else trial["run"])
    record = {k: v for k, v in summary.items() if k != "storage"}
    (OUT / f"trials-{folder.name}.json").write_text(json.dumps(record, indent=1) + "\n")
    shutil.copyfile(folder / "trials.csv", OUT / f"trials-{folder.name}.csv")
    best = summary["best"]
    done = sum(t["state"] in ("complete", "pruned") for t in summary["trials"])
    print(f"{summary['study']}: {done} of {summary['n_trials']} trials, budget {summary['budget']['steps']:,} steps x "
          f"{summary['budget']['batch_size']}; best " + (f"{best['name']} {summary['metric']} {best['score']:.4f}"
                                                           if best else "none yet"))


def row_bests(searches: list[dict]) -> dict[str, tuple[int, str]]:
    """Each row's best trial over all the searches of one task, as (id of its search, trial name): a row may
    take trials from several searches (e.g. a second search that gives some recipes the full budget), and
    only the best of their bests is the row's."""
    bests: dict[str, tuple[float, int, str]] = {}
    for summary in searches:
        best = summary.get("best")
        if not best or best.get("score") is None:
            continue
        trial = next(t for t in summary["trials"] if t["name"] == best["name"])
        row = family(summary, trial)
        key = best["score"] if summary.get("direction", "minimize") == "minimize" else -best["score"]
        if row not in bests or key < bests[row][0]:
            bests[row] = (key, id(summary), best["name"])
    return {row: (search, name) for row, (_, search, name) in bests.items()}


def task_figure(task: str, searches: list[dict], reference: Path | None):
    """Every trial of every search on one task against its training tokens; each row's best trial (over all
    its searches) bold, the others thin (dashed where the pruner stopped them)."""
    import plotly.graph_objects as go

    import tasks
    from analyses import style

    metric = searches[0]["metric"]
    accuracy = metric == "accuracy"
    fig = go.Figure()
    bests = row_bests(searches)
    others: dict[str, int] = {}  # row -> its trials that are not the row's best
    for summary in searches:
        for trial in summary["trials"]:
            if not trial.get("tokens_seen"):
                continue
            steps = sorted(int(s) for s in trial["tokens_seen"])
            row = family(summary, trial)
            top = bests.get(row) == (id(summary), trial["name"])
            name = (f"{label(summary, trial)}, {summary['budget']['steps']:,} x {summary['budget']['batch_size']} "
                    f"({state(trial)})" + (": best" if top else ""))
            others[row] = others.get(row, 0) + (not top)
            # The legend names each row's best trial; the others of a row share one entry (every trial is named
            # on hover), so the legend stays readable however many trials a search has.
            fig.add_scatter(x=[trial["tokens_seen"][str(s)] / 1e6 for s in steps],
                            y=[trial["curve"][str(s)] for s in steps], mode="lines+markers" if top else "lines",
                            name=name, hovertemplate=f"{name}<br>%{{x:.3g}}M tokens: %{{y:.4g}}<extra></extra>",
                            showlegend=top, legendgroup=None if top else f"{row} others",
                            opacity=1 if top else 0.55,
                            line=dict(color=COLOURS.get(row, "#8c564b"), width=3 if top else 1.2,
                                      dash="dash" if trial["state"] == "pruned" else "solid"))
    for row, count in others.items():
        if count:
            fig.add_scatter(x=[None], y=[None], mode="lines", legendgroup=f"{row} others", opacity=0.55,
                            name=f"{row}: its other {count} trial{'s' * (count > 1)} (dashed: stopped by the pruner)",
                            line=dict(color=COLOURS.get(row, "#8c564b"), width=1.2))
    if reference is not None:
        run = json.loads((reference / "run.json").read_text())
        budget = searches[0]["budget"]["steps"]
        rows = [json.loads(line) for line in (reference / "metrics.jsonl").read_text().splitlines() if line.strip()]
        curve = {r["step"]: r[f"eval_{metric}"] for r in rows if f"eval_{metric}" in r and r["step"] <= budget}
        seen = tokens_seen(run, curve)
        fig.add_scatter(x=[seen[s] / 1e6 for s in sorted(curve)], y=[curve[s] for s in sorted(curve)],
                        mode="lines+markers", line=dict(color="black", dash="dot"),
                        name=f"{run['arch']}, {reference.name} (its first {budget:,} of {run['train']['steps']:,} steps)")
    if accuracy:
        style.reference_line(fig, 1 / 256, "chance 0.4%", color="black")
        y_title = "held-out accuracy (tables of 1-64 pairs)"
    else:
        fig.update_yaxes(type="log")
        threshold = {t: p.threshold for _, (t, p) in tasks.primitives().items()}.get(task)
        if threshold is not None:
            style.reference_line(fig, threshold, f"the primitive's pass line, {threshold} bits", color="black")
        y_title = "held-out entropy MAE, bits (log)"
    budgets = sorted({(s["budget"]["steps"], s["budget"]["batch_size"]) for s in searches})
    shown = " and ".join(f"{a:,} steps x {b} sequences" for a, b in budgets)
    fig.update_layout(title=f"{task}: every trial of the equal search against training tokens<br>"
                            f"({shown}, the same for every architecture)",
                      xaxis_title="training tokens, millions (sequences x their length)", yaxis_title=y_title,
                      height=700, width=980)
    style.apply(fig)
    fig.update_layout(legend=dict(orientation="v", yanchor="top", y=-0.18, xanchor="left", x=0))  # below: the plot keeps its width
    return fig


def main() -> None:
    from interp.export import figure_image, figure_pdf

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tunes", nargs="+", type=Path)
    parser.add_argument("--tables", nargs="*", type=Path, default=[], help="content-addressing results (.json)")
    parser.add_argument("--names", nargs="*", default=[], help="a legend name for each --tables result")
    parser.add_argument("--grids", nargs="*", type=Path, default=[], help="`interp sweep` folders trained over "
                                                                        "widths: one MQAR grid of all their panels")
    parser.add_argument("--grid-names", nargs="*", default=[], help="what tells each --grids sweep apart (a panel's "
                                                                     "label, e.g. 'shift 3')")
    parser.add_argument("--reference", type=Path, help="a run folder (e.g. a shipped model) drawn up to the budget, "
                                                       "dotted, on its task's figure: another schedule, the same data")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    by_task: dict[str, list[dict]] = {}
    for folder in args.tunes:
        summary = read_search(folder)
        by_task.setdefault(summary["task"]["name"], []).append(summary)
        write_records(folder, summary)
    reference_task = args.reference and json.loads((args.reference / "run.json").read_text())["task"]["name"]
    for task, searches in sorted(by_task.items()):
        fig = task_figure(task, searches, args.reference if reference_task == task else None)
        (OUT / f"curves-{task}.pdf").write_bytes(figure_pdf(fig))
        (OUT / f"curves-{task}.png").write_bytes(figure_image(fig, "png"))
        print(f"wrote {OUT / f'curves-{task}.pdf'} and .png")
    if args.tables:
        table_sizes(args.tables, args.names, figure_pdf, figure_image)
    if args.grids:
        grids(args.grids, args.grid_names, figure_pdf, figure_image)


def grids(folders: list[Path], names: list[str], figure_pdf, figure_image) -> None:
    """The MQAR-style grid of several sweeps side by side, and each sweep's record beside it."""
    from interp import results
    from interp.sweep import grid_figure

    summaries = [results.read(folder / "sweep.json", "sweep")["metrics"] for folder in folders]
    fig = grid_figure(summaries, names or None)
    (OUT / "mqar-grid.pdf").write_bytes(figure_pdf(fig))
    (OUT / "mqar-grid.png").write_bytes(figure_image(fig, "png"))
    for folder in folders:
        (OUT / f"sweep-{folder.name}.json").write_text((folder / "sweep.json").read_text())
    print(f"wrote {OUT / 'mqar-grid.pdf'} and .png")


def table_sizes(paths: list[Path], names: list[str], figure_pdf, figure_image) -> None:
    import plotly.graph_objects as go

    from analyses import style
    from interp import results

    fig = go.Figure()
    sizes = set()
    for i, path in enumerate(paths):
        numbers = results.read(path, "content-addressing")
        by_size = {int(k): v for k, v in numbers["metrics"]["accuracy_by_table_size"].items()}
        sizes |= set(by_size)
        name = names[i] if i < len(names) else numbers["run"]
        fig.add_scatter(x=sorted(by_size), y=[by_size[n] for n in sorted(by_size)], mode="lines+markers",
                        name=f"{name} ({numbers['metrics']['n_sequences']:,} sequences)")
    sizes = sorted(sizes)
    fig.add_scatter(x=sizes, y=[1 / n for n in sizes], mode="lines", name="1/n: any value of the table",
                    line=dict(color="black", dash="dot"))
    fig.update_layout(title="recall: accuracy against table size at the paper's length (d_model 64)",
                      xaxis=dict(title="pairs in the table", type="log", tickvals=sizes, ticktext=[str(n) for n in sizes]),
                      yaxis=dict(title="accuracy of bound queries", type="log"), height=700, width=900)
    style.reference_line(fig, 1 / 256, "chance 0.4%")  # after the axis type: the label's place depends on it
    style.apply(fig)
    fig.update_layout(legend=dict(orientation="v", yanchor="top", y=-0.18, xanchor="left", x=0))
    (OUT / "table-size.pdf").write_bytes(figure_pdf(fig))
    (OUT / "table-size.png").write_bytes(figure_image(fig, "png"))
    print(f"wrote {OUT / 'table-size.pdf'} and .png")


if __name__ == "__main__":
    main()
