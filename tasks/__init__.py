"""Wind tunnels: synthetic sequence tasks with exact Bayes posteriors at every query position.

    task = tasks.make("bijection", V=20, L=19)
    batch = task.sample(64, generator=torch.Generator().manual_seed(0))

Every module in this package that defines a ``Task`` subclass with a ``name`` is a wind tunnel:
``REGISTRY`` is built by finding them, so adding a task is adding one file here.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil

from .base import Batch, ConfigError, PaperRow, Preset, Primitive, Task, entropy_bits


def _discover() -> dict[str, type[Task]]:
    found: dict[str, type[Task]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name == "base" or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for cls in vars(module).values():
            if inspect.isclass(cls) and issubclass(cls, Task) and cls.__module__ == module.__name__ and cls.name:
                if cls.name in found:
                    raise ImportError(f"two tasks are named {cls.name!r}: {found[cls.name].__module__} and "
                                      f"{module.__name__}")
                found[cls.name] = cls
    return dict(sorted(found.items(), key=lambda item: (item[1].order, item[0])))


REGISTRY: dict[str, type[Task]] = _discover()
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


def primitives() -> dict[str, tuple[str, Primitive]]:
    """Inference primitive name -> (the task that tests it, how it is judged), in task order."""
    return {cls.primitive.name: (name, cls.primitive) for name, cls in REGISTRY.items() if cls.primitive}


__all__ = ["Batch", "ConfigError", "PaperRow", "Preset", "Primitive", "Task", "NAMES", "REGISTRY", "make",
           "from_config", "primitives", "entropy_bits"]
