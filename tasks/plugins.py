"""Finding plugins: the one mechanism behind ``tasks.REGISTRY``, ``models.REGISTRY`` and ``analyses.REGISTRY``.

It lives in tasks/, the package every other one may import, and declares no task itself.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Iterable


def discover(package: str, path: Iterable[str], declared: Callable[[object], Iterable[tuple[str, object]]],
             order: Callable[[object], int], what: str) -> dict:
    """name -> plugin for every module of ``package`` (not base.py, not _private.py), in declared order.

    ``declared(module)`` yields the (name, plugin) pairs a module defines; a name defined twice is an
    ImportError naming both modules. Ties in ``order(plugin)`` go by name.
    """
    found, where = {}, {}
    for info in pkgutil.iter_modules(path):
        if info.name == "base" or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        for name, plugin in declared(module):
            if name in found:
                raise ImportError(f"two {what} are named {name!r}: {where[name]} and {module.__name__}")
            found[name], where[name] = plugin, module.__name__
    return dict(sorted(found.items(), key=lambda item: (order(item[1]), item[0])))


def classes_in(module, base: type, key: str) -> list[tuple[str, type]]:
    """(cls.<key>, cls) for the subclasses of ``base`` a module itself defines with a non-empty ``key``."""
    return [(getattr(cls, key), cls) for cls in vars(module).values()
            if isinstance(cls, type) and issubclass(cls, base) and cls.__module__ == module.__name__
            and getattr(cls, key)]
