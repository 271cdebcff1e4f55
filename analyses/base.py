"""What an analysis declares and returns, and the helpers analyses share.

An analysis is one module in analyses/ that defines ``ANALYSIS = Analysis(...)``: its name, the exact
definition of its numbers, its entry point, a typed option schema and what it requires of a model.
The registry finds it; the CLI builds ``interp run NAME --help`` and its validation from the schema,
and every model it cannot run on is refused up front with the requirement that is not met.

The bootstrap intervals the analyses share are in ``analyses.intervals``; what a checkpoint was trained on
(its budget, from the run's record) is in ``analyses.budget``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

import models
from ground.terminal import MODEL_SOURCES
from tasks import Task
import tasks.base as tasks_base
from tasks.base import SEED_LIMIT, ConfigError

from . import style


class AnalysisError(ValueError):
    """The analysis cannot run on this model or with these options; the message says why."""


@dataclass
class Result:
    name: str
    definition: str  # the exact definition of the numbers, also written into the JSON
    metrics: dict  # JSON-serialisable numbers
    figures: dict = field(default_factory=dict)  # {name: plotly Figure}, in display order
    descriptions: dict = field(default_factory=dict)  # {metric key: one line saying what it is}, for readers

    def record(self, context: dict | None = None) -> dict:
        """The result as its JSON holds it: the analysis, ``context`` (where it came from), the definition,
        the numbers and what each means. ``read_result`` reads it back."""
        return dict(analysis=self.name, **(context or {}), definition=self.definition, metrics=self.metrics,
                    **({"descriptions": self.descriptions} if self.descriptions else {}))


def read_result(path, analysis: str | None = None) -> dict:
    """A result's JSON as ``Result.record`` wrote it (of ``analysis`` when given); an AnalysisError
    naming the file and the command that writes it when it is not one."""
    path = Path(path)
    what = f"a {analysis} result" if analysis else "an analysis result"
    try:
        if not path.is_file():
            raise OSError("no such file")
        record = json.loads(path.read_bytes().decode())
    except (OSError, ValueError, RecursionError):
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("metrics"), dict) \
            or (analysis is not None and record.get("analysis") != analysis):
        how = {"sweep": "interp sweep --out FOLDER", "tune": "interp tune --out FOLDER"}.get(
            analysis, f"interp run {analysis or 'NAME'}")  # the commands of their own, then every analysis
        raise AnalysisError(f"{path} is not {what}; `{how}` writes one") from None
    return record


@dataclass(frozen=True)
class Option:
    """One keyword option of an analysis: its default (whose type is the option's type), help and range."""

    name: str
    default: Any
    help: str
    low: float | None = None  # inclusive bounds for numbers
    high: float | None = None

    @property
    def type(self) -> type:
        return type(self.default)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def describe(self) -> str:
        """The help text with the range and default, for ``--help``."""
        bounds = "" if self.low is None and self.high is None else f", {self.range_text()}"
        default = "auto" if self.default == "" else self.default
        return f"{self.help}{bounds} (default {default})"

    def parse(self, raw: str):
        """A value from the command line's text, checked."""
        if self.type is bool:  # bool("false") is True: read the words instead
            words = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
            if raw.strip().lower() not in words:
                raise AnalysisError(f"{self.flag} must be true or false, got {raw!r}")
            return words[raw.strip().lower()]
        try:
            value = self.type(raw)
        except ValueError:
            raise AnalysisError(f"{self.flag} must be {self.type.__name__}, got {raw!r}") from None
        return self.check(value)

    def check(self, value):
        """``value`` itself if it has the option's type and lies in its range; AnalysisError otherwise."""
        kind = self.type
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)  # an int where a float is asked for is fine
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise AnalysisError(f"{self.flag} must be {kind.__name__}, got {value!r}")
        if kind in (int, float) and ((self.low is not None and value < self.low) or
                                     (self.high is not None and value > self.high) or not math.isfinite(value)):
            raise AnalysisError(f"{self.flag} must be {self.range_text()}, got {value!r}")
        return value

    def range_text(self) -> str:
        if self.high is None:
            return f"at least {self.low}"
        return f"at most {self.high}" if self.low is None else f"from {self.low} to {self.high}"


def n_option(default: int) -> Option:
    return Option("n", default, "held-out sequences to measure on", low=1, high=10 ** 7)  # more is a typo


def seed_option() -> Option:
    return Option("seed", 1234, "seed of the held-out batch", low=0, high=SEED_LIMIT - 1)


def _has_series(model) -> bool:
    provenance = getattr(model, "provenance", None)
    return provenance is not None and len(provenance.checkpoints) >= MIN_SERIES


MIN_SERIES = 3  # checkpoints a training-dynamics analysis needs


