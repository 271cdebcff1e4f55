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
    "mess3": dict(L=6),
    "rrxor": dict(L=6),
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


@pytest.mark.parametrize("name", ["bijection", "hmm", "recall"])
def test_a_posterior_given_at_the_queries_reads_as_the_dense_one(name):
    """Tasks keep their posterior at the query positions only until something reads it whole; every
    way of reading it (whole, at the queries, after rows/to/double, the training loss) must equal the
    dense tensor with uniform placeholders."""
    import models
    from models.base import training_loss
    from tasks.base import PosteriorAtQueries

    task = tasks.make(name, **SMALL[name])
    lazy = task.sample(6, generator=torch.Generator().manual_seed(1))
    assert isinstance(lazy.__dict__["_posterior"], PosteriorAtQueries)
    picked = lazy.rows(2, 5).double()  # still lazy after map
    assert isinstance(picked.__dict__["_posterior"], PosteriorAtQueries)
    model = models.build("transformer", task, config=dict(d_model=16, n_layers=1, n_heads=2))
    loss_lazy = training_loss(model, lazy)
    dense = lazy.posterior  # made dense on this first read
    assert isinstance(lazy.__dict__["_posterior"], torch.Tensor)
    C = task.n_classes
    torch.testing.assert_close(dense[~lazy.query_mask], torch.full_like(dense[~lazy.query_mask], 1 / C))
    assert torch.equal(lazy.posterior_at_queries(), dense[lazy.query_mask])
    assert torch.equal(picked.posterior, dense[2:5].double())
    assert torch.equal(picked.posterior_at_queries(), dense[2:5].double()[picked.query_mask])
    assert torch.equal(training_loss(model, lazy), loss_lazy)


def test_query_positions_are_sorted_with_their_posteriors_and_labels():
    from tasks.base import batch_at_queries

    tokens = torch.zeros(2, 6, dtype=torch.long)
    posterior = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]] * 2)  # position 4 -> class 0, position 1 -> class 1
    labels = torch.tensor([[0, 1]] * 2)
    batch = batch_at_queries(tokens, torch.tensor([4, 1]), posterior, labels, {})
    assert batch.targets[0].tolist() == [-100, 1, -100, -100, 0, -100]
    assert batch.posterior[0, 4].tolist() == [1.0, 0.0] and batch.posterior[0, 1].tolist() == [0.0, 1.0]
    assert torch.equal(batch.posterior_at_queries(), batch.posterior[batch.query_mask])
    with pytest.raises(ValueError, match="distinct"):
        batch_at_queries(tokens, torch.tensor([1, 1]), posterior, labels, {})


@pytest.mark.parametrize("name", tasks.NAMES)
@pytest.mark.parametrize("batch_size", [0, -1, 2.5, True])
def test_a_bad_batch_size_gets_a_one_line_error(name, batch_size):
    with pytest.raises(tasks.ConfigError, match="batch_size must be a positive integer"):
        tasks.make(name).sample(batch_size)
