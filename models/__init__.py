"""Hooked sequence models. One module per architecture; each model carries its task.

    model = models.build("transformer", task, preset="cpu", seed=0)
"""
from __future__ import annotations

from tasks import ConfigError, Task

from . import transformer

# arch name -> (model class, config class, presets)
REGISTRY = {
    "transformer": (transformer.WindTunnelTransformer, transformer.TransformerConfig, transformer.PRESETS),
}
TASK_PRESETS = {("transformer", task, preset): config for (task, preset), config in transformer.TASK_PRESETS.items()}
ARCHS = tuple(REGISTRY)


def _lookup(arch: str):
    if arch not in REGISTRY:
        raise ConfigError(f"unknown architecture {arch!r}; valid architectures: {', '.join(ARCHS)}")
    return REGISTRY[arch]


def presets(arch: str) -> dict:
    return _lookup(arch)[2]


def model_config(arch: str, preset: str | None = None, task: str | None = None, **overrides) -> dict:
    """The config dict of a preset (the task's own variant of it, if it has one) with overrides applied."""
    _, config_cls, arch_presets = _lookup(arch)
    base = {}
    if preset is not None:
        if preset not in arch_presets:
            raise ConfigError(f"unknown preset {preset!r} for {arch}; valid presets: {', '.join(arch_presets)}")
        base = TASK_PRESETS.get((arch, task, preset), arch_presets[preset]).to_dict()
    base.update(overrides)
    return config_cls.from_dict(base).to_dict()


def build(arch: str, task: Task, config: dict | None = None, preset: str | None = None, seed: int = 0):
    """A freshly initialised model of ``arch`` for ``task`` (seeded, so the same seed gives the same init)."""
    model_cls, config_cls, _ = _lookup(arch)
    settings = config if config is not None else model_config(arch, preset or "cpu")
    return model_cls(config_cls.from_dict(settings), task, seed=seed)


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["ARCHS", "REGISTRY", "build", "model_config", "presets", "n_params"]
