"""The tiny shapes tests build and train (seconds on 2 cores), defined once for every test module."""
import random
from dataclasses import fields

import models
import tasks

TASK = dict(V=6, L=5)  # bijection: six values, five revealed pairs
MODEL = dict(d_model=16, n_layers=2, n_heads=2)


def cli_args(**model) -> list[str]:
    """``-T``/``-M`` arguments of ``interp train`` for the tiny bijection task and transformer (``model``
    overrides a model setting, e.g. ``n_layers=1``)."""
    task = [arg for key, value in TASK.items() for arg in ("-T", f"{key}={value}")]
    return task + [arg for key, value in (MODEL | model).items() for arg in ("-M", f"{key}={value}")]


def small_task(name: str):
    """Any registered task at the small size it declares for tests."""
    return tasks.make(name, **tasks.REGISTRY[name].small_config(random.Random(1)))


def small_config(arch: str) -> dict:
    """A fast shape for any architecture: width 16, two layers, two heads where it has heads."""
    known = {f.name for f in fields(models.architecture(arch).config_class)}
    return dict(d_model=16, n_layers=2) | ({"n_heads": 2} if "n_heads" in known else {})


# The shipped models the slow per-model suites load whole (every analysis on it; every view in Chromium). The
# process models (Mess3, RRXOR: eight, one per architecture) take every code path the fast suite's tiny process
# models take on each architecture (tests/test_every_architecture.py); one full-size model per process, of two
# architectures, keeps the real-size check without eight more minutes of CI.
PROCESS_REPRESENTATIVES = ("mess3-transformer-cpu", "rrxor-mamba-cpu")


def slow_suite(shipped: dict) -> list[str]:
    """Names of ``shipped`` (name -> folder) the slow per-model suites run: all but the extra process models."""
    def process(name):
        return name.split("-")[0] in ("mess3", "rrxor")
    return sorted(name for name in shipped if not process(name) or name in PROCESS_REPRESENTATIVES)
