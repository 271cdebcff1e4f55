"""The documentation: the generated Analyses reference is current, every relative link of the README and of
the docs pages points at a file that exists, and the README stays a front page.

The site itself is built by CI with ``mkdocs build --strict`` (which also executes the tutorials); these
checks need none of the docs extra and run in a second.
"""
import importlib.util
import json
import re
from pathlib import Path

import pytest

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
    assert len(readme.split()) <= 1000, "a front page a reader takes in within minutes; details go to the guide"
    blocks = re.split(r"\n\s*\n|\n(?=- )", readme)  # paragraphs, and each bullet on its own
    assert max(len(block.split()) for block in blocks if not block.lstrip().startswith(("|", "```"))) <= 150
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


def code_blocks(path: Path, language: str = "bash") -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(), flags=re.S)


def test_the_install_commands_are_broken_into_readable_lines():
    """The install lines were one 330-character line in a scrolling block: each is cut with line continuations."""
    for page in (ROOT / "README.md", DOCS / "getting-started.md", DOCS / "index.md"):
        long = [line for block in code_blocks(page) for line in block.splitlines()
                if len(line) > 110 and not line.startswith("#")]  # commands, not the outputs quoted below them
        assert not long, f"{page.name}: {long[0][:80]}..."
    readme = (ROOT / "README.md").read_text()
    assert "apt-get install -y chromium && \\\n  pip install torch --index-url" in readme


def test_the_home_page_shows_a_first_command_above_the_fold():
    page = (DOCS / "index.md").read_text()
    first_block, first_image = page.find("```bash\ninterp "), page.find("![")
    assert 0 <= first_block < first_image and page[:first_block].count("\n") < 12


def test_the_docs_say_as_many_shipped_models_as_there_are():
    """A count of shipped models in the README, a docs page or a tutorial is the registry's (tutorial 01 said 17
    when there were 27)."""
    from interp.catalog import shipped

    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md")), *sorted((DOCS / "how-to").glob("*.md"))]
    texts = {p.name: p.read_text() for p in pages}
    for path in sorted((DOCS / "tutorials").glob("*.ipynb")):
        texts[path.name] = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
    counts = {(name, int(n)) for name, text in texts.items()
              for n in re.findall(r"\b(\d+) (?:shipped (?:trained )?|trained |reference )?models\b", text)
              if re.search(rf"\b{n} shipped|\bships? {n}\b|\b{n} (?:shipped )?trained models", text)}
    assert {(name, n) for name, n in counts if n != len(shipped())} == set()
    assert ("README.md", len(shipped())) in counts  # the check reads what it is meant to


def test_long_code_lines_wrap_on_the_site():
    config = (ROOT / "mkdocs.yml").read_text()
    sheets = re.findall(r"extra_css:\n((?:\s+- .*\n)+)", config)
    assert sheets, "mkdocs.yml names no extra stylesheet"
    css = "".join((DOCS / s.split("#")[0].strip(" -\n")).read_text() for s in sheets[0].splitlines() if s.strip())
    assert "pre-wrap" in css and ".md-typeset pre > code" in css and ".jupyter-wrapper" in css
    assert "font: false" in config  # no Google Fonts


REQUEST = re.compile(r"<(?:link|script|img|iframe|source|video|audio)\b[^>]*\b(?:href|src)=[\"']?(?:https?:)?//"
                     r"|url\(\s*[\"']?(?:https?:)?//|@import\s+[\"']?(?:url\()?[\"']?(?:https?:)?//", re.I)


