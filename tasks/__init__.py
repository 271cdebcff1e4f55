"""Wind tunnels: synthetic sequence tasks with exact Bayes posteriors at every query position.

    task = tasks.make("bijection", V=20, L=19)
    batch = task.sample(64, generator=torch.Generator().manual_seed(0))

Every module in this package that defines a ``Task`` subclass with a ``name`` is a wind tunnel:
``REGISTRY`` is built by finding them, so adding a task is adding one file here.
"""
from __future__ import annotations

import inspect

from .base import Batch, ConfigError, PaperRow, Preset, Primitive, Task, entropy_bits
from .plugins import classes_in, discover

REGISTRY: dict[str, type[Task]] = discover(__name__, __path__, lambda m: classes_in(m, Task, "name"),
                                           lambda cls: cls.order, "tasks")
NAMES = tuple(REGISTRY)


def make(name: str, **settings) -> Task:
    """Build a task by name; unknown names and settings raise ConfigError with the valid choices."""
    if name not in REGISTRY:
        raise ConfigError(f"unknown task {name!r}; valid tasks: {', '.join(NAMES)}")
    cls = REGISTRY[name]
    allowed = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    unknown = sorted(set(settings) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(unknown)} for task {name!r}; "
                          f"valid settings: {', '.join(allowed)}")
    return cls(**settings)


def for_preset(name: str, preset: str, **settings) -> Task:
    """The task ``preset`` trains on: the task's defaults, its preset's task settings, then ``settings``."""
    own = REGISTRY[name].presets.get(preset) if name in REGISTRY else None
    return make(name, **((own.task if own else {}) | settings))


def from_config(config: dict) -> Task:
    """The task a ``task.config()`` dict describes (as stored in a run's record and in its checkpoints)."""
    if not isinstance(config, dict) or "name" not in config:
        raise ConfigError(f"a task config is a dict with a 'name', like {{'name': 'bijection', 'V': 20}}; "
                          f"got {config!r}")
    config = dict(config)
    return make(config.pop("name"), **config)


def primitives() -> dict[str, tuple[str, Primitive]]:
    """Inference primitive name -> (the task that tests it, how it is judged), in task order."""
    return {cls.primitive.name: (name, cls.primitive) for name, cls in REGISTRY.items() if cls.primitive}


__all__ = ["Batch", "ConfigError", "PaperRow", "Preset", "Primitive", "Task", "NAMES", "REGISTRY", "make", "for_preset",
           "from_config", "primitives", "entropy_bits"]
