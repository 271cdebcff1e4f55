"""Adding a wind tunnel, an architecture or an analysis is one file: the suite then covers it everywhere.

The three example plugins in tests/plugins/ (a Beta-Bernoulli coin task, a GRU, a residual-norm
analysis) are dropped into a copy of the packages, each as its one file with no other file touched,
and the generic tests (every task's posterior against its oracle, every architecture on every task,
every analysis on every model, the registries' checks) and the CLI run on that copy.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLUGINS = Path(__file__).resolve().parent / "plugins"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugged")
    skip = shutil.ignore_patterns("pretrained", "__pycache__", "*.so", "*.o")
    for package in ("tasks", "models", "analyses", "interp", "tests"):
        shutil.copytree(ROOT / package, root / package, ignore=skip)
    (root / "models" / "pretrained").mkdir()  # no shipped models: they are optional for a new task
    for plugin, package in (("coin.py", "tasks"), ("gru.py", "models"), ("residual_norm.py", "analyses")):
        shutil.copy(PLUGINS / plugin, root / package / plugin)
    return root


def run(tree, *args, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(tree), INTERP_CPP_KERNELS="0", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_new_plugins_are_registered_and_listed(tree):
    done = run(tree, "-c", "import tasks, models, analyses; from interp.reproduce import plan; "
                           "print(tasks.NAMES, models.ARCHS, analyses.NAMES); "
                           "print(sum(s[1] == 'coin' for s in plan(tasks.NAMES, models.ARCHS)))")
    assert done.returncode == 0, done.stderr
    assert "'coin'" in done.stdout and "'gru'" in done.stdout and "'residual-norm'" in done.stdout
    assert done.stdout.split()[-1] == str(2 * 5)  # reproduce: train and calibrate coin on 5 architectures


@pytest.mark.slow
def test_the_generic_suite_covers_them(tree):
    done = run(tree, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not slow",
               "tests/test_properties.py", "tests/test_every_architecture.py", "tests/test_registries.py",
               "-k", "coin or gru or residual or registries or declares", timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    passed = int(done.stdout.strip().splitlines()[-1].split()[0])
    assert passed >= 20, done.stdout[-500:]


@pytest.mark.slow  # trains and runs a plugin in a fresh process
def test_train_and_run_the_new_analysis_from_the_cli(tree, tmp_path):
    out = tmp_path / "run"
    trained = run(tree, "-m", "interp", "train", "--task", "coin", "--arch", "gru", "--steps", "20",
                  "--out", str(out), "-M", "d_model=8")
    assert trained.returncode == 0, trained.stderr[-2000:]
    ran = run(tree, "-m", "interp", "run", "residual-norm", "--ckpt", str(out), "--out", str(tmp_path / "figs"),
              "--format", "json")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert (tmp_path / "figs" / "run" / "residual-norm.json").exists()
    helped = run(tree, "-m", "interp", "run", "residual-norm", "--help")
    assert "mean residual-stream norm per layer" in helped.stdout and "--n" in helped.stdout
