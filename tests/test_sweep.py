"""interp sweep: break points on known curves, and a real (tiny) sweep that resumes and feeds compare."""
import json
from pathlib import Path

import pytest

import analyses
import models
import tasks
from interp.errors import UserError
from interp.sweep import Sweep, break_point, grid_figure, parse_axis, parse_rates, rate_counts


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
    with pytest.raises(UserError, match="measures the runs as trained; drop --lr, or drop --runs"):
        Sweep(None, "N=1,2", (), out, runs=("recall-mlp-cpu",), lr=1e-3)


def tiny_run(folder, task, arch, **task_settings):
    from interp.recipe import stated
    from interp.train import Trainer, TrainSettings

    t = tasks.make(task, **task_settings)
    Trainer.start(folder,
                  stated(t.config(), arch, models.model_config(arch, "cpu", t),
                         TrainSettings(steps=10, batch_size=8, warmup=2, eval_size=16)), progress=False).run()
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


def test_of_several_sweeps_of_one_primitive_the_matrix_takes_the_one_where_the_architecture_holds_furthest():
    from analyses.compare import curve_cell

    def grid(folder, breaks):
        return dict(axis="N", values=[4, 8, 16], mode="trained", threshold=0.9, complete=True, folder=folder,
                    budget=dict(steps=12000, batch_size=64), lrs=[1e-3, 3.2e-3], seeds=[0, 1],
                    lrs_by_arch={"transformer": [3.2e-4, 1e-3, 3.2e-3]},
                    break_points={arch: {"preset": dict(value=value, status="breaks" if value else "beyond the "
                                         "tested range", last_pass=8 if value else 16)}
                                  for arch, value in breaks.items()})

    plain = grid("ladder/plain", dict(transformer=16, mamba=16))
    shift = grid("ladder/shift", dict(transformer=None, mamba=16))
    controls = grid("ladder/controls", dict(lstm=8))
    sweeps = [plain, shift, controls]
    tf, mamba, lstm = (curve_cell(sweeps, arch) for arch in ("transformer", "mamba", "lstm"))
    assert tf["sweep"] == "ladder/shift" and tf["text"] == "holds to N=16" and tf["lrs"] == [3.2e-4, 1e-3, 3.2e-3]
    assert mamba["sweep"] == "ladder/plain" and mamba["text"] == "breaks at N=16" and mamba["lrs"] == [1e-3, 3.2e-3]
    assert lstm["sweep"] == "ladder/controls" and mamba["seeds"] == [0, 1]
    assert curve_cell(sweeps, "mlp") is None


def test_a_grid_of_rates_and_seeds_stops_each_point_at_the_threshold_and_keeps_its_curve(tmp_path):
    out = tmp_path / "ladder"
    # entropy MAE below 50 bits: every evaluation passes, so every point stops at its first one (step 4)
    job = Sweep("bijection", "V=3", ("mlp",), out, steps=12, batch_size=8, task_options=dict(L=2), n=16,
                lr="1e-3,3e-3", seeds=(0, 1), threshold=50.0, eval_every=4, curriculum=[])
    summary = job.execute(progress=False)
    assert summary["lrs"] == [1e-3, 3e-3] and summary["seeds"] == [0, 1] and summary["stops_at_threshold"]
    assert len(summary["points"]) == 4 and summary["complete"]
    for point in summary["points"]:
        run = json.loads((Path(point["run"]) / "run.json").read_text())
        assert (run["train"]["lr"], run["train"]["seed"]) == (point["lr"], point["seed"])
        assert run["status"] == "finished" and run["stopped"]["step"] == 4 and "reached the threshold" in \
            run["stopped"]["reason"]
        assert point["sequences_to_threshold"] == 4 * 8 == point["train_sequences"] and point["stopped_at_step"] == 4
        assert point["budget_sequences"] == 12 * 8 and point["learning_curve"][0][0] == 32
        assert (Path(point["run"]) / "checkpoints" / "step-00000004.safetensors").exists()
    assert {Path(p["run"]).name for p in summary["points"]} == {
        f"mlp-V3-lr{lr}-seed{seed}" for lr in ("0.001", "0.003") for seed in (0, 1)}
    with pytest.raises(UserError, match="trained with other settings than this sweep gives it \\(train.decay: 1.0 in "
                                        "the run, 0.5 now\\)"):  # another command on the same folder
        Sweep("bijection", "V=3", ("mlp",), out, steps=12, batch_size=8, task_options=dict(L=2), n=16, decay=0.5,
              lr="1e-3,3e-3", seeds=(0, 1), threshold=50.0, eval_every=4, curriculum=[]).execute(progress=False)
    cell = summary["chosen"]["mlp"]["preset"]["3"]
    assert set(cell["by_lr"]) == {"0.001", "0.003"} and len(cell["metrics"]) == 2
    assert (out / "sweep-learning.png").stat().st_size > 0
    # a threshold never reached: the point trains its whole budget and says so
    never = Sweep("bijection", "V=3", ("mlp",), tmp_path / "never", steps=8, batch_size=8, task_options=dict(L=2),
                  n=16, threshold=0.0, eval_every=4, curriculum=[]).execute(progress=False)
    (point,) = never["points"]
    assert point["sequences_to_threshold"] is None and point["stopped_at_step"] is None
    assert point["train_sequences"] == 64 and point["best_reached"] == min(v for _, v in point["learning_curve"])
    assert [x for x, _ in point["learning_curve"]] == [32, 64]


