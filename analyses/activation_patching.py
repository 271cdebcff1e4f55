"""Activation patching: which activation, at which position, carries what a corruption changed?

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

from tqdm import tqdm

from . import interventions as P
from .attribution_patching import estimates
from .base import Analysis, AnalysisError, Option, Result

DEFINITION = " ".join("""
 A clean and a corrupted input differ in one known part of the hypothesis (the task's corruption: a
bijection pair shows another value, one HMM observation is another symbol, a recall binding shows
another value or key, one regression output moves; on a language model one shown observation of the
prompt task is flipped); the exact Bayes answer of each at the compared query position is known. The
model runs on the corrupted input with one site's activation at one position (or at every position,
column "all") replaced by its value on the clean input; every later computation runs on. A site is the
residual stream before a block or after the last (blocks.l.hook_resid_pre / hook_resid_post), one
attention head's output z (blocks.l.attn.hook_z), the attention or MLP output (hook_attn_out,
hook_mlp_out), the mixer output of a non-transformer (hook_mixer_out), the recurrent state (Mamba
blocks.l.mixer.hook_h; the LSTM's hidden and cell states together), which the recurrence carries on
from the patched step (not patched at every position at once: column "all" is left empty there), or one
tap of a token shift (its term W_shift[j-1] x_{t-j}). The model's answer
a at the query (its distribution over the answer classes; on a Gaussian task its predictive mean) is
scored with Delta = Bayes(clean) - Bayes(corrupted) as sum <a - ref, Delta> / sum <target - ref, Delta>
over the batch: on the Bayes scale ref, target are the corrupted and clean Bayes answers (1 = the
clean input's Bayes answer restored), on the model scale the model's own corrupted and clean answers
(1 = its clean answer restored exactly). restores_clean_exactly: the residual stream before the first
block patched at every position gives the model scale 1 up to float error, as it must. strongest: per
site, the position whose patch restores most on the Bayes scale. intervals: 95% bootstrap intervals over
the pairs of the model's clean and corrupted answers on the Bayes scale, of its move between them, and
of each strongest cell on both scales with its paired gain over the unpatched corrupted answer (differs:
the gain's interval excludes 0); the cell is chosen once, on all pairs. On a language model (where
measuring every cell is hours on a CPU) the map is estimated first unless --exact all: every cell is
estimated to first order (attribution patching: one forward pass on the clean input, one forward and
backward pass on the corrupted one), the --exact cells of the largest estimated effect on the model
scale, among every site but the attention heads (a head's cells stay estimates; its layer's attention
output is a site), are then measured exactly, and the residual stream at every position at once is the clean run
itself (exact without a pass); exact_cells lists the cells measured, every other cell is an estimate,
and strongest and its intervals are chosen among the measured cells only.
""".split())


def compute(model, corrupt: str = "", index: int = -1, n: int = 100, seed: int = 1234,
            positions: str = "auto") -> Result:
    return patch(model, dict(corrupt=corrupt, index=index, n=n, seed=seed), positions, P.ALL)


def on_language_model(lm, prompts: str, words: str, per_shot: int, alpha: float, seed: int, index: int,
                      positions: str, exact: str) -> Result:
    return patch(lm, dict(prompts=prompts, words=words, per_shot=per_shot, alpha=alpha, seed=seed, index=index),
                 positions, exact)


def exact_count(exact: str) -> int | None:
    """--exact's cells measured exactly: a count, or None for every cell (``all``)."""
    if exact.strip().lower() == P.ALL:
        return None
    if not exact.strip().isdigit():
        raise AnalysisError(f"--exact must be a number of cells or all, got {exact!r}")
    return int(exact)


def patch(model, options: dict, positions: str, exact: str) -> Result:
    if positions not in ("auto", P.ALL):
        raise AnalysisError(f"--positions must be auto or all, got {positions!r}")
    count = exact_count(exact)
    pair = P.make_pair(model, options)
    scorer = P.Scorer(pair)
    chosen, where = P.sites(pair.model), pair.positions(positions)
    projected = {}
    if count is None:
        grid, whole = measure(pair, scorer, chosen, where, projected=projected)
        measured = None
    else:
        grid, _, measured, clean, corrupted = estimated(pair, scorer, chosen, where, default_sites(chosen), count,
                                                        projected=projected)
        whole = whole_residual(pair, scorer, chosen, clean, corrupted)
    best = strongest(chosen, where, grid["bayes"], measured)
    columns = [*where, None]
    rows = chosen if measured is None else default_sites(chosen)  # the figure's rows: an estimated map's without heads
    metrics = dict(
        subject=pair.subject, corruption=pair.what, query=pair.query, changed=list(pair.changed),
        answer=pair.kind, n_sequences=len(pair.clean), sites=[s.label for s in chosen], positions=where,
        position_labels=[pair.labels[p] for p in where], **scorer.baselines(),
        bayes_scale=grid["bayes"], model_scale=grid["model"],
        whole_residual=whole, restores_clean_exactly=whole["model"] is not None and abs(whole["model"] - 1) < 1e-4,
        strongest=best, intervals=intervals(scorer, best, projected),
        exact_cells="all" if measured is None else [[s.label, p] for s in chosen for p in columns
                                                    if (s.label, p) in measured])
    # a pretrained language model's answers sit far from Bayes's (its unpatched answers may score -58 and 3 on the
    # Bayes scale), so its map is drawn as the share of its own effect restored; a wind tunnel's on the Bayes scale
    drawn = "model" if P.is_language_model(model) else "bayes"
    meaning = ("as the share of the model's own effect restored (1: its clean answer, 0: its corrupted one)"
               if drawn == "model" else "on the Bayes scale (1: the clean input's Bayes answer, 0: the corrupted one's)")
    title = (f"{pair.subject}: activation patching, clean into corrupted ({pair.what})<br><sup>answer at position "
             f"{pair.query} {meaning}</sup>"
             + ("" if measured is None else f"<br><sup>ringed: the {len(measured)} cells measured exactly; the others "
                "are first-order estimates" + (", the heads' in the JSON" if len(rows) < len(chosen) else "") + "</sup>"))
    shown = {s.label for s in rows}
    fig = P.patching_map(pair, rows, where, {scale: [line for s, line in zip(chosen, grid[scale]) if s.label in shown]
                                             for scale in grid}, metrics, drawn, title)
    if measured is not None:
        ring(fig, rows, where, pair, measured, {(s.label, None) for s in whole_sites(chosen)})
    return Result("activation-patching", DEFINITION, metrics, {"sites-by-position": fig}, descriptions=DESCRIPTIONS)


DESCRIPTIONS = P.DESCRIPTIONS | {
    "intervals": P.INTERVALS + "; strongest: per site, its strongest cell (chosen once, on all pairs)",
    "exact_cells": "the [site, position] cells measured exactly (position null: every position at once), or all; "
                   "every other cell of bayes_scale and model_scale is a first-order estimate"}

EXACT_CELLS = 32  # a language model's map: how many cells are measured exactly, those of the largest estimates
CELLS_PER_STEP = 4  # cells measured per stacked forward pass: a job's step (between two, a cancel takes effect)


def estimated(pair: P.Pair, scorer: P.Scorer, chosen: list, where: list[int], ranked_among: list,
              exact: int = EXACT_CELLS, job=None, projected: dict | None = None):
    """A map estimated first: (grid, answers, measured, clean, corrupted). Every cell of every site is estimated to
    first order (attribution patching), then the ``exact`` cells of ``ranked_among``'s sites with the largest
    estimated effect (model scale) are measured exactly, as ``measure`` measures them; a residual stream patched at
    every position at once is the clean run itself, exact without a pass (its estimate, often far from 1, would
    otherwise take a measured cell). ``answers`` and ``projected`` hold the measured cells' answers and per-pair
    projections; ``measured`` their (site label, position) keys; ``clean`` and ``corrupted`` the two runs'
    activations a later cell is measured from (``measure_cells``). ``job``: the cells measured are its steps."""
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
    answers, measured = {}, set()
    for site in whole_sites(chosen):
        put(grid, answers, measured, scorer, rows[site.label], len(where), site, None, scorer.clean, projected)
    ranked = sorted(((abs(v), rows[s.label], j) for s in ranked_among
                     for j, v in enumerate(grid["model"][rows[s.label]]) if v is not None), reverse=True)
    cells = [(chosen[i], columns[j]) for _, i, j in ranked if (chosen[i].label, columns[j]) not in measured][:exact]
    if job is not None:
        job.what, job.total = what, len(cells)
        job.step(0)  # the estimate is done: a cancel takes effect here, and waiting views run
    steps = range(0, len(cells), CELLS_PER_STEP)
    quiet = True if job is not None else None  # a job reports its own steps; else tqdm's bar where there is a terminal
    for start in tqdm(steps, desc="measuring the largest cells", unit="step", leave=False, disable=quiet):
        chunk = cells[start:start + CELLS_PER_STEP]
        for (site, p), answer in zip(chunk, measure_cells(pair, chunk, clean, corrupted)):
            put(grid, answers, measured, scorer, rows[site.label], columns.index(p), site, p, answer, projected)
        if job is not None:
            job.step(len(chunk))
    return grid, answers, measured, clean, corrupted


def default_sites(chosen: list) -> list:
    """An estimated map's rows, and the sites whose cells it measures: every site but the attention heads (on a
    language model hundreds of rows; their layer's attention output is a row, their own cells stay estimates)."""
    return [s for s in chosen if s.kind != "head"]


def whole_sites(chosen: list) -> list:
    """The residual-stream sites, whose cell at every position at once is the clean run itself (everything after
    them is computed from them alone)."""
    return [s for s in chosen if s.kind == "resid"]


def whole_residual(pair: P.Pair, scorer: P.Scorer, chosen: list, clean: dict, corrupted: dict) -> dict:
    """The residual stream before the first block patched at every position, measured (one pass): the scores
    ``restores_clean_exactly`` checks."""
    first = chosen[[s.kind for s in chosen].index("resid")]
    return scorer.both(P.patched_answers(pair, first, [None], clean, corrupted)[0])


def put(grid: dict, answers: dict, measured: set, scorer: P.Scorer, i: int, j: int, site, p, answer,
        projected: dict | None = None) -> None:
    """A measured cell's answer and scores in place of its estimate."""
    score = scorer.both(answer)
    for scale in grid:
        grid[scale][i][j] = score[scale]
    answers[site.label, p] = answer
    measured.add((site.label, p))
    if projected is not None:
        projected[site.label, p] = scorer.project(answer)


def ring(fig, rows: list, where: list[int], pair: P.Pair, measured: set, clean_run: set, estimate: str = "") -> None:
    """An estimated map's exact cells ringed, and each cell's hover saying which it is (``estimate``: what the hover
    of an estimated cell adds, e.g. that a click measures it)."""
    columns, names = [*where, None], [pair.labels[p] for p in where] + ["all positions"]
    heat = fig.data[0]
    said = lambda cell: ("exact: the clean run itself" if cell in clean_run else "measured exactly"  # noqa: E731
                         if cell in measured else "first-order estimate" + estimate)
    heat.text = [[f"{text}<br>{said((s.label, p))}" for text, p in zip(line, columns)]
                 for s, line in zip(rows, heat.text)]
    ringed = [(names[j], s.label) for s in rows for j, p in enumerate(columns) if (s.label, p) in measured]
    fig.update_layout(yaxis=dict(dtick=1, tickfont_size=11,  # every row named
                                 title_text=fig.layout.yaxis.title.text or "site"),
                      xaxis_title_text=fig.layout.xaxis.title.text or "position")
    fig.add_scatter(x=[x for x, _ in ringed], y=[y for _, y in ringed], mode="markers", hoverinfo="skip",
                    showlegend=False, name="measured exactly",
                    marker=dict(symbol="circle-open", size=9, color="black", line=dict(width=1.5)))


def intervals(scorer: P.Scorer, best: list[dict], projected: dict) -> dict:
    """The baselines' intervals and each strongest cell's (``Scorer.cell_intervals``), from the per-pair
    projections ``measure`` kept."""
    cells = scorer.cell_intervals([projected[b["site"], b["position"]] for b in best])
    return scorer.baseline_intervals() | dict(strongest=[dict(site=b["site"], position=b["position"]) | c
                                                         for b, c in zip(best, cells)])


def measure(pair: P.Pair, scorer: P.Scorer, chosen: list, where: list[int], answers: dict | None = None,
            projected: dict | None = None):
    """({scale: [site][position..., all] scores}, the whole residual stream's scores); ``answers``, when given,
    collects every cell's patched answer by (site label, position or None), ``projected`` its per-pair projection
    (``Scorer.project``: what its intervals need, a few numbers per pair)."""
    names = P.cache_names(pair.model, chosen)
    clean, corrupted = P.run_cache(pair, pair.clean, names), P.run_cache(pair, pair.corrupted, names)
    grid = {"bayes": [], "model": []}
    for site in tqdm(chosen, desc="activation patching", unit="site", leave=False, disable=None):
        cols = [*where] if site.kind == "state" else [*where, None]  # a whole state sequence: see DEFINITION
        patched = P.patched_answers(pair, site, cols, clean, corrupted)
        if answers is not None:
            answers.update({(site.label, p): a for p, a in zip(cols, patched)})
        if projected is not None:
            projected.update({(site.label, p): scorer.project(a) for p, a in zip(cols, patched)})
        scores = [scorer.both(a) for a in patched] + [{}] * (len(where) + 1 - len(cols))
        for scale in grid:
            grid[scale].append([s.get(scale) for s in scores])
    return grid, whole_residual(pair, scorer, chosen, clean, corrupted)


def cell_hooks(pair: P.Pair, cells: list[tuple[P.Site, int | None]], source: dict) -> list:
    """Hooks for a run on ``len(cells)`` stacked copies of the batch: copy k gets ``source``'s (the clean run's)
    activation of cell k's site at its position (None: every position), as ``interventions.patch_hooks`` patches one
    site; sites that share a hook are patched by one hook. Not for taps or recurrent states (``measure_cells``)."""
    B, by_name = len(pair.clean), {}
    for k, (site, p) in enumerate(cells):
        for name in site.hooks:
            by_name.setdefault(name, []).append((k, site.head, slice(None) if p is None else p))

    def make(name, copies):
        value = source[name]

        def put(act, hook):
            act = act.clone()
            for k, head, where in copies:
                index = (slice(k * B, (k + 1) * B), where) + (() if head is None else (head,))
                act[index] = value[(slice(None), where) + index[2:]].to(act.dtype)
            return act
        return put
    return [(name, make(name, copies)) for name, copies in by_name.items()]


def measure_cells(pair: P.Pair, cells: list[tuple[P.Site, int | None]], source: dict, into: dict) -> list:
    """The answer [B, K] with each (site, position) cell patched (position None: every position), from the clean
    run's activations ``source`` into the corrupted run (``into``: its own, which a tap's term needs): the cells of
    any sites side by side in stacked forward passes (``interventions.TOKEN_BUDGET`` positions each), a tap's or a
    recurrent state's by ``interventions.patched_answers``. Each answer is that of ``measure``'s cell."""
    out: list = [None] * len(cells)
    apart = [k for k, (site, _) in enumerate(cells) if site.kind in ("tap", "state")]
    for k in apart:
        out[k] = P.patched_answers(pair, cells[k][0], [cells[k][1]], source, into)[0]
    together = [k for k in range(len(cells)) if out[k] is None]
    B, T = pair.clean.shape[:2]
    per = max(1, P.TOKEN_BUDGET // (B * T))
    for i in range(0, len(together), per):
        chunk = together[i:i + per]
        tokens = pair.corrupted.repeat(len(chunk), *[1] * (pair.corrupted.dim() - 1))
        answers = pair.answer(tokens, cell_hooks(pair, [cells[k] for k in chunk], source)).split(B)
        for k, a in zip(chunk, answers):
            out[k] = a
    return out


def strongest(chosen, where, values, measured: set | None = None) -> list[dict]:
    """Per site kind and layer, the position whose patch restores most (Bayes scale), among the cells ``measured``
    (None: every cell); a site with none measured has none."""
    out = []
    for site, row in zip(chosen, values):
        scored = [(v, p) for v, p in zip(row, where) if v is not None
                  and (measured is None or (site.label, p) in measured)]
        if scored:
            v, p = max(scored)
            out.append(dict(site=site.label, position=p, bayes_scale=v))
    return out


EXACT = Option("exact", str(EXACT_CELLS), "cells measured exactly, those of the largest first-order estimates (the "
               "others stay estimates), or all (every cell measured: hours on a CPU for a 100M+ model)")
ANALYSIS = Analysis("activation-patching", "each site x position patched from a clean into a corrupted input, scored "
                    "between the two Bayes answers", DEFINITION, compute,
                    options=(*P.wind_tunnel_options(), P.POSITIONS), order=20,
                    on_language_model=on_language_model, language_options=(*P.language_options(), P.POSITIONS, EXACT),
                    language_definition=DEFINITION, requires=("corruption",))
