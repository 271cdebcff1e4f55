"""Property-based tests of every wind tunnel (hypothesis): on random small configurations and seeds,
posteriors are distributions, entropies lie in [0, log2 C], the posterior agrees with brute force,
and sampling is a pure function of the seed."""
import math
import random
from dataclasses import fields

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tasks

SEEDS = st.integers(0, 2 ** 32 - 1)
BATCH = 3
FAST = settings(max_examples=30, deadline=None)


def test_every_task_declares_small_configs_and_an_oracle():
    for name, cls in tasks.REGISTRY.items():
        task = tasks.make(name, **cls.small_config(random.Random(0)))
        assert type(task).brute_force is not tasks.Task.brute_force, name


def sample(name, data):
    # Each task declares its small configurations (drawn from a hypothesis-controlled Random, so
    # failures shrink) and its brute-force oracle; a new task is covered here with no edit.
    rng = data.draw(st.randoms(use_true_random=False), label="rng")
    task = tasks.make(name, **tasks.REGISTRY[name].small_config(rng))
    seed = data.draw(SEEDS, label="seed")
    return task, task.sample(BATCH, generator=torch.Generator().manual_seed(seed)), seed


@pytest.mark.parametrize("name", [n for n in tasks.NAMES if not tasks.REGISTRY[n].continuous])
@FAST
@given(data=st.data())
def test_discrete_posteriors_are_distributions_that_match_brute_force(name, data):
    task, batch, _ = sample(name, data)
    post, C = batch.posterior, task.n_classes
    assert post.shape == (BATCH, task.seq_len, C) and torch.isfinite(post).all() and (post >= 0).all()
    torch.testing.assert_close(post.sum(-1), torch.ones(BATCH, task.seq_len), atol=1e-5, rtol=0)
    h = batch.bayes_entropy
    assert (h >= -1e-6).all() and (h <= math.log2(C) + 1e-5).all()
    torch.testing.assert_close(h, tasks.entropy_bits(post), atol=1e-5, rtol=0)
    for b in range(BATCH):
        at_queries = post[b, batch.query_mask[b]].double()
        torch.testing.assert_close(at_queries, task.brute_force(batch, b), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", [n for n in tasks.NAMES if tasks.REGISTRY[n].continuous])
@FAST
@given(data=st.data())
def test_continuous_predictives_are_gaussians_that_match_brute_force(name, data):
    task, batch, _ = sample(name, data)
    mean, var = batch.posterior_mean, batch.posterior_var
    assert torch.isfinite(mean).all() and torch.isfinite(var).all() and (var > 0).all()
    torch.testing.assert_close(batch.bayes_entropy, 0.5 * torch.log2(2 * math.pi * math.e * var))
    for b in range(BATCH):
        exact_mean, exact_var = task.brute_force(batch, b)
        q = batch.query_mask[b]
        torch.testing.assert_close(mean[b, q].double(), exact_mean, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(var[b, q].double(), exact_var, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", tasks.NAMES)
@FAST
@given(data=st.data())
def test_sampling_is_a_pure_function_of_the_seed(name, data):
    task, first, seed = sample(name, data)
    again = task.sample(BATCH, generator=torch.Generator().manual_seed(seed))
    for field in fields(first):
        a, b = getattr(first, field.name), getattr(again, field.name)
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b), field.name
    assert first.hypothesis.keys() == again.hypothesis.keys()
    for key, value in first.hypothesis.items():
        assert torch.equal(value, again.hypothesis[key]), key
