"""The figures the results pages show say one thing: at most MAX_SERIES series in any panel. Each figure here is
built by the code that draws it, from the shipped records it is drawn from (no training, no model), so a figure
that grows past the limit fails here before it reaches a page."""
import json
import runpy
from functools import lru_cache
from pathlib import Path

import plotly.graph_objects as go
import pytest

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "figures" / "readme"
EQUAL = FIGURES / "equal-footing"
MAX_SERIES = 6


def series_per_panel(fig) -> dict[tuple[str, str], set]:
    """Per panel (x axis, y axis), the series drawn in it: traces with data, one per legend group (a run's line, its
    error bars and its hidden continuations are one series), shaded bands left out (they belong to their line)."""
    panels: dict[tuple[str, str], set] = {}
    for trace in fig.data:
        values = [v for v in (getattr(trace, "y", None) or ()) if v is not None]
        if not values or getattr(trace, "fill", None) in ("toself", "tonexty", "tozeroy"):
            continue
        panel = (trace.xaxis or "x", trace.yaxis or "y")
        panels.setdefault(panel, set()).add(trace.legendgroup or trace.name or id(trace))
    return panels


def crowded(fig) -> dict:
    return {panel: len(series) for panel, series in series_per_panel(fig).items() if len(series) > MAX_SERIES}


def test_the_count_takes_a_line_and_its_bars_as_one_series_and_catches_a_crowded_panel():
    fig = go.Figure()
    for i in range(MAX_SERIES):
        fig.add_scatter(x=[1, 2], y=[i, i], name=f"run {i}", legendgroup=f"run {i}")
        fig.add_scatter(x=[2, 3], y=[i, i + 1], name=f"run {i}, continued", legendgroup=f"run {i}", showlegend=False)
    fig.add_scatter(x=[1, 2, 2, 1], y=[0, 0, 1, 1], fill="toself")  # a band
    fig.add_scatter(x=[None], y=[None], name="a legend entry only")
    assert crowded(fig) == {}
    fig.add_scatter(x=[1, 2], y=[9, 9], name="one run too many")
    assert crowded(fig) == {("x", "y"): MAX_SERIES + 1}


def module(path: str) -> dict:
    return runpy.run_path(str(ROOT / path), run_name=Path(path).stem)


@lru_cache(maxsize=None)
def equal_searches() -> dict[str, list[dict]]:
    by_task: dict[str, list[dict]] = {}
    for path in sorted(EQUAL.glob("trials-eq-*.json")):
        record = json.loads(path.read_text())
        by_task.setdefault(record["task"]["name"], []).append(record)
    return by_task


@pytest.mark.parametrize("task", ["bijection", "hmm", "regression", "recall"])
def test_the_equal_searches_figures(task):
    equal_footing = module("benchmarks/equal_footing.py")
    searches = equal_searches()[task]
    reference = ROOT / "models" / "pretrained" / "recall-transformer-cpu" if task == "recall" else None
    assert not crowded(equal_footing["task_figure"](task, searches, reference))
    assert not crowded(equal_footing["trials_figure"](task, searches))


def test_the_training_compute_figures():
    import tasks
    from interp.catalog import shipped
    from interp.files import RunFolder

    training_compute = module("benchmarks/training_compute.py")
    by_task: dict[str, list[Path]] = {}
    for path in shipped().values():
        if len(RunFolder(path).saved()) < 3:  # as the script picks them: the models shipped with their final state
            by_task.setdefault(RunFolder(path).read_record()["task"]["name"], []).append(path)
    primitive = {task: p.metric for _, (task, p) in tasks.primitives().items()}
    assert "hmm" in by_task
    for task, folders in by_task.items():
        metric = primitive.get(task, "entropy_mae_bits")
        curves, budgets, common = training_compute["measured"](folders, metric)
        fig = training_compute["figure"](task, metric, {n: points for n, (_, points) in curves.items()}, budgets, common)
        assert not crowded(fig), task


@pytest.mark.parametrize("table", sorted(FIGURES.glob("cpu-preset-curves*.json")), ids=lambda p: p.stem)
def test_the_cpu_preset_figures(table):
    cpu_preset = module("benchmarks/cpu_preset.py")
    record = json.loads(table.read_text())
    runs = [ROOT / run["path"] for run in record["runs"].values()]
    drawn = {run.name: (json.loads((run / "run.json").read_text()), cpu_preset["curve"](run)) for run in runs}
    assert not crowded(cpu_preset["figure"](record["task"], drawn, "--by-step" in record["command"]))


def test_the_binding_lineage_figure():
    lineage = module("experiments/binding_lineage_curve.py")
    data = {run: dict(measured=lineage["measurements"](run), loss=lineage["loss_curve"](run)) for run in lineage["RUNS"]
            if (lineage["HERE"] / run).is_dir() and lineage["measurements"](run)}
    assert len(data) > MAX_SERIES  # more runs than a panel holds: the lineages chain them
    assert not crowded(lineage["figure"](data))


@pytest.mark.parametrize("sweep", sorted((FIGURES / "sweeps").glob("*/sweep.json")), ids=lambda p: p.parent.name)
def test_the_sweeps_curves(sweep):
    from interp.sweep import curve_figure

    assert not crowded(curve_figure(json.loads(sweep.read_text())["metrics"]))


def test_the_binding_learning_rate_probe_figure():
    probe = module("experiments/binding_lr_probe_curve.py")
    runs = [f"{arch}-lr{lr}" for arch in probe["ARCHS"] for lr in probe["LRS"]]
    data = {run: probe["curves"](run) for run in runs if (probe["HERE"] / run / "run.json").is_file()}
    assert data
    assert not crowded(probe["figure"](data))
