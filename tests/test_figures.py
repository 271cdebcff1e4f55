"""Every analysis's figures, on small models: the shared style holds, no title is cut off, and no
annotation sits outside (and so stretches) the data range of its axis. No analysis is named here: a
new analysis is covered as soon as it is registered."""
import math
import random
import re
from dataclasses import fields
from functools import lru_cache

import plotly.graph_objects as go
import pytest
import torch

import analyses
import models
import tasks
from analyses import style
from analyses.base import AnalysisError
from interp import checkpoint
from interp.recipe import stated
from interp.train import Trainer, TrainSettings


def small_model(arch: str, task_name: str):
    known = {f.name for f in fields(models.architecture(arch).config_class)}
    task = tasks.make(task_name, **tasks.REGISTRY[task_name].small_config(random.Random(1)))
    config = dict(d_model=16, n_layers=2) | ({"n_heads": 2} if "n_heads" in known else {})
    return models.build(arch, task, config, seed=0).eval()


@pytest.fixture(scope="module")
def candidates(tmp_path_factory):
    """Small models to try each analysis on: a tiny run with a checkpoint series first, then every cell."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("figures") / "run"
    settings = TrainSettings(steps=20, batch_size=16, lr=3e-3, warmup=2, eval_every=20, eval_size=32,
                             checkpoint_every=5)
    Trainer.start(out,
                  stated(dict(name="bijection", V=6, L=5), "transformer", dict(d_model=16, n_layers=2, n_heads=2),
                         settings), progress=False).run()
    cells = [(arch, task) for arch in models.ARCHS for task in tasks.NAMES]
    return [lambda: checkpoint.load(out)] + [lambda cell=cell: small_model(*cell) for cell in cells]


@lru_cache(maxsize=None)
def _built(make):
    return make()


@lru_cache(maxsize=None)
def language_model():
    from models.language_model import LanguageModel, from_hugging_face
    from tests.tiny_language_models import tiny, word_tokenizer

    tokenizer = word_tokenizer()
    return LanguageModel(from_hugging_face(tiny("llama-gqa", vocab_size=len(tokenizer))), "tiny-llama", tokenizer)


def figures_of(name: str, candidates) -> tuple[dict, str | None]:
    """The figures of analysis ``name`` on the first candidate model it runs on, and the title's subject
    (the task's name; None for a multi-model analysis)."""
    analysis = analyses.get(name)
    if analysis.run is None:  # a language-model analysis
        return language_figures(name)
    for make in candidates:
        model = _built(make)
        if analysis.unmet(model):
            continue
        options = {"n": 48} if "n" in analysis.defaults() else {}
        try:
            result = analysis([model, model] if analysis.multi_model else model, **options)
            return result.figures, None if analysis.multi_model else analyses.base.subject_of(model)
        except AnalysisError:  # a data-dependent refusal on a tiny task: try the next model
            continue
    pytest.fail(f"{name} ran on none of the small models")


def language_figures(name: str) -> tuple[dict, str]:
    quick = {"value-manifold": dict(bootstrap=10), "entropy-axis": dict(controls=2)}.get(name, {})
    return analyses.run(name, language_model(), per_shot=8, **quick).figures, language_model().name


@pytest.mark.parametrize("name", [n for n, a in analyses.REGISTRY.items() if a.on_language_model is not None])
def test_every_language_model_figure_fits_its_page(name):
    figures, subject = language_figures(name)
    check_figures(name, figures, subject)


# -- the checks ----------------------------------------------------------------------------------
def cut_titles(fig) -> list[str]:
    """Title lines wider than the page leaves them (an upper estimate of the drawn width)."""
    room = style.title_room(fig)
    return [line for line, size in style.title_lines(fig.layout.title.text) if style.text_width(line, size) > room]


def _axis_units(axis, values):
    """``values`` in the units the axis is drawn in (log10 on a log axis), finite ones only."""
    out = []
    for v in values:
        try:
            v = float(v)
        except (TypeError, ValueError):
            return None  # a categorical axis
        if axis.type == "log":
            v = math.log10(v) if v > 0 else math.nan
        if math.isfinite(v):
            out.append(v)
    return out


def data_extents(fig) -> dict[str, tuple[float, float]]:
    """Per axis (layout key), the range its traces, shapes and any explicit range span, in axis units."""
    extents = {}
    for key, values in style.values_by_axis(fig, errors=True).items():
        axis = fig.layout[key]
        units = _axis_units(axis, values or [])
        if axis.range is not None and None not in axis.range:
            units += list(axis.range)  # an explicit range is in axis units already
        if values is not None and units:
            extents[key] = (min(units), max(units))
    return extents


def stray_annotations(fig) -> list[str]:
    """Annotations placed on a data axis outside the range that axis's data span (give or take 5%)."""
    extents, stray = data_extents(fig), []
    for note in fig.layout.annotations:
        for letter in "xy":
            ref = getattr(note, f"{letter}ref") or letter
            at = getattr(note, letter)
            if "domain" in ref or ref == "paper" or at is None:
                continue
            key = style._axis_key(ref, letter)
            if key not in extents:
                continue
            low, high = extents[key]
            slack = 0.05 * (high - low) + 1e-9
            if not low - slack <= float(at) <= high + slack:
                stray.append(f"{note.text!r} at {letter}={at} outside [{low:.3g}, {high:.3g}] of {key}")
    return stray


def style_breaks(fig) -> list[str]:
    """Axes with SI-prefixed ticks or data but no title, or integer-valued x axes whose ticks may be fractional."""
    broken = [f"{key} exponentformat {axis.exponentformat}" for key, axis in style._axes(fig)
              if axis.exponentformat not in ("power", "e", "E", "none")]
    broken += [f"{key} has data but no title" for key in style.values_by_axis(fig, shapes=False)
               if not fig.layout[key].title.text and not fig.layout[key].matches  # a shared axis: titled once
               and fig.layout[key].visible is not False]  # a hidden axis (e.g. a simplex's plane) shows nothing
    legend = fig.layout.legend
    if legend.orientation == "h" and (legend.x is None or legend.x >= 1):  # the shared style puts legends right
        broken.append("a horizontal legend beside the plot (it squeezes the plot and runs off the page)")
    broken += [f"{trace.name}: a bar on a log axis" for trace in fig.data if trace.type == "bar"
               and fig.layout[style._axis_key(trace.yaxis, "y")].type == "log"]
    for trace in fig.data:
        x = getattr(trace, "x", None)
        if trace.type not in ("scatter", "bar") or x is None:
            continue
        values = style._numbers(x)
        if values and all(v == int(v) for v in values):
            axis = fig.layout[style._axis_key(trace.xaxis, "x")]
            integer = (axis.tickvals is not None and all(float(v) == int(v) for v in axis.tickvals)) or \
                (axis.dtick is not None and float(axis.dtick) == int(float(axis.dtick)) and axis.type != "log")
            if not integer and axis.type != "log":
                broken.append(f"{trace.name}: integer x values without integer ticks")
    return broken


def _is_array(value) -> bool:
    return value is not None and not isinstance(value, str) and hasattr(value, "__len__")


def unexplained_colours(fig) -> list[str]:
    """Coloured scatters the figure does not explain: a scatter whose marker colours vary point by point needs
    a colour bar (its own or its colour axis's); a scatter of one colour among several needs a legend entry,
    its own, its legend group's, or another trace's of that colour."""
    def markers(trace):
        return trace.type in ("scatter", "scattergl") and (trace.mode is None or "markers" in trace.mode)

    def shown(trace):
        return trace.showlegend is not False and fig.layout.showlegend is not False and bool(trace.name)

    broken, single = [], []
    for trace in fig.data:
        if not markers(trace):
            continue
        colour = trace.marker.color
        if _is_array(colour):
            if (trace.meta or {}).get("colour_key") == "mixed from the legend's" and any(map(shown, fig.data)):
                continue  # each point's colour a mix of the legend entries' (a belief coloured by its vertices)
            if len(set(map(str, colour))) < 2:
                single.append((trace, str(colour[0]) if len(colour) else None))
                continue
            axis = trace.marker.coloraxis
            bar = fig.layout[axis].showscale is not False if axis else trace.marker.showscale is True
            if not bar:
                broken.append(f"{trace.name or 'a scatter'}: point colours without a colour bar")
        else:
            single.append((trace, None if colour is None else str(colour)))
    if len({colour for _, colour in single}) < 2:  # one colour (or plotly's own by trace): nothing to explain
        return broken
    entries = [trace for trace in fig.data if shown(trace)]  # legend entries of any kind (bars too)
    explained = {str(trace.marker.color) for trace in entries
                 if "marker" in trace and not _is_array(trace.marker.color)}
    groups = {trace.legendgroup for trace in entries if trace.legendgroup}
    broken += [f"{trace.name or 'a scatter'}: colour {colour} with no legend entry" for trace, colour in single
               if not shown(trace) and colour not in explained and not (trace.legendgroup in groups)]
    return broken


@pytest.mark.parametrize("name", analyses.NAMES)
def test_every_figure_fits_its_page_and_keeps_its_annotations_in_range(name, candidates):
    figures, subject = figures_of(name, candidates)
    check_figures(name, figures, subject)


def check_figures(name: str, figures: dict, subject: str | None) -> None:
    assert figures
    for key, fig in figures.items():
        where = f"{name}/{key}"
        assert fig.layout.title.text, f"{where} has no title"
        assert subject is None or fig.layout.title.text.replace("<br>", " ").startswith(f"{subject}: "), where
        assert not cut_titles(fig), f"{where}: title cut off: {cut_titles(fig)}"
        assert not stray_annotations(fig), f"{where}: {stray_annotations(fig)}"
        assert not style_breaks(fig), f"{where}: {style_breaks(fig)}"
        assert not unexplained_colours(fig), f"{where}: {unexplained_colours(fig)}"


# -- the checks catch what they are for ----------------------------------------------------------
def log_figure():
    fig = go.Figure(go.Bar(x=["layer 0", "layer 1"], y=[1.2, 3.0]))
    fig.update_layout(yaxis_type="log", title="a reference line on a log axis")
    return fig


def test_the_checks_catch_a_cut_title_and_a_stretching_label():
    fig = log_figure()
    fig.add_hline(y=10, annotation_text="10×")  # plotly puts the label at 10^10 on a log axis
    fig.update_layout(title="a title much too long for its page " * 4, width=400)
    assert stray_annotations(fig) and cut_titles(fig)


def test_the_shared_style_wraps_titles_and_places_reference_labels():
    fig = log_figure()
    style.reference_line(fig, 10, "10×")
    fig.update_layout(title="a title much too long for its page " * 4 + "<br><sup>and a subtitle</sup>", width=400)
    before = fig.layout.title.text
    style.apply(fig)
    assert not stray_annotations(fig) and not cut_titles(fig)
    assert fig.layout.annotations[0].y == 1  # log10(10)
    words = lambda text: re.sub(r"<[^>]+>", " ", text).split()  # noqa: E731
    assert words(fig.layout.title.text) == words(before)  # only wrapped
    height = fig.layout.height
    style.apply(fig)
    assert fig.layout.height == height  # applying twice changes nothing


def test_bars_on_a_log_axis_become_dots_and_zeros_are_left_out():
    fig = go.Figure([go.Bar(x=["a", "b"], y=[0, 1e-3], name="one"), go.Bar(x=["a", "b"], y=[1e-5, 0.2], name="two")])
    fig.update_layout(yaxis_type="log", barmode="group", title="errors")
    assert {"one: a bar on a log axis", "two: a bar on a log axis"} <= set(style_breaks(fig))
    fig.update_layout(xaxis_title="head", yaxis_title="relative error")
    style.apply(fig)
    assert [t.type for t in fig.data] == ["scatter", "scatter"] and fig.layout.scattermode == "group"
    assert list(fig.data[0].y) == [None, 1e-3] and list(fig.data[1].y) == [1e-5, 0.2]  # no 0 drawn at 1e-18
    assert not style_breaks(fig)
    linear = style.apply(go.Figure(go.Bar(x=["a"], y=[0.5])).update_layout(title="shares"))
    assert linear.data[0].type == "bar"  # a linear axis keeps its bars


def test_ticks_are_plain_numbers_and_integers():
    assert [style.number_text(v) for v in (1e-7, 0.002, 0.5, 20, 2e5)] == [
        "10<sup>-7</sup>", "0.002", "0.5", "20", "2×10<sup>5</sup>"]
    log = style.apply(go.Figure(go.Scatter(x=[0.5, 2.5, 20], y=[1e-7, 3e-4, 0.7])).update_layout(
        xaxis_type="log", yaxis_type="log"))
    assert "0.5" in log.layout.xaxis.ticktext and "20" in log.layout.xaxis.ticktext  # not "5" and "2"
    assert "10<sup>-7</sup>" in log.layout.yaxis.ticktext and not any(
        unit in re.sub(r"<[^>]+>", "", text) for text in log.layout.yaxis.ticktext for unit in "nuµkMB")
    fig = style.apply(go.Figure(go.Scatter(x=[1, 2, 3, 4, 5, 6, 7], y=[1e-7, 2e-7, 3e-7, 1e-7, 0, 0, 1e-8])))
    assert list(fig.layout.xaxis.tickvals) == [1, 2, 3, 4, 5, 6, 7] and fig.layout.yaxis.exponentformat == "power"
    many = style.apply(go.Figure(go.Scatter(x=list(range(0, 120)), y=list(range(120)))))
    assert many.layout.xaxis.dtick == 20 and many.layout.xaxis.tickformat == "d"


def test_a_figure_of_a_loaded_run_names_the_run_its_architecture_and_task():
    import interp

    model = interp.load("bijection-transformer-cpu")
    for fig in analyses.run("key-orthogonality", model).figures.values():
        title = fig.layout.title.text.replace("<br>", " ")
        assert title.startswith("bijection-transformer-cpu (transformer on bijection): "), title
        assert "bijection: " not in title  # the task prefix the analysis wrote is replaced, not repeated


def test_the_colour_check_wants_a_colour_bar_or_a_legend():
    points = dict(x=[0, 1, 2], y=[1, 0, 1], mode="markers")
    assert unexplained_colours(go.Figure(go.Scatter(**points, marker=dict(color=[0, 1, 2]))))  # colours, no key
    assert not unexplained_colours(go.Figure(go.Scatter(**points, marker=dict(color=[0, 1, 2], showscale=True))))
    on_axis = go.Figure(go.Scatter(**points, marker=dict(color=[0, 1, 2], coloraxis="coloraxis")))
    assert not unexplained_colours(on_axis.update_layout(coloraxis=dict(colorscale="Viridis")))
    assert unexplained_colours(on_axis.update_layout(coloraxis_showscale=False))
    two = [go.Scatter(**points, name=name, marker_color=colour, showlegend=False) for name, colour in
           (("a", "red"), ("b", "blue"))]
    assert unexplained_colours(go.Figure(two))  # categories with no legend
    assert not unexplained_colours(go.Figure(two).update_traces(showlegend=True))
    assert not unexplained_colours(go.Figure(two).update_traces(legendgroup="g").update_traces(showlegend=True,
                                                                                              selector=dict(name="a")))


def test_the_belief_simplex_has_a_legend_and_its_vertex_labels_clear_of_the_polygon():
    import numpy as np

    from analyses.belief_state import simplex_figure

    beliefs = np.random.default_rng(0).dirichlet(np.ones(5), 200)
    fig = simplex_figure(beliefs, beliefs, 0)
    assert not unexplained_colours(fig)
    assert {t.name for t in fig.data if t.showlegend} == {f"c{c}" for c in range(5)}
    labels = [t for t in fig.data if t.mode == "text"]
    assert len(labels) == 2 and all(t.text[0] == "<b>c0</b>" for t in labels)
    for t in labels:  # every label beyond the circle through the vertices, inside the drawn range
        radius = np.hypot(t.x, t.y)
        assert (radius > 1.1).all() and (radius < fig.layout.xaxis.range[1]).all()


def test_value_manifold_writes_a_small_report_with_a_page_per_colouring(tmp_path):
    """By default value-manifold draws a page per colouring (a row per stream), 600 points per panel in
    single precision: on an HMM model 4 pages and under 0.7 MB of HTML (it wrote 7 pages and 3.8 MB
    on hmm-transformer-cpu), with the numbers of the JSON computed on every point as before."""
    import numpy as np

    from analyses import value_manifold
    from interp.export import write_result

    task = tasks.make("hmm", S=3, O=4, K=12)
    model = models.build("transformer", task, config=dict(d_model=16, n_layers=4, n_heads=2), seed=0).eval()
    result = analyses.run("value-manifold", model, n=400)  # 4,800 query points
    assert list(result.figures) == ["pca", "pca-by-position", "pca-by-states", "entropy-readout"]
    assert result.metrics["n_points"] == 4800 and result.metrics["n_points_shown"] == value_manifold.MAX_POINTS
    for name in ("pca", "pca-by-position", "pca-by-states"):
        fig = result.figures[name]
        assert sum(len(t.x) for t in fig.data) == 2 * 4 * value_manifold.MAX_POINTS  # 2 streams x 4 layers
        assert all(np.asarray(t.x).dtype == np.float32 for t in fig.data)
    write_result(result, tmp_path, ("html",))
    assert (tmp_path / "value-manifold.html").stat().st_size < 700_000
    views = value_manifold.measure(model, 400, 1234, 1500, readout=False).figures  # the explorer's, one per stream
    assert {"residual-pca", "attention-out-pca", "residual-pca-by-states"} <= set(views)
