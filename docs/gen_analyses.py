"""Writes docs/reference/analyses.md from the analysis registry, so the reference cannot drift from the code.

    python docs/gen_analyses.py          # rewrite the page (after adding or changing an analysis)

Everything on the page comes from ``analyses.REGISTRY`` (name, summary, exact definition, typed options
with their ranges, requirements, the language-model variant) and from the CLI's manifest
(``interp.manifest``: which shipped models each analysis applies to, and why not the others). The one
picture per analysis is a PNG already under figures/readme/ (none is drawn here).
``tests/test_docs.py::test_the_analyses_page_is_current`` fails when the committed page differs.
"""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference" / "analyses.md"
FIGURES = ROOT / "figures" / "readme"

# The example picture of an analysis: the one named here, else the first PNG under figures/readme/ whose
# name starts with the analysis's name (none: the section says there is no example picture yet).
PICTURE = {
    "calibration": "bijection-transformer-cpu/calibration-staircase.png",
    "key-orthogonality": "bijection-transformer-cpu/key-orthogonality-cosine-heatmap.png",
    "length-generalization": "reproduction/hmm-transformer-cpu/length-generalization-error-by-position.png",
    "content-addressing": "reproduction/recall-transformer-cpu/content-addressing-accuracy-by-slot.png",
    "head-ablation": "reproduction/bijection-transformer-cpu/head-ablation-zero-ablation.png",
    "layer-ablation": "reproduction/bijection-transformer-cpu/layer-ablation-mae-ratio.png",
    "qk-alignment": "bijection-mamba-cpu/qk-alignment-attention-mass.png",
    "value-manifold": "language/bijection-transformer-cpu/value-manifold-residual-pca.png",
    "frame-precision": "bijection-transformer-dense/frame-precision-settling.png",
    "belief-clusters": "reproduction/hmm-mamba-cpu/belief-clusters-pca-scatter.png",
    "belief-state": "belief-state/hmm-transformer-cpu/belief-state-per-layer.png",
    "compare": "compare/compare/compare-primitives.png",
    "advantage-law": "advantage-law/bijection-transformer-cpu/advantage-law-decomposition.png",
    "em-dynamics": "em-dynamics/bijection-transformer-dense/em-dynamics-signals.png",
    "attention-focusing": "language/hmm-transformer-cpu/attention-focusing-by-layer.png",
    "entropy-axis": "language/hmm-transformer-cpu/entropy-axis-ablation.png",
}

HEAD = """# Analyses

Every diagnostic the toolkit ships, generated from the analysis registry (`analyses.REGISTRY`) by
`python docs/gen_analyses.py`; a test fails when this page and the code disagree. Run one with

```bash
interp run NAME --ckpt RUN|FILE|SHIPPED-NAME [--out figures/] [--format pdf,html,json,png] [--OPTION VALUE ...]
interp run NAME --model HF-FOLDER|CACHED-NAME|FILE.gguf [--OPTION VALUE ...]   # where it runs on language models
```

or from Python with `analyses.run(NAME, model, **options)`. Each writes `OUT/RUN-NAME/NAME.pdf` (one page
per figure), `.html` (interactive, works offline; the pages of a folder share one `plotly.min.js` beside
them) and `.json` (its numbers and the exact definition below). What each requirement means, and what
a refusal says, is under [Requirements](#requirements).
Every analysis is tested on a constructed model or matrix whose answer is known.

"""


def _wrapped(text: str) -> str:
    """A definition as a text block of lines no wider than 100 (many are written as one long line)."""
    out = []
    for line in text.strip().splitlines():
        indent = len(line) - len(line.lstrip()) + (2 if line.lstrip().startswith("- ") else 0)
        out += textwrap.wrap(line, 100, subsequent_indent=" " * indent, break_long_words=False,
                             break_on_hyphens=False) or [""]
    return "\n".join(out)


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _options(options) -> list[str]:
    if not options:
        return ["No options.", ""]
    rows = ["| option | type | default | range | what it sets |", "|---|---|---|---|---|"]
    for o in options:
        default = "auto" if o.default == "" else o.default
        span = o.range_text() if (o.low is not None or o.high is not None) else "–"
        rows.append(f"| `{o.flag}` | {o.type.__name__} | `{default}` | {span} | {_cell(o.help)} |")
    return rows + [""]


def _picture(name: str) -> str | None:
    chosen = PICTURE.get(name)
    if chosen and (FIGURES / chosen).is_file():
        return chosen
    found = sorted((p.relative_to(FIGURES).as_posix() for p in FIGURES.rglob(f"{name}-*.png")),
                   key=lambda p: ("transformer" not in p, p))  # a transformer's first: the most familiar
    return found[0] if found else None


def _applies(shipped: dict[str, str | None]) -> list[str]:
    fits = [m for m, why in shipped.items() if why is None]
    if len(fits) == len(shipped):
        return [f"**Shipped models it applies to:** all {len(fits)}.", ""]
    lines = [f"**Shipped models it applies to:** {', '.join(f'`{m}`' for m in fits) or 'none'}."]
    reasons: dict[str, list[str]] = {}
    for model, why in shipped.items():
        if why is not None:
            reasons.setdefault(why, []).append(model)
    lines += ["", "Refused on the others, before anything runs:", ""]
    lines += [f"- {', '.join(f'`{m}`' for m in models)}: \"{why}\"" for why, models in reasons.items()]
    return lines + [""]


def render() -> str:
    import analyses
    from analyses.base import REQUIREMENTS
    from interp import manifest

    known = manifest.current()["analyses"]
    out = [HEAD, "| analysis | what it measures | on language models |", "|---|---|---|"]
    for name, a in analyses.REGISTRY.items():
        out.append(f"| [`{name}`](#{name}) | {_cell(a.summary)} | {'yes' if a.on_language_model else '–'} |")
    out.append("")
    for name, a in analyses.REGISTRY.items():
        out += [f"## {name}", "", f"{a.summary[0].upper()}{a.summary[1:]}.", ""]
        if a.requires:
            out += ["**Requires:** " + ", ".join(f"[`{r}`](#requirements)" for r in a.requires) + ".", ""]
        if a.multi_model:
            out += ["Takes several models: `interp run " + name + " --ckpt A --ckpt B ...`.", ""]
        out += _applies(known[name]["shipped"])
        if a.run is not None:
            out += ["**Definition:**", "", "```text", _wrapped(a.definition), "```", "", "**Options:**", ""]
            out += _options(a.options)
        if a.on_language_model is not None:
            out += [f"**On a language model** (`interp run {name} --model MODEL`):", ""]
            if a.language_definition and (a.language_definition != a.definition or a.run is None):
                out += ["```text", _wrapped(a.language_definition), "```", ""]
            out += _options(a.language_options)
        picture = _picture(name)
        if picture:
            out += [f"![{name}: {picture}](../../figures/readme/{picture})", "",
                    f"*Example: `figures/readme/{picture}`.*", ""]
    out += ["## Requirements", "", "What an analysis may require of a model, and the reason a model without it "
            "is refused with (`analyses.base.REQUIREMENTS`):", "", "| requirement | refusal |", "|---|---|"]
    out += [f"| `{r}` | {_cell(why)} |" for r, (_, why) in REQUIREMENTS.items()]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(render())
    print(f"wrote {PAGE.relative_to(ROOT)}", file=sys.stderr)
