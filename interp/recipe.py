"""What a run trains, resolved in one place: the task, the model and the training settings.

    spec = recipe.resolve("recall", "mamba", "cpu", task_options={"N": 32}, model_options={"d_model": 96},
                          train_options={"lr": 1e-3})
    spec.task, spec.model, spec.train      # a Task, a model config dict, TrainSettings
    spec.record()                          # what a run's record holds of it
    spec.differences(record)               # where a run's record holds another recipe

A recipe is layered, each layer over the one before: the generic preset (``PRESETS`` here for
training, each architecture's ``presets`` for its model), the task's own variant of that preset
(``tasks.base.Preset``), that variant's settings for one architecture, then what the user gives.
``resolve`` is the one place that does this; ``interp train``, ``tune``, ``sweep``, ``reproduce``
and the shipped-model checks all ask it, and differ only in the recipes they ask for. A recipe stated
whole (``stated``: a test's, a sweep point's) and the one a run's record holds (``Recipe.of_run``: what
a run resumes on) are checked as a resolved one is (``checked``), so the trainer takes every recipe as
valid. The seed policy is part of the recipe: a seed is checked by ``tasks.base.is_seed`` and
held-out batches are drawn by ``tasks.base.held_out_batch``.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace

import models
import tasks
from tasks.base import SEED_RANGE, is_seed, stage_options

from .checkpoint import resolve as resolve_checkpoint
from .errors import UserError

MAX_STEPS = 10 ** 9  # step counts beyond these are typos, not plans (and overflow the batch seeds)
MAX_BATCH = 2 ** 20
MAX_LR = 10.0


@dataclass
class TrainSettings:
    steps: int = 6000
    batch_size: int = 128
    lr: float = 3e-3
    warmup: int = 300
    # The fraction of the steps after the warm-up over which the rate anneals to zero (cosine), at the end;
    # before it the rate holds at ``lr``. 1: the anneal spans the whole run after the warm-up.
    decay: float = 1.0
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.98)
    grad_clip: float = 1.0
    loss: str = "soft"  # "soft" (Bayes posterior targets) or "hard" (sampled answers)
    seed: int = 0
    eval_every: int = 250
    eval_size: int = 2000
    resume_every: int = 500  # steps between resume states (also written at every checkpoint)
    checkpoint_every: int = 0  # 0: the log-spaced schedule of checkpoint_steps; N: also every N steps
    # Stages before the task itself: [[until_step, {task settings}], ...] trains on the task with those
    # settings changed until that step (e.g. small recall tables at a short length first); a stage with a
    # list of settings is a mixture, its steps taking them in turn ({} is the task itself). Evaluation and
    # checkpoints are always on the task itself. Empty: the task from the first step.
    curriculum: tuple = ()
    # torch.compile the training step (forward and backward; evaluation stays eager). On the CPU this
    # fuses the many small element-wise kernels of a small model: HMM steps 1.5x (4 layers of d=96)
    # to 1.7x (8 layers of d=68) faster on a 2-core Intel CPU, after about a minute of compiling.
    # Needs a C++ compiler (gcc or clang). Compiled
    # kernels round differently from eager ones, so a compiled run replays itself bit for bit, not
    # the same run without it.
    compile: bool = False
    # The training forward pass under bf16 autocast: None (auto) on CUDA and not on the CPU (``bf16_on``),
    # True or False on either; weights, optimizer and every evaluation stay float32. The trainer records
    # the resolved value in the run's record (so a resume keeps the precision the run started with). Where the CPU
    # has bf16 matrix instructions the HMM preset's compiled 4-layer step is faster: 116 ms against 160 ms
    # on an Intel CPU with AMX, about 130 against 190 ms on an AMD EPYC with avx512_bf16; for one eager step
    # on this machine see benchmarks/step_profile.py. What it costs in precision is what a run measures.
    bf16: bool | None = None
    # Start from the weights of this checkpoint instead of a fresh init (fine-tuning): the same
    # architecture and weight shapes, any task settings or model options that leave the shapes alone
    # (e.g. training a shipped model on with position offsets). The run's record keeps the file's SHA-256.
    init: str | None = None

    def validate(self) -> "TrainSettings":
        if isinstance(self.checkpoint_every, bool) or not isinstance(self.checkpoint_every, int) \
                or self.checkpoint_every < 0:
            raise UserError(f"checkpoint-every must be a non-negative integer, got {self.checkpoint_every!r}")
        for name in ("steps", "batch_size", "eval_every", "eval_size", "resume_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"{name.replace('_', '-')} must be a positive integer, got {value!r}")
        for name, top in (("steps", MAX_STEPS), ("warmup", MAX_STEPS), ("checkpoint_every", MAX_STEPS),
                          ("eval_every", MAX_STEPS), ("resume_every", MAX_STEPS), ("batch_size", MAX_BATCH),
                          ("eval_size", MAX_BATCH)):
            if isinstance(getattr(self, name), int) and getattr(self, name) > top:
                raise UserError(f"{name.replace('_', '-')} must be at most {top:,}, got {getattr(self, name):,}")
        for name in ("lr", "weight_decay", "grad_clip"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0 or (name == "lr" and value == 0):
                raise UserError(f"{name.replace('_', '-')} must be a finite positive number, got {value!r}")
        if self.lr > MAX_LR:
            raise UserError(f"lr must be at most {MAX_LR:g}, got {self.lr:g} (Adam steps of that size overflow)")
        betas = self.betas if isinstance(self.betas, (list, tuple)) else ()
        if len(betas) != 2 or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1
                                      for b in betas):
            raise UserError(f"betas must be two numbers in [0, 1), got {self.betas!r}")
        if not is_seed(self.seed):
            raise UserError(f"seed must be {SEED_RANGE}, got {self.seed!r}")
        if self.init is not None and (not isinstance(self.init, str) or not self.init):
            raise UserError(f"init must be a checkpoint's path, got {self.init!r}")
        for name in ("compile", "bf16"):
            if not isinstance(getattr(self, name), bool) and not (name == "bf16" and self.bf16 is None):
                raise UserError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.loss not in ("soft", "hard"):
            raise UserError(f"loss must be 'soft' or 'hard', got {self.loss!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise UserError(f"warmup must be a non-negative integer, got {self.warmup!r}")
        if isinstance(self.decay, bool) or not isinstance(self.decay, (int, float)) or not 0 < self.decay <= 1:
            raise UserError(f"decay must be a fraction in (0, 1] (the share of the run the rate anneals over), "
                            f"got {self.decay!r}")
        self.betas = tuple(self.betas)
        stages = self.curriculum
        settings_ok = lambda s: isinstance(s, dict) or (isinstance(s, (list, tuple)) and s  # a mixture
                                                        and all(isinstance(option, dict) for option in s))
        if not isinstance(stages, (list, tuple)) or not all(
                isinstance(stage, (list, tuple)) and len(stage) == 2 and settings_ok(stage[1])
                and isinstance(stage[0], int) and not isinstance(stage[0], bool) for stage in stages):
            raise UserError(f"curriculum must be a list of [until_step, {{task settings}}] pairs (a list of settings "
                            f"for a mixture), got {stages!r}")
        ends = [stage[0] for stage in stages]
        if ends != sorted(set(ends)) or (ends and not (0 < ends[0] and ends[-1] <= self.steps)):
            raise UserError(f"curriculum stages must end at increasing steps between 1 and steps={self.steps}, "
                            f"got {ends} (interp train --curriculum sets them)")
        self.curriculum = tuple((end, dict(settings) if isinstance(settings, dict) else [dict(o) for o in settings])
                                for end, settings in stages)
        return self


# The generic training recipes that go with the model presets of the same name. A task declares its
# own variant of a preset (``tasks.base.Preset``: its ``train`` settings, then those for one
# architecture) in its module. The cpu schedules are sized for about 3 hours of training for all
# 16 task x architecture models on a 2-core CPU (measured per run; see docs/results/paper-table.md).
PRESETS = {
    "cpu": TrainSettings(),
    "paper": TrainSettings(steps=50_000, batch_size=256, lr=3e-4, warmup=2000, betas=(0.9, 0.999),
                           loss="hard", eval_every=1000),
}


def preset_settings(preset: str, task, arch: str) -> TrainSettings:
    """The training settings of ``preset`` for ``arch`` on ``task`` (a Task, or a task name for its defaults)."""
    known_preset(preset)
    task = tasks.make(task) if isinstance(task, str) else task
    settings = asdict(PRESETS[preset])
    for layer in task.preset_layers(preset, arch):
        unknown = sorted(set(layer.train) - set(settings))
        if unknown:
            raise UserError(f"task {task.name!r} sets unknown training setting(s) {', '.join(unknown)} in its "
                            f"{preset!r} preset; valid: {', '.join(settings)}")
        settings.update(layer.train)
    return TrainSettings(**settings)


def fitted_curriculum(stages, preset_steps: int, steps: int) -> list:
    """A preset's curriculum for a run of ``steps`` instead of ``preset_steps``: kept as it is where it fits,
    else its stage ends scaled by steps / preset_steps (a short trial run still passes through every stage
    that keeps at least one step of its own)."""
    stages = [list(stage) for stage in stages]
    if not stages or stages[-1][0] <= steps:
        return stages
    fitted = []
    for end, settings in stages:
        end = min(steps, max(1, round(end * steps / preset_steps)))
        if not fitted or end > fitted[-1][0]:
            fitted.append([end, settings])
    return fitted


def recorded_settings(train: dict) -> dict:
    """Training settings as a run's record holds them (JSON types), with any setting added since the run
    was written at its default."""
    return json.loads(json.dumps(asdict(TrainSettings()) | train))


def bf16_on(bf16: bool | None, device: str) -> bool:
    """Whether training autocasts to bf16: ``TrainSettings.bf16`` as given, None (auto) on CUDA only."""
    return device.startswith("cuda") if bf16 is None else bf16


def recorded_train(record: dict) -> dict:
    """A run record's training settings (``recorded_settings``) as a recipe states them. A record written
    before bf16 had an "auto" (it has no top-level "bf16", the resolved value) says false for what None
    says now: autocast on CUDA only."""
    train = recorded_settings(record.get("train", {}))
    if "bf16" not in record and train["bf16"] is False:
        train["bf16"] = None
    return train


def recorded_model(arch: str, model: dict) -> dict:
    """A model config as a run's record holds it, with any setting added since the run was written at its default."""
    try:
        return models.model_config(arch, **model)
    except tasks.ConfigError:
        return model  # not a config of this architecture: compared as it is, so the difference shows


