"""interp reproduce: reuses finished runs, fills the paper's rows from the analyses, resumes."""
import dataclasses
import json
from pathlib import Path

import pytest

import models
import tasks
from interp.recipe import stated
from interp.reproduce import Reproduction, plan, rows
from tests.cli import run_cli


@pytest.fixture
def tiny_recipes(monkeypatch):
    """The cpu preset's recipes shrunk to seconds: 20 steps, width 16 (2 heads for the transformer)."""
    real = Reproduction.recipe

    def tiny(self, task, arch):
        spec = real(self, task, arch)
        model = dict(spec.model, d_model=16, n_layers=2, **({"n_heads": 2} if "n_heads" in spec.model else {}))
        return stated(spec.task, arch, model, dataclasses.replace(spec.train, steps=20))

    monkeypatch.setattr(Reproduction, "recipe", tiny)


def test_plan_covers_every_row_the_tasks_declare():
    steps = plan(tasks.NAMES, models.ARCHS)
    analysed = {s[1:] for s in steps if s[0] == "analyse"}
    table = rows(tasks.NAMES, models.ARCHS)
    for row in table:
        assert (row.task, row.arch, row.analysis) in analysed
    assert sum(s[0] == "train" for s in steps) == len(tasks.NAMES) * len(models.ARCHS)
    # every task's paper rows are in the table: those for one architecture once, the others once per architecture
    for name, cls in tasks.REGISTRY.items():
        declared = sum(1 if r.arch else len(models.ARCHS) for r in cls.paper_rows)
        assert sum(r.task == name for r in table) == declared
    assert {r.analysis for r in table} <= set(__import__("analyses").NAMES)


@pytest.mark.slow  # trains every row of the table, then reruns
def test_reproduce_trains_fills_rows_and_skips_done_work(tmp_path, capsys, tiny_recipes):
    runs, out = tmp_path / "runs", tmp_path / "repro"
    args = ["reproduce", "--only", "bijection", "--archs", "transformer,mlp", "--runs", runs, "--out", out]
    first = run_cli(capsys, *args)
    assert first.code == 0, first.err
    table = json.loads((out / "reproduction.json").read_text())
    by_key = {(r["arch"], r["metric"]): r for r in table["rows"]}
    calibration = json.loads((out / "bijection-transformer-cpu" / "calibration.json").read_text())["metrics"]
    row = by_key[("transformer", "entropy_mae_bits")]
    assert row["ours"] == calibration["entropy_mae_bits"] and row["paper"] == 0.007
    assert abs(row["ratio"] - row["ours"] / 0.007) < 1e-12
    assert by_key[("mlp", "entropy_mae_bits")]["paper"] == 1.85
    assert ("transformer", "min_block_ratio") in by_key and ("transformer", "layer0_trained") in by_key
    assert (out / "bijection-transformer-cpu" / "head-ablation.pdf").stat().st_size > 0
    assert list((out / "bijection-transformer-cpu").glob("head-ablation*.png"))
    markdown = (out / "reproduction.md").read_text()
    assert "| bijection V=20, entropy MAE (bits) | mlp | 1.85 |" in markdown
    png = by_key[("transformer", "hypothesis_frame_head.mae_ratio_to_intact")]["png"]
    assert (out / png).stat().st_size > 0 and f"· [png]({png})" in markdown
    assert table["runs"] == 2 and table["train_minutes"] > 0 and "min for 2 runs" in markdown
    # a second run reuses the finished runs and the analyses written for their final checkpoints
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.json") if p.name != "reproduction.json"}
    again = run_cli(capsys, *args)
    assert again.code == 0, again.err
    assert stamps == {p: p.stat().st_mtime_ns for p in stamps}
    # a checkpoint replaced in place (same path and step, as when a run is retrained or a model
    # re-shipped) is analysed again: here the MLP's final weights become another seed's
    final = runs / "bijection-mlp-cpu" / "checkpoints" / "step-00000020.safetensors"
    other = run_cli(capsys, "train", "--task", "bijection", "--arch", "mlp", "--steps", "20", "--seed", "1",
                    "-M", "d_model=16", "--out", tmp_path / "other")
    assert other.code == 0, other.err
    final.write_bytes((tmp_path / "other" / "checkpoints" / "step-00000020.safetensors").read_bytes())
    before = by_key[("mlp", "entropy_mae_bits")]["ours"]
    assert run_cli(capsys, *args).code == 0
    rows = json.loads((out / "reproduction.json").read_text())["rows"]
    after = {(r["arch"], r["metric"]): r for r in rows}[("mlp", "entropy_mae_bits")]["ours"]
    assert after != before
    record = json.loads((runs / "bijection-mlp-cpu" / "run.json").read_text())
    assert record["status"] == "finished" and record["train"]["steps"] == 20


