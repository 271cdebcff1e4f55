"""The documentation: the generated Analyses reference is current, every relative link of the README and of
the docs pages points at a file that exists, and the README stays a front page.

The site itself is built by CI with ``mkdocs build --strict`` (which also executes the tutorials); these
checks need none of the docs extra and run in a second.
"""
import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def generator():
    spec = importlib.util.spec_from_file_location("gen_analyses", DOCS / "gen_analyses.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_analyses_page_is_current():
    import analyses

    gen = generator()
    assert gen.PAGE.read_text() == gen.render(), "docs/reference/analyses.md is stale: run `python docs/gen_analyses.py`"
    page = gen.PAGE.read_text()
    for name in analyses.NAMES:
        assert f"\n## {name}\n" in page


def local_links(path: Path) -> list[str]:
    """The relative link targets of a Markdown file (no web addresses, no in-page anchors)."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # code blocks hold no links
    return [t.split("#")[0] for t in LINK.findall(text) if not re.match(r"[a-z]+:|#", t)]


def test_every_relative_link_of_the_readme_and_the_docs_exists():
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    broken = [f"{page.relative_to(ROOT)} -> {target}" for page in pages for target in local_links(page)
              if not (page.parent / target).exists()]
    assert not broken, "\n".join(broken)


def test_the_readme_is_a_front_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert not re.search(r"\]\((https?:|/|\.\./)", readme), "the README links only inside the repository"
    assert not re.search(r"\bissue\s*#?\d+|(?<![\w&])#\d+\b", readme, re.I), "no issue numbers on the front page"
    assert not re.search(r"\b(this|the) (session|machine)\b|\bsession'?s\b", readme, re.I), "no machine narration"
    assert "interp run key-orthogonality --ckpt models/pretrained/bijection-transformer-cpu" in readme
    assert "python -m pytest" in readme
    # its table of contents reaches every page of the guide
    linked = {(ROOT / t).resolve() for t in local_links(ROOT / "README.md")}
    for page in ("getting-started.md", "concepts.md", "reference/analyses.md", "results/index.md",
                 "how-to/plugins.md", "how-to/language-models.md", "tutorials/01-first-ten-minutes.ipynb"):
        assert (DOCS / page).resolve() in linked, page


def test_the_tutorials_are_committed_with_their_outputs_and_no_errors():
    for path in sorted((DOCS / "tutorials").glob("*.ipynb")):
        cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        assert cells and all(c.get("execution_count") for c in cells), f"{path.name}: run it before committing"
        outputs = [o for c in cells for o in c.get("outputs", [])]
        assert not [o for o in outputs if o.get("output_type") == "error"], path.name
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name} shows no figure"
