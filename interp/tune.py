"""``interp tune``: a search over training recipes, every trial an ``interp train`` run with the same budget.

The engine is Optuna (https://optuna.org). Why Optuna: it is a library, not a service, so the default
search runs on one laptop with its study in one SQLite file and no server; its storages (SQLite, any
SQLAlchemy database, a journal file) are also how many processes or machines share one study, with
no code of ours in between; and it has the early stopping a search on a small budget needs (the
median and successive-halving pruners) over values a trial reports while it trains. Ray Tune does the
same from a cluster runtime that a one-laptop search would have to start first.

A search is a declared grid, ``--space lr=1e-3,3.2e-3 curriculum=on,off shift=0,3``: every
combination is one trial, queued in the study in the order the values are written (the first
combination first). A trial is a normal run folder under ``<out>/trials/<name>`` trained with the
budget of the search: the same steps and batch size for every trial (``--steps``, ``--batch-size``;
default the capacity reference's preset recipe for the task), the same held-out evaluations, and
the trial's settings on top of the architecture's own preset recipe. Space keys are training settings
(``lr``, ``warmup``, ``weight_decay``, ...), model settings of the architecture (``shift``, ``d_model``,
...; ``shift=0`` is no shift) and ``curriculum``: ``on`` is the task's preset curriculum (the
architecture's own, else the capacity reference's; stage ends scaled when they do not fit the
budget) or the stages given with ``--curriculum``, ``off`` none.

While a trial trains it reports the task's primitive metric (a task that tests no primitive, such as
regression: its entropy MAE in bits) on held-out sequences at every
evaluation; the pruner stops a trial that is behind the others at the same step (it stays a run
folder that ``interp train --resume`` could continue). The score of a finished trial is that metric
at its last step.

Resuming. The study lives in ``<out>/study.db`` (or ``--storage``). Run the same command again after a
kill: finished and pruned trials are kept, the trial that was killed continues from its run folder's
last resume state, and the rest run. The same command with more values on the keys of its space
widens the grid: the finished trials count and only the new points run. Many workers: start the same command in several processes, or
on several machines with ``--storage`` naming one database (``postgresql://...``, ``mysql://...``) or
``journal:FILE`` on a shared file system; each takes the next queued trial from the study. A worker
finds a trial it was running when it was killed by its host and process id.

Written after every trial: ``<out>/trials.json`` and ``trials.csv`` (every trial's settings, state,
score and the run folder) and ``tune.json`` (a result record read with ``interp.results.read``: its
``metrics`` hold the search: task, architecture, space, budget, metric, every trial, the best one).
"""
from __future__ import annotations

import csv
import fcntl
import io
import itertools
import json
import os
import socket
from dataclasses import asdict, fields
from pathlib import Path

from tqdm.auto import tqdm

import models
import tasks

from .errors import UserError
from analyses.base import Result

from . import results as store
from .files import atomic_write_bytes, atomic_write_json
from .recipe import TrainSettings, fitted_curriculum, recorded_settings, resolve
from .train import Trainer

NOT_IN_SPACE = ("steps", "batch_size", "eval_every", "eval_size", "seed", "curriculum", "resume_every",
                "checkpoint_every")  # the budget and the evaluation are the same for every trial
PRUNERS = ("median", "halving", "none")


DEFINITION = ("Every combination of the search space is one `interp train` run with the same budget (steps x "
              "batch, evaluation size, seed); a trial's score is its held-out value of the task primitive's metric "
              "(the entropy MAE in bits for a task that tests no primitive) at the end of the budget; the pruner "
              "stops a trial whose score at an evaluation is behind the median (or the halving rung) of the trials "
              "before it, after prune_after steps.")


def grid_of(space: dict[str, list[str]]) -> list[dict[str, str]]:
    """Every combination of a search space's values: one trial's settings each, in the declared order."""
    return [dict(zip(space, combo)) for combo in itertools.product(*space.values())]


def parse_space(specs: tuple[str, ...]) -> dict[str, list[str]]:
    """``("lr=1e-3,3.2e-3", "curriculum=on,off")`` -> {"lr": ["1e-3", "3.2e-3"], "curriculum": ["on", "off"]}."""
    space = {}
    for spec in specs:
        name, sep, values = str(spec).partition("=")
        name = name.strip().replace("-", "_")
        listed = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name or not listed:
            raise UserError(f"--space takes KEY=V1,V2,... such as lr=1e-3,3.2e-3 curriculum=on,off; got {spec!r}")
        if name in space:
            raise UserError(f"--space names {name} twice")
        if len(set(listed)) != len(listed):
            raise UserError(f"--space {name} lists a value twice: {values}")
        space[name] = listed
    if not space:
        raise UserError("give a search space, e.g. --space lr=1e-3,3.2e-3,1e-2 curriculum=on,off")
    return space


