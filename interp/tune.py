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
budget) or the stages given with ``--curriculum``, ``off`` none. ``--curriculum`` may also name
several, ``{"stages": [...], "dense-mix": [...]}``, searched as ``curriculum=stages,dense-mix,off``
(e.g. the short-table stage against a mixture of dense table sizes).

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
finds a trial it was running when it was killed by its host and process id. A search folder copied from
a machine that is gone (a lent GPU's, whose calls each start a fresh machine) is continued with ``--moved``:
the trials that machine was running continue here from their run folders, as this host's.

Written after every trial: ``<out>/trials.json`` and ``trials.csv`` (every trial's settings, state,
score and the run folder) and ``tune.json`` (a result record read with ``interp.results.read``: its
``metrics`` hold the search: task, architecture, space, budget, metric, every trial, the best one).
"""
from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
import socket
import sqlite3
from contextlib import closing, contextmanager
from dataclasses import asdict, fields
from pathlib import Path
from urllib.parse import quote

import click

from tqdm.auto import tqdm

import models
import tasks
from ground.locks import alive

from .errors import UserError
from analyses.base import Result

from . import results as store
from .files import (Lock, RunFolder, atomic_write_bytes, atomic_write_json, check_writes, child, component, kind_of,
                    open_regular, probe_writable, refuse_in_the_way)
from .recipe import Recipe, TrainSettings, fitted_curriculum, preset_settings, resolve, resolved_task, resolved_train
from .train import finish

NOT_IN_SPACE = ("steps", "batch_size", "eval_every", "eval_size", "seed", "curriculum", "resume_every",
                "checkpoint_every")  # the budget and the evaluation are the same for every trial
PRUNERS = ("median", "halving", "none")
MAX_GRID = 10_000  # trials a search may declare unless --max-grid raises it (each is a training run)
STUDY_FILE, STUDY_LOCK = "study.db", ".study-lock"
CURRICULA = ("curriculum_on", "curricula")  # the search's record of its curricula (a rerun may correct unused ones)
LOCK_WAIT_S = 60  # how long a worker waits for the study (its lock, or a database another process writes)
CONNECT_TIMEOUT_S = 10  # how long a database server may take to answer before the search is refused
SQLITE_MAGIC = b"SQLite format 3\x00"


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
    """The trial's name: its settings in name order (the same trial whatever order the space lists them in)."""
    return "_".join(f"{k}={params[k]}" for k in sorted(params))


def grid_size(space: dict[str, list[str]]) -> int:
    return math.prod(len(values) for values in space.values())


class Tune:
    def __init__(self, task: str | None, arch: str | None, space: tuple[str, ...], out: Path, preset: str = "cpu",
                 steps: int | None = None, batch_size: int | None = None, eval_size: int = 512, seed: int = 0,
                 storage: str | None = None, study: str | None = None, pruner: str = "median",
                 prune_after: int | None = None, task_options: dict | None = None,
                 model_options: dict | None = None, device: str | None = None, progress: bool = True,
                 curriculum: list | dict | None = None, max_grid: int = MAX_GRID):
        task = task or tasks.NAMES[0]
        arch = arch or models.REFERENCE or models.ARCHS[0]
        if task not in tasks.NAMES:
            raise UserError(f"unknown task {task!r}; valid tasks: {', '.join(tasks.NAMES)}")
        if arch not in models.ARCHS:
            raise UserError(f"unknown architecture {arch!r}; valid: {', '.join(models.ARCHS)}")
        if pruner not in PRUNERS:
            raise UserError(f"unknown pruner {pruner!r}; valid: {', '.join(PRUNERS)}")
        self.arch, self.preset, self.out, self.device, self.progress = arch, preset, Path(out), device, progress
        optuna_module()  # before any work: a search without its engine cannot start
        self.space = parse_space(space)
        if grid_size(self.space) > max_grid:  # before the grid is built: 10^12 points would fill any memory
            raise UserError(f"--space declares {grid_size(self.space):,} trials, more than --max-grid {max_grid:,} "
                            f"(each is a training run); narrow the space, or raise --max-grid")
        for name, given in (("steps", steps), ("batch-size", batch_size)):
            if given is not None and given < 1:  # 0 is no budget, never "the preset's"
                raise UserError(f"--{name} must be a positive integer, got {given}")
        self.storage = Storage(storage, self.out)  # parsed and reached before a trial trains
        self.task = resolved_task(task, preset, task_options)
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
        named = curriculum if isinstance(curriculum, dict) else None  # several curricula, by name
        if named is not None and (not named or "off" in named):
            raise UserError("--curriculum as a JSON object names curricula for --space curriculum=NAME,...: give at "
                            "least one, none called off")
        choices = {"off", *(named or {"on": None})}
        if "curriculum" in self.space and not set(self.space["curriculum"]) <= choices:
            raise UserError(f"--space curriculum takes {', '.join(sorted(choices))}, got "
                            f"{','.join(self.space['curriculum'])}")
        # The budget: the capacity reference's preset recipe for the task unless given, the same for every trial.
        reference = preset_settings(preset, self.task, models.REFERENCE or arch)
        own = preset_settings(preset, self.task, arch)
        self.budget = dict(steps=reference.steps if steps is None else steps,
                           batch_size=reference.batch_size if batch_size is None else batch_size,
                           eval_size=eval_size, seed=seed)
        stages = own.curriculum or reference.curriculum
        self.curricula = named if named is not None else {"on": (
            fitted_curriculum(stages, (own if own.curriculum else reference).steps, self.budget["steps"])
            if curriculum is None else curriculum)}
        self.curriculum_on = self.curricula.get("on")  # what the search's record calls it
        if "on" in self.space.get("curriculum", ()) and not self.curriculum_on:
            raise UserError(f"--space curriculum=on: the {preset} preset of {task} has no curriculum to turn on; "
                            f"give its stages with --curriculum, or leave curriculum out of the space")
        if curriculum is not None and not set(self.curricula) & set(self.space.get("curriculum", ())):
            raise UserError(f"--curriculum gives the stages of curriculum={','.join(self.curricula)}; add "
                            f"curriculum={','.join(self.curricula)} (and off, if wanted) to --space")
        try:
            self.base = resolved_train(self.task, arch, preset, self.budget)[0].validate()  # stages fit the budget
        except UserError as err:
            raise UserError(f"budget: {err}") from None
        self.grid = grid_of(self.space)
        # every trial's recipe is checked before anything trains (a bar after 2 s: a big grid takes a while)
        for params in tqdm(self.grid, desc="checking the trials' recipes", unit="trial", delay=2, leave=False,
                           disable=not progress or len(self.grid) < 100, dynamic_ncols=True):
            self.recipe(params)
        # A curriculum trial is judged on the task itself: by default the pruner waits for the first
        # evaluation after the last stage (judged at its end, such a trial has not trained on the task yet).
        curriculum_end = max((self.curricula[name][-1][0] for name in self.space.get("curriculum", ())
                              if name != "off" and self.curricula[name]), default=0)
        self.notes: list[str] = []  # what a user should know before the trials run (the CLI prints them)
        if prune_after is None:
            prune_after = max(self.budget["steps"] // 2, curriculum_end + 1)
        elif prune_after <= curriculum_end and pruner != "none":
            self.notes.append(f"--prune-after {prune_after}: the curriculum=on trials train on their curriculum to step "
                              f"{curriculum_end}, so the pruner judges them before they have trained on the task; "
                              f"--prune-after {curriculum_end + 1} or later judges them on it")
        self.prune_after = prune_after
        self.pruner_name = pruner
        self.storage_url = self.storage.url
        self.study_name = study or f"{task}-{arch}-{preset}"
        self.moved = False  # set by execute: the search was copied here from a machine that is gone

    # -- trials --------------------------------------------------------------------------------
    def recipe(self, params: dict[str, str]) -> Recipe:
        """The recipe of the trial with these settings, checked."""
        model_fields = {f.name for f in fields(models.architecture(self.arch).config_class)}
        model, train = dict(self.model_options), {}
        for key, raw in params.items():
            value = read_value(raw)
            if key == "curriculum":
                train["curriculum"] = [] if raw == "off" else self.curricula[raw]
            elif key in model_fields:
                model[key] = None if key == "shift" and value == 0 else value
            else:
                train[key] = value
        try:  # checked as interp train checks it: a start that is not there or a bad stage, before any trial trains
            return resolve(self.task, self.arch, self.preset, model_options=model,
                           train_options=asdict(self.base) | train)
        except (UserError, TypeError, tasks.ConfigError) as err:
            raise UserError(f"trial {trial_name(params)}: {err}") from None

    def folder(self, params: dict[str, str]) -> Path:
        """The trial's run folder: its name made one safe name (a value such as ``init=../x`` never climbs out)."""
        return child(self.out / "trials", component(trial_name(params)))

    def train(self, params: dict[str, str], report) -> float:
        """Train (or resume, or read back) one trial; its score."""
        folder = self.folder(params)

        def refused(differences) -> str:
            setting, held, wanted = differences[0]
            return (f"{folder} holds a run of another recipe than this search's trial {trial_name(params)} ({setting} "
                    f"{json.dumps(held)[:60]} there, {json.dumps(wanted)[:60]} now); move it away to train the trial "
                    f"with this recipe (the other trials are kept), or use another --out")

        replay = lambda step, metrics: report(step, metrics, replay=True)  # noqa: E731 - the curve so far, for the pruner
        run = finish(folder, self.recipe(params), refused, replay=replay, device=self.device, progress=self.progress,
                     on_eval=report, root=self.out)
        score = run.get("final", {}).get(self.metric) if isinstance(run.get("final"), dict) else None
        if not isinstance(score, (int, float)):
            raise UserError(f"{RunFolder(folder).record} has no final {self.metric}; move {folder} away to train the "
                            f"trial again")
        return score

    # -- the study -------------------------------------------------------------------------------
    def open_study(self):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage = self.storage.open()
        pruner = {"median": optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=self.prune_after),
                  "halving": optuna.pruners.SuccessiveHalvingPruner(
                      min_resource=max(1, self.prune_after), reduction_factor=2),
                  "none": optuna.pruners.NopPruner()}[self.pruner_name]
        study = optuna.create_study(storage=storage, study_name=self.study_name, load_if_exists=True,
                                    direction="maximize" if self.maximize else "minimize", pruner=pruner)
        declared = self.declaration()
        recorded = study.user_attrs.get("search")
        declared = json.loads(json.dumps(declared))
        if recorded is None or extends(recorded, declared) or self.corrects(study, recorded, declared):
            study.set_user_attr("search", declared)
        elif recorded != declared:
            changed = sorted(k for k in declared if declared[k] != recorded.get(k))
            shown = "; ".join(f"{k} was {json.dumps(recorded.get(k))[:80]}, now {json.dumps(declared[k])[:80]}"
                              for k in changed[:2])
            raise UserError(f"study {self.study_name!r} in {self.storage_url} was made for another search ({shown}; "
                            f"a space may only add values to the keys it has); to keep its finished trials, rerun "
                            f"with its settings, or give another --out or --study for a new search")
        return study

    def corrects(self, study, recorded: dict, declared: dict) -> bool:
        """Whether ``declared`` only corrects curricula that no kept trial trained on (every trial that used one
        failed, or none ran yet): the search then continues with the corrected stages, its finished trials
        kept. A curriculum a finished trial trained on is part of its score, and may not change under it."""
        from optuna.trial import TrialState

        curricula = lambda search: search.get("curricula") or {"on": search.get("curriculum_on")}
        if {k: v for k, v in recorded.items() if k not in CURRICULA} != \
                {k: v for k, v in declared.items() if k not in CURRICULA}:
            return False
        old, new = curricula(recorded), curricula(declared)
        changed = {name for name in old.keys() | new.keys() if old.get(name) != new.get(name)}
        # a running trial whose worker is gone (stranded by a refusal before refusals were marked failed) is taken
        # up again with the corrected recipe; its run folder, if it has one, says what differs
        kept = {planned(t).get("curriculum") for t in study.get_trials(deepcopy=False)
                if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
                or (t.state == TrialState.RUNNING and not orphaned(t, self.moved))}
        return not changed & kept

    def declaration(self) -> dict:
        return dict(task=self.task.config(), arch=self.arch, preset=self.preset, space=self.space,
                    budget=self.budget, curriculum_on=self.curriculum_on, metric=self.metric,
                    **({} if set(self.curricula) == {"on"} else dict(curricula=self.curricula)),
                    direction="maximize" if self.maximize else "minimize", pruner=self.pruner_name,
                    prune_after=self.prune_after, model_options=self.model_options)

    def queue(self, study) -> None:
        """Every grid point not yet in the study is queued, in the declared order."""
        from optuna.trial import TrialState

        seen = {trial_name(planned(t)) for t in study.get_trials(deepcopy=False) if t.state != TrialState.FAIL}
        for params in self.grid:
            if trial_name(params) not in seen:
                study.enqueue_trial(params, user_attrs={"queued": True})

    def check_moved(self) -> None:
        """``--moved`` continues a search copied here: refuse a folder that holds none (a typo, an empty folder, a
        training run's folder), which would otherwise start a new search there."""
        marks = ("tune.json", "trials", *self.storage.files)  # what a search folder holds once it has begun
        expected = f"--moved continues a search copied here, and a search's folder holds {', '.join(marks)}"
        kind = kind_of(self.out)
        if kind != "a folder":
            raise UserError(f"{expected}; {self.out} {'does not exist' if kind is None else f'is {kind}'}: check the "
                            f"path, or leave out --moved to start a new search")
        if RunFolder(self.out).has_record():
            raise UserError(f"{expected}; {self.out} holds {RunFolder.RECORD}, a training run's: give the search's "
                            f"folder")
        if not any(kind_of(self.out / name) is not None for name in marks):
            raise UserError(f"{expected}; {self.out} holds none of them: check the path, or leave out --moved to start "
                            f"a new search")

    def claim_orphan(self, study, moved: bool = False) -> int | None:
        """One trial this host was running in a process that no longer exists (a killed worker), claimed
        for this one (call under the study lock): it continues as the same trial, from its run folder.
        One at a time, so that after a kill every worker started picks up one, not the first all. With
        ``moved`` (the search was copied here from a machine that is gone) a trial another host was running
        is an orphan too; claiming it makes it this host's."""
        from optuna.trial import TrialState

        host = socket.gethostname()
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if orphaned(trial, moved):
                study._storage.set_trial_user_attr(trial._trial_id, "host", host)
                study._storage.set_trial_user_attr(trial._trial_id, "pid", os.getpid())
                study._storage.set_trial_user_attr(trial._trial_id, "note", "its worker was killed; resumed")
                return trial._trial_id
        return None

    def execute(self, max_trials: int | None = None, moved: bool = False) -> dict:
        self.moved = moved
        if moved:
            self.check_moved()
        # The whole write set, checked before its first byte: no link or special file at any level of it
        check_writes(self.out, files=[STUDY_LOCK, "tune.json", "trials.json", "trials.csv", *self.storage.files],
                     folders=["trials", *(f"trials/{self.folder(p).name}" for p in self.grid)])
        for params in self.grid:  # a trial folder left broken is said now, not after the trials before it ran
            if RunFolder(self.folder(params)).has_record():
                trial_record(self.folder(params))
                RunFolder(self.folder(params)).logged_lines()

        def locked(action):  # workers on this host create the study, queue and claim one at a time
            with Lock(self.out, STUDY_LOCK, wait=LOCK_WAIT_S, busy=lambda pid: (
                    f"{self.out / STUDY_LOCK} has been held by another worker (pid {pid}) for over {LOCK_WAIT_S} s; "
                    f"wait for it, or stop it")), self.storage.errors(opening=True):
                return action()

        study = locked(self.open_study)
        locked(lambda: self.queue(study))
        with self.storage.errors():
            return self._execute(study, max_trials, locked, moved)

    def _execute(self, study, max_trials, locked, moved=False) -> dict:
        import optuna
        from optuna.trial import TrialState

        done = lambda: sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in study.get_trials(deepcopy=False))
        bar = tqdm(total=len(self.grid), initial=done(), desc=f"tune {self.study_name}", unit="trial",
                   disable=not self.progress, dynamic_ncols=True)
        ran = 0
        with bar:  # closed however the loop ends, so an error's line is the last one shown
            while max_trials is None or ran < max_trials:
                orphan = locked(lambda: self.claim_orphan(study, moved))
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
                except Exception as err:
                    # refused (a setting, a file, the machine): the trial is marked failed, not left running, so a
                    # corrected rerun queues it again and the finished trials stay
                    trial.set_user_attr("note", f"failed: {first_line(err)}")
                    study.tell(trial, state=TrialState.FAIL)
                    self.write(study)
                    raise
                except BaseException:
                    # interrupted (Ctrl-C, a kill): the trial stays running in the study, and the next worker started
                    # on this host continues it from its run folder (as after a kill)
                    self.write(study)
                    raise
                else:
                    study.tell(trial, value)
                ran += 1
                bar.update(1)
                summary = self.write(study)
                if summary["best"]:
                    bar.set_postfix_str(f"best {summary['best']['name']}: {summary['best']['score']:.4g}")
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
            if (t.state.name == "FAIL" and (t.user_attrs.get("note", "").startswith("duplicate") or name in active)) or \
                    (t.state.name == "WAITING" and (name in active or name in listed)):
                # a second copy of a queued trial (two workers queued the grid at once), or a failed attempt of a
                # trial that a corrected rerun has run again
                continue
            listed.add(name)
            folder = self.folder({k: params[k] for k in self.space}) if set(params) >= set(self.space) else None
            run = {}
            if folder is not None and RunFolder(folder).has_record():
                try:  # the table lists what it can; the trial itself says what is wrong when it runs
                    run = trial_record(folder)
                except UserError:
                    pass
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
        store.write(Result("tune", DEFINITION, summary), self.out, ("json",), store.provenance(), root=self.out)
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



