"""Geometric diagnostics. One module per diagnostic, each declaring ``ANALYSIS = Analysis(...)``.

    result = analyses.run("key-orthogonality", model)
    result.metrics, result.figures

``REGISTRY`` is built by finding those declarations in this package, so adding a diagnostic is
adding one file here.
"""
from __future__ import annotations

from tasks.plugins import discover

from .base import Analysis, AnalysisError, Option, Result


def _declared(module) -> list[tuple[str, Analysis]]:
    analysis = getattr(module, "ANALYSIS", None)
    return [(analysis.name, analysis)] if isinstance(analysis, Analysis) else []


REGISTRY: dict[str, Analysis] = discover(__name__, __path__, _declared, lambda a: a.order, "analyses")
NAMES = tuple(REGISTRY)
MULTI_MODEL = {name for name, analysis in REGISTRY.items() if analysis.multi_model}


def get(name: str) -> Analysis:
    if name not in REGISTRY:
        import difflib

        close = difflib.get_close_matches(name, NAMES, n=3, cutoff=0.6)
        guess = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise AnalysisError(f"unknown analysis {name!r}{guess}; valid analyses: {', '.join(sorted(NAMES))}")
    return REGISTRY[name]


def options(name: str) -> dict:
    """The keyword options of an analysis and their defaults."""
    return get(name).defaults()


def run(name: str, model, **kwargs) -> Result:
    """Run analysis ``name``: options are checked against its schema and the model against its requirements."""
    return get(name)(model, **kwargs)


__all__ = ["Analysis", "AnalysisError", "Option", "Result", "NAMES", "MULTI_MODEL", "REGISTRY", "get", "options",
           "run"]
