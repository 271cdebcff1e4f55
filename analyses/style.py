"""The one figure style every analysis shares.

``Analysis.__call__`` passes every figure an analysis returns through ``apply``, so a new analysis gets
it without asking: the plotly_white template and one font; the title, starting with the task's name,
left-aligned at the top, wrapped
to the page width, with the top margin made to fit it; tick labels in plain numbers and powers of ten,
never SI prefixes ("100n", "10µ", "10B" bits); integer ticks on an x axis whose values are all
integers (layers, query indices); the legend to the right of the plot, top-aligned. ``reference_line``
draws a labelled reference line whose label sits on the line on a log axis too (plotly's own
``add_hline(annotation_text=...)`` puts it at 10^value there). ``text_width`` is the estimate the
wrapping uses, and the figure tests check titles with.
"""
from __future__ import annotations

import math
import re

import plotly.graph_objects as go

FONT_SIZE = 13
TITLE_SIZE = 16
SUP_SCALE = 0.7  # plotly draws <sup> text at 70% of the size
CHAR_EM = 0.58  # an upper estimate of the mean character width of plotly's sans-serif font, in ems
DEFAULT_WIDTH, DEFAULT_HEIGHT = 700, 450  # plotly's page size when a figure sets none
DEFAULT_TOP = 100  # plotly's top margin
TITLE_PAD = 12  # pixels left and right of the title
MAX_LIST_TICKS = 15  # an integer axis with at most this many distinct values gets exactly those ticks


def _plain(text: str) -> str:
    return re.sub(r"<[^>]+>", "", text)


def text_width(text: str, size: float) -> float:
    """An upper estimate, in pixels, of the width of one line of ``text`` (tags removed) at font ``size``."""
    return len(_plain(text)) * size * CHAR_EM


def title_lines(text: str) -> list[tuple[str, float]]:
    """The lines of a title (split at <br>) with the font size each is drawn at."""
    lines = [line for line in re.split(r"<br\s*/?>", text or "") if line.strip()]
    return [(line, TITLE_SIZE * (SUP_SCALE if line.lstrip().startswith("<sup>") else 1)) for line in lines]


def _wrap(line: str, size: float, width: float) -> list[str]:
    """``line`` broken at spaces into lines at most ``width`` pixels wide (a <sup> line stays <sup>)."""
    sup = line.strip().startswith("<sup>") and line.strip().endswith("</sup>")
    words, out = (_plain(line) if sup else line).split(" "), [""]
    for word in words:
        trial = f"{out[-1]} {word}".strip()
        if out[-1] and text_width(trial, size) > width:
            out.append(word)
        else:
            out[-1] = trial
    return [f"<sup>{part}</sup>" for part in out] if sup else out


def page_width(fig) -> float:
    return fig.layout.width or DEFAULT_WIDTH


def title_room(fig) -> float:
    """The width a title line may take on ``fig``'s page."""
    return page_width(fig) - 2 * TITLE_PAD


def _axes(fig):
    """(layout key, axis) for every x and y axis of the figure's layout."""
    layout = fig.layout
    return [(key, layout[key]) for key in layout if re.fullmatch(r"[xy]axis\d*", key)]


def _axis_key(ref: str | None, letter: str) -> str:
    """A trace's or annotation's axis reference ("x2") as a layout key ("xaxis2")."""
    return letter + "axis" + (ref or letter)[1:]


def _numbers(values) -> list[float] | None:
    """The finite numbers among ``values``, or None when any value is not a number (a categorical axis)."""
    out = []
    for v in values if values is not None else []:
        if v is None:
            continue
        if isinstance(v, str) or not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
            return None
        v = float(v)
        if math.isfinite(v):
            out.append(v)
    return out