def _corruptible(task) -> bool:
    """Whether ``task`` makes its default corruption (causal interventions) of a batch of its own."""
    from tasks import ConfigError

    if not task.corruptions:
        return False
    try:
        task.corrupt(task.sample(2, generator=torch.Generator().manual_seed(0)), torch.Generator().manual_seed(0))
    except ConfigError:
        return False
    return True


# What an analysis may require of a model: name -> (test of the model, the refusal's message, formatted with the
# model's arch, task and checkpoint count, saying why it is needed and what to run instead).
REQUIREMENTS: dict[str, tuple[Callable, str]] = {
    "attention": (lambda m: m.has_attention(),
                  "needs an attention model; {arch} has no attention heads (try calibration instead)"),
    "patterns": (lambda m: m.has_patterns(),
                 "needs attention patterns; {arch} has neither attention heads nor an effective attention "
                 "(try calibration instead)"),
    "discrete": (lambda m: not m.task.continuous,
                 "needs a discrete task; {task!r} has a Gaussian answer head"),
    "frame": (lambda m: m.task.frame is not None,
              "needs a task with a hypothesis frame; task {task!r} defines no hypothesis tokens"),
    "eliminates": (lambda m: m.task.eliminates,
                   "needs a discrete task whose posterior can rule hypotheses out; on {task!r} no answer class "
                   "ever has posterior 0"),
    "query-latent": (lambda m: m.task.query_latent is not None,
                     "needs a task with a discrete latent state at every query (its clusters); {task!r} has none"),
    "length-setting": (lambda m: m.task.length_setting is not None,
                       "needs a task with a length setting to vary; {task!r} has none"),
    "table": (lambda m: type(m.task).with_table is not Task.with_table,
              "needs a task with a table of key-value bindings; {task!r} has none"),
    "series": (_has_series,
               "needs a run folder with several checkpoints (at least %d; this model's run holds {n_checkpoints}); "
               "pass the run folder, e.g. --ckpt runs/NAME" % MIN_SERIES),
    "corruption": (lambda m: _corruptible(m.task),
                   "needs a clean/corrupted pair, and task {task!r} with these settings declares no corruption it can "
                   "make (the paper layouts have them: bijection without replacement, recall's paper layout)"),
}


@dataclass(frozen=True)
class Analysis:
    """A registered diagnostic. ``run(model, **options)`` is its entry point; ``multi_model``: the
    first argument is a list of models (each checked against ``requires``)."""

    name: str
    summary: str  # one line for ``interp list`` and ``interp run --help``
    definition: str
    run: Callable[..., "Result"] | None  # on a wind-tunnel model; None: the analysis runs on language models only
    options: tuple[Option, ...] = ()
    requires: tuple[str, ...] = ()
    multi_model: bool = False
    order: int = 100  # where it is listed (``interp list``, ``interp run --help``); ties by name
    # On a language model (``interp run NAME --model ...``): measured on a prompt task's prompts.
    on_language_model: Callable[..., "Result"] | None = None
    language_options: tuple[Option, ...] = ()
    language_definition: str = ""

    def __post_init__(self):
        unknown = [r for r in self.requires if r not in REQUIREMENTS]
        if unknown:
            raise ValueError(f"{self.name}: unknown requirement(s) {unknown}; known: {', '.join(REQUIREMENTS)}")

    def schema(self, language: bool = False) -> tuple[Option, ...]:
        """The options on a wind-tunnel model, or with ``language`` on a language model."""
        return self.language_options if language else self.options

    def defaults(self, language: bool = False) -> dict:
        return {o.name: o.default for o in self.schema(language)}

    def option(self, name: str, language: bool = False) -> Option:
        for o in self.schema(language):
            if o.name == name:
                return o
        listed = ", ".join(o.flag for o in self.schema(language)) or "none"
        on = " on a language model" if language else ""
        raise AnalysisError(f"unknown option --{name.replace('_', '-')} for {self.name}{on}; its options: {listed}")

    def unmet(self, model) -> list[str]:
        """The messages of the requirements ``model`` does not meet (empty when it can run)."""
        if is_language_model(model):
            from analyses import REGISTRY  # the registry is built by the time a model is checked

            usable = ", ".join(n for n, a in REGISTRY.items() if a.on_language_model is not None)
            return [] if self.on_language_model else [
                f"needs a wind-tunnel model (its numbers come from the task's exact posterior); on a language "
                f"model run {usable}"]
        if self.run is None:
            return [f"runs on language models: pass --model NAME ({MODEL_SOURCES}) instead of --ckpt"]
        missing = []
        for name in self.requires:
            test, why = REQUIREMENTS[name]
            try:
                met = test(model)
            except AttributeError:  # not a wind-tunnel model (no task, no provenance, ...)
                met = False
            if not met:
                missing.append(why.format(
                    arch=getattr(model, "arch", type(model).__name__),
                    task=getattr(getattr(model, "task", None), "name", None),
                    n_checkpoints=len(getattr(getattr(model, "provenance", None), "checkpoints", ()))))
        return missing

    def __call__(self, model, **options) -> "Result":
        language = not self.multi_model and is_language_model(model)
        names = [o.name for o in self.schema(language)]
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise AnalysisError(f"unknown option(s) {', '.join(unknown)} for {self.name}; "
                                f"valid options: {', '.join(names) or 'none'}")
        checked = {name: self.option(name, language).check(value) for name, value in options.items()}
        for m in (model if self.multi_model else [model]):
            missing = self.unmet(m)
            if missing:
                raise AnalysisError(f"{self.name} {missing[0]}")
        if language:
            # the schema holds the defaults (the entry points take every option, none defaulted)
            result = self.on_language_model(model, **(self.defaults(language=True) | checked))
            subject, task = model.name, None
        else:
            result = self.run(model, **checked)
            task = None if self.multi_model else getattr(getattr(model, "task", None), "name", None)
            subject = None if self.multi_model else subject_of(model)
        for fig in result.figures.values():  # one style for every analysis's figures, titled by their model
            style.apply(fig, subject=subject, replaces=task)
        return result


