"""Hooked sequence models. One module per architecture; each model carries its task.

    model = models.build("mamba", task, preset="cpu", seed=0)

Every module in this package whose model class (a subclass of ``models.base.AnswerHead``) sets
``arch`` is an architecture: ``REGISTRY`` is built by finding them, so adding one is adding a file.

Capacity matching: presets that leave ``d_model`` open get the width whose parameter count is within
5% of the capacity reference's (the architecture that declares ``capacity_reference``) with the same
preset on the same task, so architecture comparisons are at equal capacity. ``interp list`` prints
the counts.

A task may declare its own variant of a preset (``tasks.base.Preset``): its model settings go to every
architecture whose config has them, and its ``longest`` length sizes the position table of those with
one.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import fields
from functools import lru_cache

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import tasks
from tasks import ConfigError, Task
from tasks.plugins import classes_in, discover

from .base import AnswerHead, Provenance, matched_width

REGISTRY: dict[str, type[AnswerHead]] = discover(__name__, __path__, lambda m: classes_in(m, AnswerHead, "arch"),
                                                 lambda cls: cls.order, "architectures")
ARCHS = tuple(REGISTRY)
MAX_PARAMS = 2 ** 31  # 8 GiB of float32 weights: far beyond the paper's models, within a workstation's memory
REFERENCE = next((arch for arch, cls in REGISTRY.items() if cls.capacity_reference), None)


def architecture(arch: str) -> type[AnswerHead]:
    """The model class of ``arch``; ConfigError listing the valid ones for an unknown name."""
    if arch not in REGISTRY:
        raise ConfigError(f"unknown architecture {arch!r}; valid architectures: {', '.join(ARCHS)}")
    return REGISTRY[arch]


def presets(arch: str) -> dict:
    return architecture(arch).presets


def _as_task(task: Task | str | None) -> Task | None:
    return tasks.make(task) if isinstance(task, str) else task


def task_settings(arch: str, task: Task | None, preset: str) -> dict:
    """The model settings ``task`` declares for ``preset``, restricted to those ``arch`` has."""
    cls = architecture(arch)
    known = {f.name for f in fields(cls.config_class)}
    settings = {}
    for layer in task.preset_layers(preset, arch) if task is not None else ():
        settings.update({k: v for k, v in layer.model.items() if k in known})
        if layer.longest is not None and cls.positions:
            settings["n_ctx"] = max(task.seq_len, task.with_length(layer.longest).seq_len)
    return settings


def model_config(arch: str, preset: str | None = None, task: Task | str | None = None, **overrides) -> dict:
    """The config dict of a preset (with the task's own variant of it, if it has one) and overrides.

    ``task`` is a Task or a task name (its defaults). A preset that leaves ``d_model`` open gets the
    width that matches the capacity reference's parameter count on that task.
    """
    cls = architecture(arch)
    task = _as_task(task)
    base = {}
    if preset is not None:
        if preset not in cls.presets:
            raise ConfigError(f"unknown preset {preset!r} for {arch}; valid presets: {', '.join(cls.presets)}")
        base = cls.presets[preset].to_dict() | task_settings(arch, task, preset)
    base.update(overrides)
    if base.get("d_model", 0) is None:
        if preset is None or task is None:
            raise ConfigError(f"{arch}: d_model is not set; give it (-M d_model=...) or a preset and a task")
        target = _reference_params(preset, json.dumps(task.config(), sort_keys=True))
        with on_meta():
            base["d_model"] = matched_width(lambda d: cls(cls.config_class.from_dict(base | {"d_model": d}), task),
                                            target)
    return cls.config_class.from_dict(base).to_dict()


@lru_cache(maxsize=None)
def _reference_params(preset: str, task_json: str) -> int:
    if REFERENCE is None:
        raise ConfigError("no architecture declares capacity_reference, so d_model cannot be matched; set it")
    task = tasks.from_config(json.loads(task_json))
    return count_params(REFERENCE, task, model_config(REFERENCE, preset, task))


def build(arch: str, task: Task, config: dict | None = None, preset: str | None = None, seed: int = 0):
    """A freshly initialised model of ``arch`` for ``task`` (seeded, so the same seed gives the same init).

    A model beyond MAX_PARAMS is refused before any memory is spent (counted on the meta device,
    where it is built as asked when that is already the default device).
    """
    cls = architecture(arch)
    settings = config if config is not None else model_config(arch, preset or "cpu", task)
    config = cls.config_class.from_dict(settings)
    if torch.get_default_device().type == "meta":
        return cls(config, task, seed=seed)
    size = count_params(arch, task, settings)
    if size > MAX_PARAMS:
        raise ConfigError(f"{arch}: this model would have {size:,} parameters ({4 * size / 2 ** 30:,.0f} GiB in "
                          f"float32); at most {MAX_PARAMS:,}: make it smaller (d_model, n_layers, the task's sizes)")
    return cls(config, task, seed=seed)


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def count_params(arch: str, task: Task, config: dict) -> int:
    """The parameter count of the model ``config`` describes, built on the meta device (no memory, no init)."""
    cls = architecture(arch)
    with on_meta():
        return n_params(cls(cls.config_class.from_dict(config), task))


# What initialises a tensor's values and nothing else: on the meta device, where there are no values, a no-op.
_INITIALISERS = frozenset({getattr(nn.init, name) for name in dir(nn.init) if name.endswith("_")
                           and not name.startswith("_")} |
                          {getattr(torch.Tensor, name) for name in ("normal_", "uniform_", "zero_", "fill_",
                                                                    "random_", "bernoulli_", "exponential_",
                                                                    "cauchy_", "log_normal_", "geometric_", "copy_")})
_RANDOM = {torch.randn: torch.empty, torch.rand: torch.empty, torch.randn_like: torch.empty_like,
           torch.rand_like: torch.empty_like}


class _NoInit(TorchFunctionMode):
    """Random initialisation skipped: an initialiser returns its tensor as it is, a random factory an empty tensor.
    Only ever active on the meta device (``on_meta``): torch draws meta random numbers through its Python reference
    implementations, whose first use imports torch._dynamo, seconds spent on numbers that do not exist."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _INITIALISERS:
            target = args[0] if args else kwargs.get("tensor", kwargs.get("self"))
            if isinstance(target, torch.Tensor) and target.is_meta:
                return target
        if func in _RANDOM:
            like = func in (torch.randn_like, torch.rand_like)
            device = kwargs.get("device") or (args[0].device if like else "meta")  # the default device is meta here
            if torch.device(device).type == "meta":
                return _RANDOM[func](*args, **{k: v for k, v in kwargs.items() if k != "generator"})
        return func(*args, **kwargs)


@contextmanager
def on_meta():
    """Build models on the meta device, shapes only: no memory, and no time spent initialising them."""
    with torch.device("meta"), _NoInit():
        yield


__all__ = ["ARCHS", "REFERENCE", "REGISTRY", "Provenance", "architecture", "build", "model_config", "presets",
           "n_params", "count_params", "on_meta", "task_settings"]
