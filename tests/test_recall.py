"""The associative recall wind tunnel against brute-force enumeration of the generative process."""
import math

import pytest
import torch

from tasks.base import ConfigError
from tasks.recall import Recall
from tasks.recall import enumerated_posterior as recall_posterior


COMPACT = dict(layout="compact")


@pytest.mark.parametrize("settings", [
    dict(N=2, n_keys=3, n_values=3, queries=3, p_unbound=0.5, **COMPACT),
    dict(N=2, n_keys=4, n_values=3, queries=4, p_unbound=0.6, **COMPACT),
    dict(N=3, n_keys=3, n_values=4, queries=3, **COMPACT),
    dict(N=1, n_keys=2, n_values=2, queries=4, p_unbound=0.7, **COMPACT),
    dict(N=2, n_keys=4, n_values=3, queries=3, p_unbound=0.5, fillers=2, gap=1),
    dict(N=3, n_keys=4, n_values=4, queries=2, N_min=1, slots=4, p_unbound=0.3),
    dict(N=2, n_keys=3, n_values=3, queries=3, fillers=0, gap=0, N_min=1),
    dict(N=2, n_keys=5, n_values=6, queries=3, p_unbound=0.5, pool=3, **COMPACT),
    dict(N=2, n_keys=6, n_values=5, queries=3, N_min=1, p_unbound=0.4, pool=4, fillers=1, gap=1),
])
def test_posterior_equals_enumeration(settings):
    task = Recall(**settings)
    batch = task.sample(16, generator=torch.Generator().manual_seed(1))
    positions = batch.query_mask[0].nonzero().flatten()
    assert len(positions) == task.queries and batch.query_mask.sum(1).eq(task.queries).all()
    for b in range(len(batch)):
        tokens = batch.tokens[b].tolist()
        for i, pos in enumerate(positions.tolist()):
            expected = recall_posterior(task.n_keys, task.n_values, tokens, i, task.layout)
            torch.testing.assert_close(batch.posterior[b, pos], expected, atol=1e-6, rtol=0)


def test_repeated_unbound_key_stays_uniform():
    task = Recall(N=2, n_keys=3, n_values=3, queries=4, p_unbound=0.5, **COMPACT)
    batch = task.sample(64, generator=torch.Generator().manual_seed(0))
    h = batch.hypothesis
    positions = batch.query_mask[0].nonzero().flatten()
    # n_keys - N = 1, so any two unbound queries in a row share the same key
    repeat = ~h["bound"][:, 1:] & (~h["bound"][:, :-1]).cumsum(1).gt(0)
    assert repeat.any()
    later = batch.posterior[:, positions[1:]][repeat]
    torch.testing.assert_close(later, torch.full_like(later, 1 / 3))


def test_tokens_follow_the_layout():
    N, K, V, M = 5, 9, 7, 6
    task = Recall(N=N, n_keys=K, n_values=V, queries=M, p_unbound=0.3, **COMPACT)
    batch = task.sample(32, generator=torch.Generator().manual_seed(0))
    h = batch.hypothesis
    tokens = batch.tokens
    assert task.vocab_size == K + V + 1 and task.SEP == K + V
    assert task.seq_len == 2 * N + 2 * M and tokens.shape == (32, 2 * N + 2 * M)
    assert (tokens[:, 0:2 * N:2] == h["keys"]).all()
    assert (tokens[:, 1:2 * N:2] == h["values"] + K).all()
    assert (tokens[:, 2 * N] == task.SEP).all()
    assert (tokens[:, 2 * N + 1::2] == h["query_keys"]).all()
    assert (tokens[:, 2 * N + 2::2] == h["answers"][:, :-1] + K).all()
    # keys and values of a table are distinct and from their pools
    assert all(len(set(row.tolist())) == N for row in h["keys"])
    assert all(len(set(row.tolist())) == N for row in h["values"])
    assert h["keys"].lt(K).all() and h["values"].lt(V).all() and h["values"].ge(0).all()
    # a query is bound exactly when its key is in the table, and then answers the bound value
    in_table = (h["query_keys"][:, :, None] == h["keys"][:, None, :])
    assert torch.equal(in_table.any(-1), h["bound"])
    bound_value = (in_table.long() * h["values"][:, None, :]).sum(-1)
    assert (h["answers"][h["bound"]] == bound_value[h["bound"]]).all()
    # labels sit at the query keys and name the following answer; nothing else is labelled
    qpos = batch.query_mask[0].nonzero().flatten()
    assert torch.equal(qpos, 2 * N + 1 + 2 * torch.arange(M))
    assert torch.equal(batch.targets[:, qpos], h["answers"])
    assert (batch.targets[~batch.query_mask] == -100).all()