def sweep_point(arch, lr, seed, metric, reached, validation=None):
    return dict(arch=arch, value=8, curve="preset", lr=lr, seed=seed, metric=metric, sequences_to_threshold=reached,
                learning_curve=[[100, validation if validation is not None else metric]])


def test_the_rate_is_chosen_by_sequences_to_the_threshold_on_the_validation_curves_and_ratios_span_seed_pairs(tmp_path):
    job = Sweep("recall", "N=8", ("transformer", "mamba"), tmp_path, steps=10, lr="1e-3,3e-3", seeds=(0, 1),
                threshold=0.9)
    results = [sweep_point("transformer", 1e-3, 0, 0.95, 1000), sweep_point("transformer", 1e-3, 1, 0.97, 3000),
               sweep_point("transformer", 3e-3, 0, 0.99, 4000), sweep_point("transformer", 3e-3, 1, 0.99, 4000),
               # mamba: the faster rate has one seed that never gets there, so the slower, surer one is chosen
               sweep_point("mamba", 1e-3, 0, 0.95, 5000), sweep_point("mamba", 1e-3, 1, 0.93, 7000),
               sweep_point("mamba", 3e-3, 0, 0.99, 1000), sweep_point("mamba", 3e-3, 1, None, None) | dict(
                   diverged="loss became nan at step 3", learning_curve=[])]
    chosen = job.select(results)
    tf, mamba = chosen["transformer"]["preset"]["8"], chosen["mamba"]["preset"]["8"]
    assert tf["lr"] == 1e-3 and tf["metric"] == pytest.approx(0.96) and tf["sequences_to_threshold"] == [1000, 3000]
    assert mamba["lr"] == 1e-3 and mamba["by_lr"]["0.003"]["diverged"] == 1 and mamba["by_lr"]["0.003"]["metric"] is None
    ratio = job.ratios(chosen)["mamba"]["preset"]["8"]
    assert ratio["over"] == "transformer" and ratio["ratio"] == pytest.approx(6000 / 2000)
    assert (ratio["low"], ratio["high"]) == (pytest.approx(5000 / 3000), pytest.approx(7000 / 1000))
    # without a threshold the validation metric decides, never the reported (test) metric
    plain = Sweep("recall", "N=8", ("transformer",), tmp_path, steps=10, lr="1e-3,3e-3")
    picked = plain.select([sweep_point("transformer", 1e-3, 0, 0.99, None, validation=0.5),
                           sweep_point("transformer", 3e-3, 0, 0.90, None, validation=0.6)])
    assert picked["transformer"]["preset"]["8"]["lr"] == 3e-3


@pytest.mark.parametrize("options, message", [
    (dict(lr="fast"), "--lr must be one or more comma-separated numbers"),
    (dict(seeds=("a",)), "--seeds must be one or more"),
    (dict(threshold=float("nan")), "--threshold must be a number"),
    (dict(eval_every=0), "--eval-every must be a whole number"),
    (dict(jobs=0), "--jobs must be a whole number"),
    (dict(curriculum="sparse-mix"), "has no curriculum named 'sparse-mix'"),
])
def test_bad_grid_settings_are_refused_before_training(tmp_path, options, message):
    with pytest.raises(UserError, match=message):
        Sweep("recall", "N=4,8", ("transformer",), tmp_path / "s", steps=10, **options)
    assert not (tmp_path / "s").exists()


