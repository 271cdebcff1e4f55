"""``interp sweep``: difficulty curves, the measured form of the primitives matrix.

Each architecture is trained at each value of one task setting (the difficulty axis: recall's N,
the HMM's K or S, bijection's V; larger is harder) and, optionally, at each model width, with one
training budget for every point (the capacity reference's recipe for the task, or ``--steps`` and
``--batch-size``), then measured on held-out sequences with the task's primitive metric. Like the
MQAR grids of the Zoology work: where each architecture falls below the threshold, at equal
capacity (the preset's matched widths, or the same ``d_model`` for all) and equal budget.

With ``runs`` instead, nothing is trained: each given model is measured at every axis value (the
task it was trained on with that one setting changed; recall's N keeps the table's length, so no query
moves), a curve at the capacity and budget those runs had (both recorded per point).

Every trained point is a normal run folder under ``<out>/runs`` plus a ``point.json`` of its numbers, so an
interrupted sweep resumes: finished points are read back, an interrupted run continues from its
resume state. ``sweep.json`` (curves, break points, thresholds, budget) and ``sweep.pdf`` / ``.html``
/ ``.png`` are rewritten after every point.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import plotly.graph_objects as go
from tqdm.auto import tqdm

import models
import tasks

from .checkpoint import pick_device
from .errors import UserError
from .files import atomic_write_json, check_writes
from .recipe import recorded_settings, resolve
from .train import Trainer

DEFINITION = " ".join("""
 Each point is one model of the architecture trained from scratch on the task with the axis setting
at that value (other settings fixed), with the same training budget (steps, batch size, learning-rate
schedule) for every point and architecture, then measured with ``calibration`` on held-out
sequences of that task: the task's primitive metric (accuracy or entropy MAE in bits). Capacity is
the preset's: the capacity reference's model and every other architecture matched to its parameter
count on that task, or, with widths, d_model set to the width for every architecture. The break
point of an architecture (at one width) is the smallest axis value whose metric fails the threshold;
none within the tested values is reported as beyond the tested range. Larger axis values are assumed
harder. Evaluated sweeps (given runs) measure each trained model on its task with the axis setting
changed instead of training one per point; their budget is each run's own.
""".split())


@dataclass(frozen=True)
class Point:
    arch: str
    value: int
    width: int | None = None
    run: str | None = None  # an evaluated sweep: the trained run measured at this value

    @property
    def curve(self) -> str:
        """Which curve of its architecture the point is on: the preset's capacity, a width or a run."""
        return self.run or (str(self.width) if self.width else "preset")


def parse_axis(spec: str) -> tuple[str, list[int]]:
    """``"N=4,8,16"`` -> ("N", [4, 8, 16])."""
    name, sep, values = str(spec).partition("=")
    try:
        parsed = sorted({int(v) for v in values.split(",") if v.strip()})
    except ValueError:
        parsed = []
    if not sep or not name.strip() or not parsed:
        raise UserError(f"--axis must be SETTING=V1,V2,... with integer values, e.g. --axis N=4,8,16,32,64; got {spec!r}")
    return name.strip(), parsed


def break_point(curve: list[tuple[int, float]], direction: str, threshold: float) -> dict:
    """The first axis value (in increasing order) whose metric fails; a curve that never fails is
    'beyond the tested range'."""
    passes = (lambda v: v <= threshold) if direction == "max" else (lambda v: v >= threshold)
    curve = sorted(curve)
    for value, metric in curve:
        if not passes(metric):
            status = "fails at every value tested" if value == curve[0][0] else "breaks"
            return dict(value=value, status=status, last_pass=max((v for v, _ in curve if v < value), default=None))
    return dict(value=None, status="beyond the tested range", last_pass=curve[-1][0] if curve else None)


