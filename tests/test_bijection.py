"""The bijection wind tunnel against brute-force enumeration of every consistent permutation."""
import math

import pytest
import torch

import tasks
from tasks.bijection import enumerated_posterior as bijection_posterior


@pytest.mark.parametrize("settings", [
    dict(V=5, L=5), dict(V=6, L=4), dict(V=4, L=7, replacement=True),
    dict(V=5, L=3, paired=True), dict(V=4, L=4, paired=True, replacement=True),
])
def test_posterior_equals_enumeration(settings):
    task = tasks.make("bijection", **settings)
    batch = task.sample(12, generator=torch.Generator().manual_seed(1))
    keys, values = batch.hypothesis["keys"], batch.hypothesis["values"]
    key_positions = batch.query_mask[0].nonzero().flatten()
    assert batch.query_mask.sum(1).eq(len(key_positions)).all()
    for b in range(len(batch)):
        for i, pos in enumerate(key_positions):
            expected = bijection_posterior(task.V, keys[b].tolist(), values[b].tolist(), i)
            torch.testing.assert_close(batch.posterior[b, pos], expected, atol=1e-6, rtol=0)


def test_tokens_follow_the_reference_format():
    task = tasks.make("bijection", V=7, L=6)
    batch = task.sample(5, generator=torch.Generator().manual_seed(0))
    perm, keys = batch.hypothesis["permutation"], batch.hypothesis["keys"]
    assert batch.tokens.shape == (5, 2 * 6 - 1)
    assert (batch.tokens[:, 0::2] == keys).all()
    assert (batch.tokens[:, 1::2] == perm.gather(1, keys[:, :-1]) + 7).all()  # values are V..2V-1
    # every key is distinct without replacement; each row of perm is a permutation
    assert all(len(set(row.tolist())) == 6 for row in keys)
    assert (perm.sort(1).values == torch.arange(7)).all()
    # labels sit at the key positions and name the value that follows
    assert (batch.targets[:, 0::2] == perm.gather(1, keys)).all()
    assert (batch.targets[:, 1::2] == -100).all()


def test_entropy_staircase():
    task = tasks.make("bijection", V=20, L=19)
    batch = task.sample(3, generator=torch.Generator().manual_seed(0))
    at_keys = batch.bayes_entropy[:, batch.query_mask[0]]
    expected = torch.tensor([math.log2(20 - t + 1) for t in range(1, 20)])
    torch.testing.assert_close(at_keys, expected.expand(3, -1))


def test_repeated_key_has_delta_posterior():
    task = tasks.make("bijection", V=3, L=12, replacement=True)
    batch = task.sample(50, generator=torch.Generator().manual_seed(0))
    keys = batch.hypothesis["keys"]
    positions = batch.query_mask[0].nonzero().flatten()
    seen_before = torch.stack([(keys[:, :i] == keys[:, i:i + 1]).any(1) for i in range(12)], 1)
    h = batch.bayes_entropy[:, positions]
    assert seen_before.any() and (h[seen_before] == 0).all()
    delta = torch.nn.functional.one_hot(batch.hypothesis["values"], 3).float()
    assert torch.equal(batch.posterior[:, positions][seen_before], delta[seen_before])
    torch.testing.assert_close(h[:, 0], torch.full((50,), math.log2(3)))  # the first key is always uniform


def test_posteriors_are_distributions():
    batch = tasks.make("bijection", V=9, L=9).sample(64, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(batch.posterior.sum(-1), torch.ones(64, 17))
    assert (batch.posterior >= 0).all()


@pytest.mark.parametrize("settings, message", [
    (dict(V=1), "V must be at least 2"),
    (dict(V=5, L=6), "needs keys drawn with replacement"),
    (dict(V=5, L=0), "L must be at least 1"),
    (dict(V=5.5), "must be an integer"),
    (dict(colour=3), "unknown setting"),
])
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(tasks.ConfigError, match=message):
        tasks.make("bijection", **settings)


def test_unknown_task_lists_the_valid_ones():
    with pytest.raises(tasks.ConfigError, match="valid tasks: bijection"):
        tasks.make("sudoku")
