"""Compare several runs: one table and one bar chart of calibration, and the measured primitives matrix.

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go

import models
import tasks

from .base import (Analysis, AnalysisError, Option, Result, eval_batch, held_out_batch, n_option, read_result,
                   seed_option)
from .budget import budget_text
from .calibration import measure
from .intervals import bootstrap_difference
from .style import error_bars, text_width

def primitives() -> dict[str, tuple]:
    """primitive -> (task, metric, direction, threshold), from the tasks' own declarations."""
    return {name: (task, p.metric, p.direction, p.threshold) for name, (task, p) in tasks.primitives().items()}


def _criteria() -> str:
    """Each primitive's test as the tasks declare it, for the definition."""
    return "; ".join(f"{name} from {task} (pass when {p.metric} {'<=' if p.direction == 'max' else '>='} "
                     f"{p.threshold}; {p.why})" for name, (task, p) in tasks.primitives().items())


DEFINITION = " ".join(f"""
Every model is measured with ``calibration`` on its own task (entropy MAE and KL in
bits, accuracy for discrete tasks; n held-out sequences, the same seed for all). The primitives
matrix has one row per architecture and one column per inference primitive, each judged from the
runs given, never assumed: {_criteria()}. A primitive is judged on the task as that task declares
(``Task.judged_on``; recall: every table full, the paper's 64 pairs, whatever range of table sizes the model
trained on; such a run's ``judged`` holds those numbers, ``task_changes`` what differs). A cell with no run of that task and architecture is
"not measured"; with several, the best run counts. Each run's numbers carry a 95% bootstrap interval
over sequences; for every two runs on the same task settings (measured on the same sequences),
``differences`` gives each number's difference with a paired bootstrap interval and ``differs``: true
when that interval excludes 0, i.e. the two differ beyond the noise of the evaluation set. With sweeps (``interp sweep`` folders), each cell
also gives the architecture's break point on that primitive's difficulty curve: the smallest axis
value at which it fails the same threshold at the sweep's capacity and training budget (both in the
sweep's JSON), or "beyond the tested range"; where several sweeps measure one primitive (a grid split over
folders), the one where the architecture holds furthest, named in the cell.
""".split())


def run_label(model) -> str:
    folder = getattr(model, "run_dir", None)
    name = folder.name if folder is not None else getattr(model, "checkpoint_path", None)
    name = getattr(name, "stem", name) or f"{model.task.name}-{model.arch}"
    return f"{name}@{getattr(model, 'step', '?')}"


def primitive_cell(rows: list[dict], arch: str, primitive: str) -> dict:
    task, metric, direction, threshold = primitives()[primitive]
    value = lambda r: (r.get("judged") or r).get(metric)  # on the task the primitive is judged on
    candidates = [r for r in rows if r["arch"] == arch and r["task"] == task and value(r) is not None]
    if not candidates:
        return dict(status="not measured", value=None, threshold=threshold, metric=metric, task=task)
    chosen = (min if direction == "max" else max)(candidates, key=value)
    best = value(chosen)
    passed = best <= threshold if direction == "max" else best >= threshold
    cell = dict(status="pass" if passed else "fail", value=best, threshold=threshold, metric=metric, task=task,
                run=chosen.get("run"), budget=chosen.get("budget"), n_params=chosen.get("n_params"))
    return cell | ({"judged_on": chosen["judged"]["task_changes"]} if chosen.get("judged") else {})


def read_sweeps(spec: str) -> dict[str, list[dict]]:
    """primitive -> the sweep.json of each folder in the comma-separated ``spec`` that measures it (a grid split
    over several folders, e.g. the binding ladder's plain, shifted and control models, gives several), each with
    ``folder``: where it was read."""
    found: dict[str, list[dict]] = {}
    for folder in (part.strip() for part in spec.split(",") if part.strip()):
        try:
            sweep = read_result(Path(folder) / "sweep.json", "sweep")["metrics"]
        except AnalysisError as err:
            raise AnalysisError(f"--sweeps: {err}") from None
        found.setdefault(sweep["primitive"], []).append(dict(sweep, folder=str(folder)))
    return found


def reach(brk: dict) -> tuple:
    """How far a curve holds, to compare curves: beyond the tested range first, then the larger break point."""
    return brk["value"] is None, brk["value"] or brk["last_pass"] or 0


