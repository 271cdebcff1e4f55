"""The shipped reference models: one per task x architecture plus a checkpoint series, each with its
run.json and a model card; their weights reproduce the metrics recorded at the end of training, and
every analysis runs on them (or refuses with the documented reason)."""
import json
import math
import re

import pytest
import torch

import analyses
import models
import tasks
from analyses.base import AnalysisError, held_out_batch
from analyses.calibration import measure
from tests.tiny import slow_suite
from interp import load
from interp.checkpoint import list_checkpoints
from interp.catalog import PRETRAINED_DIR, shipped, summary
from interp.pretrained import model_card, ship, train_command
from tests.cli import run_cli

SHIPPED = shipped()
SERIES = [name for name, path in SHIPPED.items() if len(list_checkpoints(path)) >= 3]


def test_one_model_per_task_and_architecture_and_a_checkpoint_series():
    cells = {(summary(p)["task"], summary(p)["arch"]) for name, p in SHIPPED.items() if name not in SERIES}
    assert cells == {(t, a) for t in tasks.NAMES for a in models.ARCHS}
    assert [summary(SHIPPED[name])["task"] for name in SERIES] == ["bijection"]
    assert len(list_checkpoints(SHIPPED[SERIES[0]])) >= 20


def test_shipped_models_fit_the_size_budget_and_carry_no_resume_state():
    files = [p for p in PRETRAINED_DIR.rglob("*") if p.is_file()]
    # a clone stays small: 35 models of about 2 MB each and one checkpoint series (raised from 40 MB when
    # the four HMM models of the equal search joined, to 52 MB for the four regression ones, and to 67 MB for the
    # eight process models, 1.8 MB each)
    assert sum(p.stat().st_size for p in files) <= 67e6
    assert not [p for p in files if p.name == "resume.safetensors" or ".tmp" in p.name]


@pytest.mark.parametrize("name", SHIPPED)
def test_model_card_is_the_one_written_from_run_json(name):
    path = SHIPPED[name]
    record = json.loads((path / "run.json").read_text())
    assert record["status"] == "finished" or (record["status"] == "stopped" and record["final_measured_on"] == "cpu")
    card = (path / "README.md").read_text()
    expected = model_card(name, record, "cpu", [p for _, p in list_checkpoints(path)])
    assert card.startswith(expected)  # a maintainer's note may follow
    assert train_command(record, "cpu") in card and f"{record['train']['steps']:,} steps" in card
    if record["status"] == "stopped":
        assert f"Stopped at step {record['stopped_at']:,}" in card


@pytest.mark.slow  # each model on its recorded held-out batch, 10-40 s each: the slow suite's models (tests/tiny.py)
@pytest.mark.parametrize("name", slow_suite(SHIPPED))
def test_shipped_weights_reproduce_the_recorded_final_metrics(name):
    """The trainer's last evaluation (same held-out batch) recomputed from the shipped final checkpoint."""
    path = SHIPPED[name]
    record = json.loads((path / "run.json").read_text())
    model = load(name)
    assert model.step == record.get("stopped_at", record["train"]["steps"])
    batch = held_out_batch(model.task, record["train"]["eval_size"], record["train"]["seed"])
    ours = measure(model, batch)
    for key, value in record["final"].items():
        # accuracy is an argmax: a near-tie may flip under float rounding (the bijection Mamba was
        # trained with an earlier scan whose summation order differs), one query in ~40k moves it 2.6e-5
        tolerance = dict(abs_tol=1e-3) if key == "accuracy" else dict(rel_tol=1e-4, abs_tol=1e-6)
        assert math.isclose(ours[key], value, **tolerance), (key, ours[key], value)


def test_interp_list_shows_every_shipped_model(capsys):
    listed = run_cli(capsys, "list")
    assert listed.code == 0
    for name in SHIPPED:
        assert name in listed.out


