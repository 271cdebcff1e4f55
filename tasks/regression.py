"""Bayesian linear regression in context: a fresh weight vector per sequence.

Per sequence w ~ N(0, weight_std^2 I_d); inputs x_i ~ N(0, I_d); outputs y_i = w.x_i + eps_i with
eps_i ~ N(0, noise_std^2). The sequence is ``[x_1, y_1, x_2, y_2, ..., x_n]`` (length 2n-1).

How a model consumes it. The inputs are continuous, so ``batch.tokens`` is a FloatTensor
[B, T, d+2] instead of token ids: an x position holds ``[x, 0, 0]`` and a y position
``[0, ..., 0, y, 1]`` (the last feature says "this is an answer"). A model for a continuous task
replaces its token embedding by a linear input projection (``task.input_dim`` -> d_model) and its
unembedding by a Gaussian head (mean, log-variance); see ``models/transformer.py``.

Queries and posterior. Every x position is a query for the y that follows. Having seen pairs
1..i-1, the conjugate update gives the posterior over w with precision
Lambda = I / weight_std^2 + sum_j x_j x_j^T / noise_std^2 and mean Lambda^-1 sum_j x_j y_j / noise_std^2,
so the predictive for y_i is Gaussian with mean x_i^T mu and variance noise_std^2 + x_i^T Lambda^-1 x_i
(``batch.posterior_mean`` / ``batch.posterior_var``). ``bayes_entropy`` is that Gaussian's
differential entropy in bits, 0.5 log2(2 pi e var): it can be negative, and calibration MAE is
still |H_model - H_Bayes| in bits.
"""
from __future__ import annotations

import math
import random

import torch

from .base import Batch, ConfigError, Corruption, PaperRow, Preset, Task, checked_batch_size, whole


def conditioned_predictive(x: torch.Tensor, y: torch.Tensor, weight_std: float, noise_std: float):
    """p(y_i | y_<i) by conditioning the joint N(0, weight_std^2 X X^T + noise_std^2 I) of all outputs,
    which never forms a posterior over w: an independent route to ``Regression.predictive``."""
    n = x.shape[0]
    cov = weight_std ** 2 * x @ x.T + noise_std ** 2 * torch.eye(n, dtype=x.dtype)
    means, variances = [], []
    for i in range(n):
        if i == 0:
            means.append(torch.zeros((), dtype=x.dtype))
            variances.append(cov[0, 0])
            continue
        k = cov[i, :i]
        solve = torch.linalg.solve(cov[:i, :i], k)
        means.append(solve @ y[:i])
        variances.append(cov[i, i] - k @ solve)
    return torch.stack(means), torch.stack(variances)


def gaussian_entropy_bits(var: torch.Tensor) -> torch.Tensor:
    return 0.5 * torch.log2(2 * math.pi * math.e * var)