def curve_cell(sweep: dict | list[dict], arch: str) -> dict | None:
    """Where ``arch`` breaks on the sweep's curve: the preset's capacity where the sweep trained one,
    else, of its curves (widths or evaluated runs), the one that holds furthest (the best counts, as
    for the single numbers). Given several sweeps of one primitive, the one where ``arch`` holds furthest, named
    in ``sweep``."""
    if isinstance(sweep, list):
        cells = [c for c in (curve_cell(one, arch) for one in sweep) if c]
        return max(cells, key=reach, default=None)
    by_width = sweep["break_points"].get(arch)
    if not by_width:
        return None
    width = "preset" if "preset" in by_width else max(by_width, key=lambda key: reach(by_width[key]))
    brk = by_width[width]
    budget = sweep["budget"] if sweep["mode"] == "trained" else sweep["budget"].get(width, {})
    text = (f"breaks at {sweep['axis']}={brk['value']}" if brk["value"] is not None
            else f"holds to {sweep['axis']}={brk['last_pass']}")
    grid = {k: len(sweep.get(k) or []) for k in ("lrs", "seeds")}
    return dict(axis=sweep["axis"], values=sweep["values"], width=width, text=text, **brk,
                budget_steps=budget.get("steps"), budget_batch_size=budget.get("batch_size"),
                budget_init_sequences=budget.get("init_sequences") or 0, mode=sweep["mode"],
                threshold=sweep["threshold"], complete=sweep["complete"], sweep=sweep.get("folder"),
                lrs=(sweep.get("lrs_by_arch") or {}).get(arch) or sweep.get("lrs") or [],
                seeds=sweep.get("seeds") if grid["seeds"] > 1 else None)


def compute(model, n: int = 1000, seed: int = 1234, sweeps: str = "") -> Result:
    """Calibration of every model in ``model`` (a list of loaded models) and the primitives matrix."""
    curves = read_sweeps(sweeps)
    runs = list(model) if isinstance(model, (list, tuple)) else [model]
    if not runs:
        raise AnalysisError("compare needs at least one model")
    rows, sums = [], []
    for m in runs:
        sums.append({})
        numbers = measure(m, eval_batch(m, n, seed), intervals=True, sums=sums[-1])
        budget = getattr(getattr(m, "provenance", None), "budget", None)  # the loader read it off the run's record
        rows.append(dict(run=run_label(m), task=m.task.name, task_config=m.task.config(), arch=m.arch, budget=budget,
                         n_params=sum(p.numel() for p in m.parameters()),
                         entropy_mae_bits=numbers["entropy_mae_bits"], kl_bits=numbers["kl_bits"],
                         accuracy=numbers.get("accuracy"), intervals=numbers["intervals"]))
        judged = m.task.judged_on()
        if judged.config() != m.task.config():  # the primitive's number, on the task it is judged on
            device = next(m.parameters()).device
            on = measure(m, held_out_batch(judged, n, seed).to(device), intervals=True)
            rows[-1]["judged"] = dict(task_changes={k: v for k, v in judged.config().items() if m.task.config().get(k) != v},
                                      **{k: on.get(k) for k in ("entropy_mae_bits", "kl_bits", "accuracy")},
                                      intervals=on["intervals"])
    seen: dict[str, int] = {}
    for r in rows:  # two runs of one label (models built in Python, one checkpoint twice) are told apart
        seen[r["run"]] = seen.get(r["run"], 0) + 1
        r["run"] += f" #{seen[r['run']]}" if seen[r["run"]] > 1 else ""
    measured = {r["arch"] for r in rows} | {a for sweeps_of_p in curves.values() for sweep in sweeps_of_p
                                            for a in sweep["break_points"]}
    archs = [a for a in models.ARCHS if a in measured] + sorted(measured - set(models.ARCHS))
    matrix = {arch: {p: primitive_cell(rows, arch, p) for p in primitives()} for arch in archs}
    for arch in archs:
        for p, sweeps_of_p in curves.items():
            if p in matrix[arch]:
                matrix[arch][p]["curve"] = curve_cell(sweeps_of_p, arch)
    metrics = dict(runs=rows, differences=differences(rows, sums), primitives=matrix, n_sequences=n, seed=seed,
                   sweeps=sorted(curves))
    return Result("compare", DEFINITION, metrics, {
        "calibration": bar_figure(rows), "primitives": matrix_figure(matrix)})


def differences(rows: list[dict], sums: list[dict]) -> list[dict]:
    """For every two runs on the same task settings (so measured on the same held-out sequences): each
    headline number's difference (first minus second) with its paired bootstrap interval, and whether it
    differs beyond the noise of the evaluation set (the interval excludes 0)."""
    found = []
    for i, first in enumerate(rows):
        for j in range(i + 1, len(rows)):
            second = rows[j]
            if first["task_config"] != second["task_config"]:
                continue
            for metric in [m for m in sums[i] if m in sums[j]]:  # in the measured order (a set's varies by run)
                low, high = bootstrap_difference(sums[i][metric], sums[j][metric])
                found.append(dict(first=first["run"], second=second["run"], metric=metric,
                                  difference=first[metric] - second[metric] if metric in first else None,
                                  interval=[low, high], differs=bool(low > 0 or high < 0)))
    return found


