"""Writes the results pages (docs/results/*.md) from their templates and the result files they cite.

    python docs/gen_results.py            # rewrite every page from docs/results/src/NAME.md.in
    python docs/gen_results.py --check    # exit 1 when a committed page differs from what it renders to
    python docs/gen_results.py --literal  # list the numbers in the templates' tables that no file fills yet

A template is the page with its measured numbers replaced by placeholders that name a JSON file and a
key in it, so a number on a page cannot drift from the file behind it:

    {{ figures/readme/x/y.json : metrics.key.path | .3g }}

- the file: a path from the repository root (a ``.jsonl`` file, a run's metrics.jsonl, reads as the list
  of its lines: ``[step=2000].eval_entropy_mae_bits``), or an alias defined on a line of its own at the top of
  the template, ``{% R = figures/readme/reproduction/reproduction.json %}`` (the line is not rendered);
- the key: dotted names into the JSON; ``name[3]`` indexes a list; ``name[run=hmm-mlp-cpu,metric=kl]``
  picks the one element of a list of objects whose fields equal those values (exactly one must match,
  a value is compared as text); ``name["0.5"]`` names a key that holds a dot; ``name.max()``,
  ``name.min()`` and ``name.mean()`` are a list's largest, smallest and mean element; ``name[@labels=L2H3]`` indexes a list by where
  L2H3 sits in the list ``labels`` of an enclosing object (a patching map's row by its site's name);
  ``[@labels=A;B]``, ``[@labels=4..36]`` (labels from 4 to 36), ``[run=a;b]`` and ``[*]`` (all) pick several, the rest of the key applies to
  each and a final ``.min()``, ``.max()`` or ``.mean()`` makes them one number (the ends of a range). An optional ``* K`` or
  ``/ K`` after the key scales the value (a percentage, a ratio to the paper's number);
- the format: a Python format spec (``.3g``, ``#.3g`` keeps trailing zeros, ``.2%``, ``,``, ``.2e``)
  or one of FORMATS below; none: ``str(value)``.

A model card's note (models/pretrained/NAME/README.md below the trainer's lines) is rendered the same way from
docs/results/src/cards/NAME.md.in.

A filled value must be a finite number (without a format, a word too): a NaN, an infinity, a null, a list, or a
word where a format needs a number is refused, as is a file that is not JSON, in one line naming the file and the
key, with exit status 1 and no page written (all are rendered before the first is written). ``--check`` also
fails on a page that shows nan, inf or a float left unformatted (a page written before these checks).

``tests/test_results_pages.py`` fails when a page or card and its template plus files disagree, when a
placeholder names a file or key that does not exist, and when the rendered page has a placeholder left.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from functools import lru_cache
from itertools import product
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
SOURCES = RESULTS / "src"
PAGES = ["index", "paper-table", "equal-footing", "difficulty", "binding", "binding-history", "training", "interventions",
         "language-models", "geometry", "belief-geometry"]
# A model card's note, the paragraphs below what the trainer writes (interp/pretrained.py model_card, checked against
# run.json by tests/test_results_pages.py), is docs/results/src/cards/NAME.md.in filled the same way.
CARDS = SOURCES / "cards"
PRETRAINED = ROOT / "models" / "pretrained"
TRAINER_END = "`metrics.jsonl` the whole training curve.\n\n"

PLACEHOLDER = re.compile(r"\{\{\s*(?P<file>[^:{}]+?)\s*:\s*(?P<key>[^|{}]+?)\s*(?:\|\s*(?P<fmt>[^{}]*?)\s*)?\}\}")
ALIAS = re.compile(r"^\{%\s*(?P<name>[A-Za-z_][\w-]*)\s*=\s*(?P<path>\S+)\s*%\}\n", re.M)
SCALE = re.compile(r"^(?P<key>.*?)\s*(?P<op>[*/])\s*(?P<k>[0-9.eE+-]+)$")


class ResultError(ValueError):
    """A placeholder that cannot be filled: the file, the key or the format is wrong."""


def _sig(value: float, digits: int) -> str:
    """``digits`` significant digits, never in exponent notation, trailing zeros kept (0.0400, 1.20)."""
    text = f"{value:#.{digits}g}"
    if "e" in text:
        text = f"{value:.{max(digits - 1 - int(f'{value:e}'.split('e')[1]), 0)}f}"
    return text.rstrip(".")


FORMATS = {
    # significant digits with trailing zeros kept and no exponent: sig2, sig3, sig4
    **{f"sig{d}": (lambda d: lambda v: _sig(float(v), d))(d) for d in range(1, 6)},
    # a signed number (+0.018, -0.000002): signed.3g, ...
    "int": lambda v: f"{int(round(float(v))):,}",  # a count with thousands separators: 9,216
}


def fmt(value, spec: str | None) -> str:
    if spec is None or spec == "":
        return str(value)
    if spec in FORMATS:
        return FORMATS[spec](value)
    if spec.startswith("signed"):
        return format(float(value), "+" + spec[len("signed"):]).replace("-", "−")
    if spec.startswith("sci"):  # sci.1 -> 1.8e-15, 4.9e-6: exponent notation without the exponent's padding
        mantissa, _, exponent = f"{float(value):.{int(spec[len('sci'):].lstrip('.') or '1')}e}".partition("e")
        return f"{mantissa}e{int(exponent)}"
    if spec.startswith("pctnum"):  # pctnum.1 -> 7.5, a percentage without its sign (the low end of a range)
        return f"{float(value) * 100:.{int(spec[len('pctnum'):].lstrip('.') or '1')}f}"
    if spec.startswith("pct"):  # pct.1 -> 7.5%, the value a fraction
        digits = spec[len("pct"):].lstrip(".") or "1"
        return f"{float(value) * 100:.{int(digits)}f}%"
    try:
        return format(value, spec)
    except (TypeError, ValueError) as err:
        raise ResultError(f"format {spec!r} does not apply to {value!r}: {err}") from None


@lru_cache(maxsize=None)
def load(path: str):
    file = ROOT / path
    if not file.is_file():
        raise ResultError(f"no result file {path}")
    try:
        text = file.read_text()
        if file.suffix == ".jsonl":  # a run's metrics.jsonl: a list of its lines, picked by [step=N]
            return [_parse(line, f"{path} line {i}") for i, line in enumerate(text.splitlines(), 1) if line.strip()]
        return _parse(text, path)
    except (OSError, UnicodeDecodeError) as err:
        raise ResultError(f"cannot read {path} ({getattr(err, 'strerror', None) or err})") from None


def _parse(text: str, where: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:  # truncated, empty or garbage: say which file, not only where in it
        raise ResultError(f"{where} is not valid JSON ({err.msg} at line {err.lineno} column {err.colno}); "
                          f"write the result again") from None
    except RecursionError:
        raise ResultError(f"{where} is not valid JSON (nested too deeply); write the result again") from None


def _finite(value, where: str):
    """``value`` when it is a finite number; else a ResultError naming the file and key (``where``). A NaN or an
    infinity would be published as "nan bits", and max()/min() silently skip a NaN in a range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ResultError(f"{where} is {json.dumps(value)[:60]}, not a number")
    if not math.isfinite(value):
        raise ResultError(f"{where} is {value}, not a finite number")
    return value