class Sweep:
    def __init__(self, task: str | None, axis: str, archs: tuple[str, ...], out: Path, widths: tuple[int, ...] = (),
                 preset: str = "cpu", steps: int | None = None, batch_size: int | None = None,
                 task_options: dict | None = None, model_options: dict | None = None, n: int = 1000,
                 seed: int = 0, device: str | None = None, runs: tuple[str, ...] = (), lr: float | None = None,
                 curriculum: list | None = None):
        self.setting, self.values = parse_axis(axis)
        self.out, self.preset, self.widths = Path(out), preset, tuple(widths)
        self.task_options, self.model_options = dict(task_options or {}), dict(model_options or {})
        self.n, self.seed, self.device = n, seed, pick_device(device)
        self.runs = self.read_runs(runs, task) if runs else {}
        self._loaded = {}  # an evaluated sweep's model in use (points come run by run)
        if self.runs:
            if widths or steps or batch_size or task_options or model_options or lr or curriculum is not None:
                raise UserError("an evaluated sweep (--runs) measures the runs as trained; drop --widths, --steps, "
                                "--batch-size, --lr, --curriculum, -T and -M, or drop --runs to train one model per point")
            task = next(iter(self.runs.values()))["task"]["name"]
            archs = tuple(dict.fromkeys(r["arch"] for r in self.runs.values()))
        if task not in tasks.NAMES:
            raise UserError(f"unknown task {task!r}; valid tasks: {', '.join(tasks.NAMES)}")
        bad = [a for a in archs if a not in models.ARCHS]
        if bad:
            raise UserError(f"unknown architecture(s) {', '.join(bad)}; valid: {', '.join(models.ARCHS)}")
        self.task_name, self.archs = task, tuple(archs)
        self.primitive_name, self.primitive = next(((name, p) for name, (t, p) in tasks.primitives().items()
                                                    if t == task), (None, None))
        if self.primitive is None:
            raise UserError(f"task {task!r} declares no inference primitive, so a sweep has no metric to plot")
        for point in self.points():  # refuse a bad axis or setting before any training
            self.task_at(point)
        if self.runs:
            self.budget = None
            return
        known = {f.name for arch in self.archs for f in fields(models.architecture(arch).config_class)}
        unknown = sorted(set(self.model_options) - known)
        if unknown:
            raise UserError(f"-M {', '.join(unknown)}: no swept architecture has that setting; valid: "
                            f"{', '.join(sorted(known))}")
        reference = models.REFERENCE or models.ARCHS[0]
        given = {k: v for k, v in dict(steps=steps, batch_size=batch_size, lr=lr, curriculum=curriculum).items()
                 if v is not None}
        budget = resolve(self.task_at(self.points()[0]), reference, preset, train_options=given | {"seed": seed}).train
        self.budget = replace(budget, eval_size=min(budget.eval_size, 256)).validate()

    @staticmethod
    def read_runs(runs: tuple[str, ...], task: str | None) -> dict[str, dict]:
        """Run name -> its run.json (with the folder), every run of the one task."""
        from .catalog import locate

        found = {}
        for spec in runs:
            folder = locate(spec)
            try:
                record = json.loads((folder / "run.json").read_text())
            except (OSError, ValueError):
                raise UserError(f"--runs: {folder} is not a run folder (no readable run.json); pass run folders or "
                                f"shipped model names (`interp list`)") from None
            if record.get("status") != "finished":
                raise UserError(f"--runs: {folder} has not finished training; resume it with interp train --resume")
            found[folder.name] = dict(record, folder=str(folder))
        names = {r["task"]["name"] for r in found.values()} | ({task} if task else set())
        if len(names) > 1:
            raise UserError(f"--runs: the runs are of different tasks ({', '.join(sorted(names))}); a curve is one task")
        return found

    def task_at(self, point: Point):
        """The task of one point: the preset's with the axis setting, or the run's with it changed."""
        try:
            if point.run:
                from analyses.base import unmeasurable

                trained = tasks.from_config(self.runs[point.run]["task"])
                task = trained.vary(self.setting, point.value)
                positions = models.architecture(point.arch).positions
                n_ctx = (self.runs[point.run]["model"].get("n_ctx") or trained.seq_len) if positions else None
                reason = unmeasurable(trained, task, n_ctx, point.run)
                if reason:
                    raise UserError(f"{self.setting}={point.value} {reason}; leave the value out, or drop --runs "
                                    f"and train one model per point")
                return task
            return tasks.for_preset(self.task_name, self.preset, **(self.task_options | {self.setting: point.value}))
        except tasks.ConfigError as err:
            raise UserError(f"{self.setting}={point.value}: {err}") from None

    def points(self) -> list[Point]:
        if self.runs:
            return [Point(r["arch"], value, run=name) for name, r in self.runs.items() for value in self.values]
        return [Point(arch, value, width) for arch in self.archs for width in (self.widths or (None,))
                for value in self.values]

    def run_dir(self, point: Point) -> Path:
        width = f"-d{point.width}" if point.width else ""
        return self.out / "runs" / f"{point.arch}-{self.setting}{point.value}{width}"

    def model_config(self, point: Point, task) -> dict:
        """The preset's model, with the fixed -M settings this architecture has (n_heads goes only to
        those with heads, as a task preset's model settings do) and the point's width."""
        known = {f.name for f in fields(models.architecture(point.arch).config_class)}
        fixed = {k: v for k, v in self.model_options.items() if k in known}
        width = {"d_model": point.width} if point.width else {}
        try:
            return resolve(task, point.arch, self.preset, model_options=fixed | width).model
        except UserError as err:
            raise UserError(f"{point.arch} at {self.setting}={point.value}: {err}") from None

    def measure(self, point: Point) -> dict:
        """Train the point (or resume, or reuse it) and measure it; the numbers are saved beside the run."""
        from .checkpoint import load, resolve

        if point.run:
            return self.evaluate(point)
        run_dir = self.run_dir(point)
        saved = run_dir / "point.json"
        if saved.exists():
            return json.loads(saved.read_text())
        task = self.task_at(point)
        record = run_dir / "run.json"
        if record.exists() and json.loads(record.read_text()).get("status") != "finished":
            Trainer(run_dir, resume=True, device=self.device, progress=False, root=self.out).run()
        elif not record.exists():
            Trainer(run_dir, task.config(), point.arch, self.model_config(point, task), self.budget,
                    device=self.device, progress=False, root=self.out).run()
        run = json.loads(record.read_text())
        result = self.numbers(point, load(resolve(run_dir), device=self.device), task, run, str(run_dir))
        atomic_write_json(saved, result, self.out)
        return result

    def evaluate(self, point: Point) -> dict:
        """A trained run measured at the point's value; reused while its checkpoint is unchanged."""
        from .checkpoint import load, resolve
        from .results import checkpoint_digest

        run = self.runs[point.run]
        file = resolve(run["folder"])
        saved = self.out / "evaluated" / f"{point.run}-{self.setting}{point.value}.json"
        digest = checkpoint_digest(file)
        if saved.exists() and (cached := json.loads(saved.read_text())).get("checkpoint_sha256") == digest:
            return cached
        model = self._loaded.get(point.run)
        if model is None:
            model = load(file, device=self.device)
            self._loaded = {point.run: model}
        task = self.task_at(point)
        result = self.numbers(point, model, task, run, run["folder"]) | dict(checkpoint_sha256=digest)
        atomic_write_json(saved, result, self.out)
        return result

    def numbers(self, point: Point, model, task, run: dict, where: str) -> dict:
        from analyses.base import held_out_batch
        from analyses.calibration import measure

        batch = held_out_batch(task, self.n, self.seed + 1234).to(next(model.parameters()).device)
        numbers = measure(model, batch)
        train = run.get("train") or {}
        return dict(arch=point.arch, value=point.value, width=point.width, curve=point.curve, run=where,
                    metric=numbers.get(self.primitive.metric), entropy_mae_bits=numbers["entropy_mae_bits"],
                    accuracy=numbers.get("accuracy"), n_params=run.get("n_params"), train_steps=train.get("steps"),
                    train_batch_size=train.get("batch_size"), train_minutes=round(run.get("wall_time_s", 0) / 60, 2),
                    trained_task=run["task"], task=task.config())

    def execute(self, progress: bool = True) -> dict:
        # the folders every point writes, checked before the first one trains: no link at any level of them
        folders = [self.run_dir(p).relative_to(self.out) for p in self.points() if not p.run]
        check_writes(self.out, folders=folders + (["evaluated"] if self.runs else []))
        results = []
        bar = tqdm(self.points(), desc=f"sweep {self.task_name} {self.setting}", unit="point", disable=not progress)
        for point in bar:
            bar.set_postfix_str(f"{point.arch} {self.setting}={point.value}" + (f" d={point.width}" if point.width else ""))
            results.append(self.measure(point))
            self.write(results)
        bar.close()
        return self.write(results)

    def summary(self, results: list[dict]) -> dict:
        p = self.primitive
        breaks = {}
        for point in self.points():
            curve = [(r["value"], r["metric"]) for r in results if r["arch"] == point.arch and r["curve"] == point.curve]
            if curve:
                breaks.setdefault(point.arch, {})[point.curve] = break_point(curve, p.direction, p.threshold)
        budget = (recorded_settings(asdict(self.budget)) if self.budget else
                  dict(mode="evaluated", **{name: dict(steps=r["train"]["steps"], batch_size=r["train"]["batch_size"],
                                                        n_params=r.get("n_params"),
                                                        init_sequences=(r.get("init") or {}).get("sequences") or 0)
                                            for name, r in self.runs.items()}))
        return dict(task=self.task_name, primitive=self.primitive_name, axis=self.setting, values=self.values,
                    archs=list(self.archs), widths=list(self.widths), preset=self.preset,
                    mode="evaluated" if self.runs else "trained", runs=list(self.runs),
                    metric=p.metric, direction=p.direction, threshold=p.threshold, threshold_why=p.why,
                    budget=budget, fixed_task_settings=self.task_options,
                    model_options=self.model_options, n_sequences=self.n, definition=DEFINITION,
                    points=results, break_points=breaks, complete=len(results) == len(self.points()))

    def write(self, results: list[dict]) -> dict:
        from analyses.base import Result

        from . import results as store

        summary = self.summary(results)
        figures = {"curves": curve_figure(summary)}
        if len(self.widths) > 1:
            figures["grid"] = grid_figure([summary])
        result = Result("sweep", DEFINITION, summary, figures)
        store.write(result, self.out, ("pdf", "html", "png", "json"), store.provenance(), root=self.out)
        return summary


