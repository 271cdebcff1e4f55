"""Geometric diagnostics. One module per diagnostic, each declaring ``ANALYSIS = Analysis(...)``.

    result = analyses.run("key-orthogonality", model)
    result.metrics, result.figures

``REGISTRY`` is built by finding those declarations in this package, so adding a diagnostic is
adding one file here.
"""
from __future__ import annotations

import importlib
import pkgutil

from .base import Analysis, AnalysisError, Option, Result


def _discover() -> dict[str, Analysis]:
    found: dict[str, Analysis] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name == "base" or info.name.startswith("_"):
            continue
        declared = getattr(importlib.import_module(f"{__name__}.{info.name}"), "ANALYSIS", None)
        if isinstance(declared, Analysis):
            if declared.name in found:
                raise ImportError(f"two analyses are named {declared.name!r}")
            found[declared.name] = declared
    return dict(sorted(found.items(), key=lambda item: (item[1].order, item[0])))


REGISTRY: dict[str, Analysis] = _discover()
NAMES = tuple(REGISTRY)
MULTI_MODEL = {name for name, analysis in REGISTRY.items() if analysis.multi_model}


def get(name: str) -> Analysis:
    if name not in REGISTRY:
        raise AnalysisError(f"unknown analysis {name!r}; valid analyses: {', '.join(NAMES)}")
    return REGISTRY[name]


def options(name: str) -> dict:
    """The keyword options of an analysis and their defaults."""
    return get(name).defaults()


def run(name: str, model, **kwargs) -> Result:
    """Run analysis ``name``: options are checked against its schema and the model against its requirements."""
    return get(name)(model, **kwargs)


__all__ = ["Analysis", "AnalysisError", "Option", "Result", "NAMES", "MULTI_MODEL", "REGISTRY", "get", "options",
           "run"]
