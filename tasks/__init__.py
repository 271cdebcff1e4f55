"""Wind tunnels: synthetic sequence tasks with exact Bayes posteriors at every query position.

    task = tasks.make("bijection", V=20, L=19)
    batch = task.sample(64, generator=torch.Generator().manual_seed(0))
"""
from __future__ import annotations

import inspect

from .base import Batch, ConfigError, Task, entropy_bits
from .bijection import Bijection
from .hmm import HMM
from .recall import Recall
from .regression import Regression

REGISTRY: dict[str, type[Task]] = {"bijection": Bijection, "hmm": HMM, "regression": Regression, "recall": Recall}
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


def from_config(config: dict) -> Task:
    """The task a ``task.config()`` dict describes (as stored in run.json and checkpoints)."""
    if not isinstance(config, dict) or "name" not in config:
        raise ConfigError(f"a task config is a dict with a 'name', like {{'name': 'bijection', 'V': 20}}; "
                          f"got {config!r}")
    config = dict(config)
    return make(config.pop("name"), **config)


__all__ = ["Batch", "ConfigError", "Task", "NAMES", "make", "from_config", "entropy_bits"]