def test_reproduce_refuses_a_run_trained_with_other_settings(tmp_path, capsys, tiny_recipes):
    runs = tmp_path / "runs"
    done = run_cli(capsys, "train", "--task", "bijection", "--arch", "mlp", "--out", runs / "bijection-mlp-cpu",
                   "--steps", "10", "-M", "d_model=16", "-M", "n_layers=2")
    assert done.code == 0, done.err
    before = sorted(p.name for p in runs.rglob("*"))
    bad = run_cli(capsys, "reproduce", "--only", "bijection", "--archs", "mlp", "--runs", runs, "--out", tmp_path / "o")
    assert bad.code == 1 and "Traceback" not in bad.err
    assert "bijection-mlp-cpu was not trained with the cpu preset (train.steps: 10 (preset 20))" in bad.err
    assert "move it away or pass --runs" in bad.err
    assert sorted(p.name for p in runs.rglob("*")) == before


def test_reproduce_rejects_unknown_names(tmp_path, capsys):
    bad = run_cli(capsys, "reproduce", "--only", "bijection,maze", "--runs", tmp_path, "--out", tmp_path / "o")
    assert bad.code == 1 and "unknown task(s) maze" in bad.err and "Traceback" not in bad.err
    bad = run_cli(capsys, "reproduce", "--archs", "rnn", "--runs", tmp_path, "--out", tmp_path / "o")
    assert bad.code == 1 and "unknown architecture(s) rnn" in bad.err


@pytest.mark.slow  # every diagnostic on every shipped model: a minute and more
def test_reproduce_from_the_shipped_models_trains_nothing(tmp_path, capsys):
    from interp.catalog import PRETRAINED_DIR

    import shutil

    figures = PRETRAINED_DIR.parent.parent / "figures" / "readme" / "reproduction"
    before = {p: p.stat().st_mtime_ns for p in PRETRAINED_DIR.rglob("*")}
    # the shipped result of one cell is already on file (as after an earlier run): it is read back, not recomputed;
    # the lineage's row is computed here and must equal its shipped result
    kept = shutil.copytree(figures / "recall-transformer-cpu", tmp_path / "recall-transformer-cpu")
    saved = json.loads((kept / "content-addressing.json").read_text())  # made in another checkout: its weights here
    saved["checkpoint"] = str(PRETRAINED_DIR.parent.parent / saved["checkpoint"][saved["checkpoint"].index("models/"):])
    (kept / "content-addressing.json").write_text(json.dumps(saved))
    stamp = (kept / "content-addressing.json").stat().st_mtime_ns
    done = run_cli(capsys, "reproduce", "--runs", "shipped", "--only", "recall", "--archs", "transformer",
                   "--out", tmp_path)
    assert done.code == 0, done.err
    assert (kept / "content-addressing.json").stat().st_mtime_ns == stamp
    accuracy, long_run, worst_slot = json.loads((tmp_path / "reproduction.json").read_text())["rows"]
    assert long_run["variant"] and long_run["run"].endswith("recall-transformer-plain-mix")  # the lineage's row too
    assert long_run["ours"] == json.loads((figures / "recall-transformer-plain-mix" / "content-addressing.json"
                                           ).read_text())["metrics"]["accuracy_full_table"]
    shipped = json.loads((figures / "recall-transformer-cpu" / "content-addressing.json").read_text())["metrics"]
    assert accuracy["metric"] == "accuracy_full_table" and accuracy["ours"] == shipped["accuracy_full_table"]
    assert worst_slot["metric"] == "per_slot_min" and worst_slot["ours"] == shipped["per_slot_min"]
    assert accuracy["train_steps"] == 2000 and "64 pairs" in accuracy["experiment"]
    assert "content-addressing: accuracy_full_table" in done.out and "100%" in done.out  # the table, printed
    assert before == {p: p.stat().st_mtime_ns for p in PRETRAINED_DIR.rglob("*")}