def values_by_axis(fig, errors: bool = False, shapes: bool = True) -> dict[str, list[float] | None]:
    """Per axis (layout key), the numbers its scatter and bar traces (with their error bars when
    ``errors``) and its shapes (when ``shapes``) put on it, in data units; None for a categorical axis."""
    found: dict[str, list[float] | None] = {}

    def add(key: str, values) -> None:
        numbers = _numbers(values)
        found[key] = None if numbers is None or found.get(key, []) is None else found.get(key, []) + numbers

    for trace in fig.data:
        if trace.type not in ("scatter", "bar", "scattergl"):
            continue
        for letter in "xy":
            values = getattr(trace, letter, None)
            if values is None:
                continue
            values, error = list(values), getattr(trace, f"error_{letter}", None)
            if errors and error is not None and error.array is not None:
                minus = error.arrayminus if error.arrayminus is not None else error.array
                values += [v + e for v, e in zip(values, error.array) if None not in (v, e)]
                values += [v - e for v, e in zip(values, minus) if None not in (v, e)]
            if trace.type == "bar" and letter == ("x" if trace.orientation == "h" else "y"):
                values.append(0)  # a bar starts at 0
            add(_axis_key(getattr(trace, f"{letter}axis"), letter), values)
    for shape in fig.layout.shapes if shapes else ():
        for letter in "xy":
            ref = getattr(shape, f"{letter}ref") or letter
            if "domain" not in ref and ref != "paper":
                add(_axis_key(ref, letter), [getattr(shape, f"{letter}0"), getattr(shape, f"{letter}1")])
    return found


def _integer_ticks(fig, values: dict) -> None:
    """Ticks at integers only, on every x axis whose values are all integers."""
    for key, axis in _axes(fig):
        numbers = values.get(key)
        if not key.startswith("x") or not numbers or any(v != int(v) for v in numbers) or axis.tickmode \
                or axis.tickvals is not None:
            continue
        distinct = sorted(set(numbers))
        if len(distinct) <= MAX_LIST_TICKS:
            axis.update(tickmode="array", tickvals=distinct, ticktext=[f"{int(v)}" for v in distinct])
        elif axis.type != "log":
            span = distinct[-1] - distinct[0]
            step = 10 ** math.floor(math.log10(span / 8))
            step = next(m * step for m in (1, 2, 5, 10) if span / (m * step) <= 10)
            axis.update(tick0=0, dtick=max(1, int(step)), tickformat="d")


def number_text(x: float) -> str:
    """A tick label: plain digits from 0.001 to 99999, otherwise m×10^k (never an SI prefix)."""
    if 1e-3 <= abs(x) < 1e5:
        return f"{x:g}"
    k = math.floor(math.log10(abs(x)))
    m = round(x / 10 ** k, 6)
    return (f"{m:g}×" if m != 1 else "") + f"10<sup>{k}</sup>"


def _nice_step(rough: float) -> float:
    """The largest 1, 2 or 5 x 10^k at most ``rough`` (a tick spacing)."""
    k = math.floor(math.log10(rough))
    return max(m * 10.0 ** k for m in (1, 2, 5) if m * 10.0 ** k <= rough)


def _log_ticks(fig, values: dict) -> None:
    """Labelled ticks at 1, 2, 5 x 10^k (powers of ten alone over more than 3 decades; 1, 1.5, 2, 3, 5, 7 where
    fewer than three of those fall among the values, and evenly spaced ticks where fewer than three of those do)
    on every log axis, instead of plotly's unlabelled-decade digits ("2" for 20, "7" for 0.7)."""
    for key, axis in _axes(fig):
        positive = [v for v in values.get(key) or [] if v > 0]
        if axis.type != "log" or not positive or axis.tickmode or axis.tickvals is not None:
            continue
        low, high = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
        every = max(1, math.ceil((high - low) / 10))  # at most about ten labelled decades
        ticks = [m * 10.0 ** k for k in range(low, high + 1, every) for m in ((1, 2, 5) if high - low <= 3 else (1,))]
        inside = lambda ticks: sum(min(positive) <= t <= max(positive) for t in ticks)  # noqa: E731
        if inside(ticks) < 3:  # values within a decade: finer steps
            ticks = [float(f"{m}e{k}") for k in range(low, high + 1) for m in (1, 1.5, 2, 3, 5, 7)]
        if inside(ticks) < 3 and max(positive) > min(positive):  # within a fraction of one: evenly spaced
            step = _nice_step((max(positive) - min(positive)) / 4)
            first = math.floor(min(positive) / step)
            ticks = [round(k * step, 12) for k in range(first, math.ceil(max(positive) / step) + 1) if k > 0]
        axis.update(tickmode="array", tickvals=ticks, ticktext=[number_text(t) for t in ticks])