def bar_figure(rows: list[dict]) -> go.Figure:
    # one line per run: a two-line tick label, rotated, reads as two categories (one under each trace)
    labels = [r["run"] if r["task"] in r["run"] and r["arch"] in r["run"] else f"{r['run']} ({r['task']}/{r['arch']})"
              for r in rows]
    fig = go.Figure()
    def bars(metric: str) -> dict:  # none where a run has no such number (regression has no accuracy)
        return error_bars([r.get(metric) for r in rows], [r.get("intervals", {}).get(metric) for r in rows])

    fig.add_bar(x=labels, y=[r["entropy_mae_bits"] for r in rows], name="entropy MAE (bits)", offsetgroup="mae",
                error_y=bars("entropy_mae_bits"),
                customdata=[[r["kl_bits"], r["n_params"]] for r in rows],
                hovertemplate="%{x}<br>MAE %{y:.4g} bits<br>KL %{customdata[0]:.4g} bits"
                              "<br>%{customdata[1]:,} params<extra></extra>")
    fig.add_bar(x=labels, y=[r["accuracy"] for r in rows], name="accuracy", yaxis="y2", offsetgroup="accuracy",
                error_y=bars("accuracy"))
    fig.update_layout(title="Calibration of each run on its own task", barmode="group", 
                      xaxis_title="run",
                      yaxis=dict(title="entropy MAE (bits, log)", type="log"),
                      yaxis2=dict(title="accuracy", overlaying="y", side="right", range=[0, 1]),
                      width=300 + 140 * len(rows), height=460)
    return fig


CELL_FONT = 13  # the cells' text, readable where the page shows the figure (~760 px wide)


def cell_lines(line: str, width: float) -> list[str]:
    """``line`` broken at spaces into lines at most ``width`` pixels wide at the cells' font (a bold line stays
    bold)."""
    bold = line.startswith("<b>") and line.endswith("</b>")
    words, out = (line[3:-4] if bold else line).split(" "), [""]
    for word in words:
        trial = f"{out[-1]} {word}".strip()
        if out[-1] and text_width(trial, CELL_FONT) > width:
            out.append(word)
        else:
            out[-1] = trial
    return [f"<b>{part}</b>" for part in out] if bold else out


def matrix_figure(matrix: dict) -> go.Figure:
    archs, prims = list(matrix), list(primitives())
    score = {"pass": 1, "fail": 0, "not measured": 0.5}
    width = 860
    room = (width - 220) / max(1, len(prims)) - 16  # a cell's width less its padding (the row labels take ~140 px)

    def lines(cell: dict) -> list[str]:
        """The cell's lines: where the sweep's curve breaks and its budget per point, then the verdict on the run's
        own task, then that run's budget and parameters (one plain line each, none in a smaller font)."""
        out = []
        curve = cell.get("curve")
        if curve:
            out.append(f"<b>{curve['text']}</b>")
            if curve["budget_steps"]:
                budget = dict(steps=curve["budget_steps"], batch_size=curve["budget_batch_size"],
                              init_sequences=curve.get("budget_init_sequences") or 0)
                grid = [f"best of {len(curve['lrs'])} rates"] if len(curve.get("lrs") or []) > 1 else []
                grid += [f"{len(curve['seeds'])} seeds"] if curve.get("seeds") else []
                out.append(f"{budget_text(budget)} per point" + (f" ({', '.join(grid)})" if grid else ""))
                if curve.get("sweep"):
                    out.append(f"sweep {'/'.join(Path(curve['sweep']).parts[-2:])}")
        single = cell["status"] + (f" {cell['value']:.3g}" if cell["value"] is not None else "")
        if cell.get("judged_on"):  # measured on the task as the primitive is judged, not the run's own
            single += " on " + ", ".join(f"{k}={v}" for k, v in cell["judged_on"].items())
        out.append(single)
        if cell["value"] is not None:  # the budget of the run the cell is judged from, in every cell
            params = f" · {cell['n_params'] / 1e3:.0f}k params" if cell.get("n_params") else ""
            out.append(f"{budget_text(cell.get('budget'))}{params}")
        return [part for line in out for part in cell_lines(line, room)]

    text = [[lines(matrix[a][p]) for p in prims] for a in archs]
    tallest = max((len(cell) for row in text for cell in row), default=1)
    fig = go.Figure(go.Heatmap(
        z=[[score[matrix[a][p]["status"]] for p in prims] for a in archs], x=prims, y=archs,
        text=[["<br>".join(cell) for cell in row] for row in text],
        texttemplate="%{text}", textfont=dict(size=CELL_FONT), zmin=0, zmax=1, showscale=False, xgap=2, ygap=2,
        colorscale=[[0, "#f4a6a6"], [0.5, "#e8e8e8"], [1, "#9fd8a4"]],
        hovertemplate="%{y} · %{x}<br>%{text}<extra></extra>"))
    fig.update_layout(yaxis=dict(autorange="reversed", showgrid=False), xaxis=dict(showgrid=False),
                      title="Inference primitives, measured<br><sup>each cell: where the sweep's curve breaks (its budget "
                            "per point), the verdict on the run's own task, that run's steps x batch and parameters; "
                            "thresholds in the JSON</sup>",
                      width=width, height=120 + len(archs) * (18 * tallest + 24))
    return fig


ANALYSIS = Analysis("compare", "calibration of several runs side by side, and the measured primitives matrix",
                    DEFINITION, compute,
                    options=(n_option(1000), seed_option(),
                             Option("sweeps", "", "comma-separated `interp sweep` folders: each cell also states where "
                                                  "the architecture breaks on that primitive's difficulty curve")),
                    multi_model=True, order=9)