def recorded_task(task: dict) -> dict:
    """A run record's task with any setting added since it was written at its default (as its run resumes)."""
    try:
        return tasks.from_config(task).config()
    except (tasks.ConfigError, TypeError, KeyError):
        return task  # not a task config: compared as it is, so the difference shows


RECORD_FIELDS = dict(task=dict, arch=str, model=dict, train=dict, status=str, final=dict, n_params=int,
                     wall_time_s=(int, float))


def record_problem(record: dict) -> str | None:
    """What is wrong with the shape of a run's record (its values are checked where they are used), or None."""
    missing = [k for k in ("task", "arch", "model", "train") if k not in record]
    if missing:
        return f"missing {', '.join(missing)}"
    for key, kind in RECORD_FIELDS.items():
        if key in record and (not isinstance(record[key], kind) or isinstance(record[key], bool)):
            names = {dict: "a JSON object", str: "a string", int: "an integer"}
            return f"{key} must be {names.get(kind, 'a number')}, got {json.dumps(record[key])[:40]}"
    return None


def stage_tasks(task, curriculum, n_ctx: int | None) -> list[list]:
    """Every curriculum stage's task (a mixture's options in turn), each checked: the one check of a curriculum,
    made when a recipe is checked (so ``interp tune`` finds a bad stage in any trial before the first one trains)
    and by the trainer that trains on them. ``n_ctx``: the model's context, where it has one."""
    return [[stage_task(task, option, n_ctx) for option in stage_options(settings)] for _, settings in curriculum]


