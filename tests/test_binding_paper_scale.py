"""experiments/binding_paper_scale.py: a run's standing read from its metrics, and the shipped snapshot."""
import json
import runpy
from pathlib import Path

from interp.files import RunFolder

ROOT = Path(__file__).resolve().parent.parent
PAPER = runpy.run_path(str(ROOT / "experiments" / "binding_paper_scale.py"), run_name="binding_paper_scale")


def test_the_first_evaluation_at_the_bar_is_counted_in_sequences_and_later_dips_do_not_move_it():
    run = dict(arch="mamba", status="running", n_params=10,
               train=dict(batch_size=64, lr=1e-3, steps=100, eval_size=8))
    rows = [dict(step=10, loss=1.0), dict(step=20, loss=1.0, eval_accuracy=0.5),
            dict(step=40, loss=1.0, eval_accuracy=0.9), dict(step=60, loss=1.0, eval_accuracy=0.85),
            dict(step=70, loss=1.0)]
    s = PAPER["summarise"](run, rows)
    assert s["sequences_to_90"] == 40 * 64  # the first evaluation at 90%, not the last one
    assert s["steps_done"] == 70 and s["sequences_done"] == 70 * 64
    assert s["last_accuracy"] == 0.85 and s["best_accuracy"] == 0.9
    assert [p["sequences"] for p in s["curve"]] == [20 * 64, 40 * 64, 60 * 64]


def test_a_run_that_never_reaches_the_bar_has_no_sequences_to_it():
    run = dict(arch="transformer", status="running", n_params=10,
               train=dict(batch_size=64, lr=1e-3, steps=100, eval_size=8))
    s = PAPER["summarise"](run, [dict(step=20, loss=5.0, eval_accuracy=0.01)])
    assert s["sequences_to_90"] is None and s["last_accuracy"] == 0.01


def test_the_shipped_snapshot_agrees_with_the_metrics_it_was_made_from():
    summary = json.loads((PAPER["OUT"] / "summary.json").read_text())
    assert {key: shipped["run"] for key, shipped in summary.items()} == PAPER["RUNS"]
    for key, shipped in summary.items():
        folder = RunFolder(PAPER["OUT"] / shipped["run"])
        again = PAPER["summarise"](folder.read_record(), folder.logged_lines(), PAPER["STOPPED"].get(shipped["run"]))
        assert dict(run=shipped["run"], **again) == shipped and key.startswith(again["arch"])


def test_a_run_stopped_for_good_says_why_in_its_status():
    run = dict(arch="transformer", status="running", n_params=10,
               train=dict(batch_size=64, lr=1e-3, steps=100, eval_size=8))
    s = PAPER["summarise"](run, [dict(step=20, loss=5.0, eval_accuracy=0.01)], "at chance")
    assert s["status"] == "stopped: at chance"