def read_value(raw: str):
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def trial_name(params: dict[str, str]) -> str:
    """The trial's folder name: its settings in name order (the same folder whatever order the space lists them in)."""
    return "_".join(f"{k}={params[k]}" for k in sorted(params))


class Tune:
    def __init__(self, task: str | None, arch: str | None, space: tuple[str, ...], out: Path, preset: str = "cpu",
                 steps: int | None = None, batch_size: int | None = None, eval_size: int = 512, seed: int = 0,
                 storage: str | None = None, study: str | None = None, pruner: str = "median",
                 prune_after: int | None = None, task_options: dict | None = None,
                 model_options: dict | None = None, device: str | None = None, progress: bool = True,
                 curriculum: list | None = None):
        task = task or tasks.NAMES[0]
        arch = arch or models.REFERENCE or models.ARCHS[0]
        if task not in tasks.NAMES:
            raise UserError(f"unknown task {task!r}; valid tasks: {', '.join(tasks.NAMES)}")
        if arch not in models.ARCHS:
            raise UserError(f"unknown architecture {arch!r}; valid: {', '.join(models.ARCHS)}")
        if pruner not in PRUNERS:
            raise UserError(f"unknown pruner {pruner!r}; valid: {', '.join(PRUNERS)}")
        self.arch, self.preset, self.out, self.device, self.progress = arch, preset, Path(out), device, progress
        self.space = parse_space(space)
        self.task = resolve(task, arch, preset, task_options=task_options).task
        # The primitive's metric where the task tests one; otherwise (regression) the entropy error every
        # task's evaluation reports, lower being better.
        primitive = self.task.primitive
        self.metric = primitive.metric if primitive else "entropy_mae_bits"
        self.maximize = primitive is not None and primitive.direction == "min"
        self.model_options = dict(model_options or {})
        model_fields = {f.name for f in fields(models.architecture(arch).config_class)}
        train_fields = {f.name for f in fields(TrainSettings)}
        for key in self.space:
            if key in NOT_IN_SPACE and key != "curriculum":
                raise UserError(f"--space {key}: the budget and the evaluation are the same for every trial; set "
                                f"them with --steps, --batch-size, --eval-size, --seed")
            if key not in model_fields | train_fields:
                raise UserError(f"--space {key}: not a training setting nor a {arch} model setting; valid: curriculum, "
                                f"{', '.join(sorted((train_fields - set(NOT_IN_SPACE)) | model_fields))}")
        if "curriculum" in self.space and not set(self.space["curriculum"]) <= {"on", "off"}:
            raise UserError(f"--space curriculum takes on and/or off, got {','.join(self.space['curriculum'])}")
        # The budget: the capacity reference's preset recipe for the task unless given, the same for every trial.
        reference = resolve(self.task, models.REFERENCE or arch, preset).train
        own = resolve(self.task, arch, preset).train
        self.budget = dict(steps=steps or reference.steps, batch_size=batch_size or reference.batch_size,
                           eval_size=eval_size, seed=seed)
        stages = own.curriculum or reference.curriculum
        self.curriculum_on = (fitted_curriculum(stages, (own if own.curriculum else reference).steps,
                                                self.budget["steps"]) if curriculum is None else curriculum)
        if "on" in self.space.get("curriculum", ()) and not self.curriculum_on:
            raise UserError(f"--space curriculum=on: the {preset} preset of {task} has no curriculum to turn on; "
                            f"give its stages with --curriculum, or leave curriculum out of the space")
        if curriculum is not None and "on" not in self.space.get("curriculum", ()):
            raise UserError("--curriculum gives the stages of curriculum=on; add curriculum=on (or on,off) to --space")
        self.base = resolve(self.task, arch, preset, train_options=self.budget).train  # stages fitted to the budget
        try:
            self.base.validate()
        except UserError as err:
            raise UserError(f"budget: {err}") from None
        self.grid = grid_of(self.space)
        for params in self.grid:  # every trial's recipe is checked before anything trains
            self.recipe(params)
        # A curriculum trial is judged on the task itself: by default the pruner waits for the first
        # evaluation after the last stage (judged at its end, such a trial has not trained on the task yet).
        curriculum_end = self.curriculum_on[-1][0] if "on" in self.space.get("curriculum", ()) else 0
        self.notes: list[str] = []  # what a user should know before the trials run (the CLI prints them)
        if prune_after is None:
            prune_after = max(self.budget["steps"] // 2, curriculum_end + 1)
        elif prune_after <= curriculum_end and pruner != "none":
            self.notes.append(f"--prune-after {prune_after}: the curriculum=on trials train on their curriculum to step "
                              f"{curriculum_end}, so the pruner judges them before they have trained on the task; "
                              f"--prune-after {curriculum_end + 1} or later judges them on it")
        self.prune_after = prune_after
        self.pruner_name = pruner
        self.storage_url = storage or f"sqlite:///{(self.out / 'study.db').resolve()}"
        self.study_name = study or f"{task}-{arch}-{preset}"

    # -- trials --------------------------------------------------------------------------------
    def recipe(self, params: dict[str, str]) -> tuple[dict, dict, TrainSettings]:
        """(task config, model config, training settings) of the trial with these settings."""
        model_fields = {f.name for f in fields(models.architecture(self.arch).config_class)}
        model, train = dict(self.model_options), {}
        for key, raw in params.items():
            value = read_value(raw)
            if key == "curriculum":
                train["curriculum"] = self.curriculum_on if raw == "on" else []
            elif key in model_fields:
                model[key] = None if key == "shift" and value == 0 else value
            else:
                train[key] = value
        try:
            spec = resolve(self.task, self.arch, self.preset, model_options=model,
                           train_options=asdict(self.base) | train)
            settings = spec.train.validate()
        except (UserError, TypeError) as err:
            raise UserError(f"trial {trial_name(params)}: {err}") from None
        return self.task.config(), spec.model, settings

    def folder(self, params: dict[str, str]) -> Path:
        return self.out / "trials" / trial_name(params)

    def train(self, params: dict[str, str], report) -> float:
        """Train (or resume, or read back) one trial; its score."""
        folder = self.folder(params)
        task_config, model_config, settings = self.recipe(params)
        record = folder / "run.json"
        if record.exists():
            run = json.loads(record.read_text())
            recipe = dict(task=task_config, arch=self.arch, model=model_config, train=recorded_settings(asdict(settings)))
            if {k: run.get(k) for k in recipe} != json.loads(json.dumps(recipe)):
                raise UserError(f"{folder} holds another recipe than this search's trial {trial_name(params)} (the "
                                f"space or budget changed); use another --out")
            for line in (folder / "metrics.jsonl").read_text().splitlines() if (folder / "metrics.jsonl").exists() else ():
                logged = json.loads(line)  # the curve so far, for the pruner (a resume already dropped any later line)
                if f"eval_{self.metric}" in logged:
                    report(logged["step"], {self.metric: logged[f"eval_{self.metric}"]}, replay=True)
            if run.get("status") != "finished":
                Trainer(folder, resume=True, device=self.device, progress=self.progress, on_eval=report).run()
        else:
            Trainer(folder, task_config, self.arch, model_config, settings, device=self.device,
                    progress=self.progress, on_eval=report).run()
        run = json.loads(record.read_text())
        return run["final"][self.metric]

    # -- the study -------------------------------------------------------------------------------
    def open_study(self):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.out.mkdir(parents=True, exist_ok=True)
        if self.storage_url.startswith("journal:"):
            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalFileBackend

            storage = JournalStorage(JournalFileBackend(self.storage_url.removeprefix("journal:")))
        else:
            storage = optuna.storages.RDBStorage(self.storage_url, engine_kwargs=(
                {"connect_args": {"timeout": 60}} if self.storage_url.startswith("sqlite") else {}))
        pruner = {"median": optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=self.prune_after),
                  "halving": optuna.pruners.SuccessiveHalvingPruner(
                      min_resource=max(1, self.prune_after), reduction_factor=2),
                  "none": optuna.pruners.NopPruner()}[self.pruner_name]
        study = optuna.create_study(storage=storage, study_name=self.study_name, load_if_exists=True,
                                    direction="maximize" if self.maximize else "minimize", pruner=pruner)
        declared = self.declaration()
        recorded = study.user_attrs.get("search")
        declared = json.loads(json.dumps(declared))
        if recorded is None or extends(recorded, declared):
            study.set_user_attr("search", declared)
        elif recorded != declared:
            changed = sorted(k for k in declared if declared[k] != recorded.get(k))
            raise UserError(f"study {self.study_name!r} in {self.storage_url} was made for another search "
                            f"(its {', '.join(changed)} differ; a space may only add values to the keys it has); "
                            f"give another --out or --study")
        return study

    def declaration(self) -> dict:
        return dict(task=self.task.config(), arch=self.arch, preset=self.preset, space=self.space,
                    budget=self.budget, curriculum_on=self.curriculum_on, metric=self.metric,
                    direction="maximize" if self.maximize else "minimize", pruner=self.pruner_name,
                    prune_after=self.prune_after, model_options=self.model_options)

    def queue(self, study) -> None:
        """Every grid point not yet in the study is queued, in the declared order."""
        from optuna.trial import TrialState

        seen = {trial_name(planned(t)) for t in study.get_trials(deepcopy=False) if t.state != TrialState.FAIL}
        for params in self.grid:
            if trial_name(params) not in seen:
                study.enqueue_trial(params, user_attrs={"queued": True})

    def claim_orphan(self, study) -> int | None:
        """One trial this host was running in a process that no longer exists (a killed worker), claimed
        for this one (call under the study lock): it continues as the same trial, from its run folder.
        One at a time, so that after a kill every worker started picks up one, not the first all."""
        from optuna.trial import TrialState

        host = socket.gethostname()
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            attrs, pid = trial.user_attrs, trial.user_attrs.get("pid")
            # a trial another worker has just asked for has no pid yet: not an orphan
            if attrs.get("host") == host and pid is not None and pid != os.getpid() and not alive(pid):
                study._storage.set_trial_user_attr(trial._trial_id, "pid", os.getpid())
                study._storage.set_trial_user_attr(trial._trial_id, "note", "its worker was killed; resumed")
                return trial._trial_id
        return None

    def execute(self, max_trials: int | None = None) -> dict:
        import optuna
        from optuna.trial import TrialState

        self.out.mkdir(parents=True, exist_ok=True)
        def locked(action):  # workers on this host create the study, queue and claim one at a time
            with open(self.out / ".study-lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                return action()

        study = locked(self.open_study)
        locked(lambda: self.queue(study))
        done = lambda: sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in study.get_trials(deepcopy=False))
        bar = tqdm(total=len(self.grid), initial=done(), desc=f"tune {self.study_name}", unit="trial",
                   disable=not self.progress, dynamic_ncols=True)
        ran = 0
        while max_trials is None or ran < max_trials:
            orphan = locked(lambda: self.claim_orphan(study))
            if orphan is not None:
                trial = optuna.trial.Trial(study, orphan)
            elif not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
                break
            else:
                trial = study.ask()
            # the grid point it was queued with (not suggest_categorical: Optuna fixes a categorical's choices
            # for the whole study, and a widened grid adds choices)
            params = {key: planned(study._storage.get_trial(trial._trial_id)).get(key) for key in self.space}
            if not trial.user_attrs.get("queued") or None in params.values() or self.taken(study, trial, params):
                # another worker took the last queued trial first: this one was sampled, not queued
                trial.set_user_attr("note", "duplicate of a queued trial; not run")
                study.tell(trial, state=TrialState.FAIL)
                continue
            trial.set_user_attr("params", params)  # what Optuna's own views show of it
            trial.set_user_attr("pid", os.getpid())  # before the host: a trial with a host and no pid would look orphaned
            trial.set_user_attr("host", socket.gethostname())
            trial.set_user_attr("run", str(self.folder(params)))
            bar.set_postfix_str(trial_name(params))

            def report(step: int, metrics: dict, replay: bool = False) -> None:
                value = metrics.get(self.metric)
                if value is not None and step not in study._storage.get_trial(trial._trial_id).intermediate_values:
                    trial.report(value, step)
                    if not replay and step < self.budget["steps"] and trial.should_prune():  # a finished run is scored
                        raise optuna.TrialPruned(f"step {step}")

            try:
                value = self.train(params, report)
            except optuna.TrialPruned as why:
                trial.set_user_attr("pruned_at", str(why))
                study.tell(trial, state=TrialState.PRUNED)
            except BaseException:
                # interrupted or refused: the trial stays running in the study, and the next worker started on
                # this host continues it (as after a kill)
                self.write(study)
                raise
            else:
                study.tell(trial, value)
            ran += 1
            bar.update(1)
            summary = self.write(study)
            if summary["best"]:
                bar.set_postfix_str(f"best {summary['best']['name']}: {summary['best']['score']:.4g}")
        bar.close()
        return self.write(study)

    @staticmethod
    def taken(study, trial, params: dict) -> bool:
        from optuna.trial import TrialState

        # Two workers that started together may both have queued the grid: of two copies of one trial
        # the lower-numbered runs, and a copy of a finished one is not run again.
        name = trial_name(params)
        return any(t.number != trial.number and trial_name(planned(t)) == name
                   and (t.state in (TrialState.COMPLETE, TrialState.PRUNED)
                        or (t.state == TrialState.RUNNING and t.number < trial.number))
                   for t in study.get_trials(deepcopy=False))

    # -- records ---------------------------------------------------------------------------------
    def rows(self, study) -> list[dict]:
        rows, trials = [], study.get_trials(deepcopy=False)
        active = {trial_name(planned(t)) for t in trials if t.state.name in ("RUNNING", "COMPLETE", "PRUNED")}
        listed = set()
        for t in trials:
            params, name = planned(t), trial_name(planned(t))
            if (t.state.name == "FAIL" and t.user_attrs.get("note", "").startswith("duplicate")) or \
                    (t.state.name == "WAITING" and (name in active or name in listed)):
                continue  # a second copy of a queued trial (two workers queued the grid at once)
            listed.add(name)
            folder = self.folder({k: params[k] for k in self.space}) if set(params) >= set(self.space) else None
            run = {}
            if folder is not None and (folder / "run.json").exists():
                run = json.loads((folder / "run.json").read_text())
            steps = max(t.intermediate_values, default=None)
            rows.append(dict(number=t.number, name=name, params=params, state=t.state.name.lower(),
                             score=t.value, metric=self.metric, steps_trained=steps, curve=dict(sorted(
                                 t.intermediate_values.items())), run=str(folder) if folder else None,
                             n_params=run.get("n_params"), wall_time_s=run.get("wall_time_s"),
                             note=t.user_attrs.get("note") or t.user_attrs.get("pruned_at")))
        return rows

    def write(self, study) -> dict:
        rows = self.rows(study)
        scored = [r for r in rows if r["state"] == "complete" and r["score"] is not None]
        best = (max if self.maximize else min)(scored, key=lambda r: r["score"]) if scored else None
        # The study's search as recorded now: another worker may have widened it since this one started.
        declared = study.user_attrs.get("search") or self.declaration()
        grid = grid_of(declared["space"])
        summary = dict(declared, study=self.study_name, storage=self.storage_url,
                       n_trials=len(grid), best=best, trials=rows,
                       complete=all(any(r["name"] == trial_name(p) and r["state"] in ("complete", "pruned")
                                        for r in rows) for p in grid))
        store.write(Result("tune", DEFINITION, summary), self.out, ("json",), store.provenance())
        atomic_write_json(self.out / "trials.json", rows)
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(["number", *self.space, "state", self.metric, "steps_trained", "wall_time_s", "run", "note"])
        for r in rows:
            writer.writerow([r["number"], *(r["params"].get(k, "") for k in self.space), r["state"],
                             "" if r["score"] is None else r["score"], r["steps_trained"] or "",
                             r["wall_time_s"] or "", r["run"] or "", r["note"] or ""])
        atomic_write_bytes(self.out / "trials.csv", buffer.getvalue().encode())
        return summary


