"""Run the tutorials in place and stamp each with the hash of its code cells.

The site shows the outputs committed with the notebooks (``mkdocs build`` does not execute them unless
``DOCS_EXECUTE_NOTEBOOKS=true``: executing them took most of a 52-minute build on a loaded machine). The
stamp is how a stale output is caught: ``tests/test_docs.py`` fails when a notebook's code cells differ from
the ones its outputs were made by. After changing a tutorial (or what it shows), run

    python docs/run_tutorials.py                 # every tutorial
    python docs/run_tutorials.py 01-first-ten-minutes
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

TUTORIALS = Path(__file__).resolve().parent / "tutorials"
STAMP = "interp"  # the notebook metadata key: {"code_sha256": ...}


def code_hash(notebook: dict) -> str:
    """sha256 over the sources of the notebook's code cells, in order."""
    digest = hashlib.sha256()
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            digest.update(source.encode() + b"\0")
    return digest.hexdigest()


def run(path: Path, timeout: int = 1800) -> float:
    """Execute ``path`` from the repository root, write it back with its outputs and stamp; the seconds taken."""
    import nbformat
    from nbconvert.preprocessors import ExecutePreprocessor

    started = time.perf_counter()
    notebook = nbformat.read(path, as_version=4)
    ExecutePreprocessor(timeout=timeout, kernel_name="python3").preprocess(
        notebook, {"metadata": {"path": str(TUTORIALS.parent.parent)}})
    notebook.metadata[STAMP] = {"code_sha256": code_hash(json.loads(nbformat.writes(notebook)))}
    nbformat.write(notebook, path)
    return time.perf_counter() - started


if __name__ == "__main__":
    names = sys.argv[1:] or sorted(p.stem for p in TUTORIALS.glob("*.ipynb"))
    for name in names:
        seconds = run(TUTORIALS / f"{name.removesuffix('.ipynb')}.ipynb")
        print(f"{name}: {seconds:.0f} s")
