import pytest
import torch

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
