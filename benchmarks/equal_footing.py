"""The equal-footing searches: each architecture's best trial against training compute, every trial's score
against its learning rate, one pair of figures per task, and the records.

    python benchmarks/equal_footing.py runs/eq-bijection-transformer runs/eq-bijection-mamba ... \
        [--tables CONTENT-ADDRESSING.json ...] [--grids SWEEP ...]
    python benchmarks/equal_footing.py --records figures/readme/equal-footing/trials-eq-hmm-*.json   # figures only

Each argument is an ``interp tune`` folder. Writes figures/readme/equal-footing/curves-TASK.{pdf,png}
for each task searched (each row's best trial, over all its searches, against the tokens it trained on,
a short-table stage at what its shorter sequences cost), curves-TASK-trials.{pdf,png} (every trial's
held-out score against its learning rate, a panel per row) and trials-FOLDER.{json,csv} (every trial of
each search: settings, state, score, curve, budget), and prints one line per search with its best trial.
``--records`` draws the same figures from those records alone (the searches' run folders need not exist).
``--tables`` takes ``interp run content-addressing``
results (``--sizes 1,2,4,8,16,32,64 --queries 3``) and draws their accuracy against table size into
table-size.{pdf,png}, beside 1/n (answering with any value of the table). ``--grids`` takes ``interp
sweep`` folders trained over widths and draws their MQAR grids side by side into mqar-grid.{pdf,png}.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
from pathlib import Path

from interp.files import RunFolder

OUT = Path("figures/readme/equal-footing")


def tokens_seen(run: dict, steps) -> dict[int, int]:
    """Training tokens of a run (its run record) after each of these steps (curriculum stages at their own length)."""
    from analyses.budget import training_tokens

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
        trained = RunFolder(trial["run"]) if trial["run"] else None
        if trained is None or not trained.record.exists():
            continue
        run = trained.read_record()
        trial["run_status"] = run["status"]
        if not trial["curve"]:
            logged = trained.logged_lines()
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


def row_order(row: str) -> int:
    """Rows in the order of COLOURS (the transformer first), others after them."""
    return list(COLOURS).index(row) if row in COLOURS else len(COLOURS)


def best_trials(searches: list[dict]) -> list[tuple[dict, dict]]:
    """Each row's best trial (over all its searches) with its search, the rows in their order."""
    bests = row_bests(searches)
    found = [(summary, trial) for summary in searches for trial in summary["trials"]
             if bests.get(family(summary, trial)) == (id(summary), trial["name"]) and trial.get("tokens_seen")]
    return sorted(found, key=lambda pair: row_order(family(*pair)))


def score_axis(fig, task: str, metric: str) -> str:
    """The score axis in log scale with the task's reference line (chance, or the primitive's pass line);
    returns the axis title."""
    import tasks
    from analyses import style

    fig.update_yaxes(type="log")
    if metric == "accuracy":
        style.reference_line(fig, 1 / 256, "chance 0.4%", color="black")
        return "held-out accuracy (tables of 1-64 pairs, log)"
    threshold = {t: p.threshold for _, (t, p) in tasks.primitives().items()}.get(task)
    if threshold is not None:
        style.reference_line(fig, threshold, f"the primitive's pass line, {threshold} bits", color="black")
    return "held-out entropy MAE, bits (log)"


def task_figure(task: str, searches: list[dict], reference: Path | None):
    """The headline of one task's searches: each row's best trial (over all its searches) against the tokens
    it trained on, one line per architecture; every trial's score is in trials_figure and the records."""
    import plotly.graph_objects as go

    from analyses import style

    metric = searches[0]["metric"]
    fig = go.Figure()
    for summary, trial in best_trials(searches):
        steps = sorted(int(s) for s in trial["tokens_seen"])
        row = family(summary, trial)
        done = "" if trial["state"] == "complete" else f" ({state(trial)})"
        name = f"{label(summary, trial)}, {summary['budget']['steps']:,} x {summary['budget']['batch_size']}{done}"
        fig.add_scatter(x=[trial["tokens_seen"][str(s)] / 1e6 for s in steps], y=[trial["curve"][str(s)] for s in steps],
                        mode="lines+markers", name=name, line=dict(color=COLOURS.get(row, "#8c564b"), width=3),
                        hovertemplate=f"{name}<br>%{{x:.3g}}M tokens: %{{y:.4g}}<extra></extra>")
    budget = max(s["budget"]["steps"] for s in searches)
    if reference is not None:
        run = RunFolder(reference).read_record()
        rows = RunFolder(reference).logged_lines()
        curve = {r["step"]: r[f"eval_{metric}"] for r in rows if f"eval_{metric}" in r and r["step"] <= budget}
        seen = tokens_seen(run, curve)
        part = f"its first {budget:,} of {run['train']['steps']:,} steps" if budget < run["train"]["steps"] else \
            f"its preset, {run['train']['steps']:,} x {run['train']['batch_size']}, not searched"
        shift = run["model"].get("shift")
        fig.add_scatter(x=[seen[s] / 1e6 for s in sorted(curve)], y=[curve[s] for s in sorted(curve)],
                        mode="lines+markers", line=dict(color="black", dash="dot"),
                        name=f"{run['arch']}{f' shift {shift}' if shift else ''}, {reference.name} ({part})")
    y_title = score_axis(fig, task, metric)
    budgets = sorted({(s["budget"]["steps"], s["budget"]["batch_size"]) for s, _ in best_trials(searches)})
    shown = " and ".join(f"{a:,} steps x {b} sequences" for a, b in budgets)
    fig.update_layout(title=f"{task}: each architecture's best trial of the equal search against training tokens<br>"
                            f"<sup>{shown}, the same for every architecture; every trial: the trials figure</sup>",
                      xaxis_title="training tokens, millions (sequences x their length)", yaxis_title=y_title,
                      height=560, width=900)
    style.apply(fig)
    fig.update_layout(legend=dict(orientation="v", yanchor="top", y=-0.2, xanchor="left", x=0))  # below: the plot keeps its width
    return fig