def _segments(key: str) -> list[str]:
    """'a.b[run=x.y,metric=z].c["0.5"]' -> ['a', 'b', '[run=x.y,metric=z]', 'c', '["0.5"]']."""
    parts, depth, current = [], 0, ""
    for ch in key:
        if ch == "[" and depth == 0:
            if current:
                parts.append(current)
            current, depth = "[", 1
        elif ch == "]" and depth == 1:
            parts.append(current + "]")
            current, depth = "", 0
        elif ch == "." and depth == 0:
            if current:
                parts.append(current)
            current = ""
        else:
            current += ch
    if current:
        parts.append(current)
    return parts


class Fan(list):
    """Several elements picked at once (``[@sites=A;B]``, ``[@positions=4..36]``): the segments after it apply
    to each, and ``.min()`` / ``.max()`` reduce them to one number (the ends of a range on a page: "0.07-0.18")."""


def _labelled(seg: str, node, seen: list, key: str, where: str):
    """[@sites=L2H3]: the element at L2H3's index in the list ``sites`` of an enclosing object; [@sites=A;B]: a Fan
    of those at A's and B's; [@positions=4..36]: a Fan of those whose (numeric) label lies in 4..36, ends included."""
    name, _, value = seg[2:-1].partition("=")
    labels = next((n[name.strip()] for n in reversed(seen) if isinstance(n, dict) and name.strip() in n), None) or []
    low, dots, high = value.strip().partition("..")
    if dots:
        picked = [i for i, v in enumerate(labels) if float(low) <= float(v) <= float(high)]
    else:
        picked = [[i for i, v in enumerate(labels) if str(v) == want.strip()] for want in value.split(";")]
        picked = [m[0] for m in picked] if all(len(m) == 1 for m in picked) else []
    if not picked or not isinstance(node, list) or max(picked) >= len(node):
        raise ResultError(f"{where}: {seg} names no one element of {name.strip()!r} (in {key!r})")
    return Fan(node[i] for i in picked) if dots or ";" in value else node[picked[0]]


