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

The grid the field uses (zoology's MQAR sweeps): several learning rates (``lrs``) and seeds per point, the
best rate per architecture and cell reported with the others kept; evaluations along the way
(``eval_every``, on the task's own held-out format), and with a ``threshold`` each point records the
training sequences at the first evaluation that reaches it and stops there, so the budget goes to the
points that need it. Points are claimed by a lock each, so several processes (``jobs``, one thread each,
or sweeps started by hand on machines that share the folder) train different points of one sweep.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import plotly.graph_objects as go
from tqdm.auto import tqdm

import models
import tasks
from tasks.base import stage_options

from .checkpoint import pick_device
from .errors import Diverged, UserError
from .files import Lock, RunFolder, atomic_write_json, check_writes
from .recipe import Recipe, recorded_settings, resolved_model, resolved_train, stated
from .train import finish

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
changed instead of training one per point; their budget is each run's own. With several learning rates
and seeds, every (rate, seed) is a point of its own; an architecture's rate in a cell is the one that reaches
the threshold in the fewest training sequences (median over seeds; with no threshold, or a tie, the best mean
metric of the training-time evaluations, a held-out draw of its own), and the cell's metric is the mean over
seeds at that rate, measured on a separate held-out draw: the rate is never chosen on the numbers reported.
sequences_to_threshold is the training sequences at the first evaluation that reaches the threshold, null when
none did within the budget.
""".split())


@dataclass(frozen=True)
class Point:
    arch: str
    value: int
    width: int | None = None
    run: str | None = None  # an evaluated sweep: the trained run measured at this value
    lr: float | None = None  # None: the sweep's one budget rate
    seed: int | None = None  # None: the sweep's one seed

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


def parse_numbers(spec, kind=float, name: str = "--lr") -> tuple:
    """``"1e-3,3.2e-3"`` (or one number, or a list) -> a sorted tuple without repeats."""
    values = spec if isinstance(spec, (list, tuple)) else [v for v in str(spec).split(",") if v.strip()]
    try:
        parsed = tuple(sorted({kind(v) for v in values}))
    except (TypeError, ValueError):
        parsed = ()
    if not parsed:
        example = "1e-3,3.2e-3,1e-2" if kind is float else "0,1"
        raise UserError(f"{name.rstrip('=')} must be one or more comma-separated numbers, e.g. "
                        f"{name}{'' if name.endswith('=') else ' '}{example}; got {spec!r}")
    return parsed


def parse_rates(spec, archs: tuple[str, ...]) -> dict[str, tuple]:
    """``--lr``'s specs -> architecture -> its sorted rates. A spec is ``"1e-3,3.2e-3"`` (every architecture) or
    ``"transformer=3.2e-4,1e-3"`` (that one, in place of the shared rates), so each architecture's grid can bracket
    its own best rate; a number, a list of specs or a dict arch -> rates is taken too. Empty: no architecture has
    rates of its own (the preset's rate)."""
    if spec is None or spec == () or spec == []:
        return {}
    if isinstance(spec, dict):
        specs = [f"{arch}={','.join(map(str, v)) if isinstance(v, (list, tuple)) else v}" for arch, v in spec.items()]
    elif isinstance(spec, (list, tuple)) and all(isinstance(v, str) for v in spec):
        specs = list(spec)
    else:
        specs = [spec]
    shared, own = None, {}
    for one in specs:
        arch, sep, rates = str(one).partition("=") if isinstance(one, str) else ("", "", one)
        if not sep:
            if shared is not None:
                raise UserError(f"--lr: give the rates of every architecture once (then ARCH=LR,... for one "
                                f"architecture's own); got {one!r} after {','.join(f'{r:g}' for r in shared)}")
            shared = parse_numbers(one)
            continue
        arch = arch.strip()
        if arch not in archs:
            raise UserError(f"--lr {one}: {arch!r} is not swept here; give rates to one of {', '.join(archs)}")
        if arch in own:
            raise UserError(f"--lr: {arch} has its rates twice ({one!r}); give them once")
        own[arch] = parse_numbers(rates, name=f"--lr {arch}=")
    missing = [a for a in archs if a not in own]
    if shared is None and missing:
        raise UserError(f"--lr gives no rates to {', '.join(missing)}; add them (e.g. --lr {missing[0]}=1e-3,3.2e-3) "
                        f"or give rates for every architecture (e.g. --lr 1e-3,3.2e-3)")
    return {a: own.get(a, shared) for a in archs}


def passes(metric: float | None, direction: str, threshold: float) -> bool:
    """Whether a metric passes: at most the threshold for errors ("max"), at least it for scores; a point
    without a metric (its training diverged) fails."""
    return metric is not None and (metric <= threshold if direction == "max" else metric >= threshold)


def break_point(curve: list[tuple[int, float]], direction: str, threshold: float) -> dict:
    """The first axis value (in increasing order) whose metric fails; a curve that never fails is
    'beyond the tested range'."""
    curve = sorted(curve, key=lambda vm: vm[0])
    for value, metric in curve:
        if not passes(metric, direction, threshold):
            status = "fails at every value tested" if value == curve[0][0] else "breaks"
            return dict(value=value, status=status, last_pass=max((v for v, _ in curve if v < value), default=None))
    return dict(value=None, status="beyond the tested range", last_pass=curve[-1][0] if curve else None)


class Sweep:
    def __init__(self, task: str | None, axis: str, archs: tuple[str, ...], out: Path, widths: tuple[int, ...] = (),
                 preset: str = "cpu", steps: int | None = None, batch_size: int | None = None,
                 task_options: dict | None = None, model_options: dict | None = None, n: int = 1000,
                 seed: int = 0, device: str | None = None, runs: tuple[str, ...] = (),
                 lr: float | tuple | str | None = None, curriculum: list | str | None = None, seeds: tuple = (),
                 threshold: float | None = None, eval_every: int | None = None, jobs: int = 1,
                 paired: dict | None = None, decay: float | None = None):
        # what a worker process needs to build the same sweep (jobs > 1)
        self.arguments = dict(task=task, axis=axis, archs=tuple(archs), out=Path(out), widths=tuple(widths),
                              preset=preset, steps=steps, batch_size=batch_size, task_options=task_options,
                              model_options=model_options, n=n, seed=seed, device=device, runs=tuple(runs), lr=lr,
                              curriculum=curriculum, seeds=tuple(seeds), threshold=threshold, eval_every=eval_every,
                              paired=paired, decay=decay)
        self.setting, self.values = parse_axis(axis)
        self.on_eval = None  # on_eval(point, step, metrics) at each evaluation of a training point: progress
        # task settings that move with the axis, one value per axis value (e.g. recall's key pool with N)
        self.paired = {}
        for name, spec in (paired or {}).items():
            values = [int(v) if str(v).strip().lstrip("-").isdigit() else v
                      for v in (spec if isinstance(spec, (list, tuple)) else str(spec).split(","))]
            if len(values) != len(self.values):
                raise UserError(f"--axis-with {name}: give one value per axis value ({len(self.values)}: "
                                f"{', '.join(map(str, self.values))}), got {len(values)}")
            self.paired[name] = dict(zip(self.values, values))
        self.seeds = parse_numbers(seeds, int, "--seeds") if seeds else (seed,)
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise UserError(f"--jobs must be a whole number of processes, at least 1, got {jobs!r}")
        self.jobs = jobs
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                      or not math.isfinite(threshold)):
            raise UserError(f"--threshold must be a number, e.g. 0.9 for accuracy, got {threshold!r}")
        if eval_every is not None and (isinstance(eval_every, bool) or not isinstance(eval_every, int)
                                       or eval_every < 1):
            raise UserError(f"--eval-every must be a whole number of steps, at least 1, got {eval_every!r}")
        self.out, self.preset, self.widths = Path(out), preset, tuple(widths)
        self.task_options, self.model_options = dict(task_options or {}), dict(model_options or {})
        self.n, self.seed, self.device = n, seed, pick_device(device)
        self.runs = self.read_runs(runs, task) if runs else {}
        self._loaded = {}  # an evaluated sweep's model in use (points come run by run)
        if self.runs:
            given = [name for name, value in (
                ("--widths", widths), ("--steps", steps), ("--batch-size", batch_size), ("--lr", lr),
                ("--decay", decay is not None), ("--curriculum", curriculum is not None), ("--seeds", seeds),
                ("--threshold", threshold is not None), ("--eval-every", eval_every), ("--axis-with", paired),
                ("--jobs", jobs > 1), ("-T", task_options), ("-M", model_options)) if value]
            if given:
                raise UserError(f"an evaluated sweep (--runs) measures the runs as trained; drop {', '.join(given)}, "
                                f"or drop --runs to train one model per point")
            task = next(iter(self.runs.values()))["task"]["name"]
            archs = tuple(dict.fromkeys(r["arch"] for r in self.runs.values()))
        if task not in tasks.NAMES:
            raise UserError(f"unknown task {task!r}; valid tasks: {', '.join(tasks.NAMES)}")
        bad = [a for a in archs if a not in models.ARCHS]
        if bad:
            raise UserError(f"unknown architecture(s) {', '.join(bad)}; valid: {', '.join(models.ARCHS)}")
        self.task_name, self.archs = task, tuple(archs)
        # each architecture's rates (their union is ``lrs``; a point's rate is in its folder's name when it has several)
        self.arch_lrs = parse_rates(None if self.runs else lr, self.archs)
        self.lrs = tuple(sorted({r for rates in self.arch_lrs.values() for r in rates}))
        self.primitive_name, self.primitive = next(((name, p) for name, (t, p) in tasks.primitives().items()
                                                    if t == task), (None, None))
        if self.primitive is None:
            raise UserError(f"task {task!r} declares no inference primitive, so a sweep has no metric to plot")
        self.threshold = self.primitive.threshold if threshold is None else float(threshold)
        self.stops = threshold is not None  # a point stops at the first evaluation that reaches the threshold
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
        given = {k: v for k, v in dict(steps=steps, batch_size=batch_size, lr=self.lrs[0] if self.lrs else None,
                                       curriculum=curriculum, eval_every=eval_every, decay=decay).items()
                 if v is not None}
        self.curriculum_name = curriculum if isinstance(curriculum, str) else None  # built for each point's task
        budget, _ = resolved_train(self.task_at(self.points()[0]), reference, preset, given | {"seed": self.seeds[0]})
        self.budget = replace(budget, eval_size=min(budget.eval_size, 256)).validate()
        for point in self.points():  # a named curriculum that one point's task cannot build is refused now
            self.point_budget(point)

    @staticmethod
    def read_runs(runs: tuple[str, ...], task: str | None) -> dict[str, dict]:
        """Run name -> its run record (with the folder), every run of the one task."""
        from .catalog import locate

        found = {}
        for spec in runs:
            folder = locate(spec)
            record = RunFolder(folder).record_if_readable()
            if record is None:
                raise UserError(f"--runs: {folder} is not a run folder (no readable {RunFolder.RECORD}); pass run "
                                f"folders or shipped model names (`interp list`)")
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
            paired = {name: by_value[point.value] for name, by_value in self.paired.items()}
            return tasks.for_preset(self.task_name, self.preset,
                                    **(self.task_options | paired | {self.setting: point.value}))
        except tasks.ConfigError as err:
            raise UserError(f"{self.setting}={point.value}: {err}") from None

    def points(self) -> list[Point]:
        if self.runs:
            return [Point(r["arch"], value, run=name) for name, r in self.runs.items() for value in self.values]
        lrs = self.lrs if len(self.lrs) > 1 else (None,)
        seeds = self.seeds if len(self.seeds) > 1 else (None,)
        # the easiest cell first, its architectures side by side at each rate and seed, so a sweep stopped early
        # has whole cells and comparable architectures
        return [Point(arch, value, width, lr=lr, seed=seed) for value in self.values
                for width in (self.widths or (None,)) for lr in lrs for seed in seeds for arch in self.archs
                if lr is None or lr in self.arch_lrs[arch]]

    def run_dir(self, point: Point) -> Path:
        """The point's run folder; the rate and seed are in its name only when the sweep has several (so a
        sweep of one rate and seed resumes in the folders it always had)."""
        width = f"-d{point.width}" if point.width else ""
        lr = f"-lr{point.lr:g}" if point.lr is not None else ""
        seed = f"-seed{point.seed}" if point.seed is not None else ""
        return self.out / "runs" / f"{point.arch}-{self.setting}{point.value}{width}{lr}{seed}"

    def point_budget(self, point: Point):
        """The sweep's budget with the point's rate and seed, and a named curriculum built for its task."""
        budget = replace(self.budget, **({"lr": point.lr} if point.lr is not None else {}),
                         **({"seed": point.seed} if point.seed is not None else {}))
        if self.curriculum_name:
            try:
                stages = self.task_at(point).curriculum(self.curriculum_name, budget.steps)
            except tasks.ConfigError as err:
                raise UserError(f"--curriculum {self.curriculum_name}: {err}") from None
            budget = replace(budget, curriculum=stages)
        return budget.validate()

    def model_config(self, point: Point, task) -> dict:
        """The preset's model, with the fixed -M settings this architecture has (n_heads goes only to
        those with heads, as a task preset's model settings do) and the point's width."""
        known = {f.name for f in fields(models.architecture(point.arch).config_class)}
        fixed = {k: v for k, v in self.model_options.items() if k in known}
        width = {"d_model": point.width} if point.width else {}
        try:
            config = resolved_model(point.arch, self.preset, task, fixed | width)
        except UserError as err:
            raise UserError(f"{point.arch} at {self.setting}={point.value}: {err}") from None
        if "n_ctx" in config and "n_ctx" not in fixed:  # a context that holds every stage the point trains on
            longest = max((tasks.from_config(task.config() | option).seq_len
                           for _, settings in self.point_budget(point).curriculum
                           for option in stage_options(settings)), default=0)
            if longest > (config["n_ctx"] or task.seq_len):
                config["n_ctx"] = longest
        return config

    def stop_at_threshold(self, step: int, metrics: dict) -> str | None:
        """A trained point's stop rule: the first evaluation that reaches the threshold ends its run."""
        p = self.primitive
        value = metrics.get(p.metric)
        return f"{p.metric} {value:.4g} reached the threshold {self.threshold:g}" if passes(
            value, p.direction, self.threshold) else None

    def claim(self, point: Point) -> Lock | None:
        """The point's claim, held while one process trains it; None when another process holds it."""
        lock = Lock(self.out / "claims", f"{self.run_dir(point).name}.lock")
        try:
            return lock.acquire()
        except UserError:
            return None

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
        stop = self.stop_at_threshold if self.stops else None
        report = (lambda step, metrics: self.on_eval(point, step, metrics)) if self.on_eval else None
        try:
            run = finish(run_dir, self.recipe(point, task), lambda differences: self.refusal(point, differences),
                         ignore=self.BOOKKEEPING, device=self.device, progress=False, root=self.out, stop=stop,
                         on_eval=report)
        except Diverged as err:
            # a rate too high for this architecture: a result of the grid, not a failure of the sweep
            result = self.point_record(point, None, {}, dict(task=task.config()), str(run_dir)) | dict(
                diverged=str(err).split(";")[0])
            atomic_write_json(saved, result, self.out)
            return result
        result = self.numbers(point, load(resolve(run_dir), device=self.device), task, run, str(run_dir))
        atomic_write_json(saved, result, self.out)
        return result

    def recipe(self, point: Point, task) -> Recipe:
        """What the point trains: its task, the architecture's model at the sweep's capacity (``model_config``) and
        the sweep's budget at the point's rate and seed (``point_budget``)."""
        return stated(task, point.arch, self.model_config(point, task), self.point_budget(point))

    # what a point may differ in from the run already in its folder: which checkpoints it keeps and how often it
    # saves its resume state (its weights and curve are the same)
    BOOKKEEPING = ("checkpoint_every", "resume_every")

    def check_recipe(self, point: Point, task, record: dict) -> None:
        """Refuse to resume or reuse a point's run trained on other settings than this sweep gives it (another
        command on the same --out): its numbers would stand in for the point's silently."""
        if differences := self.recipe(point, task).differences(record, self.BOOKKEEPING):
            raise UserError(self.refusal(point, differences))

    def refusal(self, point: Point, differences: list) -> str:
        diff = [f"{setting}: {held!r} in the run, {wanted!r} now" for setting, held, wanted in differences]
        return (f"{self.run_dir(point)} was trained with other settings than this sweep gives it "
                f"({'; '.join(diff[:3])}); give the command it was started with, or another --out")

    def learning_curve(self, run_dir: Path, batch_size: int) -> list[list]:
        """[[training sequences, metric], ...] at every evaluation the run logged (the task's own held-out
        format, the run's evaluation draw)."""
        key, curve = f"eval_{self.primitive.metric}", []
        for row in RunFolder(run_dir).logged_lines():
            if row.get(key) is not None and (not curve or row["step"] * batch_size > curve[-1][0]):
                curve.append([row["step"] * batch_size, row[key]])
        return curve

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
        return self.point_record(point, measure(model, batch), run, task.config(), where)

    def point_record(self, point: Point, numbers: dict | None, run: dict, task: dict, where: str) -> dict:
        """What sweep.json keeps of a point: its numbers on the sweep's held-out draw (None: its training
        diverged), its budget, and for a trained point its learning curve and sequences to the threshold."""
        numbers = numbers or {}
        train = run.get("train") or {}
        record = dict(arch=point.arch, value=point.value, width=point.width, curve=point.curve, run=where,
                      metric=numbers.get(self.primitive.metric), entropy_mae_bits=numbers.get("entropy_mae_bits"),
                      accuracy=numbers.get("accuracy"), n_params=run.get("n_params"), train_steps=train.get("steps"),
                      train_batch_size=train.get("batch_size"), train_minutes=round(run.get("wall_time_s", 0) / 60, 2),
                      trained_task=run.get("task", task), task=task)
        if point.run:
            return record
        budget = self.point_budget(point)
        curve = self.learning_curve(Path(where), budget.batch_size)
        p = self.primitive
        reached = next((sequences for sequences, value in curve if passes(value, p.direction, self.threshold)), None)
        best = (min if p.direction == "max" else max)((v for _, v in curve), default=None)
        stopped = (run.get("stopped") or {}).get("step")
        train_sequences = (stopped or train.get("steps") or 0) * budget.batch_size if run else None
        return record | dict(lr=budget.lr, seed=budget.seed, budget_sequences=budget.steps * budget.batch_size,
                             train_sequences=train_sequences, stopped_at_step=stopped,
                             sequences_to_threshold=reached, best_reached=best,
                             sequences_per_s=(round(train_sequences / run["wall_time_s"], 1)
                                              if run.get("wall_time_s") else None),
                             learning_curve=curve)

    def execute(self, progress: bool = True) -> dict:
        self._drawn_at = time.monotonic()  # the figures' clock (see write): the first redraw a minute in
        # the folders every point writes, checked before the first one trains: no link at any level of them
        folders = [self.run_dir(p).relative_to(self.out) for p in self.points() if not p.run]
        check_writes(self.out, folders=folders + (["evaluated"] if self.runs else ["claims", "workers"]))
        bar = tqdm(total=len(self.points()), desc=f"sweep {self.task_name} {self.setting}", unit="point",
                   disable=not progress)
        with bar:
            if self.runs:
                results = []
                for point in self.points():
                    bar.set_postfix_str(f"{point.run} {self.setting}={point.value}")
                    results.append(self.measure(point))
                    self.write(results, final=False)
                    bar.update(1)
                return self.write(results)
            for point in self.points():  # before any training: every run already there is this sweep's
                if (run := RunFolder(self.run_dir(point))).has_record():
                    self.check_recipe(point, self.task_at(point), run.read_record())
            if self.jobs > 1:
                return self.execute_in_workers(bar)

            def finished(point):  # this process's point or another's: the bar counts every measured point
                done = self.finished_points()
                bar.update(len(done) - bar.n)
                self.write(done, final=False)

            bar.update(len(self.finished_points()))

            metric = self.primitive.metric
            self.on_eval = lambda point, step, metrics: bar.set_postfix_str(
                f"{self.label(point)}: step {step}, {metric} {metrics.get(metric, float('nan')):.3f}")
            self.work(on_point=finished, on_start=lambda point: bar.set_postfix_str(self.label(point)))
        return self.write(self.finished_points())

    def in_training(self) -> str:
        """The points a worker trains now (their claims held, not yet measured), each with its last logged step and
        evaluation: the bar's words between two finished points, which may be an hour apart."""
        metric, said = self.primitive.metric, []
        for point in self.points():
            run = self.run_dir(point)
            if not (self.out / "claims" / f"{run.name}.lock").exists() or (run / "point.json").exists():
                continue
            rows = RunFolder(run).logged_lines()
            scored = [r for r in rows if r.get(f"eval_{metric}") is not None]
            said.append(f"{self.label(point)}: " + (f"step {rows[-1]['step']}" if rows else "starting")
                        + (f", {metric} {scored[-1][f'eval_{metric}']:.3f}" if scored else ""))
        return "; ".join(said)

    def label(self, point: Point) -> str:
        return (f"{point.arch} {self.setting}={point.value}" + (f" d={point.width}" if point.width else "")
                + (f" lr={point.lr:g}" if point.lr is not None else "")
                + (f" seed={point.seed}" if point.seed is not None else ""))

    def finished_points(self) -> list[dict]:
        """Every point measured so far (by this process or another), in the sweep's order."""
        found = []
        for point in self.points():
            saved = self.run_dir(point) / "point.json"
            if saved.exists():
                found.append(json.loads(saved.read_text()))
        return found

    def work(self, on_point=None, on_start=None, poll_s: float = 5.0) -> None:
        """Train and measure every point no other process is training, each under its claim, until every
        point is measured; points another process holds are waited for (its claim ends with it, so a
        point whose process died is taken over and resumed)."""
        while True:
            pending = [p for p in self.points() if not (self.run_dir(p) / "point.json").exists()]
            if not pending:
                return
            progressed = False
            for point in pending:
                claim = self.claim(point)
                if claim is None:
                    continue
                try:
                    if (self.run_dir(point) / "point.json").exists():  # finished while we looked
                        continue
                    if on_start:
                        on_start(point)
                    self.measure(point)
                    progressed = True
                finally:
                    claim.release()
                if on_point:
                    on_point(point)
            if not progressed:
                time.sleep(poll_s)

    def execute_in_workers(self, bar) -> dict:
        """``jobs`` worker processes, one thread each, claim and train the points; this process rewrites
        sweep.json and the figures as their points arrive. A worker's output goes to workers/worker-K.log."""
        import multiprocessing

        logs = self.out / "workers"
        check_writes(self.out, folders=["workers"])
        logs.mkdir(parents=True, exist_ok=True)
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited torch threads or locks
        saved = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")  # read when each worker's torch starts
        try:
            workers = [context.Process(target=_worker, args=(self.arguments, str(logs / f"worker-{k}.log")),
                                       daemon=False) for k in range(self.jobs)]
            for worker in workers:
                worker.start()
        finally:
            for key, value in saved.items():
                os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
        seen, told = 0, 0.0
        try:
            while any(w.is_alive() for w in workers):
                time.sleep(2)
                done = self.finished_points()
                if len(done) > seen:
                    bar.update(len(done) - seen)
                    seen = len(done)
                    self.write(done, final=False)
                if time.monotonic() - told > 10:  # the points in training and how far each has come
                    bar.set_postfix_str(self.in_training())
                    told = time.monotonic()
        except KeyboardInterrupt:
            for worker in workers:
                worker.terminate()  # their runs keep their resume states: rerun the sweep to go on
            raise
        failed = [(k, w.exitcode) for k, w in enumerate(workers) if w.exitcode]
        summary = self.write(self.finished_points())
        if failed:
            k, code = failed[0]
            last = (logs / f"worker-{k}.log").read_text(errors="replace").strip().splitlines()[-1:] or [f"exit {code}"]
            raise UserError(f"{len(failed)} of {self.jobs} sweep workers stopped ({last[0]}); see {logs}; "
                            f"run the same command again to resume")
        return summary

    def select(self, results: list[dict]) -> dict:
        """arch -> curve -> axis value -> the cell at its chosen rate (see DEFINITION): the mean metric over
        seeds and each seed's, each seed's sequences to the threshold, and every rate's numbers."""
        p = self.primitive
        worst = -math.inf if p.direction == "min" else math.inf
        mean = lambda values: statistics.fmean(values) if values else None  # noqa: E731
        cells = {}
        for r in results:
            cells.setdefault((r["arch"], r["curve"], r["value"]), {}).setdefault(r.get("lr"), []).append(r)
        chosen = {}
        for (arch, curve, value), by_lr in cells.items():
            rates = {}
            for lr, runs in by_lr.items():
                validation = [r["learning_curve"][-1][1] if r.get("learning_curve") else None for r in runs]
                reached = [r.get("sequences_to_threshold") for r in runs]
                rates[lr] = dict(
                    lr=lr, seeds=[r.get("seed") for r in runs], metrics=[r["metric"] for r in runs],
                    metric=None if any(r["metric"] is None for r in runs) else mean([r["metric"] for r in runs]),
                    validation=None if None in validation else mean(validation),
                    sequences_to_threshold=reached,
                    median_sequences_to_threshold=(statistics.median(reached) if None not in reached else None),
                    diverged=sum(1 for r in runs if r.get("diverged")))

            def rank(cell):  # fewer sequences to the threshold first, then the better validation metric
                steps = cell["median_sequences_to_threshold"] if self.stops else None
                score = worst if cell["validation"] is None or cell["metric"] is None else cell["validation"]
                return (math.inf if steps is None else steps, -score if p.direction == "min" else score)

            best = min(rates.values(), key=rank)
            chosen.setdefault(arch, {}).setdefault(curve, {})[str(value)] = dict(
                best, by_lr={f"{lr:g}" if lr is not None else "budget": cell for lr, cell in sorted(
                    rates.items(), key=lambda kv: kv[0] or 0)})
        return chosen

    def ratios(self, chosen: dict) -> dict:
        """With a threshold: each architecture's sequences to it over the first architecture's, per cell, at
        each one's chosen rate: the ratio of the means over seeds, and the lowest and highest ratio over every
        pair of seeds (null where a seed never reached it)."""
        if not self.stops or len(self.archs) < 2:
            return {}
        reference = self.archs[0]
        found = {}
        for arch in self.archs[1:]:
            for curve, cells in chosen.get(arch, {}).items():
                for value, cell in cells.items():
                    ref = chosen.get(reference, {}).get(curve, {}).get(value)
                    if not ref:
                        continue
                    ours, theirs = cell["sequences_to_threshold"], ref["sequences_to_threshold"]
                    known = None not in ours and None not in theirs
                    pairs = [a / b for a in ours for b in theirs] if known else []
                    found.setdefault(arch, {}).setdefault(curve, {})[value] = dict(
                        over=reference, ratio=statistics.fmean(ours) / statistics.fmean(theirs) if known else None,
                        low=min(pairs, default=None), high=max(pairs, default=None),
                        reached=[None not in ours, None not in theirs])
        return found

    def summary(self, results: list[dict]) -> dict:
        p = self.primitive
        breaks = {}
        chosen = self.select(results) if not self.runs else {}
        for point in self.points():
            if chosen:
                cells = chosen.get(point.arch, {}).get(point.curve, {})
                curve = [(int(value), cell["metric"]) for value, cell in cells.items()]
            else:
                curve = [(r["value"], r["metric"]) for r in results
                         if r["arch"] == point.arch and r["curve"] == point.curve]
            if curve:
                breaks.setdefault(point.arch, {})[point.curve] = break_point(curve, p.direction, self.threshold)
        budget = (recorded_settings(asdict(self.budget)) if self.budget else
                  dict(mode="evaluated", **{name: dict(steps=r["train"]["steps"], batch_size=r["train"]["batch_size"],
                                                        n_params=r.get("n_params"),
                                                        init_sequences=(r.get("init") or {}).get("sequences") or 0)
                                            for name, r in self.runs.items()}))
        return dict(task=self.task_name, primitive=self.primitive_name, axis=self.setting, values=self.values,
                    archs=list(self.archs), widths=list(self.widths), preset=self.preset,
                    mode="evaluated" if self.runs else "trained", runs=list(self.runs),
                    metric=p.metric, direction=p.direction, threshold=self.threshold,
                    threshold_why=p.why if self.threshold == p.threshold else "given with --threshold",
                    lrs=list(self.lrs), lrs_by_arch={a: list(r) for a, r in self.arch_lrs.items()},
                    seeds=list(self.seeds), stops_at_threshold=self.stops,
                    curriculum_name=getattr(self, "curriculum_name", None), chosen=chosen,
                    ratios=self.ratios(chosen) if chosen else {},
                    budget=budget, fixed_task_settings=self.task_options,
                    paired_task_settings={k: {str(v): x for v, x in by.items()} for k, by in self.paired.items()},
                    model_options=self.model_options, n_sequences=self.n, definition=DEFINITION,
                    points=results, break_points=breaks, complete=len(results) == len(self.points()))

    FIGURES_EVERY_S = 60.0

    def write(self, results: list[dict], final: bool = True) -> dict:
        """sweep.json of ``results``, and its figures. While the sweep runs (``final`` False) the figures are
        redrawn at most once a ``FIGURES_EVERY_S``: a redraw is seconds of Chromium, and a sweep of quick points
        would spend most of its time drawing. The last write draws them always."""
        from analyses.base import Result

        from . import results as store

        summary = self.summary(results)
        draw = final or time.monotonic() - getattr(self, "_drawn_at", 0.0) >= self.FIGURES_EVERY_S
        formats = ("pdf", "html", "png", "json") if draw else ("json",)
        store.write(Result("sweep", DEFINITION, summary, figures(summary)), self.out, formats, store.provenance(),
                    root=self.out)
        if draw:
            self._drawn_at = time.monotonic()
        return summary


def _worker(arguments: dict, log: str) -> None:
    """One worker process of a sweep with ``jobs``: one thread, its output in ``log``, the same sweep."""
    import sys

    import torch

    torch.set_num_threads(1)
    with open(log, "a", buffering=1) as stream:
        sys.stdout = sys.stderr = stream
        try:
            sweep = Sweep(**arguments)
            metric = sweep.primitive.metric
            sweep.on_eval = lambda point, step, metrics: print(
                f"{time.strftime('%H:%M:%S')} {sweep.label(point)}: step {step}, {metric} {metrics.get(metric)}")
            sweep.work(on_start=lambda point: print(f"{time.strftime('%H:%M:%S')} training {sweep.label(point)}"))
        except UserError as err:
            print(f"error: {err}")
            raise SystemExit(1) from None


def figures(summary: dict) -> dict[str, go.Figure]:
    """A sweep's figures, by name, from its summary (the ``metrics`` of its sweep.json): they can be drawn again
    from a sweep.json alone, without its runs."""
    drawn = {"curves": curve_figure(summary)}
    if any(r.get("learning_curve") for r in summary["points"]):
        drawn["learning"] = learning_figure(summary)
    if len(summary["widths"]) > 1:
        drawn["grid"] = grid_figure([summary])
    return drawn


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


SPARE = ("#17becf", "#8c564b", "#e377c2", "#bcbd22")


def curve_figure(summary: dict) -> go.Figure:
    fig = go.Figure()
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    dashes = ["solid", "dash", "dot", "dashdot"]
    chosen = summary.get("chosen") or {}
    for i, arch in enumerate(summary["archs"]):
        for j, (curve, brk) in enumerate(summary["break_points"].get(arch, {}).items()):
            # one colour per curve: an architecture's second curve (another model) takes a spare colour, not its dash alone
            colour = colours[i % len(colours)] if j == 0 else SPARE[(i + j - 1) % len(SPARE)]
            label = arch + ("" if curve == "preset" else f" d={curve}" if curve.isdigit() else f" ({curve})")
            where = "beyond tested" if brk["value"] is None else f"breaks at {summary['axis']}={brk['value']}"
            if chosen:  # each cell at its chosen rate: the mean over seeds, the band their range
                cells = sorted((int(v), c) for v, c in chosen.get(arch, {}).get(curve, {}).items())
                points = [(v, c["metric"]) for v, c in cells]
                seeds = [[m for m in c["metrics"] if m is not None] for _, c in cells]
                if len(summary.get("seeds") or []) > 1:
                    add_band(fig, [v for v, _ in cells], [min(m, default=None) for m in seeds],
                             [max(m, default=None) for m in seeds], colour)
            else:
                points = sorted((r["value"], r["metric"]) for r in summary["points"]
                                if r["arch"] == arch and r["curve"] == curve)
            fig.add_scatter(x=[v for v, _ in points], y=[m for _, m in points], mode="lines+markers",
                            name=f"{label}: {where}", line=dict(color=colour, dash=dashes[j % 4]))
    metric = {"entropy_mae_bits": "entropy MAE (bits)"}.get(summary["metric"], summary["metric"].replace("_", " "))
    trained_at = []  # x of a trained value, marked once the axes are set
    if summary["mode"] == "trained":
        budget = summary["budget"]
        how = f"{budget['steps']} steps x batch {budget['batch_size']} for every point, {summary['preset']} preset capacity"
        if len(summary.get("lrs") or []) > 1 or len(summary.get("seeds") or []) > 1:
            how += (f"; each cell at its best of {rate_counts(summary)} rates, mean of "
                    f"{len(summary['seeds'])} seed(s)" + (" (band: their range)" if len(summary["seeds"]) > 1 else ""))
    else:
        axis = summary["axis"]
        # A task that trains on a range of the axis says so with a "<axis>_min" setting (recall's N_min).
        ranges = sorted({(r["trained_task"].get(f"{axis}_min", r["trained_task"].get(axis)), r["trained_task"].get(axis))
                         for r in summary["points"]})
        trained = ", ".join(f"{low}..{high}" if low != high else str(high) for low, high in ranges)
        how = f"trained models measured across {axis} (trained on {axis}={trained})"
        for low, high in ranges:
            if low == high:
                trained_at.append(high)
            else:
                trained_at.append((low, high))
    fig.update_layout(
        title=f"{summary['primitive']} ({summary['task']}): {metric} against {summary['axis']}<br><sup>{how}</sup>",
        xaxis=dict(title=summary["axis"], type="log", tickvals=summary["values"], ticktext=[str(v) for v in summary["values"]],
                   # explicit, so the shapes' extent does not stretch the log axis
                   range=[math.log10(min(summary["values"])) - 0.1, math.log10(max(summary["values"])) + 0.1]),
        yaxis=dict(title=metric, type="log" if summary["direction"] == "max" else "linear"),
        width=800, height=480)
    from analyses import style

    log = fig.layout.yaxis.type == "log"
    scale = (lambda v: math.log10(v)) if log else (lambda v: v)
    drawn = summary["threshold"] > 0 or not log  # a threshold of 0 has no place on a log axis: not drawn
    line = scale(summary["threshold"]) if drawn else None
    curves = [trace for trace in fig.data if trace.showlegend is not False]  # not the seeds' bands
    shown = [(x, scale(y)) for trace in curves for x, y in zip(trace.x, trace.y)
             if y is not None and (y > 0 or not log)]
    if shown:  # room above the curves for the marks' labels, which sit at the top of the plot
        ys = [y for _, y in shown] + ([line] if drawn else [])
        low, high = min(ys), max(ys)
        span = (high - low) or 1
        fig.update_yaxes(range=[low - 0.05 * span, high + 0.14 * span])
    # the threshold's label at the end of its line, above or below it, where the nearest point at that end is farthest
    # (a tie: right, above)
    places = [(side, above) for side in ("right", "left") for above in (True, False)]
    at = {"left": min(summary["values"]), "right": max(summary["values"])}
    clear = {(side, above): min((abs(y - line) for x, y in shown if drawn and x == at[side] and (y >= line) == above),
                                default=math.inf) for side, above in places}
    side, above = max(places, key=lambda place: clear[place])
    # after the axes (on a log axis plotly puts an hline's own label at 10^value); grey and black, no architecture's
    # colour
    if drawn:
        style.reference_line(fig, summary["threshold"], f"threshold {summary['threshold']:g}", position=side,
                             above=above)
    for mark in trained_at:
        if isinstance(mark, tuple):
            style.reference_band(fig, *mark, "trained range", color="grey")
        else:
            style.reference_line(fig, mark, "trained", axis="x", dash="dot", color="black")
    style.apply(fig)  # labelled log ticks (not plotly's bare "5", "2" between decades)
    # the legend under the plot: its entries (a model, where it breaks) are long, and beside the plot they took half
    # the page's width from it
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.2, yanchor="top"),
                      height=fig.layout.height + 24 * len(curves))
    return fig