# what told a row's trials apart besides the learning rate, each its own colour (the panels are the architectures)
RECIPES = {"no curriculum": "#000000", "curriculum": "#ff7f0e", "curriculum, its own search without the pruner": "#8c564b"}


def recipe(summary: dict, trial: dict) -> str:
    """What a trial ran with besides its learning rate and its row's settings: the curriculum, and a search of its own
    that the pruner did not stop."""
    on = trial["params"].get("curriculum") == "on"
    return ("curriculum" if on else "no curriculum") + (", its own search without the pruner"
                                                        if on and summary.get("pruner") == "none" else "")


def trials_figure(task: str, searches: list[dict]):
    """Every trial of one task's searches: its score against its learning rate, one panel per row (architecture),
    one line per recipe; an open marker is a trial the pruner stopped, at its score then."""
    from plotly.subplots import make_subplots

    from analyses import style

    rows = sorted({family(s, t) for s in searches for t in s["trials"] if t.get("score") is not None}, key=row_order)
    fig = make_subplots(rows=1, cols=len(rows), subplot_titles=rows, shared_yaxes=True, horizontal_spacing=0.03)
    metric, shown = searches[0]["metric"], set()
    for col, row in enumerate(rows, start=1):
        lines: dict[str, list[tuple[float, dict, dict]]] = {}
        for summary in searches:
            for trial in summary["trials"]:
                if family(summary, trial) == row and trial.get("score") is not None:
                    lines.setdefault(recipe(summary, trial), []).append((float(trial["params"]["lr"]), summary, trial))
        for name, points in lines.items():
            points.sort(key=lambda p: p[0])
            fig.add_scatter(x=[lr for lr, *_ in points], y=[t["score"] for *_, t in points], mode="lines+markers",
                            name=name, legendgroup=name, showlegend=False, row=1, col=col,
                            line=dict(color=RECIPES[name], width=1.5),
                            marker=dict(size=9, color=RECIPES[name], line=dict(color=RECIPES[name], width=2),
                                        symbol=["circle-open" if t["state"] == "pruned" else "circle" for *_, t in points]),
                            hovertext=[f"{label(s, t)}: {t['score']:.4g} ({state(t)})" for _, s, t in points],
                            hovertemplate="%{hovertext}<extra></extra>")
            shown.add(name)
        lrs = sorted({(float(t["params"]["lr"]), t["params"]["lr"]) for points in lines.values() for *_, t in points})
        fig.update_xaxes(type="log", tickvals=[lr for lr, _ in lrs], ticktext=[text for _, text in lrs], tickangle=0,
                         title_text="learning rate", range=[math.log10(lrs[0][0]) - 0.3, math.log10(lrs[-1][0]) + 0.3],
                         row=1, col=col)
    # the legend: each recipe once (filled: the trial ran its budget), and what an open marker is
    for name in sorted(shown, key=list(RECIPES).index):
        fig.add_scatter(x=[None], y=[None], mode="lines+markers", name=name, legendgroup=name,
                        line=dict(color=RECIPES[name], width=1.5), marker=dict(size=9, color=RECIPES[name]))
    fig.add_scatter(x=[None], y=[None], mode="markers", name="open: stopped by the pruner, at its score then",
                    marker=dict(size=9, color="grey", symbol="circle-open", line=dict(color="grey", width=2)))
    fig.update_yaxes(type="log")
    fig.update_yaxes(title_text="held-out accuracy (log)" if metric == "accuracy" else "held-out entropy MAE, bits (log)",
                     row=1, col=1)
    budgets = sorted({(s["budget"]["steps"], s["budget"]["batch_size"]) for s in searches})
    fig.update_layout(title=f"{task}: every trial of the equal search, its score against its learning rate<br>"
                            f"<sup>{' and '.join(f'{a:,} steps x {b} sequences' for a, b in budgets)}, the same for "
                            f"every architecture</sup>", width=900, height=480)
    style.apply(fig)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.25, xanchor="left", x=0))
    return fig


def read_record(path: Path) -> dict:
    """A search's record (trials-FOLDER.json, as write_records wrote it): its summary, every trial's curve and tokens."""
    return json.loads(path.read_text())


def draw(by_task: dict[str, list[dict]], reference: Path | None) -> None:
    """curves-TASK.{pdf,png} (the headline) and curves-TASK-trials.{pdf,png} (every trial) for each task."""
    from interp.export import figure_image, figure_pdf

    reference_task = reference and RunFolder(reference).read_record()["task"]["name"]
    for task, searches in sorted(by_task.items()):
        figures = {f"curves-{task}": task_figure(task, searches, reference if reference_task == task else None),
                   f"curves-{task}-trials": trials_figure(task, searches)}
        for stem, fig in figures.items():
            (OUT / f"{stem}.pdf").write_bytes(figure_pdf(fig))
            (OUT / f"{stem}.png").write_bytes(figure_image(fig, "png"))
            print(f"wrote {OUT / stem}.pdf and .png")


def main() -> None:
    from interp.export import figure_image, figure_pdf

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tunes", nargs="*", type=Path)
    parser.add_argument("--records", nargs="*", type=Path, default=[],
                        help="searches' records (trials-FOLDER.json) to draw instead of their tune folders: "
                             "the figures again without the runs")
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
    for path in args.records:
        summary = read_record(path)
        by_task.setdefault(summary["task"]["name"], []).append(summary)
    draw(by_task, args.reference)
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