REDUCERS = {"max()": max, "min()": min, "mean()": lambda values: sum(values) / len(values)}


def _step(node, seg: str, seen: list, key: str, where: str):
    """One segment of a key applied to one node."""
    if seg.startswith("[@"):  # [@sites=L2H3]: the index of L2H3 in the list `sites` beside this one
        return _labelled(seg, node, seen, key, where)
    if seg.startswith("["):
        inner = seg[1:-1].strip()
        if inner == "*" and isinstance(node, list):  # every element: a Fan
            return Fan(node)
        if inner[:1] in "\"'":
            seg = inner.strip("\"'")
        elif re.fullmatch(r"-?\d+", inner):
            if not isinstance(node, list) or not -len(node) <= int(inner) < len(node):
                raise ResultError(f"{where}: no element {inner} in {key!r}")
            return node[int(inner)]
        else:
            pairs = [p.split("=", 1) for p in inner.split(",")]
            if not isinstance(node, list) or any(len(p) != 2 for p in pairs):
                raise ResultError(f"{where}: {seg} selects from a list of objects by field=value")
            # [component=L0H0;L0H1]: a Fan of the elements whose field is any of those (each must be there once)
            wanted = [[(k.strip(), v) for v in alternatives.split(";")] for k, alternatives in pairs]
            found = [[e for e in node if isinstance(e, dict) and all(str(e.get(k)) == v.strip() for k, v in combo)]
                     for combo in product(*wanted)]
            if any(len(f) != 1 for f in found):
                raise ResultError(f"{where}: {seg} matches {[len(f) for f in found]} elements of {key!r}, not one")
            return found[0][0] if len(found) == 1 else Fan(f[0] for f in found)
    if seg in REDUCERS and isinstance(node, list):  # the largest, smallest or mean element of a list
        # a patching map's row ends in None (undefined); anything else must be a finite number
        values = [_finite(v, f"{where}: an element of {key!r}") for v in node if v is not None]
        if not values:
            raise ResultError(f"{where}: {key!r} has no numbers to take {seg} of")
        return REDUCERS[seg](values)
    if not isinstance(node, dict) or seg not in node:
        raise ResultError(f"{where}: no key {seg!r} (in {key!r})")
    return node[seg]


def lookup(data, key: str, where: str):
    node, seen = data, [data]
    for seg in _segments(key):
        if isinstance(node, Fan) and seg not in REDUCERS:  # each picked element, one flat Fan of results
            results = [_step(element, seg, seen, key, where) for element in node]
            node = Fan(x for r in results for x in (r if isinstance(r, Fan) else [r]))
            continue
        node = _step(node, seg, seen, key, where)
        seen.append(node)
    return node


def aliases(template: str) -> dict[str, str]:
    return {m["name"]: m["path"] for m in ALIAS.finditer(template)}


def fill(match: re.Match, names: dict[str, str], page: str) -> str:
    path = names.get(match["file"], match["file"])
    key, op, k = match["key"], None, None
    scaled = SCALE.match(key)
    if scaled:
        key, op, k = scaled["key"], scaled["op"], float(scaled["k"])
    where = f"{page}: {{{{ {match['file']} : {match['key']} }}}}"
    value = lookup(load(path), key, where + f" in {path}")
    if isinstance(value, Fan):
        raise ResultError(f"{where} picks several values: end the key with .min() or .max()")
    if op or match["fmt"]:  # a number is meant: a format or a scale applies only to one
        value = _finite(value, f"{where} in {path}: {key}")
    elif not isinstance(value, str):  # shown as it is: a word, or a finite number, never null, NaN or a list
        _finite(value, f"{where} in {path}: {key}")
    if op:
        value = value * k if op == "*" else value / k
    return fmt(value, match["fmt"])


