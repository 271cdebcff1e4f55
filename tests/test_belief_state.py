"""belief-state: the held-out linear read-out of the Bayes belief, on inputs whose answer is known."""
import numpy as np
import torch

import tasks
from analyses import belief_state


def beliefs(n, C, seed=0):
    return np.random.default_rng(seed).dirichlet(np.ones(C), size=n)


def test_a_residual_that_is_a_linear_image_of_the_belief_reads_out_exactly():
    y = beliefs(2000, 4)
    x = y @ np.random.default_rng(1).normal(size=(4, 16)) + 3.0  # an affine embedding in 16 dimensions
    train, test = np.arange(1000), np.arange(1000, 2000)
    r2, rmse, _ = belief_state.held_out_scores(x, y, train, test)
    assert r2 > 0.999 and rmse < 0.01
    # fitted to shuffled beliefs, the same residuals explain nothing held out
    shuffled = y[train][np.random.default_rng(2).permutation(1000)]
    assert belief_state.held_out_scores(x, y, train, test, fit_targets=shuffled)[0] < 0.02


def test_a_residual_unrelated_to_the_belief_scores_about_zero():
    y, x = beliefs(2000, 4), np.random.default_rng(3).normal(size=(2000, 16))
    r2, _, _ = belief_state.held_out_scores(x, y, np.arange(1000), np.arange(1000, 2000))
    assert -0.05 < r2 < 0.02


def test_split_keeps_each_sequence_on_one_side_and_targets_line_up_with_queries():
    task = tasks.make("hmm", S=3, K=6)
    batch = task.sample(10, generator=torch.Generator().manual_seed(0))
    target = belief_state.beliefs_at_queries(batch)
    assert target.shape == (int(batch.query_mask.sum()), task.n_classes)
    assert np.allclose(target.sum(1), 1)
    train, test = belief_state.split_points(batch, seed=4)
    per = batch.query_mask.sum(1).numpy()
    owner = np.repeat(np.arange(10), per)
    assert set(owner[train]).isdisjoint(owner[test]) and len(set(owner[train])) == 5
    assert sorted(np.concatenate([train, test])) == list(range(len(target)))


def test_continuous_targets_are_mean_and_log_variance():
    task = tasks.make("regression", d=2, n=4)
    batch = task.sample(6, generator=torch.Generator().manual_seed(0))
    target = belief_state.beliefs_at_queries(batch)
    mask = batch.query_mask
    assert np.allclose(target[:, 0], batch.posterior_mean[mask].numpy())
    assert np.allclose(target[:, 1], batch.posterior_var[mask].log().numpy(), atol=1e-6)
