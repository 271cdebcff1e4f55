"""What a checkpoint was trained on, read from its run's record: steps x batch, sequences and tokens.

The record is read by whoever loaded the checkpoint (``interp.checkpoint``); analyses never read a run's files.
"""
from __future__ import annotations

from tasks import from_config
from tasks.base import stage_options


def training_tokens(record: dict, step: int) -> int:
    """Tokens a run (its run record, ``record``) trained on in its first ``step`` steps: sequences x their
    length, each curriculum stage at its own length (a short-table step costs what its shorter
    sequences cost; a mixture's steps each at their option's length)."""
    task = from_config(record["task"])
    total, start = 0, 0
    for end, settings in record["train"].get("curriculum") or ():
        steps, options = max(0, min(step, end) - start), stage_options(settings)
        for i, option in enumerate(options):  # a mixture's options take its steps in turn
            total += (steps // len(options) + (i < steps % len(options))) * from_config(task.config() | option).seq_len
        start = end
    return (total + max(0, step - start) * task.seq_len) * record["train"]["batch_size"]


def training_budget(record: dict | None, step: int, start: dict | None = None) -> dict | None:
    """What a checkpoint at ``step`` of a run was trained on, from the run's record (``record``, read by whoever
    loaded the checkpoint: analyses never read a run's files; None for a lone checkpoint file, whose budget is
    unknown: None): steps x batch of its run and the tokens, plus, for a run started from another checkpoint
    (``--init``), what that one had seen, as the record counts it, or for a record from before the start's tokens
    were counted, ``start``: that checkpoint's own budget (None: unknown, counted as none)."""
    try:
        batch = record["train"]["batch_size"]
        tokens = training_tokens(record, step)
    except (TypeError, ValueError, KeyError):
        return None
    init = record.get("init") or {}
    before, tokens_before = init.get("sequences") or 0, init.get("tokens")
    if tokens_before is None:
        tokens_before = start["tokens"] if start else 0
    return dict(steps=step, batch_size=batch, init_sequences=before, sequences=step * batch + before,
                init_tokens=tokens_before, tokens=tokens + tokens_before)


def budget_text(budget: dict | None) -> str:
    """``25,000 x 64`` or, after a start from another checkpoint, ``6,000 x 64 after 1.6M sequences``."""
    if not budget:
        return "budget unknown"
    own, before = f"{budget['steps']:,} x {budget['batch_size']}", budget["init_sequences"]
    seen = f"{before / 1e6:.3g}M" if before >= 100_000 else f"{before:,}"
    return own + (f" after {seen} sequences" if before else "")
