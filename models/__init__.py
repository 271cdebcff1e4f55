"""Hooked sequence models. One module per architecture; each model carries its task.

    model = models.build("mamba", task, preset="cpu", seed=0)

Capacity matching: the non-transformer presets fix depth and shape but leave ``d_model`` open; it
is chosen so the model's parameter count is within 5% of the transformer preset's on the same task,
so architecture comparisons are at equal capacity. ``interp list`` prints the counts.
"""
from __future__ import annotations

import json
from functools import lru_cache

import tasks
from tasks import ConfigError, Task

from . import lstm, mamba, mlp, transformer
from .base import matched_width

# arch name -> (model class, config class, presets, per-task presets)
REGISTRY = {
    "transformer": (transformer.WindTunnelTransformer, transformer.TransformerConfig, transformer.PRESETS,
                    transformer.TASK_PRESETS),
    "mamba": (mamba.WindTunnelMamba, mamba.MambaConfig, mamba.PRESETS, mamba.TASK_PRESETS),
    "lstm": (lstm.WindTunnelLSTM, lstm.LSTMConfig, lstm.PRESETS, lstm.TASK_PRESETS),
    "mlp": (mlp.WindTunnelMLP, mlp.MLPConfig, mlp.PRESETS, mlp.TASK_PRESETS),
}
ARCHS = tuple(REGISTRY)
TASK_PRESETS = {(arch, task, preset): config for arch, entry in REGISTRY.items()
                for (task, preset), config in entry[3].items()}


def _lookup(arch: str):
    if arch not in REGISTRY:
        raise ConfigError(f"unknown architecture {arch!r}; valid architectures: {', '.join(ARCHS)}")
    return REGISTRY[arch]


def presets(arch: str) -> dict:
    return _lookup(arch)[2]


def _as_task(task: Task | str | None) -> Task | None:
    return tasks.make(task) if isinstance(task, str) else task


def model_config(arch: str, preset: str | None = None, task: Task | str | None = None, **overrides) -> dict:
    """The config dict of a preset (the task's own variant of it, if it has one) with overrides applied.

    ``task`` is a Task or a task name (its defaults). A preset that leaves ``d_model`` open gets the
    width that matches the transformer preset's parameter count on that task.
    """
    _, config_cls, arch_presets, _ = _lookup(arch)
    task = _as_task(task)
    base = {}
    if preset is not None:
        if preset not in arch_presets:
            raise ConfigError(f"unknown preset {preset!r} for {arch}; valid presets: {', '.join(arch_presets)}")
        base = TASK_PRESETS.get((arch, task and task.name, preset), arch_presets[preset]).to_dict()
    base.update(overrides)
    if base.get("d_model", 0) is None:
        if preset is None or task is None:
            raise ConfigError(f"{arch}: d_model is not set; give it (-M d_model=...) or a preset and a task")
        target = _transformer_params(preset, json.dumps(task.config(), sort_keys=True))
        model_cls = _lookup(arch)[0]
        base["d_model"] = matched_width(
            lambda d: model_cls(config_cls.from_dict(base | {"d_model": d}), task), target)
    return config_cls.from_dict(base).to_dict()


@lru_cache(maxsize=None)
def _transformer_params(preset: str, task_json: str) -> int:
    task = tasks.from_config(json.loads(task_json))
    return n_params(build("transformer", task, model_config("transformer", preset, task)))


def build(arch: str, task: Task, config: dict | None = None, preset: str | None = None, seed: int = 0):
    """A freshly initialised model of ``arch`` for ``task`` (seeded, so the same seed gives the same init)."""
    model_cls, config_cls, _, _ = _lookup(arch)
    settings = config if config is not None else model_config(arch, preset or "cpu", task)
    return model_cls(config_cls.from_dict(settings), task, seed=seed)


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["ARCHS", "REGISTRY", "build", "model_config", "presets", "n_params"]
