"""The tiny shapes tests build and train (seconds on 2 cores), defined once for every test module."""
import os
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


# The shipped models the slow per-model suites load whole (every analysis on it; every view in Chromium; its
# recorded final metrics). The fast suite runs every analysis and every view on a tiny model of every task x
# architecture (tests/test_every_architecture.py); what only a full-size model can break is its real size (a
# 329-token recall sequence, a four-layer Mamba's kernels), a real configuration, and a number recorded at training.
# One full-size model per task, the architectures taken in turn so that each appears, plus the two models behind the
# binding result (learned positions and untied weights; Mamba as the paper builds it) keep that check at 8 models
# instead of 39. INTERP_TEST_EVERY_MODEL=1 runs all of them, as before shipping a new model.
BINDING_MODELS = ("recall-transformer-plain-mix", "recall-mamba-plain-mix")


def slow_suite(shipped: dict) -> list[str]:
    """Names of ``shipped`` (name -> folder) the slow per-model suites run (see above)."""
    if os.environ.get("INTERP_TEST_EVERY_MODEL") == "1":
        return sorted(shipped)
    covering = [f"{task}-{models.ARCHS[i % len(models.ARCHS)]}-cpu" for i, task in enumerate(tasks.NAMES)]
    return sorted(name for name in shipped if name in covering or name in BINDING_MODELS)