def use_template(fig):
    """Give ``fig`` the plotly_white template; returns ``fig``. Assigned as plotly assigns its own default
    template, without validating it again: ``template="plotly_white"`` deep-copies the whole template on
    every assignment (40 ms a figure, most of an explorer update)."""
    import plotly.io as pio

    layout = fig.layout
    layout._validate = False  # plotly's own switch for an already-validated template (BaseFigure)
    try:
        layout.template = pio.templates["plotly_white"]
    finally:
        layout._validate = fig._validate
    return fig


def dots_on_log_axes(fig) -> None:
    """Bars on a log axis are drawn as dots: a bar's length on a log axis depends on where the axis
    happens to start, and a zero has no place on it (it was drawn as a bar to 1e-18). Values <= 0 are
    left out (their hover says nothing false); grouped bars stay side by side (scattermode "group")."""
    traces, converted = [], False
    for trace in fig.data:
        letter = "x" if trace.type == "bar" and trace.orientation == "h" else "y"
        if trace.type != "bar" or fig.layout[_axis_key(getattr(trace, f"{letter}axis"), letter)].type != "log":
            traces.append(trace)
            continue
        values = [v if isinstance(v, (int, float)) and v > 0 else None for v in getattr(trace, letter)]
        traces.append(go.Scatter(x=values if letter == "x" else trace.x, y=trace.y if letter == "x" else values,
                                 mode="markers", name=trace.name, legendgroup=trace.legendgroup,
                                 showlegend=trace.showlegend, xaxis=trace.xaxis, yaxis=trace.yaxis,
                                 customdata=trace.customdata, hovertemplate=trace.hovertemplate,
                                 offsetgroup=trace.offsetgroup, error_y=trace.error_y.to_plotly_json(),
                                 marker=dict(size=9, color=trace.marker.color)))
        converted = True
    if converted:
        fig.data = ()
        fig.add_traces(traces)
        fig.update_layout(scattermode="group")


def apply(fig, subject: str | None = None, replaces: str | None = None):
    """Give ``fig`` the shared style (see the module docstring); returns ``fig``. ``subject`` (what the
    figure is of: the model, or the task) starts every title that does not already start with it:
    "bijection: ..."; a title that starts with ``replaces`` instead (an analysis names its task) has that
    prefix swapped for the subject."""
    dots_on_log_axes(fig)
    title = fig.layout.title.text or ""
    if subject and replaces and title.startswith(f"{replaces}: "):
        title = title[len(replaces) + 2:]
        fig.update_layout(title_text=title)
    if subject and title and not title.startswith(f"{subject}:"):
        lower = title[:1].lower() if title[1:2].islower() else title[:1]  # "Key cosines" but not "KL"
        fig.update_layout(title_text=f"{subject}: {lower}{title[1:]}")
    right_axis = any(axis.side == "right" for _, axis in _axes(fig))  # the legend goes beyond its ticks
    use_template(fig)
    fig.update_layout(font=dict(size=FONT_SIZE),
                      legend=dict(x=1.15 if right_axis else 1.02, y=1, xanchor="left", yanchor="top",
                                  font=dict(size=FONT_SIZE - 1)))
    if fig.layout.width is None:
        fig.update_layout(width=DEFAULT_WIDTH)
    title = fig.layout.title.text or ""
    lines = [part for line, size in title_lines(title) for part in _wrap(line, size, title_room(fig))]
    if lines:
        sizes = [size for _, size in title_lines("<br>".join(lines))]
        over_plot = any(a.yref == "paper" and a.y is not None and a.y >= 1 for a in fig.layout.annotations)
        before = fig.layout.margin.t or DEFAULT_TOP
        top = int(sum(1.35 * size for size in sizes) + (1.35 * FONT_SIZE + 8) * over_plot) + 40
        # the page grows by what the title takes beyond the top margin it had, not the plot (so a
        # second ``apply`` changes nothing)
        height = (fig.layout.height or DEFAULT_HEIGHT) + max(0, top - before)
        # plotly centres a title's first line on its anchor and writes the others below it
        fig.update_layout(title=dict(text="<br>".join(lines), x=0, xref="container", xanchor="left",
                                     y=1 - (12 + 0.7 * sizes[0]) / height, yref="container", yanchor="middle",
                                     pad=dict(l=TITLE_PAD), font=dict(size=TITLE_SIZE)),
                          margin=dict(t=top), height=height)
    plain_numbers(fig)
    for _, axis in _axes(fig):
        if axis.overlaying and not axis.tickmode:  # its own ticks, not ones synced to the other axis's grid
            axis.update(tickmode="auto", showgrid=False)
    _integer_ticks(fig, values_by_axis(fig, shapes=False))  # a reference line between integers is no reason
    _log_ticks(fig, values_by_axis(fig))
    return fig