def test_the_binding_recipe_is_built_for_each_points_table(tmp_path):
    job = Sweep("recall", "N=4,16", ("transformer",), tmp_path, steps=10, curriculum="dense-mix",
                task_options=dict(N_min=None, fillers=4, gap=2, queries=8))
    for value, sizes in ((4, [1, 2]), (16, [2, 4, 8])):
        ((end, mixture),) = job.point_budget(next(p for p in job.points() if p.value == value)).curriculum
        assert end == 10 and [stage.get("N") for stage in mixture] == sizes + [None, None]
        assert mixture[-1] == {} and mixture[-2] == dict(queries=value, gap=0, ask="every", p_unbound=0.0)
        assert all(stage["ask"] == "every" and stage["queries"] == stage["N"] for stage in mixture[:-2])
    # the key pool moves with the table (--axis-with), and a model with a position table gets one that holds the
    # longest stage (the full dense table asks all 16 keys: 116 tokens against the task's 106)
    ladder = Sweep("recall", "N=4,16", ("transformer",), tmp_path, steps=10, curriculum="dense-mix", decay=0.25,
                   task_options=dict(N_min=None, fillers=4, gap=2, queries=8), paired={"pool": "8,32"},
                   model_options=dict(positional="learned", shift=None))
    small, large = (next(p for p in ladder.points() if p.value == v) for v in (4, 16))
    assert ladder.task_at(small).pool == 8 and ladder.task_at(large).pool == 32 and ladder.budget.decay == 0.25
    task = ladder.task_at(large)
    assert task.seq_len == 106 and ladder.model_config(large, task)["n_ctx"] == 116
    assert ladder.model_config(small, ladder.task_at(small))["n_ctx"] is None  # the task's own length holds them all
    assert ladder.summary([])["paired_task_settings"] == {"pool": {"4": 8, "16": 32}}
    with pytest.raises(UserError, match="--axis-with pool: give one value per axis value"):
        Sweep("recall", "N=4,16", ("transformer",), tmp_path, steps=10, paired={"pool": "8"})
    with pytest.raises(UserError, match="task 'bijection' has no curriculum named 'dense-mix' \\(it names none\\)"):
        Sweep("bijection", "V=3", ("mlp",), tmp_path / "b", steps=10, curriculum="dense-mix")


@pytest.mark.slow  # two fresh interpreters import torch and train: about a minute
def test_two_workers_share_the_points_and_each_is_trained_once(tmp_path):
    out = tmp_path / "shared"
    summary = Sweep("bijection", "V=3,4", ("mlp",), out, steps=6, batch_size=8, task_options=dict(L=2), n=16,
                    seeds=(0, 1), curriculum=[], jobs=2).execute(progress=False)
    assert summary["complete"] and len(summary["points"]) == 4
    logs = [(out / "workers" / f"worker-{k}.log").read_text() for k in range(2)]
    trained = [line for log in logs for line in log.splitlines() if " training " in line]
    assert len(trained) == 4 and all(log.count(" training ") >= 1 for log in logs)  # both worked, none twice
    assert not list(out.glob("claims/*"))  # every claim let go


def test_the_bar_says_which_points_the_workers_train_and_how_far_each_has_come(tmp_path):
    """Between two finished points (an hour apart on a ladder) the bar names each point in training, its last step
    and evaluation; a point with its claim let go, or already measured, is not named."""
    sweep = Sweep("bijection", "V=3,4", ("mlp",), tmp_path, steps=6, task_options=dict(L=2), seeds=(0, 1),
                  curriculum=[], jobs=2)
    training, idle, measured = sweep.points()[:3]
    (tmp_path / "claims").mkdir()
    for point in (training, measured):
        run = sweep.run_dir(point)
        run.mkdir(parents=True)
        (tmp_path / "claims" / f"{run.name}.lock").write_text("")
        (run / "metrics.jsonl").write_text('{"step": 250, "loss": 1.0, "eval_entropy_mae_bits": 0.5}\n'
                                           '{"step": 300, "loss": 0.9}\n')
    (sweep.run_dir(measured) / "point.json").write_text("{}")
    metric = sweep.primitive.metric
    assert sweep.in_training() == f"{sweep.label(training)}: step 300, {metric} 0.500"
    assert sweep.label(idle) not in sweep.in_training()


