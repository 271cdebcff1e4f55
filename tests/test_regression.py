"""Bayesian linear regression: the conjugate predictive against the joint Gaussian of the outputs."""
import math

import pytest
import torch

import analyses
import models
import tasks
from analyses import calibration
from interp.recipe import stated
from interp.train import TrainSettings, Trainer
from tasks.regression import conditioned_predictive as regression_predictive


@pytest.mark.parametrize("d, n, weight_std, noise_std", [(1, 5, 1.0, 0.5), (3, 8, 2.0, 0.1), (4, 6, 0.5, 1.0)])
def test_predictive_equals_joint_gaussian_conditioning(d, n, weight_std, noise_std):
    task = tasks.make("regression", d=d, n=n, weight_std=weight_std, noise_std=noise_std)
    batch = task.sample(6, generator=torch.Generator().manual_seed(0))
    x, y = batch.hypothesis["x"].double(), batch.hypothesis["y"].double()
    for b in range(6):
        mean, var = regression_predictive(x[b], y[b], weight_std, noise_std)
        torch.testing.assert_close(batch.posterior_mean[b, 0::2].double(), mean, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(batch.posterior_var[b, 0::2].double(), var, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(batch.bayes_entropy[:, 0::2],
                               0.5 * torch.log2(2 * math.pi * math.e * batch.posterior_var[:, 0::2]))


def test_tokens_and_monte_carlo_coverage():
    task = tasks.make("regression", d=2, n=6)
    batch = task.sample(4000, generator=torch.Generator().manual_seed(1))
    x, y = batch.hypothesis["x"], batch.hypothesis["y"]
    assert batch.tokens.shape == (4000, 11, 4)
    assert torch.equal(batch.tokens[:, 0::2, :2], x) and torch.equal(batch.tokens[:, 1::2, 2], y[:, :-1])
    assert (batch.tokens[:, 1::2, 3] == 1).all() and (batch.tokens[:, 0::2, 2:] == 0).all()
    # Monte Carlo: the realised y is a draw from the predictive, so standardised residuals are N(0, 1).
    z = (y - batch.posterior_mean[:, 0::2]) / batch.posterior_var[:, 0::2].sqrt()
    assert abs(z.mean().item()) < 0.03 and abs(z.var().item() - 1) < 0.05


def test_determinism_and_bad_settings():
    task = tasks.make("regression", d=3, n=4)
    a = task.sample(5, generator=torch.Generator().manual_seed(3))
    b = task.sample(5, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.tokens, b.tokens)
    with pytest.raises(tasks.ConfigError, match="noise_std must be a finite positive"):
        tasks.make("regression", noise_std=0)
    with pytest.raises(tasks.ConfigError, match="d must be at least 1"):
        tasks.make("regression", d=0)


class GaussianOracle:
    def __init__(self, task, batch):
        self.task, self.batch = task, batch

    def predictive(self, inputs):
        n = len(inputs)
        return self.batch.posterior_mean[:n], self.batch.posterior_var[:n]


def test_calibration_of_the_exact_predictive_is_zero():
    task = tasks.make("regression", d=3, n=5)
    batch = task.sample(50, generator=torch.Generator().manual_seed(0))
    numbers = calibration.measure(GaussianOracle(task, batch), batch)
    assert numbers["entropy_mae_bits"] == pytest.approx(0, abs=1e-6)
    assert numbers["kl_bits"] == pytest.approx(0, abs=1e-6) and numbers["mean_sq_error"] == 0
    assert numbers["relative_mean_error"] == 0


class ShiftedOracle(GaussianOracle):
    """The Bayes predictive with its mean moved by one Bayes standard deviation."""

    def predictive(self, inputs):
        mean, var = super().predictive(inputs)
        return mean + var.sqrt(), var


def test_relative_mean_error_counts_the_mean_off_by_one_predictive_sd_as_one():
    task = tasks.make("regression", d=3, n=5)
    batch = task.sample(50, generator=torch.Generator().manual_seed(0))
    numbers = calibration.measure(ShiftedOracle(task, batch), batch)
    assert numbers["relative_mean_error"] == pytest.approx(1, rel=1e-5)
    assert numbers["entropy_mae_bits"] == pytest.approx(0, abs=1e-6)  # what entropy alone cannot see


def test_least_squares_predictions_match_numpy_lstsq_minimum_norm():
    import numpy as np

    x, y = torch.randn(3, 7, 4, dtype=torch.float64), torch.randn(3, 7, dtype=torch.float64)
    got = calibration.least_squares_predictions(x, y)
    for b in range(3):
        assert got[b, 0] == 0
        for i in range(1, 7):  # i < d = 4: underdetermined, numpy's lstsq gives the minimum-norm fit
            w_hat = np.linalg.lstsq(x[b, :i].numpy(), y[b, :i].numpy(), rcond=None)[0]
            assert got[b, i].item() == pytest.approx(float(x[b, i].numpy() @ w_hat), abs=1e-9)


def test_in_context_curves_put_the_oracle_on_the_bayes_curve_below_least_squares():
    task = tasks.make("regression", d=3, n=8)
    batch = task.sample(1000, generator=torch.Generator().manual_seed(1))  # the oracle answers one chunk
    curves = calibration.measure(GaussianOracle(task, batch), batch, in_context=True)["in_context"]
    assert curves["examples"] == list(range(8)) and curves["model_sq_error"] == curves["bayes_sq_error"]
    # With no example both predict 0: E[y^2] / d = (weight_std^2 d + noise^2) / d.
    assert curves["bayes_sq_error"][0] == pytest.approx((3 + 0.25) / 3, rel=0.1)
    # Least squares interpolates noise near k = d, where Bayes (ridge) is far better (Garg et al.).
    assert curves["least_squares_sq_error"][3] > 2 * curves["bayes_sq_error"][3]
    assert curves["least_squares_sq_error"][7] == pytest.approx(curves["bayes_sq_error"][7], rel=0.5)


@pytest.mark.slow  # trains hundreds of steps or starts processes: minutes on a busy 2-core machine
def test_a_transformer_reads_continuous_inputs_with_hooks_and_learns(tmp_path):
    task = tasks.make("regression", d=2, n=6)
    model = models.build("transformer", task, config=dict(d_model=32, n_layers=2, n_heads=2))
    batch = task.sample(8, generator=torch.Generator().manual_seed(0))
    mean, var = model.predictive(batch.tokens)
    assert mean.shape == var.shape == (8, 11) and (var > 0).all()
    _, cache = model.run_with_cache(batch.tokens)
    assert cache["hook_embed"].shape == (8, 11, 32) and "blocks.1.attn.hook_pattern" in cache
    with pytest.raises(TypeError, match="continuous task"):
        model.answer_probs(batch.tokens)
    with pytest.raises(analyses.AnalysisError, match="no hypothesis tokens"):
        analyses.run("key-orthogonality", model)
    settings = TrainSettings(steps=600, batch_size=64, lr=3e-3, warmup=30, eval_every=600, eval_size=500)
    trainer = Trainer.start(tmp_path / "reg",
                            stated(task.config(), "transformer", dict(d_model=32, n_layers=2, n_heads=2), settings),
                            progress=False)
    before = trainer.evaluate()["entropy_mae_bits"]
    after = trainer.run()["entropy_mae_bits"]
    assert after < before / 2


def test_gd_baseline_known_answers(benchmark_module):
    """benchmarks/gd_baseline.py: one step from 0 is eta * sum_{j<i} y_j x_j . x_i; many steps reach least squares."""
    gd_baseline = benchmark_module("gd_baseline")
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(3, 12, 2, generator=g, dtype=torch.float64), torch.randn(3, 12, generator=g, dtype=torch.float64)
    one = gd_baseline.gd_means(x, y, 1, 0.1)
    for i in range(12):
        w = 0.1 * (y[:, :i, None] * x[:, :i]).sum(1)
        torch.testing.assert_close(one[:, i], (w * x[:, i]).sum(-1))
    # at the last query 11 pairs in 2 dimensions: plain GD converges to the least-squares fit
    many = gd_baseline.gd_means(x, y, 3000, 0.02)[:, -1]
    w_ls = torch.linalg.lstsq(x[:, :-1], y[:, :-1, None]).solution[..., 0]
    torch.testing.assert_close(many, (w_ls * x[:, -1]).sum(-1), rtol=1e-6, atol=1e-8)
