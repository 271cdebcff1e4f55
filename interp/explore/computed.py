"""What several wind-tunnel views compute on the model, cached in the explorer's state so they share one
computation: one sequence's numbers (the posterior, lens and numbers views, the download) and calibration on the
held-out batch (the posterior, numbers and head-ablation views).
"""
from __future__ import annotations

from analyses import logit_lens
from analyses.base import answer_probs
from analyses.calibration import measure

from .hooks import ablated

KEEP_SEQUENCES = 64  # sequences whose numbers are kept (the newest)


def sequence_numbers(state, index: int, tokens: list, seed: int | None, choices: list[str]) -> dict:
    """What the model does on one sequence: calibration curves, answer distribution, logit lens (discrete)
    or predictive mean and variance (continuous); cached per (checkpoint, sequence, ablation)."""
    key = ("sequence", index, tuple(tokens) if seed is None else seed, tuple(sorted(choices)))
    if key not in state.cache:
        batch = state.batch(tokens, seed)
        with ablated(state, index, choices) as model, state.waits.on("the model on this sequence"):
            continuous = state.task.continuous
            state.cache[key] = dict(
                batch=batch, curves=measure(model, batch),
                probs=None if continuous else answer_probs(model, batch.tokens)[0],
                lens=None if continuous else logit_lens.lens_probs(model, batch.tokens),
                predictive=[t[0].float() for t in model.predictive(batch.tokens)] if continuous else None)
        state.keep_newest("sequence", KEEP_SEQUENCES)
    return state.cache[key]


def held_out_calibration(state, index: int, choices: list[str]) -> dict:
    """Calibration on the held-out batch, which does not depend on the sequence shown: computed once per
    checkpoint and ablation (the slowest part of a view on a large model)."""
    key = ("held-out", index, tuple(sorted(choices)))
    if key not in state.cache:
        with ablated(state, index, choices) as model, state.waits.on(
                f"held-out calibration on {state.n_calibration} sequences" + (" (ablated)" if choices else "")):
            sums = {}  # per sequence, for the paired interval of an ablated model against the intact one
            state.cache[key] = measure(model, state.held_out(), intervals=True, sums=sums)
            state.cache[("held-out-sums", *key[1:])] = sums
    return state.cache[key]


def held_out_sums(state, index: int, choices: list[str]) -> dict:
    """``calibration.measure``'s per-sequence sums of ``held_out_calibration(state, index, choices)``."""
    held_out_calibration(state, index, choices)
    return state.cache[("held-out-sums", index, tuple(sorted(choices)))]
