"""interp sweep: break points on known curves, and a real (tiny) sweep that resumes and feeds compare."""
import json
from pathlib import Path

import pytest

import analyses
import models
import tasks
from interp.errors import UserError
from interp.sweep import Sweep, break_point, grid_figure, parse_axis


def test_break_points_of_known_curves():
    assert break_point([(4, 1.0), (8, 0.95), (16, 0.5), (32, 0.99)], "min", 0.9) == dict(
        value=16, status="breaks", last_pass=8)  # the first failure counts, a later recovery does not
    assert break_point([(8, 0.01), (4, 0.02)], "max", 0.05) == dict(value=None, status="beyond the tested range",
                                                                    last_pass=8)
    assert break_point([(4, 0.2), (8, 0.1)], "max", 0.05)["status"] == "fails at every value tested"
    assert break_point([(4, 0.9)], "min", 0.9)["value"] is None  # the threshold itself passes


@pytest.mark.parametrize("spec", ["N", "N=", "=4,8", "N=a,b", "N=4;8"])
def test_bad_axes_are_refused(spec):
    with pytest.raises(UserError, match="--axis must be SETTING=V1,V2"):
        parse_axis(spec)


def test_bad_settings_are_refused_before_training(tmp_path):
    with pytest.raises(UserError, match="unknown task"):
        Sweep("nope", "V=3", ("transformer",), tmp_path)
    with pytest.raises(UserError, match="unknown architecture"):
        Sweep("bijection", "V=3", ("gpt",), tmp_path)
    with pytest.raises(UserError, match="V=1: bijection"):
        Sweep("bijection", "V=1,3", ("transformer",), tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_tiny_sweep_resumes_and_feeds_the_matrix(tmp_path, capsys):
    out = tmp_path / "sweep"
    job = Sweep("bijection", "V=3,4", ("transformer", "mlp"), out, steps=20, task_options=dict(L=2), n=64)
    first = job.execute(progress=False)
    assert first["complete"] and len(first["points"]) == 4
    assert first["budget"]["steps"] == 20 and first["metric"] == "entropy_mae_bits" and first["axis"] == "V"
    assert {p["task"]["V"] for p in first["points"]} == {3, 4} and {p["task"]["L"] for p in first["points"]} == {2}
    for arch in ("transformer", "mlp"):  # equal capacity: the mlp matched to the transformer on each task
        by_value = {p["value"]: p["n_params"] for p in first["points"] if p["arch"] == arch}
        assert set(by_value) == {3, 4}
    ref = {p["value"]: p["n_params"] for p in first["points"] if p["arch"] == "transformer"}
    for p in first["points"]:
        assert abs(p["n_params"] - ref[p["value"]]) <= 0.05 * ref[p["value"]]
    for name in ("sweep.json", "sweep.pdf", "sweep.html", "sweep-curves.png"):
        assert (out / name).stat().st_size > 0
    assert (out / "sweep.pdf").read_bytes().startswith(b"%PDF")
    # a second run reads every point back; a lost point.json is remeasured from its finished run
    (out / "runs" / "mlp-V4" / "point.json").unlink()
    mtime = (out / "runs" / "transformer-V3" / "run.json").stat().st_mtime
    again = Sweep("bijection", "V=3,4", ("transformer", "mlp"), out, steps=20, task_options=dict(L=2), n=64)
    second = again.execute(progress=False)
    assert (out / "runs" / "transformer-V3" / "run.json").stat().st_mtime == mtime
    assert [p["metric"] for p in second["points"]] == pytest.approx([p["metric"] for p in first["points"]])
    # the primitives matrix takes the curve: each cell states where the architecture breaks
    model = models.build("transformer", tasks.make("bijection", V=3, L=2))
    result = analyses.run("compare", [model], n=32, sweeps=str(out))
    cell = result.metrics["primitives"]["mlp"]["accumulation"]
    assert cell["status"] == "not measured" and cell["curve"]["axis"] == "V"
    assert cell["curve"]["budget_steps"] == 20
    # the cell's text is the break point of the mlp's measured curve, worked out here from its points
    threshold = second["threshold"]
    failing = sorted(p["value"] for p in second["points"] if p["arch"] == "mlp" and p["metric"] > threshold)
    expected = f"breaks at V={failing[0]}" if failing else "holds to V=4"
    assert cell["curve"]["text"] == expected
    with pytest.raises(analyses.AnalysisError, match="is not a sweep result"):
        analyses.run("compare", [model], sweeps=str(tmp_path / "none"))


def test_a_grid_sweep_takes_one_lr_and_curriculum_for_every_point_and_draws_each_cell(tmp_path):
    out = tmp_path / "grid"
    summary = Sweep("bijection", "V=3,4", ("mlp",), out, widths=(8, 16), steps=5, task_options=dict(L=2), n=16,
                    lr=1e-3, curriculum=[[2, {"L": 1}]]).execute(progress=False)
    assert summary["budget"]["lr"] == 1e-3 and summary["budget"]["curriculum"] == [[2, {"L": 1}]]
    for point in summary["points"]:  # every run trained on exactly that budget
        train = json.loads((Path(point["run"]) / "run.json").read_text())["train"]
        assert (train["lr"], train["curriculum"], train["steps"]) == (1e-3, [[2, {"L": 1}]], 5)
    assert (out / "sweep-grid.png").stat().st_size > 0
    fig = grid_figure([summary])
    heat = fig.data[0]
    assert list(heat.x) == ["3", "4"] and list(heat.y) == ["8", "16"]
    cell = {(p["width"], p["value"]): p["metric"] for p in summary["points"]}
    assert [list(row) for row in heat.z] == [[cell[(w, v)] for v in (3, 4)] for w in (8, 16)]
    assert heat.text[1][0] == f"{cell[(16, 3)]:.3f}"
    with pytest.raises(UserError, match="drop --widths, --steps, --batch-size, --lr"):
        Sweep(None, "N=1,2", (), out, runs=("recall-mlp-cpu",), lr=1e-3)


def tiny_run(folder, task, arch, **task_settings):
    from interp.train import Trainer, TrainSettings

    t = tasks.make(task, **task_settings)
    Trainer(folder, t.config(), arch, models.model_config(arch, "cpu", t),
            TrainSettings(steps=10, batch_size=8, warmup=2, eval_size=16), progress=False).run()
    return str(folder)


def test_an_evaluated_sweep_measures_trained_runs_across_the_axis(tmp_path):
    runs = [tiny_run(tmp_path / f"rec-{arch}", "recall", arch, N=4, N_min=2, n_keys=8, n_values=8, queries=2,
                     fillers=1, gap=1) for arch in ("transformer", "lstm")]
    out = tmp_path / "sweep"
    summary = Sweep(None, "N=1,2,4", (), out, runs=tuple(runs), n=32).execute(progress=False)
    assert summary["mode"] == "evaluated" and summary["task"] == "recall" and summary["archs"] == ["transformer", "lstm"]
    assert summary["budget"]["rec-lstm"]["steps"] == 10
    points = summary["points"]
    assert len(points) == 6 and {p["curve"] for p in points} == {"rec-transformer", "rec-lstm"}
    # N is the number of pairs in the same table: the length, and so every query position, stays
    lengths = {tasks.from_config(p["task"]).seq_len for p in points}
    assert lengths == {tasks.from_config(points[0]["trained_task"]).seq_len}
    assert {(p["task"]["N"], p["task"]["N_min"], p["task"]["slots"]) for p in points} == {(1, 1, 4), (2, 2, 4), (4, 4, 4)}
    assert set(summary["break_points"]["lstm"]) == {"rec-lstm"}
    cached = sorted((out / "evaluated").iterdir())
    assert len(cached) == 6
    again = Sweep(None, "N=1,2,4", (), out, runs=tuple(runs), n=32).execute(progress=False)
    assert again["points"] == points
    # what cannot be measured is refused up front
    with pytest.raises(UserError, match="measures the runs as trained"):
        Sweep(None, "N=1,2", (), out, runs=tuple(runs), steps=5)
    with pytest.raises(UserError, match="N=8 needs 40 positions; rec-transformer has n_ctx=24"):
        Sweep(None, "N=2,8", (), out, runs=tuple(runs))  # a larger table is longer: the lstm could, the transformer not
    with pytest.raises(UserError, match="N=9: recall: N=9 bindings need N distinct keys"):
        Sweep(None, "N=9", (), out, runs=tuple(runs[1:]))
    with pytest.raises(UserError, match="changes the vocabulary"):
        Sweep(None, "n_keys=9", (), out, runs=tuple(runs))
    with pytest.raises(UserError, match="is not a run folder"):
        Sweep(None, "N=1", (), out, runs=(str(tmp_path / "none"),))


def test_widths_give_one_curve_per_width_at_that_d_model(tmp_path):
    job = Sweep("bijection", "V=3", ("transformer", "lstm"), tmp_path / "grid", widths=(8, 16), steps=5,
                task_options=dict(L=2), model_options=dict(n_heads=2), n=16)
    summary = job.execute(progress=False)
    assert set(summary["break_points"]["lstm"]) == {"8", "16"} and summary["widths"] == [8, 16]
    for arch in ("transformer", "lstm"):
        runs = {p["width"]: json.loads((tmp_path / "grid" / "runs" / f"{arch}-V3-d{p['width']}" / "run.json").read_text())
                for p in summary["points"] if p["arch"] == arch}
        assert {w: r["model"]["d_model"] for w, r in runs.items()} == {8: 8, 16: 16}
        assert runs[8]["n_params"] < runs[16]["n_params"]


def test_a_model_setting_no_swept_architecture_has_is_refused(tmp_path):
    with pytest.raises(UserError, match="-M colour: no swept architecture has that setting"):
        Sweep("bijection", "V=3", ("transformer", "lstm"), tmp_path, model_options=dict(colour="red"))
    assert not list(tmp_path.iterdir())


def test_the_matrix_takes_the_curve_that_holds_furthest_when_an_architecture_has_several():
    from analyses.compare import curve_cell

    points = {"breaks-early": dict(value=10, status="breaks", last_pass=5),
              "holds": dict(value=None, status="beyond the tested range", last_pass=50),
              "breaks-late": dict(value=40, status="breaks", last_pass=30)}
    sweep = dict(axis="K", values=[5, 10, 30, 40, 50], mode="evaluated", threshold=0.05, complete=True,
                 budget={name: dict(steps=1, batch_size=2) for name in points},
                 break_points={"transformer": points})
    assert curve_cell(sweep, "transformer")["width"] == "holds"
    del points["holds"]
    assert curve_cell(sweep, "transformer")["width"] == "breaks-late"
    points["preset"] = dict(value=5, status="fails at every value tested", last_pass=None)
    assert curve_cell(dict(sweep, mode="trained", budget=dict(steps=1, batch_size=2)), "transformer")["width"] == "preset"
