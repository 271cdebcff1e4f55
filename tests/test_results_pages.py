"""The results pages (docs/results/*.md) are generated from their templates (docs/results/src/*.md.in) and
the result files the templates name: a page whose numbers differ from its files fails here, as does a
placeholder naming a file or key that does not exist. ``python docs/gen_results.py`` rewrites the pages."""
import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def generator():
    spec = importlib.util.spec_from_file_location("gen_results", ROOT / "docs" / "gen_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = generator()


@pytest.mark.parametrize("name", gen.PAGES)
def test_the_results_page_is_its_template_filled_from_the_result_files(name):
    page = (ROOT / "docs" / "results" / f"{name}.md").read_text()
    assert page == gen.render(name), (f"docs/results/{name}.md differs from its template and result files: edit "
                                      f"docs/results/src/{name}.md.in, then run `python docs/gen_results.py`")
    assert "{{" not in page and "{%" not in page


@pytest.mark.parametrize("name", gen.card_names())
def test_a_model_cards_note_is_its_template_filled_from_the_result_files(name):
    """The paragraphs below the trainer's lines of a model card (the search that chose it, remeasurements) are
    docs/results/src/cards/NAME.md.in filled from the trial records and run files."""
    card = (ROOT / "models" / "pretrained" / name / "README.md").read_text()
    assert card == gen.render_card(name), (f"models/pretrained/{name}/README.md differs from its template and result "
                                           f"files: edit docs/results/src/cards/{name}.md.in, then run `python docs/gen_results.py`")
    assert "{{" not in card and gen.placeholders_in((gen.CARDS / f"{name}.md.in").read_text())


@pytest.mark.parametrize("name", gen.PAGES)
def test_every_template_fills_numbers_from_files(name):
    assert gen.placeholders(name), f"docs/results/src/{name}.md.in names no result file"


def test_a_placeholder_reads_the_file_and_formats(tmp_path):
    data = tmp_path / "r.json"
    data.write_text(json.dumps({"rows": [{"run": "a", "x": 0.01234}, {"run": "b", "x": 0.5}],
                                "m": {"0.5": 3, "l": [1, 2, 2000]}}))
    text = ("{% F = " + str(data) + " %}\n| {{ F : rows[run=a].x | sig3 }} | {{ F : rows[run=b].x / 0.25 | .2g }}× | "
            "{{ F : m[\"0.5\"] }} | {{ F : m.l[-1] | int }} | {{ F : rows[run=a].x | pct.1 }} | {{ F : m.l.min() }} |")
    assert gen.render_text(text) == "| 0.0123 | 2× | 3 | 2,000 | 1.2% | 1 |"
    grid = tmp_path / "g.json"
    grid.write_text(json.dumps({"m": {"sites": ["a", "b"], "positions": [70, 71], "scale": [[1, 2], [3, 4]]}}))
    assert gen.render_text("{{ " + str(grid) + " : m.scale[@sites=b][@positions=70] }}") == "3"
    with pytest.raises(gen.ResultError, match="names no one element"):
        gen.render_text("{{ " + str(grid) + " : m.scale[@sites=c][0] }}")


def test_a_range_picks_several_cells_and_reduces_them(tmp_path):
    """The ends of a range on a page ("0.07-0.18 each") from the cells it spans: [@labels=A;B] and
    [@labels=lo..hi] pick several, the rest of the key applies to each, .min()/.max() reduce (None skipped)."""
    grid = tmp_path / "g.json"
    grid.write_text(json.dumps({"m": {"sites": ["a", "b", "c"], "positions": [70, 71, 72],
                                      "scale": [[1, 2, 3], [4, 5, None], [7, 8, 9]],
                                      "parts": [{"c": "a", "s": 0.5}, {"c": "b", "s": -2}, {"c": "c", "s": 9}]}}))
    cell = lambda key: gen.render_text("{{ " + str(grid) + " : m." + key + " }}")
    assert cell("scale[@sites=a;c][@positions=71].max()") == "8"
    assert cell("scale[@sites=a;c][@positions=71].min()") == "2"
    assert cell("scale[@sites=b][@positions=71..72].max()") == "5"  # the undefined cell left out
    assert cell("scale[@sites=a;b;c][@positions=70..71].min()") == "1"
    assert cell("parts[c=a;b].s.min() * 10") == "-20.0" and cell("parts[*].s.mean()") == "2.5"
    with pytest.raises(gen.ResultError, match="picks several"):
        cell("scale[@sites=a;c][@positions=71]")
    with pytest.raises(gen.ResultError, match="names no one element"):
        cell("scale[@sites=a;d][0].max()")
    with pytest.raises(gen.ResultError, match="not one"):
        cell("parts[c=a;d].s.max()")
    assert gen.fmt(4.915e-6, "sci.1") == "4.9e-6" and gen.fmt(1.8e-15, "sci.1") == "1.8e-15"


@pytest.mark.parametrize("key, words", [("rows[run=c].x", "matches [0] elements"), ("rows[run=a].y", "no key 'y'"),
                                        ("m.l[7]", "no element 7")])
def test_a_placeholder_that_names_nothing_is_refused(tmp_path, key, words):
    data = tmp_path / "r.json"
    data.write_text(json.dumps({"rows": [{"run": "a", "x": 1}], "m": {"l": [1]}}))
    with pytest.raises(gen.ResultError, match=re.escape(words)):
        gen.render_text("{{ " + str(data) + " : " + key + " }}")


def test_a_missing_file_is_refused():
    with pytest.raises(gen.ResultError, match="no result file"):
        gen.render_text("{{ figures/readme/no-such-file.json : a }}")


def test_the_smollm2_columns_follow_the_header():
    """Issue 52: the mixed and math columns must be in the header's order (mixed / math / coin)."""
    page = (ROOT / "docs" / "results" / "language-models.md").read_text()
    row = next(line for line in page.splitlines() if line.startswith("| value manifold: PC1 + PC2"))
    base = ROOT / "figures" / "readme" / "smollm2-135m"
    shares = [json.loads((base / d / "smollm2-135m" / "value-manifold.json").read_text())["metrics"]["final_pc12_variance"]
              for d in ("two-label-mixed", "two-label-math", "coin")]
    assert " / ".join(f"{s:.2f}" for s in shares) in re.sub(r" \([^)]*\)", "", row.split("|")[3])


CARDS = sorted((ROOT / "models" / "pretrained").glob("*/README.md"))
HELD_OUT = re.compile(r"Held-out metrics at (?:the end|step [\d,]+, measured on the CPU when shipped) "
                      r"\(([\d,]+) sequences\): (.*?)\.\s*$", re.M)
PARAMS = re.compile(r"\(([\d,]+) parameters")


def _printed(text: str) -> tuple[float, float]:
    """A printed number and half a unit of its last printed digit (the rounding it allows)."""
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return float(text), 0.5 * 10 ** (-decimals + (int(exponent) if exponent else 0))


@pytest.mark.parametrize("card", CARDS, ids=lambda p: p.parent.name)
def test_a_model_cards_numbers_are_its_run_record(card):
    """The numbers the trainer writes into a model card (parameters, held-out metrics at the end and their
    number of sequences) are those of the run's run.json: a card edited by hand, or a run replaced under
    an old card, fails here."""
    run = json.loads((card.parent / "run.json").read_text())
    text = card.read_text()
    params = PARAMS.search(text)
    assert params and int(params[1].replace(",", "")) == run["n_params"], f"{card}: parameter count"
    held = HELD_OUT.search(text)
    if held is None:  # a card without the trainer's metrics line (none at present)
        pytest.skip("no held-out metrics line")
    assert int(held[1].replace(",", "")) == run["train"]["eval_size"], f"{card}: sequences"
    for part in held[2].split(";"):
        name, _, value = part.strip().rpartition(" ")
        key = name.replace(" ", "_")
        printed, slack = _printed(value)
        assert abs(printed - run["final"][key]) <= slack * 1.001 + 1e-12, f"{card}: {name} {value} vs {run['final'][key]}"


EQ = ROOT / "figures" / "readme" / "equal-footing"


def _differences(name):
    metrics = json.loads((EQ / name / "compare.json").read_text())["metrics"]
    return {(d["first"], d["second"], d["metric"]): d for d in metrics["differences"]}


# (compare folder, the four runs of the page's row): the page says every two of them differ beyond the paired interval
ROWS = [("paired-bijection", ["bijection-transformer-equal@2000", "bijection-mamba-cpu@2000", "bijection-lstm-cpu@2000",
                              "bijection-mlp-cpu@2000"]),
        ("paired-hmm", ["hmm-transformer-equal@5000", "hmm-mamba-equal@5000", "hmm-lstm-equal@5000", "hmm-mlp-equal@5000"]),
        ("paired-regression", ["regression-transformer-equal@2000", "regression-mamba-equal@2000",
                               "regression-lstm-equal@2000", "regression-mlp-equal@2000"])]


@pytest.mark.parametrize("folder, runs", ROWS, ids=[r[0] for r in ROWS])
def test_the_four_architectures_differ_as_the_page_says(folder, runs):
    """docs/results/equal-footing.md: "On each of the first three rows every two architectures differ beyond the paired
    interval of their difference"; if a re-measurement changes that, the sentence must change with it."""
    diffs = _differences(folder)
    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            d = diffs.get((a, b, "entropy_mae_bits")) or diffs[(b, a, "entropy_mae_bits")]
            assert d["differs"], (a, b, d)


def test_the_comparisons_in_the_prose_follow_their_marks():
    """Each sentence of the results pages that calls a difference real or noise, against the paired interval."""
    hmm, reg = _differences("paired-hmm"), _differences("paired-regression")
    # "the curriculum is not shown to help": the LSTM with it ties the preset's LSTM without it
    assert not hmm[("hmm-lstm-equal@5000", "hmm-lstm-cpu@5000", "entropy_mae_bits")]["differs"]
    # "the curriculum helps Mamba" on regression: lower error with it, beyond the interval
    d = reg[("regression-mamba-equal@2000", "regression-mamba-cpu@2000", "entropy_mae_bits")]
    assert d["differs"] and d["interval"][1] < 0
    # the two HMM MLPs: "a hundred-thousandth of their level"
    d = hmm[("hmm-mlp-equal@5000", "hmm-mlp-cpu@2000", "entropy_mae_bits")]
    assert abs(d["difference"]) / 0.41 < 2e-5
    # recall Mamba "under" E[1/n] on the balanced set
    mamba = json.loads((EQ / "recall-remeasure" / "recall-remeasure.json").read_text())["models"]["recall-mamba-cpu"]
    assert mamba["balanced"]["ratio_to_e_inv_n_interval"][1] < 1
    assert mamba["balanced"]["n_queries"] >= 3000 and mamba["fresh"]["n_queries"] >= 3000


def test_the_geometry_pages_verdicts_follow_their_files():
    """docs/results/geometry.md: the Jacobian lens is further from Bayes than the logit lens at every layer before the
    last on every model that uses its context ("every paired interval excludes 0"), the same-position lens closer on
    the HMM transformer; the frame settles before precision on the dense series and not on the 6k-step run; routing
    does not settle before precision on either em-dynamics series (both settle at one step)."""
    lens = ROOT / "figures" / "readme" / "jacobian-lens"
    for model in ("bijection-transformer-cpu", "bijection-mamba-cpu", "bijection-lstm-cpu", "hmm-transformer-cpu",
                  "hmm-mamba-cpu", "hmm-lstm-cpu"):
        intervals = json.loads((lens / model / "jacobian-lens.json").read_text())["metrics"]["kl_gain_interval"][:-1]
        assert all(high < 0 for _, high in intervals), model
    same = json.loads((lens / "same-position" / "hmm-transformer-cpu" / "jacobian-lens.json").read_text())["metrics"]
    assert all(low > 0 for low, _ in same["kl_gain_interval"][:-1])
    readme = ROOT / "figures" / "readme"
    assert json.loads((readme / "bijection-transformer-dense" / "frame-precision.json").read_text())["metrics"]["frame_settles_first"]
    assert not json.loads((readme / "bench-cpu" / "frame-precision.json").read_text())["metrics"]["frame_settles_first"]
    for series in ("bijection-transformer-dense", "hmm-transformer-10k"):
        metrics = json.loads((readme / "em-dynamics" / series / "em-dynamics.json").read_text())["metrics"]
        assert not metrics["routing_settles_first"] and metrics["frame_settles_first"], series
        assert metrics["settling_steps"]["routing"] == metrics["settling_steps"]["precision"], series  # "both settle at"


def test_the_hmm_models_sit_between_the_windows_the_page_says():
    """docs/results/training.md: after the first positions "the LSTM is still on window 0, Mamba is between windows 1
    and 2, and the transformer is between windows 2 and 3" (stationary prior), on the same sequences."""
    record = json.loads((ROOT / "figures" / "readme" / "hmm-window-baseline.json").read_text())
    window = {int(w): v["stationary"] for w, v in record["windows"].items()}
    level = {name: m["positions_5_on"] for name, m in record["models"].items()}
    assert window[1] < level["hmm-lstm-cpu"] and abs(level["hmm-lstm-cpu"] - window[0]) < abs(level["hmm-lstm-cpu"] - window[1])
    assert window[2] < level["hmm-mamba-cpu"] < window[1]
    assert window[3] < level["hmm-transformer-cpu"] < window[2]