def test_a_cell_is_analysed_only_for_the_rows_it_fills():
    """recall's rows read content-addressing: no calibration of 64-pair tables for nothing (a third of the
    time of `--runs shipped`); a task's calibration rows still come first."""
    steps = plan(("recall", "bijection"), ("mamba", "transformer"))
    assert [s[3] for s in steps if s[0] == "analyse" and s[1] == "recall"] == ["content-addressing"] * 2
    assert [s[3] for s in steps if s[0] == "analyse" and s[1:3] == ("bijection", "transformer")] == [
        "calibration", "head-ablation", "key-orthogonality", "layer-ablation"]


@pytest.fixture
def shipped_like_table(tmp_path, monkeypatch):
    """The table written from made-up numbers for every row (no model is run)."""
    from interp.reproduce import dig

    values = {"accuracy_full_table": 0.0127, "per_slot_min": 0.979, "purity": 0.343, "entropy_mae_bits": 0.00091,
              "hypothesis_frame_head.mae_ratio_to_intact": 31.2, "min_block_ratio": 9.0}

    def saved(self, task, arch, name, run_dir=None):
        metrics = {}
        for row in rows((task,), (arch,)):
            if row.analysis == name:
                value, where = values.get(row.metric, 0.5), metrics
                *path, last = row.metric.split(".")
                for key in path:
                    where = where.setdefault(key, {})
                where[last] = value
                assert dig(metrics, row.metric) == value
        return dict(metrics=metrics, figures=["f"], seconds=1.0)

    monkeypatch.setattr(Reproduction, "saved", saved)
    monkeypatch.setattr(Reproduction, "record", lambda self, task, arch: {})
    job = Reproduction("cpu", tmp_path / "runs", tmp_path / "out", tasks.NAMES, models.ARCHS)
    return job.write_table()


def test_the_table_shows_paper_and_ours_in_one_unit_and_no_ratio_for_words(shipped_like_table):
    from interp.reproduce import markdown, text

    by = {(r["metric"], r["arch"]): r for r in shipped_like_table["rows"]}
    recall = by[("accuracy_full_table", "mamba")]
    assert recall["paper_text"] == "97.8%" and recall["unit"] == "percent" and recall["ours"] == 0.0127  # stored as is
    assert by[("per_slot_min", "transformer")]["unit"] == "percent"  # the same analysis's other row too
    clusters = by[("purity", "mamba")]
    assert clusters["paper_text"] == "5 clusters, one per hidden state" and clusters["ratio"] is None
    head = by[("hypothesis_frame_head.mae_ratio_to_intact", "transformer")]
    assert head["ratio"] is None and head["claim_holds"] is True
    assert by[("min_block_ratio", "transformer")]["claim_holds"] is False
    shown, md = text(shipped_like_table), markdown(shipped_like_table)
    for out in (shown, md):
        line = next(line for line in out.splitlines() if "97.8%" in line)
        assert "1.27%" in line and "0.0127" not in line and "0.013x" in line  # percent beside percent
        assert "content-addressing: accuracy_full_table" in line  # the metric named
        line = next(line for line in out.splitlines() if "5 clusters" in line)
        assert "0.343" in line and "x " not in line.replace("0.343", "") and "belief-clusters: purity" in line
        assert "claim holds (31.2 > 10)" in out and "claim fails (9 <= 10)" in out
    assert shown.splitlines()[0].split() == ["experiment", "arch", "paper", "ours", "ours", "/", "paper", "training",
                                             "metric", "(analysis:", "key)"]
    assert max(len(line.split("  ")[0]) for line in shown.splitlines()) <= 52  # the experiment column wraps