def stage_task(task, settings: dict, n_ctx: int | None):
    """The task with a curriculum stage's settings changed; it must share the task's vocabulary and answers."""
    try:
        stage = tasks.from_config(task.config() | settings)
    except tasks.ConfigError as err:
        raise UserError(f"curriculum stage {settings}: {err}") from None
    shape = lambda t: (t.name, getattr(t, "vocab_size", None), getattr(t, "n_classes", None))
    if shape(stage) != shape(task):
        raise UserError(f"curriculum stage {settings} changes the vocabulary or the answers of the task; a stage "
                        f"may change only what the model can be run on unchanged (sizes, lengths)")
    if n_ctx is not None and stage.seq_len > n_ctx:
        raise UserError(f"curriculum stage {settings} has sequences of {stage.seq_len} tokens, longer than the "
                        f"model's context ({n_ctx}); train with -M n_ctx={stage.seq_len}")
    return stage


def model_context(arch: str, task, model_config: dict) -> int | None:
    """The context (n_ctx) the model of this config would have, where its architecture has one; built on the
    meta device (no memory, no init), so that a check before training sees what training would build."""
    with models.on_meta():
        return getattr(models.build(arch, task, config=model_config).cfg, "n_ctx", None)


# What a resumed run may change of its recipe: torch.compile changes how the step's kernels round, not what it
# computes (the trainer notes the switch). Every other setting a run resumes with is its record's.
SWITCHABLE_ON_RESUME = ("compile",)


