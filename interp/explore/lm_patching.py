"""A language model's activation-patching map for the explorer's patching view (``patching``): estimated first.

Measuring every cell (every head of every layer at every position, a forward pass on the prompts each) is hours on
a CPU, so ``estimated_map`` estimates every cell to first order from one forward and one backward pass (attribution
patching, ``analyses.attribution_patching.estimates``), then measures exactly the ``EXACT_CELLS`` cells of the
largest estimates, ``CELLS_PER_STEP`` a step of the view's job, each as ``analyses.activation_patching.measure``
measures it (``measure_cells``); the residual stream at every position at once is the clean run itself. The map's
rows are ``default_sites`` (the residual stream, each layer's attention and MLP outputs), a layer's heads added on
demand (``shown_sites``); ``mark`` rings the exact cells, ``covers`` is the panel's sentence on what the map holds.
``Patched`` is the view's result, a wind tunnel's (every cell measured) too.
"""
from __future__ import annotations

from typing import NamedTuple

import plotly.graph_objects as go

from analyses import interventions as P
from analyses.activation_patching import measure_cells
from analyses.attribution_patching import estimates


class Patched(NamedTuple):
    """A map's results: every cell's scores (``grid``: per scale, [site][position..., all]) and the answers of the
    cells measured (``answers``, by (site label, position or None)). A language model's map is estimated first
    (``estimated_map``): ``measured`` holds the cells measured exactly, the others are first-order estimates, and
    ``clean`` / ``corrupted`` the two runs' activations a click measures another cell from; None: every cell
    measured."""
    pair: P.Pair
    scorer: P.Scorer
    chosen: list
    where: list
    grid: dict
    answers: dict
    measured: set | None = None
    clean: dict | None = None
    corrupted: dict | None = None


EXACT_CELLS = 32  # a language model's map: how many cells are measured exactly, those of the largest estimates
CELLS_PER_STEP = 4  # cells measured a step (one stacked forward pass): between two a cancel takes effect, views run


def default_sites(chosen: list) -> list:
    """The rows of a language model's map: every site but the attention heads (a layer's heads are shown on
    demand, ``shown_sites``)."""
    return [s for s in chosen if s.kind != "head"]


def shown_sites(chosen: list, layer: int | None) -> list:
    """The rows drawn: ``default_sites`` with the heads of ``layer`` (None: no heads) in residual-stream order."""
    return [s for s in chosen if s.kind != "head" or s.layer == layer]


def estimated_map(pair: P.Pair, scorer: P.Scorer, chosen: list, where: list[int], job=None,
                  exact: int = EXACT_CELLS) -> Patched:
    """A language model's map: every cell of every site (heads too) estimated to first order (attribution
    patching: one forward pass on the clean input, one forward and backward pass on the corrupted one), then the
    ``exact`` cells of ``default_sites`` with the largest estimated effect (model scale) measured exactly, as
    ``measure`` measures them. A residual stream patched at every position at once (``whole``) is the clean run
    itself: its answer is the model's clean answer, exact without a pass (its estimate, often far from 1, would
    otherwise take a measured cell). ``job``: the cells measured are its steps (``CELLS_PER_STEP`` a step)."""
    what = job.what if job is not None else ""
    if job is not None:  # (its line until the estimate is done: "preparing")
        job.what = f"{what}, every cell estimated to first order first"
    names = P.cache_names(pair.model, chosen)
    clean = P.run_cache(pair, pair.clean, names)
    grid = estimates(pair, chosen, where, scorer, clean=clean)
    taps = any(s.kind == "tap" for s in chosen)  # (only a tap's patch reads the corrupted run's activations)
    corrupted = P.run_cache(pair, pair.corrupted, names) if taps else {}
    rows = {s.label: i for i, s in enumerate(chosen)}
    columns = [*where, None]
    ranked = sorted(((abs(v), rows[s.label], j) for s in default_sites(chosen)
                     for j, v in enumerate(grid["model"][rows[s.label]]) if v is not None), reverse=True)
    answers, measured = {}, set()
    for site in whole(chosen):
        put(grid, answers, measured, scorer, rows[site.label], len(where), site, None, scorer.clean)
    cells = [(chosen[i], columns[j]) for _, i, j in ranked if (chosen[i].label, columns[j]) not in measured][:exact]
    if job is not None:
        job.what, job.total = what, len(cells)
        job.step(0)  # the estimate is done: a cancel takes effect here, and waiting views run
    for start in range(0, len(cells), CELLS_PER_STEP):
        chunk = cells[start:start + CELLS_PER_STEP]
        for (site, p), answer in zip(chunk, measure_cells(pair, chunk, clean, corrupted)):
            put(grid, answers, measured, scorer, rows[site.label], columns.index(p), site, p, answer)
        if job is not None:
            job.step(len(chunk))
    return Patched(pair, scorer, chosen, where, grid, answers, measured, clean, corrupted)