def test_every_shipped_binding_model_answers_the_paper_s_row_with_its_own_budget(tmp_path, monkeypatch):
    """--runs shipped: the row that asks for variants is measured on every other shipped model of the cell too,
    each listed below the preset's with its steps, batch and whether it went on from another run's weights."""
    from interp.catalog import PRETRAINED_DIR
    from interp.reproduce import markdown, text

    job = Reproduction("cpu", PRETRAINED_DIR, tmp_path / "out", ("recall",), ("transformer", "mamba", "lstm"))
    assert {cell: [f.name for f in found] for cell, found in job.variants.items()} == {
        ("recall", "transformer"): ["recall-transformer-plain-mix"],
        ("recall", "mamba"): ["recall-mamba-plain-mix", "recall-mamba-plain-scratch", "recall-mamba-shift-mix"],
        ("recall", "lstm"): []}
    assert Reproduction("cpu", tmp_path, tmp_path / "o", ("recall",), ("mamba",)).variants == {}  # a user's runs

    def saved(self, task, arch, name, run_dir=None):
        value = {"recall-mamba-plain-mix": 0.92}.get(getattr(run_dir, "name", None), 0.0127)
        return dict(metrics=dict(accuracy_full_table=value, per_slot_min=0.5), figures=["f"], seconds=1.0)

    monkeypatch.setattr(Reproduction, "saved", saved)
    table = job.write_table()
    mamba = [r for r in table["rows"] if r["arch"] == "mamba"]
    assert [r["experiment"].strip()[:30] for r in mamba] == [
        "associative recall (64 pairs f", "the same, recall-mamba-plain-m", "the same, recall-mamba-plain-s",
        "the same, recall-mamba-shift-m"]
    preset, plain = mamba[0], mamba[1]
    assert (preset["train_steps"], preset["train_batch_size"], preset["continued"]) == (2000, 64, False)
    assert plain["ours"] == 0.92 and plain["ratio"] == pytest.approx(0.92 / 0.978) and plain["continued"] is True
    assert plain["sequences_before"] == 2_982_400  # what the weights it went on from had seen
    scratch = json.loads((PRETRAINED_DIR / "recall-mamba-plain-scratch" / "run.json").read_text())
    assert (mamba[2]["continued"], mamba[2]["train_steps"]) == (False, scratch["stopped_at"])  # from scratch, as far
    # as it had trained when shipped
    transformer = next(r for r in table["rows"] if r["experiment"].strip() == "the same, recall-transformer-plain-mix")
    assert transformer["train_steps"] == 3200  # shipped as it stood at a checkpoint, not its planned 100,000
    line = next(line for line in markdown(table).splitlines() if "recall-mamba-plain-mix" in line)
    assert "92%" in line and "continued from another run's weights" in line and " x 64" in line
    assert any("recall-mamba-plain-mix" in line and "92%" in line for line in text(table).splitlines())


def test_the_listing_says_which_metric_its_numbers_are():
    """`interp list`'s shipped-model numbers are each run's last training evaluation (recall: tables of 1-64
    pairs), not the reproduction table's metric; the listing names both."""
    from interp import manifest

    listing = manifest.current()["list"]  # the shipped listing when current (regenerated with the sources)
    head = listing[listing.index("\nshipped models"):].split("\n  recall-")[0]
    assert "entropy_mae_bits" in head and "accuracy_full_table" in head and "interp reproduce" in head
    recall = next(line for line in listing.splitlines() if line.startswith("  recall-mamba-cpu"))
    assert "eval MAE" in recall and "eval accuracy" in recall


def test_the_default_table_is_the_paper_s_tasks_and_every_shipped_model_there_fits_the_preset():
    """`interp reproduce --runs shipped` with no --only: the tasks with paper rows, whose shipped models were
    trained on the cpu preset (the process tasks' shipped models were trained at their own search's rate)."""
    from interp.catalog import PRETRAINED_DIR
    from interp.reproduce import paper_tasks

    assert "mess3" not in paper_tasks() and {"bijection", "hmm", "recall", "regression"} <= set(paper_tasks())
    job = Reproduction("cpu", PRETRAINED_DIR, Path("unused"), paper_tasks(), models.ARCHS)
    for step in job.steps:
        if step[0] == "train":
            job.check_recipe(step[1], step[2], job.record(step[1], step[2]))