def subject_of(model) -> str:
    """What a figure's title names: the run ("bijection-transformer-cpu (transformer on bijection)") or,
    for a model built in memory, its architecture and task ("transformer on bijection")."""
    arch, task = getattr(model, "arch", type(model).__name__), getattr(getattr(model, "task", None), "name", "?")
    run_dir = getattr(getattr(model, "provenance", None), "run_dir", None)
    return f"{run_dir.name} ({arch} on {task})" if run_dir is not None else f"{arch} on {task}"


def is_language_model(model) -> bool:
    from models.language_model import LanguageModel

    return isinstance(model, LanguageModel)


# -- numeric helpers the analyses share ------------------------------------------------------
RIDGE_ALPHAS = np.logspace(-3, 3, 13)  # ridge read-outs: the penalty chosen by leave-one-out on the fitting half


def readout_r2(X, y, fit, test, ridge: bool = False) -> float | None:
    """R² on rows ``test`` of a least-squares read-out (with intercept) of ``y`` from ``X`` fitted on rows
    ``fit`` (``ridge``: a ridge read-out, penalty from RIDGE_ALPHAS by leave-one-out, for fewer points than
    dimensions, where least squares interpolates the fitting half). None when either half has fewer than
    two rows or the target is constant on the test rows (R² undefined)."""
    from sklearn.linear_model import LinearRegression, RidgeCV
    from sklearn.metrics import r2_score

    if len(fit) < 2 or len(test) < 2 or np.ptp(y[test]) == 0:
        return None
    model = (RidgeCV(alphas=RIDGE_ALPHAS) if ridge else LinearRegression()).fit(X[fit], y[fit])
    r2 = float(r2_score(y[test], model.predict(X[test])))
    return r2 if math.isfinite(r2) else None


def held_out_batch(task, n: int, seed: int):
    """tasks.base.held_out_batch, its refusals as an AnalysisError."""
    try:
        return tasks_base.held_out_batch(task, n, seed)
    except ConfigError as err:
        raise AnalysisError(str(err)) from None


def unmeasurable(trained, variant, n_ctx: int | None, model: str = "the model") -> str | None:
    """Why a model trained on task ``trained`` cannot be measured on ``variant`` (None when it can):
    another vocabulary, or more positions than its position table (``n_ctx`` None: no table)."""
    if (variant.vocab_size, variant.n_classes) != (trained.vocab_size, trained.n_classes):
        return f"changes the vocabulary of {model}'s task, so it cannot be measured there"
    if n_ctx is not None and variant.seq_len > n_ctx:
        return f"needs {variant.seq_len} positions; {model} has n_ctx={n_ctx}"
    return None


def eval_batch(model, n: int, seed: int):
    """A held-out batch of the model's task, on the model's device."""
    batch = held_out_batch(model.task, n, seed)
    return batch.to(next(model.parameters()).device)


@torch.no_grad()
def answer_probs(model, tokens: torch.Tensor, chunk: int = 1024, **kwargs) -> torch.Tensor:
    """``model.answer_probs`` in chunks, without gradients, as float32."""
    return torch.cat([model.answer_probs(tokens[i:i + chunk], **kwargs).float()
                      for i in range(0, len(tokens), chunk)])


def untrained_twin(model):
    """The same architecture, config and seed as ``model`` at initialisation: its step-0 weights,
    on the model's device, for baselines that separate what training did from what the shape gives."""
    twin = models.build(model.arch, model.task, config=model.config.to_dict(), seed=model.provenance.seed)
    return twin.to(next(model.parameters()).device).eval()
