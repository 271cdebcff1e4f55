"""A language model's activation-patching map for the explorer's patching view (``patching``): estimated first.

Measuring every cell (every head of every layer at every position, a forward pass on the prompts each) is hours on
a CPU, so ``estimated_map`` estimates every cell to first order from one forward and one backward pass (attribution
patching, ``analyses.attribution_patching.estimates``), then measures exactly the ``EXACT_CELLS`` cells of the
largest estimates, ``CELLS_PER_STEP`` a step of the view's job, each as ``analyses.activation_patching.measure``
measures it (``measure_cells``; ``activation_patching.estimated`` is this map, which ``interp run
activation-patching`` draws for a language model too); the residual stream at every position at once is the clean
run itself. The map's
rows are ``default_sites`` (the residual stream, each layer's attention and MLP outputs), a layer's heads added on
demand (``shown_sites``); ``mark`` rings the exact cells, ``covers`` is the panel's sentence on what the map holds.
``Patched`` is the view's result, a wind tunnel's (every cell measured) too.
"""
from __future__ import annotations

from typing import NamedTuple


from analyses import interventions as P
from analyses.activation_patching import (CELLS_PER_STEP, EXACT_CELLS, default_sites, estimated, measure_cells, put,
                                          ring, whole_sites)


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


def shown_sites(chosen: list, layer: int | None) -> list:
    """The rows drawn: ``default_sites`` with the heads of ``layer`` (None: no heads) in residual-stream order."""
    return [s for s in chosen if s.kind != "head" or s.layer == layer]


def estimated_map(pair: P.Pair, scorer: P.Scorer, chosen: list, where: list[int], job=None,
                  exact: int = EXACT_CELLS) -> Patched:
    """A language model's map (``activation_patching.estimated``): every cell of every site (heads too) estimated
    to first order, then the ``exact`` cells of ``default_sites`` with the largest estimated effect measured
    exactly. ``job``: the cells measured are its steps (``CELLS_PER_STEP`` a step)."""
    grid, answers, measured, clean, corrupted = estimated(pair, scorer, chosen, where, default_sites(chosen), exact, job)
    return Patched(pair, scorer, chosen, where, grid, answers, measured, clean, corrupted)


whole = whole_sites  # the residual-stream sites: their cell at every position at once is the clean run itself


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
            "interp run activation-patching --model NAME --exact all (hours on a CPU).")


MAP_ROW_PX, MAP_FRAME_PX = 15, 300  # an estimated map's height: a row's, and the title's and the labels' room


def map_height(source) -> str:
    """The map's height in the page: a wind tunnel's fixed, a language model's enough for every row it may draw."""
    if not source.estimate_first:
        return "520px"
    chosen = source.sites()
    return f"{MAP_FRAME_PX + MAP_ROW_PX * (len(default_sites(chosen)) + heads_per_layer(chosen))}px"


def heads_per_layer(chosen: list) -> int:
    return len({s.head for s in chosen if s.kind == "head"})


def mark(fig, rows: list, where: list[int], pair: P.Pair, measured: set, clean_run: set) -> None:
    """An estimated map's exact cells ringed, each cell's hover saying which it is (and that a click measures it)."""
    ring(fig, rows, where, pair, measured, clean_run, ": click to measure it")