class Regression(Task):
    name = "regression"
    order = 2
    length_setting = "n"
    continuous = True
    linear_in_context = True
    presets = {"cpu": Preset(train=dict(steps=2_000, batch_size=64), by_arch={
        # The transformer needs depth and a curriculum over n (benchmarks/regression_recipe.py). With
        # lr 3e-3 it stays on the context-free plateau (1.67 bits); with 1e-3, 2 layers of width 96
        # end near one step of gradient descent (1.00 bits, mean error 3.9 Bayes variances; one GD
        # step with the best step size: 4.3), and a curriculum alone only makes that faster. Six
        # narrower layers, first on 10 then 20 examples (4x and 2x shorter sequences), leave the
        # plateau sooner and reach 0.17 bits 250 steps into the full length.
        "transformer": Preset(model=dict(d_model=64, n_layers=6, n_heads=4),
                              train=dict(steps=14_000, lr=1e-3,
                                         curriculum=[[2_000, dict(n=10)], [4_000, dict(n=20)]]))})}
    paper_rows = (PaperRow("Bayesian regression, differential-entropy MAE (bits)", None, "calibration",
                           "entropy_mae_bits", None, "–"),
                  PaperRow("Bayesian regression, mean error E[(mu - mu_Bayes)² / var_Bayes]", None, "calibration",
                           "relative_mean_error", None, "–"),
                  PaperRow("Bayesian regression, Bayes predictive (mean, log variance) read linearly from the final "
                           "layer, held-out R²", None, "belief-state", "r2", None, "–"))

    def __init__(self, d: int = 8, n: int = 40, weight_std: float = 1.0, noise_std: float = 0.5):
        for label, value in (("d", d), ("n", n)):
            whole("regression", label, value)
        for label, value in (("weight_std", weight_std), ("noise_std", noise_std)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"regression: {label} must be a finite positive number, got {value!r}")
        self.d, self.n, self.weight_std, self.noise_std = d, n, float(weight_std), float(noise_std)
        self.input_dim = d + 2
        self.vocab_size = 0
        self.n_classes = 0
        self.seq_len = 2 * n - 1

    def config(self) -> dict:
        return dict(name=self.name, d=self.d, n=self.n, weight_std=self.weight_std, noise_std=self.noise_std)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        B, d, n = checked_batch_size(batch_size), self.d, self.n
        w = torch.randn(B, d, generator=generator, dtype=torch.float64) * self.weight_std
        x = torch.randn(B, n, d, generator=generator, dtype=torch.float64)
        y = (x @ w[:, :, None])[..., 0] + self.noise_std * torch.randn(B, n, generator=generator, dtype=torch.float64)
        return self.batch_of(x, y, w)

    def batch_of(self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> Batch:
        """The Batch of inputs x [B, n, d] and outputs y [B, n] (float64) drawn with weights w [B, d]."""
        B, d = x.shape[0], self.d
        mean, var = self.predictive(x, y)

        T = self.seq_len
        tokens = torch.zeros(B, T, d + 2, dtype=torch.float64)
        tokens[:, 0::2, :d] = x
        tokens[:, 1::2, d] = y[:, :-1]
        tokens[:, 1::2, d + 1] = 1.0
        query_mask = torch.zeros(B, T, dtype=torch.bool)
        query_mask[:, 0::2] = True
        posterior_mean = torch.zeros(B, T, dtype=torch.float64)
        posterior_var = torch.ones(B, T, dtype=torch.float64)  # placeholder off the queries
        posterior_mean[:, 0::2], posterior_var[:, 0::2] = mean, var
        targets = torch.zeros(B, T, dtype=torch.float64)
        targets[:, 0::2] = y
        return Batch(tokens=tokens.float(), targets=targets.float(), query_mask=query_mask,
                     bayes_entropy=gaussian_entropy_bits(posterior_var).float(),
                     posterior_mean=posterior_mean.float(), posterior_var=posterior_var.float(),
                     hypothesis=dict(w=w.float(), x=x.float(), y=y.float()))

    corruptions = {"y": "one shown output moved by two prior standard deviations of y (index: which pair, default "
                        "the last shown); the last query's predictive mean moves"}

    def corrupt(self, batch: Batch, generator: torch.Generator | None = None, kind: str = "",
                index: int | None = None, size: float = 2.0) -> Corruption:
        """Output y_index moved by ``size`` prior standard deviations of y, sqrt(d weight_std^2 + noise_std^2)."""
        self.corruption_kind(kind)
        index = self.n - 2 if index is None else index
        if not 0 <= index < self.n - 1:
            raise ConfigError(f"regression: the output to move must be from 0 to {self.n - 2} (the last shown), "
                              f"got {index}")
        h = batch.hypothesis
        x, y, w = h["x"].double(), h["y"].double(), h["w"]
        moved = y.clone()
        moved[:, index] += size * math.sqrt(self.d * self.weight_std ** 2 + self.noise_std ** 2)
        return Corruption(self.batch_of(x, y, w), self.batch_of(x, moved, w), query=self.seq_len - 1,
                          changed=(2 * index + 1,), what=f"output y_{index} moved by {size:g} prior sd")

    def predictive(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior predictive mean and variance of y_i given pairs 1..i-1, for every i: [B, n] each."""
        B, n, d = x.shape
        s2 = self.noise_std ** 2
        outer = x[..., :, None] * x[..., None, :]  # [B, n, d, d]
        seen_outer = outer.cumsum(1) - outer  # pairs strictly before i
        seen_xy = (x * y[..., None]).cumsum(1) - x * y[..., None]
        precision = torch.eye(d, dtype=x.dtype) / self.weight_std ** 2 + seen_outer / s2
        cholesky = torch.linalg.cholesky(precision)
        w_mean = torch.cholesky_solve((seen_xy / s2)[..., None], cholesky)[..., 0]
        spread = torch.cholesky_solve(x[..., None], cholesky)[..., 0]  # Lambda^-1 x_i
        return (x * w_mean).sum(-1), s2 + (x * spread).sum(-1)

    @classmethod
    def small_config(cls, rng: random.Random) -> dict:
        return dict(d=rng.randint(1, 3), n=rng.randint(1, 5), weight_std=rng.uniform(0.2, 3.0),
                    noise_std=rng.uniform(0.1, 2.0))

    def brute_force(self, batch: Batch, row: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch.hypothesis["x"][row].double(), batch.hypothesis["y"][row].double()
        return conditioned_predictive(x, y, self.weight_std, self.noise_std)

    def token_names(self, tokens: torch.Tensor) -> list[str]:
        return [f"y={float(t[self.d]):+.2f}" if t[self.d + 1] > 0.5 else "x" for t in tokens]