PLAIN = dict(exponentformat="power", showexponent="all", separatethousands=False)


def plain_numbers(fig):
    """Plain numbers and powers of ten, never SI prefixes, on every axis and colour bar of ``fig`` (ticks and
    the hover text plotly formats with them); returns ``fig``."""
    for _, axis in _axes(fig):
        axis.update(**PLAIN, automargin=True)
    for trace in fig.data:
        if "colorbar" in trace:
            trace.update(colorbar=PLAIN)
    for key in fig.layout.to_plotly_json():  # the colour axes the figure uses
        if re.fullmatch(r"coloraxis\d*", key):
            fig.layout[key].update(colorbar=PLAIN)
    return fig


def _at(fig, axis: str, value: float) -> float:
    """``value`` as an annotation on ``axis`` takes it: log10 on a log axis (a shape takes the value itself)."""
    return math.log10(value) if fig.layout[axis + "axis"].type == "log" else value


def label(fig, color: str, **place) -> None:
    """A text label in the shared style at ``place`` (x, y, their refs and anchors)."""
    fig.add_annotation(showarrow=False, font=dict(color=color), bgcolor="rgba(255,255,255,0.8)", **place)


def reference_line(fig, value: float, text: str, axis: str = "y", dash: str = "dash", color: str = "gray",
                   position: str = "right", above: bool = True) -> None:
    """A horizontal (``axis`` "y") or vertical ("x") line at ``value`` with the label ``text`` beside it (a
    horizontal line's label at its ``position`` end, ``above`` it or below). Call it after the axis type is set
    (the label's place depends on it)."""
    if axis == "y":
        fig.add_hline(y=value, line_dash=dash, line_color=color)
        label(fig, color, text=text, x=1 if position == "right" else 0, xref="x domain", y=_at(fig, "y", value),
               yref="y", xanchor=position, yanchor="bottom" if above else "top")
    else:
        fig.add_vline(x=value, line_dash=dash, line_color=color)
        label(fig, color, text=text, y=1, yref="y domain", x=_at(fig, "x", value), xref="x", xanchor="left",
               yanchor="top")


def interval_band(fig, x: list, bounds: list, color: str, group: str | None = None, **where) -> None:
    """A shaded band through the [low, high] ``bounds`` at ``x`` (a curve's 95% intervals), in ``color`` made faint,
    behind the curve and without a legend entry or hover of its own (``group``: the curve's legend group, so the
    band hides with it; ``where``: row and col of a subplot)."""
    low, high = [b[0] for b in bounds], [b[1] for b in bounds]
    red, green, blue = (int(color.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4))
    fig.add_scatter(x=list(x) + list(x)[::-1], y=high + low[::-1], fill="toself", mode="lines", line=dict(width=0),
                    fillcolor=f"rgba({red},{green},{blue},0.2)", showlegend=False, hoverinfo="skip",
                    legendgroup=group, **where)


def reference_band(fig, low: float, high: float, text: str, color: str = "#2ca02c") -> None:
    """A shaded band from ``low`` to ``high`` on the x axis, labelled at its middle (after the axis type is set)."""
    fig.add_vrect(x0=low, x1=high, fillcolor=color, opacity=0.08, line_width=0)
    middle = math.sqrt(low * high) if fig.layout.xaxis.type == "log" else (low + high) / 2
    label(fig, color, text=text, y=1, yref="y domain", x=_at(fig, "x", middle), xref="x", yanchor="top")


def error_bars(values: list, intervals: list) -> dict:
    """Asymmetric error bars from [low, high] intervals (none where an interval is undefined)."""
    up = [math.nan if v is None or ci is None else ci[1] - v for v, ci in zip(values, intervals)]
    down = [math.nan if v is None or ci is None else v - ci[0] for v, ci in zip(values, intervals)]
    return dict(type="data", array=up, arrayminus=down, thickness=1.5, width=4)