def whole(chosen: list) -> list:
    """The residual-stream sites, whose cell at every position at once is the clean run itself (everything after
    them is computed from them alone)."""
    return [s for s in chosen if s.kind == "resid"]


def put(grid: dict, answers: dict, measured: set, scorer: P.Scorer, i: int, j: int, site, p, answer) -> None:
    """A measured cell's answer and scores in place of its estimate."""
    score = scorer.both(answer)
    for scale in grid:
        grid[scale][i][j] = score[scale]
    answers[site.label, p] = answer
    measured.add((site.label, p))


def covers(source) -> str:
    """What an estimated map (a language model's) covers, and how to get the rest: the panel's words, from the
    sites ``default_sites`` draws and the numbers ``estimated_map`` measures."""
    chosen = source.sites()
    rows, heads = default_sites(chosen), [s for s in chosen if s.kind == "head"]
    kinds = {s.kind for s in rows}
    what = [text for kind, text in (("tap", "each token-shift tap"),
                                    ("resid", f"the residual stream before each of the {P.n_layers(source.model)} "
                                              f"layers and after the last"),
                                    ("attn", "each layer's attention output"), ("mlp_out", "its MLP output"),
                                    ("state", "its recurrent state"), ("mixer", "its mixer output")) if kind in kinds]
    return (f"The map's {len(rows)} rows: {', '.join(what)}"
            + (f" (a layer's {heads_per_layer(chosen)} heads: pick the layer in \"heads of layer\")" if heads else "")
            + "; its columns: every position from two before the flipped observation to the answer (where that is "
            "over 48, those around the flip and before the answer), and all positions at once. Every cell is first "
            "estimated to first order (attribution patching: one forward pass on the clean prompts, one forward and "
            f"backward pass on the corrupted ones); then the {EXACT_CELLS} cells of the largest estimated effect are "
            "measured exactly (ringed, as is the residual stream at all positions at once, which is the clean run "
            "itself), and a click on any other cell measures it. Every cell measured, every head at every position: "
            "interp run activation-patching --model (hours on a CPU).")


MAP_ROW_PX, MAP_FRAME_PX = 15, 300  # an estimated map's height: a row's, and the title's and the labels' room


def map_height(source) -> str:
    """The map's height in the page: a wind tunnel's fixed, a language model's enough for every row it may draw."""
    if not source.estimate_first:
        return "520px"
    chosen = source.sites()
    return f"{MAP_FRAME_PX + MAP_ROW_PX * (len(default_sites(chosen)) + heads_per_layer(chosen))}px"


def heads_per_layer(chosen: list) -> int:
    return len({s.head for s in chosen if s.kind == "head"})


def mark(fig: go.Figure, rows: list, where: list[int], pair: P.Pair, measured: set, clean_run: set) -> None:
    """An estimated map's exact cells ringed, and each cell's hover saying which it is."""
    columns, names = [*where, None], [pair.labels[p] for p in where] + ["all positions"]
    heat = fig.data[0]
    said = lambda cell: ("exact: the clean run itself" if cell in clean_run else "measured exactly"  # noqa: E731
                         if cell in measured else "first-order estimate: click to measure it")
    heat.text = [[f"{text}<br>{said((s.label, p))}" for text, p in zip(line, columns)]
                 for s, line in zip(rows, heat.text)]
    ringed = [(names[j], s.label) for s in rows for j, p in enumerate(columns) if (s.label, p) in measured]
    fig.update_layout(yaxis=dict(dtick=1, tickfont_size=11))  # every row named (``map_height`` gives them room)
    fig.add_scatter(x=[x for x, _ in ringed], y=[y for _, y in ringed], mode="markers", hoverinfo="skip",
                    showlegend=False, name="measured exactly",
                    marker=dict(symbol="circle-open", size=9, color="black", line=dict(width=1.5)))