def test_ship_copies_a_finished_run_with_its_card_and_refuses_an_unfinished_one(tmp_path, capsys):
    run = tmp_path / "runs" / "tiny"
    done = run_cli(capsys, "train", "--out", run, "--steps", "30", "--checkpoint-every", "10", "-M", "d_model=16",
                   "-M", "n_heads=2")
    assert done.code == 0, done.err
    dest = ship(run, "tiny-series", all_checkpoints=True, dest_root=tmp_path / "pretrained")
    assert [s for s, _ in list_checkpoints(dest)] == [0, 10, 20, 30]
    card = (dest / "README.md").read_text()
    assert "interp train --task bijection --arch transformer --preset cpu -M d_model=16 -M n_heads=2 --steps 30 " \
           "--checkpoint-every 10" in card
    assert "All 4 checkpoints are shipped (steps 0, 10, 20, 30" in card
    assert torch.equal(load(dest).W_E, load(run).W_E)
    final_only = ship(run, "tiny", dest_root=tmp_path / "pretrained")
    assert [s for s, _ in list_checkpoints(final_only)] == [30]
    record = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(dict(record, status="running")))
    with pytest.raises(Exception, match="has not finished training"):
        ship(run, "again", dest_root=tmp_path / "pretrained")


def test_ship_at_a_checkpoint_takes_a_stopped_run_as_it_stood_there(tmp_path, capsys):
    """A long run stopped before its planned end ships from one of its checkpoints: that checkpoint and
    the ones before it, the curve up to it, ``final`` measured from it (as the trainer measures), a card
    that says where it stopped; a step without a checkpoint is refused with the steps there are."""
    run = tmp_path / "runs" / "long"
    done = run_cli(capsys, "train", "--out", run, "--steps", "40", "--checkpoint-every", "10", "--eval-every", "10",
                   "-M", "d_model=16", "-M", "n_heads=2")
    assert done.code == 0, done.err
    record = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(dict(record, status="running")))  # as a run killed mid-way
    dest = ship(run, "long-at-20", all_checkpoints=True, dest_root=tmp_path / "pretrained", at_step=20)
    assert [s for s, _ in list_checkpoints(dest)] == [0, 10, 20]
    shipped_record = json.loads((dest / "run.json").read_text())
    assert shipped_record["status"] == "stopped" and shipped_record["stopped_at"] == 20
    curve = [json.loads(line) for line in (dest / "metrics.jsonl").read_text().splitlines()]
    assert curve[-1]["step"] == 20 and all(row["step"] <= 20 for row in curve)
    for key, value in shipped_record["final"].items():  # the trainer's evaluation at step 20, same batch
        assert math.isclose(curve[-1][f"eval_{key}"], value, rel_tol=1e-5, abs_tol=1e-7), key
    card = (dest / "README.md").read_text()
    assert "Stopped at step 20 (" in card and "of the planned 40 steps" in card and "Held-out metrics at step 20, measured on the CPU when shipped (" in card
    assert load(dest).step == 20
    from interp.catalog import summary
    listed = summary(dest)  # what `interp list` prints of it: the steps it trained, and that it stopped
    assert (listed["steps"], listed["planned"], listed["stopped"]) == (20, 40, True)
    with pytest.raises(Exception, match="no checkpoint at step 25; it has steps 0, 10, 20, 30, 40"):
        ship(run, "nowhere", dest_root=tmp_path / "pretrained", at_step=25)


@pytest.mark.slow
@pytest.mark.parametrize("name", slow_suite(SHIPPED))
def test_every_analysis_runs_on_every_shipped_model(name):
    """Each analysis runs, or refuses exactly when its declared requirements say it must (nothing else)."""
    model = load(name)  # loaded by name, as a user would: frame-precision finds the run's checkpoints
    for analysis in analyses.REGISTRY.values():
        subject = [model, load(name)] if analysis.multi_model else model
        # the interventions run one forward pass per site and position: a few pairs show they run
        few = analysis.requires and "corruption" in analysis.requires
        options = {"n": 8 if few else 64} if "n" in analysis.defaults() else {}
        if "n_fit" in analysis.defaults():  # the Jacobian lens: one backward pass per dimension per fitting batch
            options["n_fit"] = 8
        if "moved" in analysis.defaults():  # content-addressing: one forward pass per sequence per destination slot
            options["moved"] = 8
        unmet = analysis.unmet(model)
        if unmet:
            with pytest.raises(AnalysisError, match=re.escape(unmet[0])):
                analysis(subject, **options)
            continue
        result = analysis(subject, **options)
        assert result.metrics and result.figures, analysis.name


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name in slow_suite(SHIPPED) if summary(SHIPPED[name])["arch"] == "transformer"])
def test_the_advantage_law_holds_on_every_head_of_the_shipped_attention_models(name):
    metrics = analyses.run("advantage-law", load(name), n=32).metrics
    assert metrics["holds"] and metrics["max_relative_error"] <= 1e-6, (name, metrics["max_relative_error"])
    assert all(len(row) == load(name).cfg.n_heads for row in metrics["score_error"])