def planned(trial) -> dict:
    """A trial's settings: its parameters, or, while it waits in the queue, those it was queued with."""
    return trial.params or trial.system_attrs.get("fixed_params", {})


def extends(recorded: dict, declared: dict) -> bool:
    """Whether ``declared`` is ``recorded`` with more values on the same keys of its space (a grid widened, e.g.
    one more learning rate where the best sat at the edge), everything else the same: the study takes it,
    its finished trials count, and only the new grid points run."""
    old, new = recorded.get("space") or {}, declared.get("space") or {}
    return (recorded != declared and set(old) == set(new) and all(set(old[k]) <= set(new[k]) for k in old)
            and {k: v for k, v in recorded.items() if k != "space"} == {k: v for k, v in declared.items() if k != "space"})


def alive(pid) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def table(summary: dict) -> str:
    """The trial table: one line per trial, best first."""
    keys = list(summary["space"])
    reverse = summary["direction"] == "maximize"
    order = sorted(summary["trials"], key=lambda r: (r["score"] is None, -(r["score"] or 0) if reverse else (r["score"] or 0)))
    head = ["#", *keys, "state", summary["metric"], "steps"]
    lines = [head] + [[str(r["number"]), *(str(r["params"].get(k, "")) for k in keys), r["state"],
                       "-" if r["score"] is None else f"{r['score']:.4g}",
                       str(r["steps_trained"] or "-")] for r in order]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    text = "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) for line in lines)
    budget = summary["budget"]
    return text + (f"\nbudget per trial: {budget['steps']:,} steps x {budget['batch_size']} sequences; "
                   f"{sum(r['state'] in ('complete', 'pruned') for r in summary['trials'])} of {summary['n_trials']} "
                   f"trials done" + (f"; best: {summary['best']['name']}" if summary["best"] else ""))
