"""What every wind tunnel promises, checked on each registered task at small sizes."""
import math

import pytest
import torch

import tasks

SMALL = {
    "bijection": dict(V=6, L=5),
    "hmm": dict(S=3, O=3, K=6),
    "regression": dict(d=3, n=6),
    "recall": dict(N=4, n_keys=8, n_values=8, queries=3, p_unbound=0.3),
}


def test_every_task_is_covered():
    assert set(SMALL) == set(tasks.NAMES)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_sampling_is_deterministic_under_a_generator(name):
    task = tasks.make(name, **SMALL[name])
    a, b, c = (task.sample(16, generator=torch.Generator().manual_seed(s)) for s in (42, 42, 43))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.targets, b.targets)
    assert torch.equal(a.bayes_entropy, b.bayes_entropy)
    for key, value in a.hypothesis.items():
        assert torch.equal(value, b.hypothesis[key]), key
    assert not torch.equal(a.tokens, c.tokens)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_shapes_and_posteriors(name):
    task = tasks.make(name, **SMALL[name])
    batch = task.sample(32, generator=torch.Generator().manual_seed(0))
    B, T = 32, task.seq_len
    assert batch.tokens.shape[:2] == (B, T) and batch.query_mask.shape == (B, T)
    assert batch.query_mask.any(1).all()
    assert tasks.from_config(task.config()).config() == task.config()
    if task.continuous:
        assert batch.tokens.shape[2] == task.input_dim and (batch.posterior_var > 0).all()
        return
    assert batch.posterior.shape == (B, T, task.n_classes) and (batch.posterior >= 0).all()
    torch.testing.assert_close(batch.posterior.sum(-1), torch.ones(B, T))
    h = batch.bayes_entropy
    assert (h >= -1e-6).all() and (h <= math.log2(task.n_classes) + 1e-6).all()
    assert (batch.targets[~batch.query_mask] == -100).all()
    assert (batch.targets[batch.query_mask] >= 0).all()
    # the label at every query is an answer the Bayes posterior allows
    allowed = batch.posterior.gather(-1, batch.targets.clamp_min(0)[..., None])[..., 0]
    assert (allowed[batch.query_mask] > 0).all()


@pytest.mark.parametrize("name", tasks.NAMES)
@pytest.mark.parametrize("batch_size", [0, -1, 2.5, True])
def test_a_bad_batch_size_gets_a_one_line_error(name, batch_size):
    with pytest.raises(tasks.ConfigError, match="batch_size must be a positive integer"):
        tasks.make(name).sample(batch_size)