@pytest.mark.slow  # a strict build of the site without executing the notebooks: a minute and more
def test_the_site_builds_and_requests_nothing_from_the_network(tmp_path):
    """Every page of the built site loads its styles, scripts, fonts and pictures from the site itself: no
    <link>, <script>, <img> or CSS url() reaches another host (the site reads offline; Material's own bundle
    only fetches polyfills a current browser does not need, and mermaid, which no page uses)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, DOCS_EXECUTE_NOTEBOOKS="false", NO_MKDOCS_2_WARNING="1")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    files = [p for p in (tmp_path / "site").rglob("*") if p.suffix in (".html", ".css")]
    assert len(files) > 20
    found = [f"{p.relative_to(tmp_path)}: {m.group(0)[:80]}" for p in files
             for m in REQUEST.finditer(p.read_text(errors="replace"))]
    assert not found, "\n".join(found[:10])
    diagrams = re.compile(r"<(?:pre|div|code)\b[^>]*class=[\"'][^\"']*\bmermaid\b")  # Material fetches mermaid for them
    assert not [p.name for p in files if p.suffix == ".html" and diagrams.search(p.read_text(errors="replace"))]


def test_the_tutorials_outputs_were_made_by_their_code():
    """The site shows the outputs committed with the tutorials (executing them took most of a 52-minute build):
    each notebook carries the hash of the code cells that made them (docs/run_tutorials.py), so a code cell
    changed without running the notebook again fails here instead of showing stale outputs."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_tutorials", DOCS / "run_tutorials.py")
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    assert "execute: !ENV [DOCS_EXECUTE_NOTEBOOKS, false]" in (ROOT / "mkdocs.yml").read_text()
    for path in sorted((DOCS / "tutorials").glob("*.ipynb")):
        notebook = json.loads(path.read_text())
        stamp = notebook.get("metadata", {}).get(runner.STAMP, {}).get("code_sha256")
        assert stamp == runner.code_hash(notebook), \
            f"{path.name}: its outputs are not from its code; run `python docs/run_tutorials.py {path.stem}`"


def test_the_readmes_findings_table_is_the_primitives_matrix_it_cites():
    """Each cell of the README's primitives table (pass or fail, the number, the budget) is what the shipped
    compare result holds, so the front page cannot drift from its file."""
    matrix = json.loads((ROOT / "figures/readme/compare/compare/compare.json").read_text())["metrics"]["primitives"]
    readme = (ROOT / "README.md").read_text()
    rows = {line.split("|")[1].strip().lower(): [cell.strip() for cell in line.split("|")[2:-1]]
            for line in readme.splitlines() if re.match(r"\| (transformer|Mamba|LSTM|MLP) \|", line)}
    assert set(rows) == set(matrix)
    for arch, cells in rows.items():
        for cell, primitive in zip(cells, ("accumulation", "transport", "binding")):
            measured = matrix[arch][primitive]
            value = measured["value"]
            shown = (f"{100 * value:.0f}%" if 100 * value >= 10 else f"{100 * value:.1f}%") \
                if measured["metric"] == "accuracy" else f"{value:.2g} bits"
            budget = f"{measured['budget']['steps']:,} × {measured['budget']['batch_size']}"
            assert cell.startswith(f"{measured['status']}, {shown} ({budget}"), (arch, primitive, cell)


def prose_between_headings(text: str) -> list[tuple[int, str]]:
    """(words, the heading they follow) for each stretch of a Markdown page between two headings, counting prose
    only: fenced code blocks (commands) and table rows (one number a cell) are left out of the count."""
    stretches, words, heading, code = [], 0, "(top of the page)", False
    for line in text.splitlines():
        if line.startswith("```"):
            code = not code
        elif not code and re.match(r"#{1,6} ", line):
            stretches.append((words, heading))
            words, heading = 0, line
        elif not code and not line.lstrip().startswith("|"):
            words += len(line.split())
    return stretches + [(words, heading)]


def test_prose_between_headings_counts_prose_only():
    page = "# A\none two\n```\nnot counted at all\n```\n| a | b |\n## B\nthree\n"
    assert prose_between_headings(page) == [(0, "(top of the page)"), (2, "# A"), (1, "## B")]


def test_every_results_page_is_short_and_headed():
    """A results page a reader takes in: at most 5,000 words (``wc -w`` of the generated page, tables and code
    included) and a heading at least every 700 words of prose (tables and code blocks not counted)."""
    pages = sorted((DOCS / "results").glob("*.md"))
    assert len(pages) >= 10
    for page in pages:
        text = page.read_text()
        assert len(text.split()) <= 5000, f"{page.name}: {len(text.split())} words; split it into pages"
        words, heading = max(prose_between_headings(text))
        assert words <= 700, f"{page.name}: {words} words of prose after {heading!r} without a heading"
