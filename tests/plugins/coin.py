"""A Beta-Bernoulli coin: the smallest wind tunnel, written as a new task author would (one file).

Per sequence a bias theta ~ Uniform(0, 1) = Beta(1, 1); n flips x_i ~ Bernoulli(theta). Tokens are the
flips (0 or 1); every position predicts the next flip, whose Bayes predictive is Laplace's rule of
succession, (1 + heads) / (2 + seen).
"""
import random

import numpy.polynomial.legendre
import torch

from tasks.base import Batch, ConfigError, PaperRow, Preset, Task, checked_batch_size


class Coin(Task):
    name = "coin"
    order = 50
    length_setting = "n"
    frame = "flips"
    presets = {"cpu": Preset(train=dict(steps=500))}
    paper_rows = (PaperRow("coin, entropy MAE (bits)", None, "calibration", "entropy_mae_bits", None, "–"),)

    def __init__(self, n: int = 12):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"coin: n must be a positive integer, got {n!r}")
        self.n = n
        self.vocab_size, self.n_classes, self.seq_len = 2, 2, n

    def config(self) -> dict:
        return dict(name=self.name, n=self.n)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        B = checked_batch_size(batch_size)
        theta = torch.rand(B, generator=generator, dtype=torch.float64)
        flips = (torch.rand(B, self.n + 1, generator=generator, dtype=torch.float64) < theta[:, None]).long()
        tokens, nxt = flips[:, :-1], flips[:, 1:]
        heads = tokens.cumsum(1).double()
        seen = torch.arange(1, self.n + 1, dtype=torch.float64)
        p1 = (1 + heads) / (2 + seen)
        posterior = torch.stack([1 - p1, p1], -1).float()
        entropy = -(posterior * posterior.clamp_min(1e-30).log2()).sum(-1)
        return Batch(tokens=tokens, targets=nxt, query_mask=torch.ones(B, self.n, dtype=torch.bool),
                     posterior=posterior, bayes_entropy=entropy, hypothesis=dict(theta=theta.float()))

    def hypothesis_tokens(self) -> dict[str, torch.Tensor]:
        return {"flips": torch.arange(2)}

    @classmethod
    def small_config(cls, rng: random.Random) -> dict:
        return dict(n=rng.randint(1, 5))

    def brute_force(self, batch: Batch, row: int) -> torch.Tensor:
        """Integrate over theta numerically (uniform prior, as sampled): Gauss-Legendre with 32 nodes is exact
        for the polynomial likelihoods of up to 62 flips, an independent route to Laplace's rule above."""
        nodes, weights = (torch.from_numpy(a) for a in numpy.polynomial.legendre.leggauss(32))
        theta, weights = (nodes + 1) / 2, weights / 2
        out = []
        for t in range(self.n):
            shown = batch.tokens[row, :t + 1]
            likelihood = weights * theta ** int(shown.sum()) * (1 - theta) ** int((1 - shown).sum())
            p1 = float((likelihood * theta).sum() / likelihood.sum())
            out.append([1 - p1, p1])
        return torch.tensor(out, dtype=torch.float64)
