"""Geometric diagnostics. One module per diagnostic, each declaring ``ANALYSIS = Analysis(...)``.

    result = analyses.run("key-orthogonality", model)
    result.metrics, result.figures

``REGISTRY`` is built by finding those declarations in this package, so adding a diagnostic is
adding one file here.

The modules are imported only when asked for: ``get``, ``run`` and ``options`` import the one module
whose file is named after the analysis (``key-orthogonality`` in ``key_orthogonality.py``) and nothing
else, so running one analysis does not pay for the others' imports (scikit-learn, ``torch.func``, ...).
``REGISTRY``, ``NAMES`` and ``MULTI_MODEL`` are built on first use, by importing every module (and
checking that no name is declared twice); so is ``get`` of a name whose file is named otherwise, or of
an unknown name. Listing analyses without importing them is interp/manifest.py's job.
"""
from __future__ import annotations

import importlib
import threading
from pathlib import Path

from .base import Analysis, AnalysisError, Option, Result

_BUILT = ("REGISTRY", "NAMES", "MULTI_MODEL")  # module attributes filled on first use (__getattr__)
_lock = threading.RLock()


def _declared(module) -> list[tuple[str, Analysis]]:
    analysis = getattr(module, "ANALYSIS", None)
    return [(analysis.name, analysis)] if isinstance(analysis, Analysis) else []


def _registry() -> dict[str, Analysis]:
    """Every analysis, in declared order: imports every module of the package once."""
    with _lock:
        if "REGISTRY" not in globals():
            from tasks.plugins import discover

            registry = discover(__name__, __path__, _declared, lambda a: a.order, "analyses")
            globals().update(NAMES=tuple(registry),
                             MULTI_MODEL={name for name, analysis in registry.items() if analysis.multi_model},
                             REGISTRY=registry)
    return globals()["REGISTRY"]


def __getattr__(name: str):
    if name in _BUILT:
        _registry()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_BUILT))


def _own_file(name: str) -> Analysis | None:
    """The analysis ``name`` from the module named after it, importing only that module; None when there is
    no such module or it declares another name."""
    module = name.replace("-", "_")
    if not module.isidentifier() or module == "base" or module.startswith("_") or \
            not any((Path(folder) / f"{module}.py").is_file() for folder in __path__):
        return None
    found = dict(_declared(importlib.import_module(f"{__name__}.{module}")))
    return found.get(name)


def get(name: str) -> Analysis:
    if "REGISTRY" not in globals() and isinstance(name, str) and (analysis := _own_file(name)) is not None:
        return analysis
    registry = _registry()
    if name not in registry:
        import difflib

        names = tuple(registry)
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        guess = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise AnalysisError(f"unknown analysis {name!r}{guess}; valid analyses: {', '.join(sorted(names))}")
    return registry[name]


def options(name: str) -> dict:
    """The keyword options of an analysis and their defaults."""
    return get(name).defaults()


def run(name: str, model, **kwargs) -> Result:
    """Run analysis ``name``: options are checked against its schema and the model against its requirements."""
    return get(name)(model, **kwargs)


__all__ = ["Analysis", "AnalysisError", "Option", "Result", "NAMES", "MULTI_MODEL", "REGISTRY", "get", "options",
           "run"]