def fixed_on_resume(task_options: dict, model_options: dict, train_options: dict) -> list[str]:
    """The parts of a recipe given for a run that resumes (on the recipe its record holds) which it would not take:
    every training setting in ``train_options`` but those ``SWITCHABLE_ON_RESUME``, then ``task_options`` and
    ``model_options`` when any are given; by their names."""
    return ([name for name in train_options if name not in SWITCHABLE_ON_RESUME]
            + ["task_options"] * bool(task_options) + ["model_options"] * bool(model_options))


@dataclass(frozen=True)
class Recipe:
    """One run's settings, resolved: the task it trains on, its model config and its training settings."""

    task: "tasks.Task"
    arch: str
    model: dict
    train: TrainSettings
    notes: tuple[str, ...] = ()  # what the resolution changed that the user did not ask for, one line each

    def record(self) -> dict:
        """The recipe as a run's record holds it (task, arch, model, train; JSON types)."""
        return dict(task=self.task.config(), arch=self.arch, model=self.model,
                    train=recorded_settings(asdict(self.train)))

    def differences(self, record: dict, ignore=()) -> list[tuple[str, object, object]]:
        """Where the run whose record is ``record`` was trained on another recipe than this one: (setting, as the
        run has it, as this recipe has it) for every task, model and training setting, then the architecture, each
        as this version reads the record (a setting added since it was written at its default). Training settings
        named in ``ignore`` are not compared (those that change what a run records of itself, never its weights).
        What a sweep or a reproduction asks before it reuses or resumes a run, and a search of a trial's folder."""
        want = self.record()
        have = dict(task=recorded_task(record.get("task", {})), train=recorded_train(record),
                    model=recorded_model(self.arch, record.get("model", {})))
        found = [(f"{part}.{key}", have[part].get(key), value) for part in ("task", "model", "train")
                 for key, value in want[part].items()
                 if have[part].get(key) != value and not (part == "train" and key in ignore)]
        return found + ([("arch", record.get("arch"), self.arch)] if record.get("arch") != self.arch else [])

    def checked(self, new: bool = True) -> "Recipe":
        """This recipe, after every check a recipe must pass before a run trains on it: the training settings'
        values, the curriculum's stages against the task and the model's context, and for a ``new`` run the
        checkpoint it starts from (a run that resumes has its weights already). A UserError otherwise."""
        self.train.validate()
        if self.train.curriculum:
            stage_tasks(self.task, self.train.curriculum, model_context(self.arch, self.task, self.model))
        if new and self.train.init is not None:  # the start must be there before anything trains
            resolve_checkpoint(self.train.init)
        return self

    @classmethod
    def of_run(cls, record: dict, where) -> "Recipe":
        """The recipe a run's record holds (read from ``where``), which the run resumes on: each setting as it
        was written (one added since at its default), checked; a record that holds none is a UserError saying
        the run cannot be resumed."""
        try:
            if problem := record_problem(record):
                raise TypeError(problem)
            train = TrainSettings(**record["train"]).validate()
        except (KeyError, TypeError, UserError) as err:
            raise UserError(f"{where} is not a valid run record ({err}); it cannot be resumed") from None
        try:
            task = tasks.from_config(record["task"])
            model = models.architecture(record["arch"]).config_class.from_dict(record["model"]).to_dict()
        except tasks.ConfigError as err:
            raise UserError(f"{where}: {err}; it cannot be resumed") from None
        return cls(task, record["arch"], model, train).checked(new=False)


def resolve(task, arch: str, preset: str = "cpu", *, task_options: dict | None = None,
            model_options: dict | None = None, train_options: dict | None = None) -> Recipe:
    """What ``interp train --task TASK --arch ARCH --preset PRESET -T ... -M ... --lr ...`` trains: its three
    layers (``resolved_task``, ``resolved_model``, ``resolved_train``), checked (``Recipe.checked``).

    ``task`` is a task name (trained on the preset's task settings, then ``task_options``) or a Task
    (as it is). ``train_options`` override the preset's training settings; a shorter ``steps`` without
    a ``curriculum`` of its own gets the preset's stages in proportion (``fitted_curriculum``).
    Unknown presets, settings or values raise UserError.
    """
    task = resolved_task(task, preset, task_options) if isinstance(task, str) else task
    model = resolved_model(arch, preset, task, model_options)
    train, notes = resolved_train(task, arch, preset, train_options)
    return Recipe(task, arch, model, train, tuple(notes)).checked()


