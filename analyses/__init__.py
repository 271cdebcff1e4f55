"""Geometric diagnostics. One module per diagnostic, each with one entry point ``run(model, **options)``.

    result = analyses.run("key-orthogonality", model)
    result.metrics, result.figures
"""
from __future__ import annotations

import inspect

from . import (belief_clusters, calibration, compare, frame_precision, head_ablation, key_orthogonality,
               layer_ablation, length_generalization, qk_alignment, value_manifold)
from .base import AnalysisError, Result

REGISTRY = {
    "calibration": calibration.run,
    "key-orthogonality": key_orthogonality.run,
    "length-generalization": length_generalization.run,
    "head-ablation": head_ablation.run,
    "layer-ablation": layer_ablation.run,
    "qk-alignment": qk_alignment.run,
    "value-manifold": value_manifold.run,
    "frame-precision": frame_precision.run,
    "belief-clusters": belief_clusters.run,
    "compare": compare.run,
}
MULTI_MODEL = {"compare"}  # analyses whose first argument is a list of models
NAMES = tuple(REGISTRY)


def options(name: str) -> dict:
    """The keyword options of an analysis and their defaults."""
    _check(name)
    params = inspect.signature(REGISTRY[name]).parameters
    return {k: p.default for k, p in params.items() if k != "model"}


def run(name: str, model, **kwargs) -> Result:
    valid = options(name)
    unknown = sorted(set(kwargs) - set(valid))
    if unknown:
        raise AnalysisError(f"unknown option(s) {', '.join(unknown)} for {name}; "
                            f"valid options: {', '.join(valid) or 'none'}")
    return REGISTRY[name](model, **kwargs)


def _check(name: str) -> None:
    if name not in REGISTRY:
        raise AnalysisError(f"unknown analysis {name!r}; valid analyses: {', '.join(NAMES)}")


__all__ = ["AnalysisError", "Result", "NAMES", "MULTI_MODEL", "REGISTRY", "options", "run"]
