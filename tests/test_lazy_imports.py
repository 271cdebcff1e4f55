"""Running one analysis pays for one analysis: `analyses.get`/`run` import only that analysis's module (the
registry is filled on first use), and a run's figures are drawn in one browser, started once (interp/export.py)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def python(code: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})))


def test_running_one_analysis_imports_no_other_analysis_module():
    done = python(
        "import sys, analyses, tasks, models\n"
        "model = models.build(models.REFERENCE, tasks.make('bijection'), preset='cpu').eval()\n"
        "analyses.run('key-orthogonality', model)\n"
        "print(sorted(m for m in sys.modules if m.startswith('analyses.')))\n"
        "print(sorted(m for m in ('sklearn', 'sklearn.linear_model') if m in sys.modules))\n"
        "ko = analyses.get('key-orthogonality')\n"
        "print(len(analyses.NAMES), analyses.REGISTRY['key-orthogonality'] is ko, 'compare' in analyses.MULTI_MODEL)\n")
    assert done.returncode == 0, done.stderr
    imported, heavy, listed = done.stdout.splitlines()
    # the shared helpers (activations, the contract, the bootstrap intervals, the style), no other analysis
    assert eval(imported) == ["analyses.activations", "analyses.base", "analyses.intervals",
                              "analyses.key_orthogonality", "analyses.style"]
    assert eval(heavy) == []  # scikit-learn (entropy-axis, belief-state) is not paid for here
    plugins = [p for p in (ROOT / "analyses").glob("*.py") if p.stem != "base" and not p.stem.startswith("_")]
    n_declared = sum("\nANALYSIS = Analysis(" in p.read_text() for p in plugins)
    assert listed.split() == [str(n_declared), "True", "True"]  # the whole registry when asked for, the same objects


def test_the_registry_is_filled_on_first_use_and_keeps_its_contracts():
    import analyses

    names = analyses.NAMES
    assert tuple(analyses.REGISTRY) == names and set(analyses.MULTI_MODEL) <= set(names)
    from analyses import REGISTRY

    assert REGISTRY is analyses.REGISTRY and "REGISTRY" in dir(analyses)
    assert analyses.get("calibration") is REGISTRY["calibration"]
    with pytest.raises(analyses.AnalysisError, match="did you mean key-orthogonality"):
        analyses.get("key-orthogonalty")
    with pytest.raises(AttributeError):
        analyses.NOT_THERE  # noqa: B018


def test_an_analysis_in_a_file_named_otherwise_is_still_found(tmp_path):
    """The plugin rule: any one new file in analyses/ adds an analysis, whatever its file is called."""
    tree = tmp_path / "tree"
    skip = shutil.ignore_patterns("pretrained", "__pycache__", "*.so", "*.o")
    for package in ("tasks", "models", "analyses"):
        shutil.copytree(ROOT / package, tree / package, ignore=skip)
    (tree / "analyses" / "my_probe.py").write_text(
        (ROOT / "tests" / "plugins" / "residual_norm.py").read_text())
    done = subprocess.run([sys.executable, "-c", "import analyses; a = analyses.get('residual-norm'); "
                           "print(a.name, a.run.__module__, 'residual-norm' in analyses.NAMES)"],
                          cwd=tree, env=dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["residual-norm", "analyses.my_probe", "True"]


FIGURES = ("import plotly.graph_objects as go\n"
           "from interp import export\n"
           "figs = {str(i): go.Figure(go.Scatter(y=[1, 2, i])) for i in range(3)}\n")


@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("google-chrome") is None
                    and not os.environ.get("BROWSER_PATH"), reason="no Chrome or Chromium to draw PDFs with")
def test_several_figures_export_through_one_browser_start():
    done = python(FIGURES + "import kaleido\n"
                  "opened = []\n"
                  "original = kaleido.Kaleido.open\n"
                  "async def counted(self):\n"
                  "    opened.append(1)\n"
                  "    return await original(self)\n"
                  "kaleido.Kaleido.open = counted\n"
                  "pdf = export.merged_pdf(figs)\n"
                  "png = export.figure_image(figs['0'], 'png')\n"
                  "from pypdf import PdfReader\nimport io\n"
                  "print(len(opened), len(PdfReader(io.BytesIO(pdf)).pages), png[:4] == b'\\x89PNG')\n", timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "3", "True"]


def test_no_browser_is_said_at_once_not_waited_for():
    """kaleido's own kept-open server waited forever when its browser failed to start."""
    done = python(FIGURES + "from interp.errors import UserError\n"
                  "try:\n    export.merged_pdf(figs)\nexcept UserError as err:\n    print(err)\n",
                  env=dict(BROWSER_PATH=str(ROOT / "no-such-chromium")), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "PDF export needs Chrome or Chromium" in done.stdout
