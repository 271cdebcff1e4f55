import os

import pytest
import torch

# The Mamba scan is compiled for training only, and compiling costs ~20 s; tests run it uncompiled
# (tests/test_architectures.py checks the compiled kernels against the plain ones, marked slow).
os.environ.setdefault("INTERP_COMPILE", "0")

import models
import tasks


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(2)


@pytest.fixture
def small_model():
    """An untrained small transformer on a small bijection task (fast to build and run)."""
    task = tasks.make("bijection", V=8, L=7)
    return models.build("transformer", task, config=dict(d_model=32, n_layers=2, n_heads=2), seed=0).eval()