def add_band(fig: go.Figure, x: list, low: list, high: list, colour: str, **where) -> None:
    """A shaded band between ``low`` and ``high`` (no legend entry), under the line drawn after it."""
    keep = [(a, lo, hi) for a, lo, hi in zip(x, low, high) if lo is not None and hi is not None]
    if not keep:
        return
    xs = [a for a, _, _ in keep]
    fig.add_scatter(x=xs + xs[::-1], y=[hi for *_, hi in keep] + [lo for _, lo, _ in keep][::-1], fill="toself",
                    mode="lines",
                    fillcolor=colour, opacity=0.18, line=dict(width=0), hoverinfo="skip", showlegend=False, **where)


def mean_curve(curves: list[list]) -> tuple[list, list, list, list]:
    """Seeds' learning curves on one grid: x, mean, low, high. A seed that stopped at the threshold holds its
    last value to the end (it is not trained further, so it is counted as it stopped)."""
    grid = sorted({x for curve in curves for x, _ in curve})
    rows = []
    for curve in curves:
        values, i, last = [], 0, None
        for x in grid:
            while i < len(curve) and curve[i][0] <= x:
                last = curve[i][1]
                i += 1
            values.append(last)
        rows.append(values)
    columns = [[v for v in column if v is not None] for column in zip(*rows)]
    return (grid, [statistics.fmean(c) if c else None for c in columns], [min(c, default=None) for c in columns],
            [max(c, default=None) for c in columns])


