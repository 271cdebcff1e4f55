"""compare: the primitives matrix is judged from measured runs, with the stated thresholds."""
import json

import pytest

import analyses
import models
import tasks
from analyses import compare


def test_primitive_cells_follow_the_thresholds():
    rows = [dict(arch="transformer", task="bijection", entropy_mae_bits=0.2, accuracy=0.1),
            dict(arch="transformer", task="bijection", entropy_mae_bits=0.01, accuracy=0.1),
            dict(arch="transformer", task="recall", entropy_mae_bits=0.5, accuracy=0.85),
            dict(arch="lstm", task="hmm", entropy_mae_bits=0.41, accuracy=0.5)]
    rows[1].update(run="second", budget=dict(steps=10, batch_size=4, init_sequences=0), n_params=99)
    assert compare.primitive_cell(rows, "transformer", "accumulation") == dict(
        status="pass", value=0.01, threshold=0.05, metric="entropy_mae_bits", task="bijection",  # best run counts
        run="second", budget=rows[1]["budget"], n_params=99)  # and says which, with its budget
    assert compare.primitive_cell(rows, "transformer", "binding")["status"] == "fail"
    assert compare.primitive_cell(rows, "transformer", "transport")["status"] == "not measured"
    assert compare.primitive_cell(rows, "lstm", "transport")["status"] == "fail"


def test_compare_measures_every_model():
    bij = models.build("transformer", tasks.make("bijection", V=6, L=5), config=dict(d_model=16, n_layers=1, n_heads=2))
    rec = models.build("transformer", tasks.make("recall", N=3, n_keys=6, n_values=6, queries=2),
                       config=dict(d_model=16, n_layers=1, n_heads=2))
    result = analyses.run("compare", [bij.eval(), rec.eval()], n=64)
    runs = result.metrics["runs"]
    assert [r["task"] for r in runs] == ["bijection", "recall"]
    direct = analyses.run("calibration", bij, n=64).metrics["entropy_mae_bits"]
    assert runs[0]["entropy_mae_bits"] == pytest.approx(direct)
    cells = result.metrics["primitives"]["transformer"]
    assert cells["transport"]["status"] == "not measured"
    mae = runs[0]["entropy_mae_bits"]  # an untrained model: far from Bayes, so the cell must say fail
    assert mae > 0.05 and cells["accumulation"] == dict(status="fail", value=mae, threshold=0.05,
                                                        metric="entropy_mae_bits", task="bijection",
                                                        run=runs[0]["run"], budget=None,  # built, never trained
                                                        n_params=runs[0]["n_params"])
    assert cells["binding"]["value"] == runs[1]["accuracy"]
    json.dumps(result.metrics, allow_nan=False)
    assert set(result.figures) == {"calibration", "primitives"}
    # one category per run, shared by its MAE and its accuracy, on one line (a rotated two-line label
    # reads as two categories)
    for trace in result.figures["calibration"].data:
        assert list(trace.x) == [r["run"] for r in runs] and not any("<br>" in x for x in trace.x)
    with pytest.raises(analyses.AnalysisError, match="at least one model"):
        analyses.run("compare", [])


def test_binding_is_judged_on_full_tables_whatever_range_a_model_trained_on():
    """A recall model trained on tables of 1..N pairs is judged on full N-pair tables (the paper's
    format): over a range of sizes the small tables, which chance answers often, would lift it."""
    ranged = tasks.make("recall", N=4, N_min=1, n_keys=8, n_values=8, queries=2, layout="paper", fillers=2, gap=1)
    assert ranged.judged_on().config() == dict(ranged.config(), N_min=4)
    assert tasks.make("bijection", V=6, L=5).judged_on().config() == tasks.make("bijection", V=6, L=5).config()
    model = models.build("transformer", ranged, config=dict(d_model=16, n_layers=1, n_heads=2)).eval()
    result = analyses.run("compare", [model], n=64)
    run, cell = result.metrics["runs"][0], result.metrics["primitives"]["transformer"]["binding"]
    assert run["judged"]["task_changes"] == {"N_min": 4}
    from analyses.base import held_out_batch
    from analyses.calibration import measure
    direct = measure(model, held_out_batch(ranged.judged_on(), 64, result.metrics["seed"]))["accuracy"]
    assert cell["value"] == pytest.approx(direct) and cell["judged_on"] == {"N_min": 4}
    assert run["accuracy"] != cell["value"]  # the calibration table keeps the model's own task
    assert "on N_min=4" in result.figures["primitives"].data[0].text[0][2]


def test_differences_are_paired_and_marked_only_beyond_the_noise():
    import copy

    import torch

    task = tasks.make("bijection", V=6, L=5)
    model = models.build("transformer", task, config=dict(d_model=16, n_layers=1, n_heads=2)).eval()
    twin = copy.deepcopy(model)  # the same weights: every resample gives a difference of exactly 0
    sharper = copy.deepcopy(model)
    with torch.no_grad():
        sharper.unembed.W_U.mul_(30)  # confidently wrong: far from Bayes on every sequence
    other_task = models.build("transformer", tasks.make("bijection", V=6, L=4),
                              config=dict(d_model=16, n_layers=1, n_heads=2)).eval()
    metrics = analyses.run("compare", [model, twin, sharper, other_task], n=200).metrics
    found = {(d["first"], d["second"], d["metric"]): d for d in metrics["differences"]}
    runs = [r["run"] for r in metrics["runs"]]
    same = found[(runs[0], runs[1], "entropy_mae_bits")]
    assert same["interval"] == [0.0, 0.0] and not same["differs"] and same["difference"] == 0
    apart = found[(runs[0], runs[2], "entropy_mae_bits")]
    assert apart["differs"] and apart["interval"][1] < 0 and apart["difference"] < 0
    assert not any(runs[3] in (d["first"], d["second"]) for d in metrics["differences"])  # other sequences
    low, high = metrics["runs"][0]["intervals"]["entropy_mae_bits"]
    assert low <= metrics["runs"][0]["entropy_mae_bits"] <= high
