"""content-addressing against constructed lookups whose answer is known: one that matches keys by
content, one that remembers the first slots by position."""
import pytest
import torch

import analyses
import tasks
from analyses.base import AnalysisError


class TableReader(torch.nn.Module):
    """Answers a recall query by reading the table in the tokens: by content (find the query key) or
    by position (only the first ``remembered`` slots, as a positional shortcut would)."""

    positions = True

    def __init__(self, task, remembered=None):
        super().__init__()
        self.task, self.remembered = task, remembered
        self.weight = torch.nn.Parameter(torch.zeros(1))  # a device to run on
        self.cfg = type("Cfg", (), {"n_ctx": task.seq_len})()

    def answer_logits(self, tokens):
        task = self.task
        batch = task.batch_from_tokens(tokens)
        h = batch.hypothesis
        slot = h["slot"]
        truth = h["values"].gather(1, slot.clamp(min=0))
        forgotten = slot >= (self.remembered if self.remembered is not None else task.slots)
        guess = torch.where(forgotten, (truth + 1) % task.n_classes, truth)  # a wrong answer when forgotten
        logits = torch.zeros(*tokens.shape, task.n_classes)
        logits[batch.query_mask] = torch.nn.functional.one_hot(guess, task.n_classes).float().flatten(0, 1) * 10
        return logits


TASK = dict(N=16, N_min=4, n_keys=32, n_values=32, queries=2, fillers=2, gap=1)


def test_a_content_lookup_passes_everywhere():
    task = tasks.make("recall", **TASK)
    result = analyses.run("content-addressing", TableReader(task), n=256)
    m = result.metrics
    assert m["per_slot_min"] == 1.0 and m["slot_spread"] == 0.0 and m["content_addressed"]
    assert set(m["accuracy_by_table_size"]) == {"1", "2", "4", "8", "16"}
    assert all(a == 1.0 for a in m["accuracy_by_table_size"].values())
    # the constructed model has positions for the trained length only: more queries are skipped, with why
    assert m["accuracy_by_queries"] == {"1": 1.0, "2": 1.0} and "n_ctx=" in m["skipped_queries"]["4"]
    assert min(m["per_slot_asked"]) > 0 and sum(m["per_slot_asked"]) == 256 * 2
    # the same pairs moved through every slot: answered alike everywhere
    assert m["moved_pair_accuracy"] == [1.0] * 16 and m["moved_pair_min"] == 1.0 and m["moved_pair_spread"] == 0.0
    assert m["n_moved_pair_sequences"] == 64 and m["moved_pair_interval"] == [[1.0, 1.0]] * 16


def test_a_positional_shortcut_is_caught():
    task = tasks.make("recall", **TASK)
    m = analyses.run("content-addressing", TableReader(task, remembered=8), n=512).metrics
    assert m["per_slot_accuracy"][:8] == [1.0] * 8 and m["per_slot_accuracy"][8:] == [0.0] * 8
    assert m["per_slot_min"] == 0.0 and m["worst_slot"] == 8 and m["slot_spread"] == 1.0
    assert not m["content_addressed"]
    # one pair moved through the slots is answered where it is remembered and nowhere else
    assert m["moved_pair_accuracy"] == [1.0] * 8 + [0.0] * 8 and m["moved_pair_spread"] == 1.0
    # tables of up to 8 pairs never use the forgotten slots, larger ones do in proportion
    assert m["accuracy_by_table_size"]["8"] == 1.0
    assert m["accuracy_by_table_size"]["16"] == pytest.approx(0.5, abs=0.05)
    # a perfect model's intervals are a point; a half-right one's contain its accuracy and have the binomial width
    assert m["accuracy_by_table_size_interval"]["8"] == [1.0, 1.0]
    low, high = m["accuracy_full_table_interval"]
    assert low < m["accuracy_full_table"] < high and m["n_queries_full_table"] == 512 * 2
    se = (0.25 / m["n_queries_full_table"]) ** 0.5  # 2 queries per sequence, slots drawn independently
    assert high - low == pytest.approx(2 * 1.96 * se, rel=0.25)


