"""Activation patching: which activation, at which position, carries what a corruption changed?

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

from tqdm import tqdm

from . import interventions as P
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
the gain's interval excludes 0); the cell is chosen once, on all pairs.
""".split())


def compute(model, corrupt: str = "", index: int = -1, n: int = 100, seed: int = 1234,
            positions: str = "auto") -> Result:
    return patch(model, dict(corrupt=corrupt, index=index, n=n, seed=seed), positions)


def on_language_model(lm, prompts: str, words: str, per_shot: int, alpha: float, seed: int, index: int,
                      positions: str) -> Result:
    return patch(lm, dict(prompts=prompts, words=words, per_shot=per_shot, alpha=alpha, seed=seed, index=index),
                 positions)


def patch(model, options: dict, positions: str) -> Result:
    if positions not in ("auto", P.ALL):
        raise AnalysisError(f"--positions must be auto or all, got {positions!r}")
    pair = P.make_pair(model, options)
    scorer = P.Scorer(pair)
    chosen, where = P.sites(pair.model), pair.positions(positions)
    projected = {}
    grid, whole = measure(pair, scorer, chosen, where, projected=projected)
    best = strongest(chosen, where, grid["bayes"])
    metrics = dict(
        subject=pair.subject, corruption=pair.what, query=pair.query, changed=list(pair.changed),
        answer=pair.kind, n_sequences=len(pair.clean), sites=[s.label for s in chosen], positions=where,
        position_labels=[pair.labels[p] for p in where], **scorer.baselines(),
        bayes_scale=grid["bayes"], model_scale=grid["model"],
        whole_residual=whole, restores_clean_exactly=whole["model"] is not None and abs(whole["model"] - 1) < 1e-4,
        strongest=best, intervals=intervals(scorer, best, projected))
    fig = P.patching_map(pair, chosen, where, grid, metrics, "bayes",
                         f"{pair.subject}: activation patching, clean into corrupted ({pair.what})<br><sup>answer at "
                         f"position {pair.query} on the Bayes scale (1: the clean input's Bayes answer, 0: the "
                         f"corrupted one's)</sup>")
    return Result("activation-patching", DEFINITION, metrics, {"sites-by-position": fig}, descriptions=DESCRIPTIONS)


DESCRIPTIONS = P.DESCRIPTIONS | {
    "intervals": P.INTERVALS + "; strongest: per site, its strongest cell (chosen once, on all pairs)"}


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
    first = chosen[[s.kind for s in chosen].index("resid")]
    return grid, scorer.both(P.patched_answers(pair, first, [None], clean, corrupted)[0])


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


def strongest(chosen, where, values) -> list[dict]:
    """Per site kind and layer, the position whose patch restores most (Bayes scale)."""
    out = []
    for site, row in zip(chosen, values):
        scored = [(v, p) for v, p in zip(row, where) if v is not None]
        if scored:
            v, p = max(scored)
            out.append(dict(site=site.label, position=p, bayes_scale=v))
    return out


POSITIONS = Option("positions", "auto", "auto (around the change and the query) or all")
ANALYSIS = Analysis("activation-patching", "each site x position patched from a clean into a corrupted input, scored "
                    "between the two Bayes answers", DEFINITION, compute,
                    options=(*P.wind_tunnel_options(), POSITIONS), order=20,
                    on_language_model=on_language_model, language_options=(*P.language_options(), POSITIONS),
                    language_definition=DEFINITION, requires=("corruption",))