def test_each_architecture_can_have_its_own_rates():
    archs = ("transformer", "mamba")
    assert parse_rates("1e-3,3e-3", archs) == {"transformer": (1e-3, 3e-3), "mamba": (1e-3, 3e-3)}
    assert parse_rates(("1e-3,3e-3", "transformer=3e-4,1e-3"), archs) == {
        "transformer": (3e-4, 1e-3), "mamba": (1e-3, 3e-3)}
    assert parse_rates(dict(transformer=[1e-3], mamba="3e-3,1e-2"), archs) == {
        "transformer": (1e-3,), "mamba": (3e-3, 1e-2)}
    assert parse_rates(None, archs) == {} and parse_rates((), archs) == {}


@pytest.mark.parametrize("spec, message", [
    (("1e-3", "3e-3"), "give the rates of every architecture once"),
    (("1e-3", "lstm=1e-3"), "'lstm' is not swept here"),
    (("transformer=1e-3", "transformer=3e-3", "mamba=1e-3"), "transformer has its rates twice"),
    (("1e-3", "transformer=fast"), "--lr transformer must be one or more comma-separated numbers, e.g. "
                                   "--lr transformer=1e-3"),
    (("transformer=1e-3",), "--lr gives no rates to mamba"),
])
def test_bad_rates_per_architecture_are_refused(spec, message):
    with pytest.raises(UserError, match=message):
        parse_rates(spec, ("transformer", "mamba"))


def test_a_rate_given_to_one_architecture_later_trains_only_its_new_points(tmp_path):
    out = tmp_path / "ladder"
    grid = dict(steps=8, batch_size=8, task_options=dict(L=2), n=16, threshold=50.0, eval_every=4, curriculum=[])
    first = Sweep("bijection", "V=3", ("mlp", "lstm"), out, lr="1e-3,3e-3", **grid).execute(progress=False)
    assert len(first["points"]) == 4
    stamps = {p["run"]: (Path(p["run"]) / "run.json").stat().st_mtime_ns for p in first["points"]}
    wider = Sweep("bijection", "V=3", ("mlp", "lstm"), out, lr=("1e-3,3e-3", "mlp=3e-4,1e-3,3e-3"), **grid)
    summary = wider.execute(progress=False)
    assert summary["lrs"] == [3e-4, 1e-3, 3e-3] and summary["complete"]
    assert summary["lrs_by_arch"] == {"mlp": [3e-4, 1e-3, 3e-3], "lstm": [1e-3, 3e-3]}
    assert sorted((p["arch"], p["lr"]) for p in summary["points"]) == [
        ("lstm", 1e-3), ("lstm", 3e-3), ("mlp", 3e-4), ("mlp", 1e-3), ("mlp", 3e-3)]
    # the four finished points are read back, untouched; only mlp at 3e-4 trained
    assert all((Path(run) / "run.json").stat().st_mtime_ns == stamp for run, stamp in stamps.items())
    assert (out / "runs" / "mlp-V3-lr0.0003").is_dir() and not (out / "runs" / "lstm-V3-lr0.0003").exists()
    assert set(summary["chosen"]["mlp"]["preset"]["3"]["by_lr"]) == {"0.0003", "0.001", "0.003"}
    assert set(summary["chosen"]["lstm"]["preset"]["3"]["by_lr"]) == {"0.001", "0.003"}
    assert rate_counts(summary) == "3 (mlp), 2 (lstm)" and rate_counts(first) == "2"


def test_the_learning_figure_has_a_log_axis_with_a_few_short_ticks():
    from interp.sweep import log_ticks, short_count

    assert log_ticks(6400, 80000) == [10000, 20000, 50000]
    assert log_ticks(6400, 800000) == [10000, 100000]  # more than four: the powers of ten alone
    assert log_ticks(3, 4) == [3]  # nothing between: the low end
    assert [short_count(n) for n in (500, 20000, 1.5e6)] == ["500", "20k", "1.5M"]