def log_ticks(low: float, high: float) -> list[float]:
    """Ticks for a log axis from ``low`` to ``high``: 1, 2 and 5 times each power of ten between them, thinned to
    the powers of ten alone when that gives more than four."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    ticks = [m * 10 ** e for e in range(first, last + 1) for m in (1, 2, 5) if low <= m * 10 ** e <= high]
    if len(ticks) > 4:
        ticks = [t for t in ticks if math.log10(t).is_integer()] or ticks[::3]
    return ticks or [low]


def short_count(n: float) -> str:
    """20000 -> "20k", 1000000 -> "1M": a count short enough for a tick label."""
    for size, unit in ((1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:g}{unit}"
    return f"{n:g}"


def rate_counts(summary: dict) -> str:
    """How many rates each architecture tried: "3", or "4 (transformer), 3 (mamba)" when they differ."""
    by_arch = summary.get("lrs_by_arch") or {}  # a sweep written before rates per architecture: one grid for all
    counts = {arch: len(by_arch.get(arch) or summary.get("lrs") or []) or 1 for arch in summary["archs"]}
    if len(set(counts.values())) <= 1:
        return str(next(iter(counts.values()), 1))
    return ", ".join(f"{n} ({arch})" for arch, n in counts.items())


def learning_figure(summary: dict) -> go.Figure:
    """Metric against training sequences, one panel per axis value, one line per architecture at its chosen
    rate: the mean over seeds, the band their range; the threshold dashed."""
    from plotly.subplots import make_subplots

    from analyses import style

    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    values = [str(v) for v in summary["values"]]
    fig = make_subplots(rows=1, cols=len(values), shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=[f"{summary['axis']}={v}" for v in values])
    metric = {"entropy_mae_bits": "entropy MAE (bits)"}.get(summary["metric"], summary["metric"].replace("_", " "))
    for i, arch in enumerate(summary["archs"]):
        colour = colours[i % len(colours)]
        for col, value in enumerate(values, start=1):
            curve_name = next(iter(summary["chosen"].get(arch, {})), None)
            cell = summary["chosen"].get(arch, {}).get(curve_name, {}).get(value)
            if not cell:
                continue
            runs = [r for r in summary["points"] if r["arch"] == arch and r["curve"] == curve_name
                    and str(r["value"]) == value and r.get("lr") == cell["lr"] and r.get("learning_curve")]
            x, mean, low, high = mean_curve([r["learning_curve"] for r in runs])
            if len(runs) > 1:
                add_band(fig, x, low, high, colour, row=1, col=col)
            # markers too: a point that passed at its first evaluations has one or two, no line to speak of
            fig.add_scatter(x=x, y=mean, mode="lines+markers", marker=dict(size=4), line=dict(color=colour),
                            legendgroup=arch, showlegend=col == 1,
                            name=f"{arch} (lr {cell['lr']:g})" if len(values) == 1 else arch,
                            hovertemplate=f"{arch}, lr {cell['lr']:g}: %{{y:.3f}} at %{{x:,}} sequences<extra></extra>",
                            row=1, col=col)
    for col in range(1, len(values) + 1):
        fig.add_hline(y=summary["threshold"], line_dash="dash", line_color="grey", row=1, col=col)
        # a log axis: architectures' sequences to the threshold differ by 10x and more within one cell, and a
        # linear one hides the faster; SI labels (10k, 100k) stay short enough for a 330-pixel panel
        xs = [x for trace in fig.data if trace.xaxis == ("x" if col == 1 else f"x{col}") for x in (trace.x or ())
              if x]
        ticks = log_ticks(min(xs, default=1), max(xs, default=10))
        fig.update_xaxes(title_text="training sequences (log)", type="log", tickmode="array", tickvals=ticks,
                         ticktext=[short_count(t) for t in ticks], tickangle=0, row=1, col=col)
    fig.update_yaxes(title_text=metric, row=1, col=1)
    seeds = len(summary.get("seeds") or [])
    # the subtitle a <sup> line, which style.apply wraps to the page and makes room for above the panels' titles
    fig.update_layout(title=f"{summary['primitive']} ({summary['task']}): {metric} while training, each architecture "
                            f"at its best rate<br><sup>mean of {seeds} seed(s)"
                            f"{' (band: their range)' if seeds > 1 else ''}; threshold {summary['threshold']:g} "
                            f"dashed{'; a point stops at it' if summary.get('stops_at_threshold') else ''}</sup>",
                      width=max(520, 330 * len(values)), height=440)
    return style.apply(fig)