def test_names_and_hypothesis_tokens():
    task = Recall(N=2, n_keys=4, n_values=8, queries=2, **COMPACT)
    assert task.token_names(torch.tensor([3, 4, 11, 12])) == ["k3", "v0", "v7", "SEP"]
    frame = task.hypothesis_tokens()
    assert torch.equal(frame["keys"], torch.arange(4)) and torch.equal(frame["values"], torch.arange(4, 12))
    logits = torch.randn(3, task.vocab_size)
    assert torch.equal(task.answer_logits(logits), logits[:, 4:12])
    assert task.config() == dict(name="recall", N=2, n_keys=4, n_values=8, queries=2, p_unbound=0.0,
                                 layout="compact", fillers=0, gap=0, N_min=2, slots=2, ask="random")
    assert Recall(**{k: v for k, v in task.config().items() if k != "name"}).config() == task.config()
    assert Recall.length_setting == "queries"


def test_posteriors_are_distributions_and_entropies_in_range():
    task = Recall(N=6, n_keys=10, n_values=12, queries=8, p_unbound=0.4)
    batch = task.sample(128, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(batch.posterior.sum(-1), torch.ones(128, task.seq_len))
    assert (batch.posterior >= 0).all()
    h = batch.bayes_entropy
    assert (h >= -1e-6).all() and (h <= math.log2(12) + 1e-6).all()
    at_queries = h[:, batch.query_mask[0]]
    bound = batch.hypothesis["bound"]
    assert bound.any() and (~bound).any()
    assert (at_queries[bound] == 0).all()
    torch.testing.assert_close(at_queries[~bound], torch.full_like(at_queries[~bound], math.log2(12)))


def test_unbound_fraction():
    every = Recall(N=4, n_keys=8, n_values=8, queries=6).sample(
        500, generator=torch.Generator().manual_seed(0))
    assert every.hypothesis["bound"].all()
    task = Recall(N=4, n_keys=8, n_values=8, queries=8, p_unbound=0.3)
    h = task.sample(4000, generator=torch.Generator().manual_seed(0)).hypothesis
    unbound = ~h["bound"]
    assert abs(unbound.float().mean().item() - 0.3) < 0.02  # 32k draws: std ~0.003
    # unbound queries reach every free key; bound queries spread over every table slot
    in_table = h["query_keys"][:, :, None] == h["keys"][:, None, :]
    slot_counts = in_table[h["bound"]].float().sum(0)
    assert slot_counts.min() > 0.9 * slot_counts.mean()
    assert len(set(h["query_keys"][unbound].tolist())) == 8


@pytest.mark.parametrize("settings, message", [
    (dict(N=0), "N must be at least 1"),
    (dict(queries=0), "queries must be at least 1"),
    (dict(n_keys=2.0), "n_keys must be an integer"),
    (dict(N=True), "N must be an integer"),
    (dict(N=5, n_keys=4), "raise n_keys to at least 5"),
    (dict(N=5, n_values=4), "raise n_values to at least 5"),
    (dict(p_unbound=1.0), r"p_unbound must be in \[0, 1\)"),
    (dict(p_unbound=-0.1), r"p_unbound must be in \[0, 1\)"),
    (dict(p_unbound="0.1"), "p_unbound must be a number"),
    (dict(N=4, n_keys=4, p_unbound=0.2), "raise n_keys above N=4 or set p_unbound=0"),
    (dict(layout="grid"), "layout must be one of paper, compact"),
    (dict(fillers=-1), "fillers must be at least 0"),
    (dict(gap=1.5), "gap must be an integer"),
    (dict(N=8, N_min=9), "N_min=9 is more than N=8"),
    (dict(N=8, slots=7), "slots=7 cannot hold N=8 pairs"),
    (dict(N=8, N_min=4, layout="compact"), "need layout='paper'"),
    (dict(ask="all"), "ask must be one of random, every"),
    (dict(ask="every", p_unbound=0.2), "takes no unbound queries"),
    (dict(N=8, pool=7), "pool=7 must hold the table"),
    (dict(N=8, n_values=20, pool=21), "at most n_keys=256, n_values=20"),
    (dict(N=8, pool=8, p_unbound=0.1), "raise pool above N=8"),
    (dict(pool=2.5), "pool must be an integer"),
])
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        Recall(**settings)


def test_paper_layout_and_its_defaults():
    """The authors' format: 64 x STORE k SEP v, 32 fillers, 3 x QUERY k PAD with 16 fillers between."""
    task = Recall()
    assert (task.N, task.n_keys, task.n_values, task.queries, task.fillers, task.gap) == (64, 256, 256, 3, 32, 16)
    assert task.seq_len == 64 * 4 + 32 + 3 * 3 + 2 * 16 == 329 and task.vocab_size == 256 + 256 + 5
    batch = task.sample(8, generator=torch.Generator().manual_seed(0))
    names = task.token_names(batch.tokens[0])
    assert names[:4] == ["STORE", f"k{batch.hypothesis['keys'][0, 0].item()}", "SEP",
                         f"v{batch.hypothesis['values'][0, 0].item()}"]
    assert names[256:288] == ["FILL"] * 32
    assert names[288] == "QUERY" and names[290] == "PAD" and names[291:307] == ["FILL"] * 16
    assert names[-3] == "QUERY" and names[-1] == "PAD"
    assert torch.equal(batch.query_mask[0].nonzero().flatten(), torch.tensor([289, 308, 327]))
    h = batch.hypothesis
    assert all(len(set(row.tolist())) == 64 for row in h["keys"]) and h["bound"].all()
    assert torch.equal(batch.targets[:, [289, 308, 327]], h["values"].gather(1, h["slot"]))


def test_table_sizes_vary_at_one_length():
    """N_min < N: every size from N_min to N occurs, empty slots are filler, the queries do not move."""
    task = Recall(N=6, n_keys=10, n_values=10, queries=2, N_min=2, slots=8, p_unbound=0.2)
    batch = task.sample(3000, generator=torch.Generator().manual_seed(0))
    h = batch.hypothesis
    assert sorted(set(h["n_pairs"].tolist())) == [2, 3, 4, 5, 6]
    counts = torch.bincount(h["n_pairs"])[2:].float()
    assert counts.min() > 0.85 * counts.mean()
    filled = torch.arange(8) < h["n_pairs"][:, None]
    assert ((h["keys"] >= 0) == filled).all() and ((h["values"] >= 0) == filled).all()
    table = batch.tokens[:, :32].reshape(-1, 8, 4)
    assert (table[~filled] == task.FILL).all() and (table[filled][:, 0] == task.STORE).all()
    # a bound query asks about a filled slot, spread over all of them; an unbound one about no slot
    slot = h["slot"]
    assert (slot[h["bound"]] < h["n_pairs"][:, None].expand_as(slot)[h["bound"]]).all()
    assert (slot[~h["bound"]] == -1).all() and set(slot[h["bound"]].tolist()) == set(range(6))
    # reading the tokens back gives the same posterior and slots
    again = task.batch_from_tokens(batch.tokens)
    torch.testing.assert_close(again.posterior, batch.posterior)
    assert torch.equal(again.hypothesis["slot"], slot)
    # more queries than trained: the layout extends, positions of the first ones stay
    longer = task.with_length(4).sample(2)
    assert torch.equal(longer.query_mask[0].nonzero().flatten()[:2], batch.query_mask[0].nonzero().flatten())


def test_malformed_paper_sequences_are_refused():
    task = Recall(N=2, n_keys=4, n_values=4, queries=2, fillers=1, gap=1)
    tokens = task.sample(1, generator=torch.Generator().manual_seed(0)).tokens
    for position, token in ((0, task.FILL), (2, task.PAD), (8, task.STORE), (10, task.SEP)):
        bad = tokens.clone()
        bad[0, position] = token
        with pytest.raises(ConfigError, match="a sequence is up to 2 slots"):
            task.batch_from_tokens(bad)
    with pytest.raises(ConfigError, match="a sequence is"):
        task.batch_from_tokens(tokens[:, :-1])


@pytest.mark.parametrize("queries", [3, 16, 20])
def test_ask_every_queries_each_bound_key_once_then_draws_again(queries):
    task = Recall(N=16, N_min=1, queries=queries, gap=0, ask="every")
    batch = task.sample(256, generator=torch.Generator().manual_seed(0))
    h = batch.hypothesis
    for row in range(256):
        n = int(h["n_pairs"][row])
        asked = h["query_keys"][row].tolist()
        first = asked[:min(queries, n)]
        assert len(set(first)) == len(first)  # no key twice before every key was asked
        bound = set(h["keys"][row, :n].tolist())
        assert set(asked) <= bound and (queries < n or set(first) == bound)
    # every query is labelled with its bound value, as the random layout labels it
    assert torch.equal(batch.posterior[batch.query_mask].argmax(-1), h["answers"].flatten())
    assert bool((batch.bayes_entropy[batch.query_mask] == 0).all())


def test_ask_every_leaves_the_table_and_the_random_layouts_stream_alone():
    """The table of a seed is the same under both settings (the extra draw comes last), so a dense stage and
    the paper's evaluation differ only in which keys are asked."""
    random_, every = (Recall(N=16, N_min=1, queries=16, gap=0, ask=ask).sample(
        64, generator=torch.Generator().manual_seed(3)) for ask in ("random", "every"))
    assert torch.equal(random_.hypothesis["keys"], every.hypothesis["keys"])
    assert torch.equal(random_.hypothesis["values"], every.hypothesis["values"])
    assert not torch.equal(random_.hypothesis["query_keys"], every.hypothesis["query_keys"])


def test_dense_answers_at_the_paper_table():
    from tasks.recall import DENSE

    task = Recall(**DENSE)
    assert task.seq_len == 4 * 64 + 32 + 3 * 64 == 480
    batch = task.sample(4, generator=torch.Generator().manual_seed(0))
    assert int(batch.query_mask.sum()) == 4 * 64
    assert [sorted(row) for row in batch.hypothesis["query_keys"].tolist()] == \
        [sorted(row) for row in batch.hypothesis["keys"].tolist()]


def test_a_pool_draws_tables_from_its_first_keys_and_values_and_the_full_pool_changes_nothing():
    task = Recall(N=8, N_min=1, slots=8, fillers=4, queries=8, gap=0, p_unbound=0.3, pool=16)
    assert task.config()["pool"] == 16 and Recall(**{k: v for k, v in task.config().items() if k != "name"}).pool == 16
    h = task.sample(256, generator=torch.Generator().manual_seed(0)).hypothesis
    keys, values = h["keys"][h["keys"] >= 0], h["values"][h["values"] >= 0]
    assert keys.max() < 16 and values.max() < 16 and h["query_keys"].max() < 16
    assert not h["bound"].all() and set(h["query_keys"][~h["bound"]].tolist()) <= set(range(16))
    # pool=None (every key and value) is the stream it always was; a pool as large as both is the same draw
    plain, full = (Recall(N=8, N_min=1, queries=4, pool=pool).sample(32, generator=torch.Generator().manual_seed(5))
                   for pool in (None, 256))
    assert torch.equal(plain.tokens, full.tokens) and "pool" not in Recall().config()