def render_text(template: str, page: str = "page") -> str:
    names = aliases(template)
    body = ALIAS.sub("", template)
    return PLACEHOLDER.sub(lambda m: fill(m, names, page), body)


def render(name: str) -> str:
    return render_text((SOURCES / f"{name}.md.in").read_text(), f"docs/results/src/{name}.md.in")


def card_names() -> list[str]:
    return sorted(path.name[:-len(".md.in")] for path in CARDS.glob("*.md.in"))


def render_card(name: str) -> str:
    """models/pretrained/NAME/README.md: the trainer's part as it is, then the note rendered from its template."""
    card = (PRETRAINED / name / "README.md").read_text()
    trainer, end, _ = card.partition(TRAINER_END)
    if not end:
        raise ResultError(f"models/pretrained/{name}/README.md has no trainer-written part ending {TRAINER_END!r}")
    return trainer + end + render_text((CARDS / f"{name}.md.in").read_text(), f"docs/results/src/cards/{name}.md.in")


def placeholders_in(template: str) -> list[str]:
    return [m.group(0) for m in PLACEHOLDER.finditer(template)]


def placeholders(name: str) -> list[str]:
    return placeholders_in((SOURCES / f"{name}.md.in").read_text())


NUMBER = re.compile(r"(?<![\w.\-/])[−-]?\d[\d,]*(?:\.\d+)?(?:e[−-]?\d+)?%?")


def literal_numbers(name: str) -> list[tuple[int, str]]:
    """(line, number) of every number typed into a table row of the template rather than filled from a
    file: what is left to cover. Settings (steps, widths) and the paper's numbers are among them."""
    out = []
    for i, line in enumerate((SOURCES / f"{name}.md.in").read_text().splitlines(), 1):
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        stripped = PLACEHOLDER.sub("", re.sub(r"\]\([^)]*\)|`[^`]*`", "", line))
        out += [(i, n) for n in NUMBER.findall(stripped)]
    return out


# What a page may never show in a filled number: nan or inf (a non-finite value published), or a float's full repr
# (a value left unformatted, 0.18333333333333)
DAMAGE = re.compile(r"(?<![\w.-])-?(?:nan|inf)\b|\d\.\d{9,}")


def damage(text: str) -> str | None:
    """The first nan, inf or unformatted number a page shows; None when it shows none."""
    found = DAMAGE.search(text)
    return found.group(0) if found else None


def main(argv=None) -> int:
    """Write (or with --check compare) every page; a ResultError is one line and exit status 1, no traceback."""
    try:
        return _main(argv)
    except ResultError as err:
        print(f"gen_results: error: {err}", file=sys.stderr)
        return 1


def _main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--literal", action="store_true")
    args = parser.parse_args(argv)
    if args.literal:
        for name in PAGES:
            for line, number in literal_numbers(name):
                print(f"docs/results/src/{name}.md.in:{line}: {number}")
        return 0
    outputs = ([(RESULTS / f"{name}.md", lambda name=name: render(name)) for name in PAGES]
               + [(PRETRAINED / name / "README.md", lambda name=name: render_card(name)) for name in card_names()])
    stale = []
    # every page rendered before the first is written: a refusal leaves all of them as they were
    for path, text in [(path, rendered()) for path, rendered in outputs]:
        if args.check and (shown := damage(path.read_text())):
            raise ResultError(f"{path.relative_to(ROOT)} shows {shown!r}, a number that is not finite or not "
                              f"formatted; fix the result file or the template, then run `python docs/gen_results.py`")
        if path.read_text() == text:
            continue
        if args.check:
            stale.append(str(path.relative_to(ROOT)))
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("stale: " + ", ".join(stale) + " (edit its template under docs/results/src/, "
              "then run `python docs/gen_results.py`)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
