import os

import pytest
import torch

import models
import tasks

# Under pytest-xdist (`-n auto`) each worker is a process of its own, and one thread each keeps the workers from
# asking for more threads than there are cores; run alone, the suite uses two threads. A test that needs a thread
# count (a bit-exact replay) sets its own.
THREADS = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(THREADS)


@pytest.fixture
def small_model():
    """An untrained small transformer on a small bijection task (fast to build and run)."""
    task = tasks.make("bijection", V=8, L=7)
    return models.build("transformer", task, config=dict(d_model=32, n_layers=2, n_heads=2), seed=0).eval()


@pytest.fixture
def benchmark_module():
    """Load a script from benchmarks/ (not a package) by name, to test its functions on known answers."""
    import importlib.util
    from pathlib import Path

    def load(name: str):
        path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load


@pytest.fixture(scope="module")
def workspace_template(tmp_path_factory):
    """The bad-input workspace (tests/workspace.py), built once per module; tests copy it."""
    from tests.workspace import build_workspace

    root = tmp_path_factory.mktemp("template")
    build_workspace(root)
    return root