def grid_figure(summaries: list[dict], names: list[str] | None = None) -> go.Figure:
    """The MQAR-style grid: the metric over axis value x width, one panel per architecture of each
    trained sweep (``names`` label the sweeps' panels, e.g. a model option that tells two apart)."""
    from plotly.subplots import make_subplots

    from analyses.style import use_template

    panels = [(summary, arch, f"{arch}{f' ({names[i]})' if names else ''}") for i, summary in enumerate(summaries)
              for arch in summary["archs"]]
    first = summaries[0]
    values = sorted({r["value"] for summary in summaries for r in summary["points"]})
    widths = sorted({r["width"] for summary in summaries for r in summary["points"] if r["width"]})
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[title for *_, title in panels],
                        horizontal_spacing=0.06, shared_yaxes=True)
    metric = {"entropy_mae_bits": "entropy MAE (bits)"}.get(first["metric"], first["metric"].replace("_", " "))
    ascending = first["direction"] == "min"  # accuracy: more is better
    accuracy = first["metric"] == "accuracy"
    # one colour scale for every panel, so equal colours are equal numbers
    top = 1 if accuracy else max((r["metric"] for summary in summaries for r in summary["points"]
                                  if r["metric"] is not None), default=1)
    for col, (summary, arch, _) in enumerate(panels, start=1):
        cell = {(r["width"], r["value"]): r["metric"] for r in summary["points"] if r["arch"] == arch}
        z = [[cell.get((w, v)) for v in values] for w in widths]
        text = [[("" if m is None else f"{m:.0%}" if accuracy else f"{m:.3f}") for m in row] for row in z]
        fig.add_heatmap(x=[str(v) for v in values], y=[str(w) for w in widths], z=z, text=text,
                        texttemplate="%{text}", zmin=0, zmax=top,
                        colorscale="Viridis" if ascending else "Viridis_r", showscale=col == len(panels),
                        colorbar=dict(title=metric), row=1, col=col)
        fig.update_xaxes(title_text=first["axis"], type="category", row=1, col=col)
    fig.update_yaxes(title_text="d_model", type="category", row=1, col=1)
    budgets = {json.dumps({k: summary["budget"].get(k) for k in ("steps", "batch_size", "lr")}) for summary in summaries}
    budget = "; ".join(f"{b['steps']} steps x batch {b['batch_size']}, lr {b['lr']:g}"
                       for b in map(json.loads, sorted(budgets)))
    fig.update_layout(title=f"{first['primitive']} ({first['task']}): {metric} by {first['axis']} and width"
                            f"<br><sub>every cell: {budget}; threshold {first['threshold']:g}</sub>",
                      width=max(420, 300 * len(panels)), height=440, margin=dict(t=120))
    return use_template(fig)