def orphaned(trial, moved: bool = False) -> bool:
    """Whether a running trial's worker is gone: a process of this host that no longer exists, or with ``moved``
    (the search was copied here from a machine that is gone) any other host's. A trial another worker has just
    asked for has no pid yet: not an orphan."""
    attrs, pid, host = trial.user_attrs, trial.user_attrs.get("pid"), socket.gethostname()
    if pid is None:
        return False
    return (moved and attrs.get("host") != host) or (attrs.get("host") == host and pid != os.getpid() and not alive(pid))


def optuna_module():
    """Optuna, or a UserError saying how to install it (checked before a search does any work)."""
    try:
        import optuna
    except ImportError:
        raise UserError("interp tune needs Optuna, which is not installed here: pip install optuna") from None
    return optuna


def trial_record(folder: Path) -> dict:
    """A trial's run record, or a UserError that says how to start the trial afresh."""
    try:
        return RunFolder(folder).read_record()
    except UserError as err:
        raise UserError(f"{err}; move {folder} away to train the trial again") from None


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


class Storage:
    """Where the study lives, checked before a trial trains: ``OUT/study.db`` by default, an SQLAlchemy URL
    (parsed, its driver imported, its server reached within ``CONNECT_TIMEOUT_S``; an SQLite file checked as the
    default one is) or ``journal:FILE``. A file that is not a study, a link, a pipe or a missing folder is
    one line here, not a traceback from the database layer after the search folder was made."""

    def __init__(self, spec: str | None, out: Path):
        self.spec, self.files, self.path = spec, [], None
        if spec is None:  # part of the search folder: checked with its write set too
            self.path, self.files = out / STUDY_FILE, [STUDY_FILE]
            self.url, self.shown = f"sqlite:///{out.resolve() / STUDY_FILE}", str(self.path)
            refuse_in_the_way(self.path, out)
            self.sqlite_file()
        elif spec.startswith("journal:"):
            self.url = self.shown = spec
            self.journal()
        else:
            self.url = spec
            self.database()

    # -- checks ----------------------------------------------------------------------------------
    def database(self) -> None:
        import sqlalchemy
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        try:
            url = make_url(self.spec)
        except ArgumentError:
            raise UserError(f"--storage {self.spec!r} is not a storage URL; give an SQLAlchemy URL (sqlite:///FILE, "
                            f"postgresql://USER@HOST/DB, mysql+pymysql://...) or journal:FILE") from None
        self.shown = url.render_as_string(hide_password=True)
        try:
            url.get_dialect().import_dbapi()
        except NoSuchModuleError:
            raise UserError(f"--storage {self.shown}: {url.drivername!r} is not a database SQLAlchemy knows") from None
        except ImportError as err:
            raise UserError(f"--storage {self.shown}: the driver of {url.drivername} is not installed here "
                            f"({err.name or first_line(err)}); install it, e.g. pip install psycopg2-binary for "
                            f"postgresql, pymysql for mysql+pymysql") from None
        if url.get_backend_name() == "sqlite":
            if url.database in (None, "", ":memory:") or str(url.database).startswith("file:"):
                raise UserError(f"--storage {self.shown}: a study must live in a file (sqlite:///FILE); an in-memory "
                                f"one is lost when the worker ends")
            self.path = Path(url.database)
            if not os.path.isdir(self.path.parent):
                raise UserError(f"--storage {self.shown}: the folder {self.path.parent} does not exist; create it, "
                                f"or name a file in a folder that exists")
            refuse_in_the_way(self.path)
            self.sqlite_file()
            return
        timeout = {"postgresql": "connect_timeout", "mysql": "connect_timeout"}.get(url.get_backend_name())
        engine = sqlalchemy.create_engine(url, connect_args={timeout: CONNECT_TIMEOUT_S} if timeout else {})
        try:
            with engine.connect():
                pass
        except sqlalchemy.exc.SQLAlchemyError as err:
            raise UserError(f"cannot reach the study storage {self.shown}: {first_line(getattr(err, 'orig', err))}; "
                            f"check the server and the URL") from None
        finally:
            engine.dispose()

    def sqlite_file(self) -> None:
        """An existing file must be an SQLite database (empty is one); its folder must take files."""
        if kind_of(self.path) is not None:
            with os.fdopen(open_regular(self.path, os.O_RDONLY), "rb") as handle:
                head = handle.read(len(SQLITE_MAGIC))
            if head and head != SQLITE_MAGIC:
                raise UserError(f"{self.path} is not an SQLite database, so not an Optuna study; move it away, or "
                                f"give another {'--storage' if self.spec else '--out'}")
        if self.spec is not None:
            probe_writable(self.path.parent)

    def journal(self) -> None:
        raw = self.spec.removeprefix("journal:")
        self.path = Path(raw)
        if not raw.strip():
            raise UserError("--storage journal: names no file; give journal:FILE, e.g. journal:search.log")
        if not os.path.isdir(self.path.parent):
            raise UserError(f"--storage {self.spec}: the folder {self.path.parent} does not exist; create it, or "
                            f"name a file in a folder that exists")
        refuse_in_the_way(self.path)
        if kind_of(self.path) is not None:
            with os.fdopen(open_regular(self.path, os.O_RDONLY), "rb") as handle:
                first = handle.readline(1 << 20)
            try:
                record = json.loads(first) if first.strip() else {"op_code": None}
            except (ValueError, RecursionError):
                record = None
            if not (isinstance(record, dict) and "op_code" in record):
                raise UserError(f"{self.path} is not an Optuna journal (its first line is not a journal record); "
                                f"give another journal:FILE")
        probe_writable(self.path.parent)

    # -- use -------------------------------------------------------------------------------------
    def open(self):
        import optuna

        if self.spec is not None and self.spec.startswith("journal:"):
            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalFileBackend

            return JournalStorage(JournalFileBackend(str(self.path)))
        if self.path is not None:  # SQLite: say so before a wait for another process's write lock
            self.note_if_locked()
        return optuna.storages.RDBStorage(self.url, engine_kwargs=(
            {"connect_args": {"timeout": LOCK_WAIT_S}} if self.path is not None else {}))

    def note_if_locked(self) -> None:
        try:
            with closing(sqlite3.connect(f"file:{quote(str(self.path))}?mode=rw", uri=True, timeout=1)) as db:
                db.execute("BEGIN IMMEDIATE")
                db.rollback()
        except sqlite3.OperationalError as err:
            if "locked" in str(err):
                click.echo(f"note: {self.path} is locked by another process; waiting up to {LOCK_WAIT_S} s for it",
                           err=True)

    @contextmanager
    def errors(self, opening: bool = False):
        """The database layer's errors as one line: a study locked past the wait, a file that is not a study,
        a server gone; while ``opening``, also a journal that does not parse."""
        import sqlalchemy.exc

        where = "--storage" if self.spec else "--out"
        try:
            yield
        except (sqlalchemy.exc.SQLAlchemyError, sqlite3.Error) as err:
            reason = first_line(getattr(err, "orig", None) or err)
            if "locked" in reason:
                raise UserError(f"the study in {self.shown} is locked by another process (waited {LOCK_WAIT_S} s); "
                                f"wait for it to finish, or stop it") from None
            raise UserError(f"{self.shown} is not a usable Optuna study ({reason}); move it away, or give another "
                            f"{where}") from None
        except (ValueError, OSError) as err:
            if not (opening and self.spec and self.spec.startswith("journal:")):
                raise
            raise UserError(f"{self.path} is not a readable Optuna journal ({first_line(err)}); give another "
                            f"journal:FILE") from None

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
