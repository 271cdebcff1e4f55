"""Content addressing: is recall done by matching the query key, or by remembering where slot i sits?

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
import torch

from tasks import ConfigError

from . import style
from .base import Analysis, AnalysisError, Option, Result, held_out_batch, n_option, seed_option, unmeasurable
from .intervals import bootstrap_interval

DEFINITION = " ".join("""
Accuracy is the fraction of bound queries (keys that are in the table) whose arg-max answer is the bound
value; unbound queries have no right answer and are left out. Per-slot accuracy: the table is filled to its
largest size (every slot holds a pair) and accuracy is split by the table slot the query asks about (slot 0 is
shown first); per_slot_min is the worst slot and slot_spread the best minus the worst. Accuracy by table size:
the same model on tables of n pairs for each n, the remaining slots filled with filler, so no query moves; a
lookup that matches keys by content keeps its accuracy at every n, one that learned positions fails where
slots are empty or never trained. Accuracy by query count: the task rebuilt with that many queries (those a
model's position table cannot hold are listed as skipped). The moved pair: on full tables, the pair the last
query asks about is moved to every slot in turn (swapped with the pair there; nothing else moves, no answer
changes) and that query's accuracy is taken per slot, on the same sequences at every slot; moved_pair_min is
the worst slot and moved_pair_spread the best minus the worst (a lookup by content answers alike wherever the
pair sits). With the task option, all of it is measured on the model's task with those settings changed (e.g.
the paper's 3 queries for a model trained with more). content_addressed is true when per_slot_min, the
accuracy at every table size tested and (when measured) moved_pair_min are at least the threshold. Each
accuracy on the full table and by table size, and the moved pair's at every slot, comes with a 95% percentile
bootstrap interval over sequences (2,000 resamples; the queries of one sequence share its table, so sequences,
not queries, are resampled), and n_queries_full_table counts the bound queries behind the full-table accuracy.
""".split())


def parse_ints(spec: str, flag: str) -> list[int]:
    """The sorted distinct integers of a comma-separated option."""
    try:
        return sorted({int(part) for part in str(spec).split(",") if part.strip()})
    except ValueError:
        raise AnalysisError(f"{flag} must be comma-separated integers, got {spec!r}") from None


def parse_sizes(spec: str, largest: int) -> list[int]:
    if not spec:
        powers = [2 ** i for i in range(largest.bit_length()) if 2 ** i < largest]
        return powers + [largest]
    sizes = parse_ints(spec, "--sizes")
    if not sizes or sizes[0] < 1 or sizes[-1] > largest:
        raise AnalysisError(f"--sizes must lie from 1 to the table's {largest} slots, got {spec!r}")
    return sizes


@torch.no_grad()
def bound_accuracy(model, task, n: int, seed: int, chunk: int = 256) -> dict:
    """Correct / asked counts of bound queries on ``n`` held-out sequences of ``task``, in total and per slot.

    Sampled and measured ``chunk`` sequences at a time (chunk i with seed + i): a recall batch carries a
    posterior for every position, [B, T, n_values] floats, which at the paper's size is 86 MB per 256.
    """
    device = next(model.parameters()).device
    rows_right, rows_asked = [], []  # per sequence, for the interval
    slot_right, slot_asked = torch.zeros(task.slots), torch.zeros(task.slots, dtype=torch.long)
    for i, start in enumerate(range(0, n, chunk)):
        batch = held_out_batch(task, min(chunk, n - start), seed + i)
        h = batch.hypothesis
        logits = model.answer_logits(batch.tokens.to(device))
        guess = logits[batch.query_mask.to(device)].argmax(-1).cpu().view(len(batch), -1)
        bound = h["bound"]
        correct = (guess == h["answers"]) & bound
        rows_right.append(correct.sum(1))
        rows_asked.append(bound.sum(1))
        slot_right += torch.bincount(h["slot"][bound], weights=correct[bound].float(), minlength=task.slots)
        slot_asked += torch.bincount(h["slot"][bound], minlength=task.slots)
    rows_right, rows_asked = torch.cat(rows_right), torch.cat(rows_asked)
    right, asked = int(rows_right.sum()), int(rows_asked.sum())
    return dict(accuracy=right / max(asked, 1), interval=bootstrap_interval(rows_right, rows_asked, seed=seed),
                n_bound=asked, per_slot_right=slot_right.tolist(), per_slot_asked=slot_asked.tolist())


@torch.no_grad()
def moved_pair_accuracy(model, task, n: int, seed: int, chunk: int = 256) -> dict | None:
    """The pair the last query asks about, moved to every slot of a full table in turn (``task.move_pair``), on
    the same ``n`` held-out sequences (seed + 1; rows whose last query is unbound are left out; None if that is
    all of them): that query's right answers per destination slot, with intervals over sequences. The model
    reads ``chunk`` sequences at a time."""
    device = next(model.parameters()).device
    batch = held_out_batch(task, n, seed + 1)
    asked = batch.hypothesis["bound"][:, -1]
    tokens, slot = batch.tokens[asked], batch.hypothesis["slot"][asked, -1]
    if not len(tokens):
        return None
    right = []
    for to in range(task.slots):
        hits = []
        for start in range(0, len(tokens), chunk):
            rows = slice(start, start + chunk)
            moved = task.batch_from_tokens(task.move_pair(tokens[rows], slot[rows], to))
            logits = model.answer_logits(moved.tokens.to(device))
            guess = logits[moved.query_mask.to(device)].argmax(-1).cpu().view(len(moved), -1)[:, -1]
            h = moved.hypothesis
            hits.append(guess == h["values"].gather(1, h["slot"][:, -1:]).squeeze(1))
        right.append(torch.cat(hits).float())
    ones = torch.ones(len(tokens))
    return dict(accuracy=[float(r.mean()) for r in right], n=len(tokens),
                interval=[bootstrap_interval(r, ones, seed=seed) for r in right])


def measured_task(model, settings: str):
    """The model's task, or that task with ``settings`` ("queries=3,gap=16,ask=random") changed, same
    vocabulary. A value is an integer or a word (a setting such as recall's ``ask`` takes a name)."""
    task = model.task
    for part in (p for p in settings.split(",") if p.strip()):
        key, _, value = (s.strip() for s in part.partition("="))
        if not key or not (value.lstrip("-").isdigit() or value.isidentifier()):
            raise AnalysisError(f"--task must be KEY=VALUE pairs (an integer or a word) separated by commas, "
                                f"e.g. queries=3,ask=random, got {settings!r}")
        try:
            task = task.vary(key, int(value) if value.lstrip("-").isdigit() else value)
        except ConfigError as err:
            raise AnalysisError(f"--task {part.strip()}: {err}") from None
    reason = unmeasurable(model.task, task, model.cfg.n_ctx if model.positions else None)
    if reason:
        raise AnalysisError(f"--task {settings!r} {reason}")
    return task


def compute(model, sizes: str = "", queries: str = "", threshold: float = 0.95, task: str = "", n: int = 2048,
            seed: int = 1234, moved: int = 64) -> Result:
    """Per-slot accuracy with a full table, accuracy across table sizes and across query counts."""
    settings, task = task, measured_task(model, task)
    largest = task.slots
    full = task.with_table(largest)
    slots = bound_accuracy(model, full, n, seed)
    per_slot = [r / a if a else None for r, a in zip(slots["per_slot_right"], slots["per_slot_asked"])]
    measured = [a for a in per_slot if a is not None]

    by_size, by_size_interval = {}, {}
    for size in parse_sizes(sizes, largest):
        measured_size = bound_accuracy(model, task.with_table(size), n, seed)
        by_size[str(size)], by_size_interval[str(size)] = measured_size["accuracy"], measured_size["interval"]

    trained_queries = task.queries
    counts = parse_counts(queries, trained_queries)
    n_ctx = model.cfg.n_ctx if model.positions else None
    by_queries, skipped = {}, {}
    for count in counts:
        variant = task.with_length(count)
        reason = unmeasurable(task, variant, n_ctx)
        if reason:
            skipped[str(count)] = reason
            continue
        by_queries[str(count)] = bound_accuracy(model, variant, n, seed)["accuracy"]

    per_slot_min = min(measured)
    pair = moved_pair_accuracy(model, full, moved, seed) if moved else None
    moved_min = min(pair["accuracy"]) if pair else None
    metrics = dict(
        table_slots=largest, trained_table_sizes=[task.N_min, task.N], trained_queries=trained_queries,
        accuracy_full_table=slots["accuracy"], accuracy_full_table_interval=slots["interval"],
        n_queries_full_table=slots["n_bound"], per_slot_accuracy=per_slot, per_slot_asked=slots["per_slot_asked"],
        per_slot_min=per_slot_min, worst_slot=per_slot.index(per_slot_min), slot_spread=max(measured) - per_slot_min,
        accuracy_by_table_size=by_size, accuracy_by_table_size_interval=by_size_interval, accuracy_by_queries=by_queries, skipped_queries=skipped,
        moved_pair_accuracy=pair and pair["accuracy"], moved_pair_interval=pair and pair["interval"],
        moved_pair_min=moved_min, moved_pair_spread=pair and max(pair["accuracy"]) - moved_min,
        n_moved_pair_sequences=pair and pair["n"], threshold=threshold,
        content_addressed=bool(per_slot_min >= threshold and min(by_size.values()) >= threshold
                               and (moved_min is None or moved_min >= threshold)),
        measured_task=task.config(), task_changes=settings,
        n_sequences=n, seed=seed)
    return Result("content-addressing", DEFINITION, metrics, {
        "accuracy-by-slot": slot_figure(per_slot, threshold, task.name, pair),
        "accuracy-by-table-size": size_figure(by_size, (task.N_min, task.N), threshold, by_size_interval),
    })


def parse_counts(spec: str, trained: int) -> list[int]:
    if not spec:
        return sorted({1, trained, 2 * trained, 4 * trained})
    counts = parse_ints(spec, "--queries")
    if not counts or counts[0] < 1:
        raise AnalysisError(f"--queries must be positive integers, got {spec!r}")
    return counts


def slot_figure(per_slot: list, threshold: float, task_name: str, moved: dict | None = None) -> go.Figure:
    fig = go.Figure()
    fig.add_bar(x=list(range(len(per_slot))), y=per_slot, marker_color="#1f77b4", name="queries to that slot",
                hovertemplate="slot %{x}<br>accuracy %{y:.3f}<extra></extra>")
    if moved:  # the same pairs at every slot: a flat line is a lookup by content
        fig.add_scatter(x=list(range(len(per_slot))), y=moved["accuracy"], mode="lines+markers", marker_size=4,
                        name=f"one pair moved to each slot ({moved['n']} sequences)", line_color="#d62728",
                        error_y=style.error_bars(moved["accuracy"], moved["interval"]),
                        hovertemplate="pair moved to slot %{x}<br>accuracy %{y:.3f}<extra></extra>")
    fig.update_layout(title=f"{task_name}: accuracy by table slot (full table)", xaxis_title="table slot (0 = shown first)",
                      yaxis_title="accuracy of bound queries", yaxis_range=[0, 1.02], 
                      width=760, height=420)
    style.reference_line(fig, threshold, f"threshold {threshold:g}")
    return fig


def size_figure(by_size: dict, trained: tuple[int, int], threshold: float, intervals: dict | None = None) -> go.Figure:
    fig = go.Figure()
    fig.add_scatter(x=[int(k) for k in by_size], y=list(by_size.values()), mode="lines+markers", name="model",
                    error_y=style.error_bars(list(by_size.values()), [(intervals or {}).get(k) for k in by_size]))
    sizes = [int(k) for k in by_size] + list(trained)
    fig.update_layout(title="Accuracy by table size (same length: empty slots are filler)", xaxis_type="log",
                      xaxis_range=[math.log10(min(sizes)) - 0.1, math.log10(max(sizes)) + 0.1],  # log10 units
                      xaxis_title="pairs in the table", yaxis_title="accuracy of bound queries", yaxis_range=[0, 1.02],
                      width=640, height=420)
    style.reference_band(fig, trained[0], trained[1], "trained sizes")
    style.reference_line(fig, threshold, f"threshold {threshold:g}")
    return fig


ANALYSIS = Analysis(
    "content-addressing", "binding by content or by position: accuracy per table slot, table size and query count",
    DEFINITION, compute,
    options=(Option("sizes", "", "comma-separated table sizes to test (default: powers of two and the full table)"),
             Option("queries", "", "comma-separated query counts (default: 1, trained, 2x and 4x trained)"),
             Option("threshold", 0.95, "accuracy a content-addressed lookup must reach everywhere", low=0.0, high=1.0),
             Option("task", "", "measure on the model's task with these settings changed, e.g. "
                                "queries=3,gap=16,ask=random (the same vocabulary; default: the task as trained)"),
             n_option(2048), seed_option(),
             Option("moved", 64, "held-out sequences whose last queried pair is moved to every slot (0: not measured)",
                    low=0, high=10 ** 5)),
    requires=("table",), order=3)