def test_a_bootstrap_interval_resamples_sequences_not_queries():
    from analyses.intervals import bootstrap_interval

    # 4,000 sequences, each either all right or all wrong on its 4 queries: the spread is that of 4,000
    # coin flips, twice what 16,000 independent queries would give
    right = (torch.arange(4000) % 2 * 4).float()
    low, high = bootstrap_interval(right, torch.full((4000,), 4.0))
    assert (low + high) / 2 == pytest.approx(0.5, abs=0.005)
    assert high - low == pytest.approx(2 * 1.96 * (0.25 / 4000) ** 0.5, rel=0.1)
    assert bootstrap_interval(torch.ones(10), torch.ones(10)) == [1.0, 1.0]


def test_options_and_refusals():
    task = tasks.make("recall", **TASK)
    with pytest.raises(AnalysisError, match="--sizes must lie from 1 to the table's 16 slots"):
        analyses.run("content-addressing", TableReader(task), sizes="4,17")
    m = analyses.run("content-addressing", TableReader(task), sizes="3,16", queries="1", n=64).metrics
    assert list(m["accuracy_by_table_size"]) == ["3", "16"] and list(m["accuracy_by_queries"]) == ["1"]
    model = __import__("models").build("transformer", tasks.make("bijection", V=4, L=3))
    with pytest.raises(AnalysisError, match="needs a task with a table of key-value bindings"):
        analyses.run("content-addressing", model)


def test_measured_on_another_layout_of_the_same_task():
    task = tasks.make("recall", **TASK)
    m = analyses.run("content-addressing", TableReader(task), task="queries=1", queries="1", n=64).metrics
    assert m["measured_task"]["queries"] == 1 and m["task_changes"] == "queries=1" and m["per_slot_min"] == 1.0
    for settings, message in (("n_keys=64", "changes the vocabulary"), ("depth=3", "has no setting 'depth'"),
                              ("queries=9", "needs 101 positions; the model has n_ctx=73"),
                              ("queries", "must be KEY=VALUE pairs"), ("ask=every one", "must be KEY=VALUE pairs"),
                              ("ask=sometimes", "--task ask=sometimes: ")):
        with pytest.raises(AnalysisError, match=message):
            analyses.run("content-addressing", TableReader(task), task=settings)


def test_moving_a_pair_keeps_every_binding_and_moves_nothing_else():
    task = tasks.make("recall", **TASK)
    batch = task.sample(32, generator=torch.Generator().manual_seed(3))
    slot = batch.hypothesis["slot"][:, -1].clamp(min=0)
    for to in (0, 7, 15):
        moved = task.batch_from_tokens(task.move_pair(batch.tokens, slot, to))
        h, before = moved.hypothesis, task.batch_from_tokens(batch.tokens)
        assert torch.equal(moved.posterior_at_queries(), before.posterior_at_queries())  # the same answers
        assert bool((h["slot"][:, -1][batch.hypothesis["bound"][:, -1]] == to).all())
        changed = (moved.tokens != batch.tokens).any(0).nonzero().flatten()
        blocks = set((changed // 4).tolist())
        assert changed.max() < 4 * task.slots and blocks <= set(slot.tolist()) | {to}


def test_the_moved_pair_can_be_skipped_and_is_refused_out_of_range():
    task = tasks.make("recall", **TASK)
    m = analyses.run("content-addressing", TableReader(task), moved=0, n=64).metrics
    assert m["moved_pair_accuracy"] is None and m["moved_pair_min"] is None and m["content_addressed"]
    with pytest.raises(tasks.ConfigError, match="slots to move between must lie from 0 to 15"):
        task.move_pair(torch.zeros(1, task.seq_len, dtype=torch.long), torch.tensor([0]), 16)


def test_the_moved_pair_is_read_in_chunks_with_the_same_answer():
    from analyses.content_addressing import moved_pair_accuracy

    task = tasks.make("recall", **TASK)
    reader = TableReader(task, remembered=8)
    whole, chunked = (moved_pair_accuracy(reader, task.with_table(16), 40, 5, chunk=c) for c in (256, 7))
    assert whole == chunked and whole["n"] == 40
    # a draw where no last query is bound (p_unbound near 1, one sequence): nothing to move, so no numbers
    unbound = tasks.make("recall", **TASK, p_unbound=0.999).with_table(16)
    assert not bool(analyses.base.held_out_batch(unbound, 1, 1).hypothesis["bound"][0, -1])
    assert moved_pair_accuracy(TableReader(unbound), unbound, 1, 0) is None