# The layers of ``resolve``, each alone and unchecked: for a caller that builds its recipes from the preset's
# layers (a sweep's budget and models, a search's budget), whose whole recipes are then checked as any recipe is.

def resolved_task(name: str, preset: str, options: dict | None = None):
    """The task ``preset`` trains on (its task settings), with ``options`` over them."""
    known_preset(preset)
    try:
        return tasks.for_preset(name, preset, **dict(options or {}))
    except tasks.ConfigError as err:
        raise UserError(str(err)) from None


def resolved_model(arch: str, preset: str, task, options: dict | None = None) -> dict:
    """The model config of ``preset`` for ``arch`` on ``task``, with ``options`` over it."""
    known_preset(preset)
    try:
        return models.model_config(arch, preset, task, **dict(options or {}))
    except tasks.ConfigError as err:
        raise UserError(str(err)) from None


def resolved_train(task, arch: str, preset: str, options: dict | None = None) -> tuple[TrainSettings, list[str]]:
    """The training settings of ``preset`` for ``arch`` on ``task`` with ``options`` over them (a named curriculum
    built by the task; a shorter run's preset stages in proportion), and notes on what that changed."""
    train = preset_settings(preset, task, arch)
    overrides = dict(options or {})
    unknown = sorted(set(overrides) - set(asdict(train)))
    if unknown:
        raise UserError(f"unknown training setting(s) {', '.join(unknown)}; valid: {', '.join(asdict(train))}")
    notes = []
    if isinstance(overrides.get("curriculum"), str):  # a named curriculum: the task builds it for this run
        try:
            overrides["curriculum"] = task.curriculum(overrides["curriculum"], overrides.get("steps", train.steps))
        except tasks.ConfigError as err:
            raise UserError(str(err)) from None
    if "steps" in overrides and "curriculum" not in overrides:  # a shorter run: the preset's stages in proportion
        overrides["curriculum"] = fitted_curriculum(train.curriculum, train.steps, overrides["steps"])
        if overrides["curriculum"] != [list(stage) for stage in train.curriculum]:
            notes.append(f"the preset's curriculum stages end at steps {[end for end, _ in train.curriculum]} of "
                         f"{train.steps}; for --steps {overrides['steps']} they end at "
                         f"{[end for end, _ in overrides['curriculum']]} (--curriculum sets them)")
    return replace(train, **overrides), notes


def known_preset(preset: str) -> None:
    if preset not in PRESETS:
        raise UserError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")


def stated(task=None, arch: str | None = None, model: dict | None = None,
           train: TrainSettings | None = None) -> Recipe:
    """A recipe stated whole, with no preset layered under it (a sweep's point, a test's run): ``task`` a Task or a
    task config (default: the first task listed), ``arch`` (default: the capacity reference), ``model`` a config of
    the architecture (its settings not given at the class's defaults; None: the cpu preset's for the task) and
    ``train`` the training settings (None: the defaults). Checked as ``resolve`` checks a recipe."""
    try:
        task = task if isinstance(task, tasks.Task) else tasks.from_config(task or {"name": tasks.NAMES[0]})
        arch = arch or models.REFERENCE
        model = (models.model_config(arch, "cpu", task) if model is None else
                 models.architecture(arch).config_class.from_dict(model).to_dict())
    except tasks.ConfigError as err:
        raise UserError(str(err)) from None
    return Recipe(task, arch, model, replace(train or TrainSettings())).checked()


def preset_recipe(preset: str, task, arch: str) -> dict:
    """What ``interp train --task T --arch A --preset P`` trains, as its run's record holds it (task,
    arch, model, train). ``task`` is a task name (what the preset trains on) or a Task."""
    return resolve(task, arch, preset).record()


__all__ = ["MAX_BATCH", "MAX_LR", "MAX_STEPS", "PRESETS", "Recipe", "TrainSettings", "fitted_curriculum",
           "bf16_on", "fixed_on_resume", "model_context", "preset_recipe", "preset_settings", "record_problem",
           "recorded_model", "recorded_settings", "recorded_task", "recorded_train", "resolve", "resolved_model",
           "resolved_task", "resolved_train", "stage_tasks", "stated"]