def curve_figure(summary: dict) -> go.Figure:
    fig = go.Figure()
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    dashes = ["solid", "dash", "dot", "dashdot"]
    for i, arch in enumerate(summary["archs"]):
        for j, (curve, brk) in enumerate(summary["break_points"].get(arch, {}).items()):
            points = sorted((r["value"], r["metric"]) for r in summary["points"]
                            if r["arch"] == arch and r["curve"] == curve)
            label = arch + ("" if curve == "preset" else f" d={curve}" if curve.isdigit() else f" ({curve})")
            where = "beyond tested" if brk["value"] is None else f"breaks at {summary['axis']}={brk['value']}"
            fig.add_scatter(x=[v for v, _ in points], y=[m for _, m in points], mode="lines+markers",
                            name=f"{label}: {where}", line=dict(color=colours[i % len(colours)], dash=dashes[j % 4]))
    fig.add_hline(y=summary["threshold"], line_dash="dash", line_color="grey",
                  annotation_text=f"threshold {summary['threshold']:g}")
    metric = {"entropy_mae_bits": "entropy MAE (bits)"}.get(summary["metric"], summary["metric"].replace("_", " "))
    if summary["mode"] == "trained":
        budget = summary["budget"]
        how = f"{budget['steps']} steps x batch {budget['batch_size']} for every point, {summary['preset']} preset capacity"
    else:
        axis = summary["axis"]
        # A task that trains on a range of the axis says so with a "<axis>_min" setting (recall's N_min).
        ranges = sorted({(r["trained_task"].get(f"{axis}_min", r["trained_task"].get(axis)), r["trained_task"].get(axis))
                         for r in summary["points"]})
        trained = ", ".join(f"{low}..{high}" if low != high else str(high) for low, high in ranges)
        how = f"trained models measured across {axis} (trained on {axis}={trained})"
        for low, high in ranges:
            if low == high:
                fig.add_vline(x=high, line_dash="dot", line_color="#2ca02c", annotation_text="trained")
            else:
                fig.add_vrect(x0=low, x1=high, fillcolor="#2ca02c", opacity=0.06,
                              line_width=0, annotation_text="trained range")
    fig.update_layout(
        title=f"{summary['primitive']} ({summary['task']}): {metric} against {summary['axis']}<br><sub>{how}</sub>",
        xaxis=dict(title=summary["axis"], type="log", tickvals=summary["values"], ticktext=[str(v) for v in summary["values"]],
                   # explicit, so the shapes' extent does not stretch the log axis
                   range=[math.log10(min(summary["values"])) - 0.1, math.log10(max(summary["values"])) + 0.1]),
        yaxis=dict(title=metric, type="log" if summary["direction"] == "max" else "linear"),
        width=800, height=480, legend=dict(font=dict(size=11)))
    from analyses.style import use_template

    return use_template(fig)
