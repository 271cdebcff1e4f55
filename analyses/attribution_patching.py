"""Attribution patching: activation patching's first-order estimate, from one forward and one backward pass.

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import torch

from . import interventions as P
from .base import Analysis, Option, Result
from .intervals import bootstrap_sums

DEFINITION = " ".join("""
 The clean/corrupted pair, the sites and the two scales are those of activation-patching. One forward
pass on the corrupted input and one backward pass give, for every site activation x, the gradient g of
the metric sum_rows <a, Delta> (a the model's answer at the query, Delta = Bayes(clean) -
Bayes(corrupted)). Patching x at one position from the clean run changes the metric by about
<x_clean - x_corrupted, g> (summed over the batch and the activation's features; a token-shift tap's x is
its term W_shift[j-1] x_{t-j}); divided by the scale's denominator and added to the corrupted answer's
score, that is the estimate of the activation-patching cell. The metric is linear in a, so the estimate
is exact to first order in the activation change; its error is second order. A recurrent state (Mamba
blocks.l.mixer.hook_h; the LSTM's hidden and cell states together, their two terms summed) is estimated
as activation-patching patches it, carried on by the recurrence: the gradient a hooked state gets at step
t is the total derivative through every later step (the model reads the hooked states back into the
recurrence), so the estimate is that of the carried patch; its column "all" is left empty, as in
activation-patching. With exact=true the activation-patching cells are measured too, and gap is the
estimate minus the measured value (model scale): mean_abs_gap and max_abs_gap over the cells. intervals:
95% bootstrap intervals over the pairs of the model's clean and corrupted answers on the Bayes scale,
and with exact=true of mean_abs_gap and max_abs_gap (every cell's estimate and measurement resampled
together) and, per cell, of the paired gap: gaps_beyond_interval counts the cells whose gap's interval
excludes 0, where the first-order estimate differs from patching beyond the noise of the pairs.
""".split())


def compute(model, corrupt: str = "", index: int = -1, n: int = 100, seed: int = 1234, positions: str = "auto",
            exact: bool = False) -> Result:
    return attribute(model, dict(corrupt=corrupt, index=index, n=n, seed=seed), positions, exact)


def on_language_model(lm, prompts: str, words: str, per_shot: int, alpha: float, seed: int, index: int,
                      positions: str, exact: bool) -> Result:
    return attribute(lm, dict(prompts=prompts, words=words, per_shot=per_shot, alpha=alpha, seed=seed, index=index),
                     positions, exact)


def gradients(pair: P.Pair, names: list[str]) -> tuple[dict, dict]:
    """(activations, gradients of sum <a, Delta>) of every hook in ``names`` on the corrupted input."""
    saved = {}

    def keep(name):
        # stored under the name asked for: on a TransformerBridge, blocks.0.hook_resid_pre is an alias and the
        # hook point's own name is another (blocks.0.hook_in)
        def hook(act, hook):
            if not act.requires_grad:  # frozen weights: the first hooked activation becomes a leaf
                act = act.detach().requires_grad_()
            act.retain_grad()
            saved[name] = act
            return act
        return hook

    with torch.enable_grad(), pair.model.hooks(fwd_hooks=[(name, keep(name)) for name in names]):
        answer = pair.read(pair.output(pair.corrupted))
        (answer * pair.delta).sum().backward()
    grads = {name: (act.grad if act.grad is not None else torch.zeros_like(act)).detach()
             for name, act in saved.items()}
    return {name: act.detach() for name, act in saved.items()}, grads


def estimates(pair: P.Pair, chosen: list, where: list[int], scorer: P.Scorer, projected: list | None = None,
              clean: dict | None = None) -> dict:
    """Per scale, [site][position..., all] estimates of the activation-patching cells; ``projected``, when given,
    gets per site each cell's estimated per-pair projection (``Scorer.project``; None where there is no cell): the
    corrupted answer's plus that pair's first-order change, since the gradient of a sum over pairs is per pair.
    ``clean``: the clean run's activations of the sites' hooks (``interventions.run_cache``), if the caller has
    them."""
    names = P.cache_names(pair.model, chosen)
    clean = P.run_cache(pair, pair.clean, names) if clean is None else clean
    corrupted, grads = gradients(pair, names)
    pair.model.zero_grad(set_to_none=True)
    base = {"bayes": scorer.bayes(scorer.corrupted), "model": scorer.model(scorer.corrupted)}
    dens = {"bayes": ((pair.bayes_clean - pair.bayes_corrupted) * pair.delta).sum().item(),
            "model": ((scorer.clean - scorer.corrupted) * pair.delta).sum().item()}
    out = {"bayes": [], "model": []}
    for site in chosen:
        per_row = 0
        for name in site.hooks:  # the LSTM's state: its hidden and cell terms add
            if site.kind == "tap":
                diff = P.tap_term(pair.model, clean, site.head) - P.tap_term(pair.model, corrupted, site.head)
            else:
                diff = clean[name] - corrupted[name]
                if site.head is not None:
                    diff = torch.zeros_like(diff).index_copy_(2, torch.tensor([site.head], device=diff.device),
                                                              diff[:, :, site.head:site.head + 1])
            per_row = per_row + (diff.double() * grads[name].double()).flatten(2).sum(-1)  # [B, T]
        per_position = per_row.sum(0)  # [T]
        cells = [per_position[p].item() for p in where] + [None if site.kind == "state" else per_position.sum().item()]
        if projected is not None:
            rows = per_row.cpu()
            projected.append([scorer.refs["model"][0] + rows[:, p] for p in where]
                             + [None if site.kind == "state" else scorer.refs["model"][0] + rows.sum(1)])
        for scale in out:
            ok = base[scale] is not None and abs(dens[scale]) > 0
            out[scale].append([base[scale] + c / dens[scale] if ok and c is not None else None for c in cells])
    return out


def attribute(model, options: dict, positions: str, exact: bool) -> Result:
    pair = P.make_pair(model, options)
    scorer = P.Scorer(pair)
    chosen = P.sites(pair.model)
    where = pair.positions(positions)
    estimated = []
    est = estimates(pair, chosen, where, scorer, estimated)
    metrics = dict(subject=pair.subject, corruption=pair.what, query=pair.query, changed=list(pair.changed),
                   n_sequences=len(pair.clean), sites=[s.label for s in chosen], positions=where,
                   position_labels=[pair.labels[p] for p in where], **scorer.baselines(),
                   bayes_scale=est["bayes"], model_scale=est["model"], intervals=scorer.baseline_intervals())
    hover = None
    if exact:
        names = P.cache_names(pair.model, chosen)
        clean, corrupted = P.run_cache(pair, pair.clean, names), P.run_cache(pair, pair.corrupted, names)
        state = lambda site: site.kind == "state"  # noqa: E731  (patched at one step at a time only)
        answers = [P.patched_answers(pair, site, [*where] + [None] * (not state(site)), clean, corrupted)
                   for site in chosen]
        measured = [[scorer.model(a) for a in row] + [None] * state(site) for site, row in zip(chosen, answers)]
        gaps = [[None if e is None or m is None else e - m for e, m in zip(er, mr)]
                for er, mr in zip(est["model"], measured)]
        flat = [abs(g) for row in gaps for g in row if g is not None]
        metrics |= dict(measured_model_scale=measured, gap=gaps,
                        mean_abs_gap=sum(flat) / len(flat) if flat else None, max_abs_gap=max(flat, default=None))
        hover = [[f"measured {P.short(m)}, gap {P.short(g)}" for m, g in zip(mr, gr)] for mr, gr in zip(measured, gaps)]
        pairs = [(e, scorer.project(a)) for er, row, gr in zip(estimated, answers, gaps)
                 for e, a, g in zip(er, row, gr) if g is not None]
        metrics["intervals"] |= gap_intervals(scorer, pairs)
        beyond = metrics["intervals"].pop("beyond")
        metrics["gaps_beyond_interval"] = sum(beyond) if beyond else None
        metrics["n_cells"] = len(pairs)
    cols = [pair.labels[p] for p in where] + ["all positions"]
    gap = [("mean |estimate - measured| on the model scale", metrics["mean_abs_gap"],
            metrics["intervals"]["mean_abs_gap"])] if exact else []
    fig = P.grid_figure(est["bayes"], metrics["sites"], cols,
                        f"{pair.subject}: attribution patching, the first-order estimate of activation patching "
                        f"({pair.what})<br><sup>estimated answer at position {pair.query} on the Bayes scale</sup>"
                        + P.interval_line(gap + P.baseline_numbers(metrics), len(pair.clean)), "Bayes scale", hover)
    return Result("attribution-patching", DEFINITION, metrics, {"estimate": fig}, descriptions=DESCRIPTIONS)


DESCRIPTIONS = P.DESCRIPTIONS | {
    "gaps_beyond_interval": "cells (of n_cells, with exact) whose gap estimate - measured has a 95% paired interval "
                            "over the pairs that excludes 0",
    "intervals": P.INTERVALS + "; mean_abs_gap, max_abs_gap: every cell's estimate and measurement from the same "
                 "resample of pairs (the cells are not resampled)",
}


def gap_intervals(scorer: P.Scorer, cells: list[tuple[torch.Tensor, torch.Tensor]]) -> dict:
    """From each cell's (estimated, measured) per-pair projections: the intervals of the mean and the largest
    |gap| over the cells, and per cell whether its paired gap's interval excludes 0 (``beyond``). A gap is
    sum(estimated - measured) / sum(the model's own move) over the pairs: one resample serves every cell."""
    ref, target = scorer.refs["model"]
    if not cells or P.vanishes((target - ref).sum().item(), scorer.pair.delta):
        return dict(mean_abs_gap=None, max_abs_gap=None, beyond=[])
    columns = torch.stack([e - m for e, m in cells] + [target - ref], 1)
    gaps = lambda sums: sums[:, :-1] / sums[:, -1:]  # noqa: E731  [resamples, cells]
    return dict(mean_abs_gap=bootstrap_sums(columns, lambda sums: gaps(sums).abs().mean(1)),
                max_abs_gap=bootstrap_sums(columns, lambda sums: gaps(sums).abs().amax(1)),
                beyond=[bool(P.differs(i)) for i in bootstrap_sums(columns, gaps)])


EXACT = Option("exact", False, "also measure activation patching at the same cells and report the gap")
ANALYSIS = Analysis("attribution-patching", "activation patching estimated to first order from one forward and one "
                    "backward pass, with its gap to the measured value", DEFINITION, compute,
                    options=(*P.wind_tunnel_options(), P.POSITIONS, EXACT), order=22,
                    on_language_model=on_language_model, language_options=(*P.language_options(), P.POSITIONS, EXACT),
                    language_definition=DEFINITION, requires=("corruption",))
