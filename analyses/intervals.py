"""Bootstrap intervals over held-out sequences, the statistics the analyses share.

Every interval resamples whole sequences, never single queries: the queries of one sequence share its hidden
truth, so they are not independent draws. ``bootstrap_interval`` is a ratio of sums (what was right over what
was asked), ``bootstrap_difference`` the paired difference (or ratio) of two models' such ratios on the same
sequences, and ``bootstrap_sums`` / ``resampled_sums`` any function of several sums over the sequences, all
from the same resamples for a seed.
"""
from __future__ import annotations

import math
from typing import Callable

import torch


def _ratio_resamples(sums: torch.Tensor, counts: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """sum(sums) / sum(counts) over each resample of sequences (a row of ``rows``)."""
    return sums.double().flatten()[rows].sum(1) / counts.double().flatten()[rows].sum(1).clamp(min=1)


def _percentile_interval(values: torch.Tensor, level: float) -> list[float]:
    """The central ``level`` interval of resampled values [resamples] or of each column of [resamples, m] (then a
    list of m [low, high]). A resample can leave a number undefined (0/0: a mean over a subset of the sequences
    that drew none of them); it is left out of that number's percentiles rather than making the interval NaN."""
    tail = (1 - level) / 2
    q = torch.tensor([tail, 1 - tail], dtype=torch.float64)
    if values.dim() == 1:
        return torch.nanquantile(values, q).tolist()
    # torch's quantiles refuse inputs past 2^24 elements: a few thousand columns at a time
    return torch.cat([torch.nanquantile(part, q, dim=0) for part in values.split(4096, dim=1)], dim=1).T.tolist()


def _resampled_rows(n: int, resamples: int, seed: int) -> torch.Tensor:
    return torch.randint(0, n, (resamples, n), generator=torch.Generator().manual_seed(seed))


def bootstrap_interval(right: torch.Tensor, asked: torch.Tensor, level: float = 0.95, resamples: int = 2000,
                       seed: int = 0) -> list[float]:
    """A percentile bootstrap interval for sum(right) / sum(asked), resampling whole sequences (row i of
    ``right`` and ``asked`` is what sequence i got right, or its summed error, and how many queries it
    has): the queries of one sequence share its hidden truth, so they are not independent draws, and
    resampling them one by one would understate the spread. Deterministic for a seed."""
    if not asked.numel() or asked.sum() == 0:
        return [math.nan, math.nan]
    return _percentile_interval(_ratio_resamples(right, asked, _resampled_rows(asked.numel(), resamples, seed)), level)


def bootstrap_difference(first: tuple[torch.Tensor, torch.Tensor], second: tuple[torch.Tensor, torch.Tensor],
                         level: float = 0.95, resamples: int = 2000, seed: int = 0, ratio: bool = False) -> list[float]:
    """The interval of mean(first) - mean(second) (with ``ratio``, mean(first) / mean(second)) for two
    models measured on the same sequences, each mean given as a (per-sequence sums, counts) pair as for
    ``bootstrap_interval``: a paired bootstrap, one resample of sequences for both, so what the two share
    (the same hard sequences) cancels. A difference whose interval excludes 0 (a ratio's: 1) is beyond
    the noise of the evaluation set."""
    rows = _resampled_rows(first[1].numel(), resamples, seed)
    a, b = _ratio_resamples(*first, rows), _ratio_resamples(*second, rows)
    return _percentile_interval(a / b if ratio else a - b, level)


def bootstrap_sums(per_sequence: torch.Tensor, statistic: Callable[[torch.Tensor], torch.Tensor], level: float = 0.95,
                   resamples: int = 2000, seed: int = 0) -> list:
    """The percentile bootstrap interval of ``statistic`` of the column sums of ``per_sequence`` [n, k] (row i: what
    sequence i adds to each of k sums), resampling whole sequences with ``bootstrap_interval``'s resamples. For
    numbers that are functions of several sums over the same sequences: a ratio whose denominator is not a count
    (it may be small or negative, where ``bootstrap_interval`` clamps a count's sum at 1), or the difference of two
    such ratios (paired: one resample for both). ``statistic`` maps [resamples, k] sums to [resamples] values (one
    interval) or to [resamples, m] (m intervals, a list of [low, high]): the sums are one matrix product, so many
    numbers cost one resampling."""
    return _percentile_interval(statistic(resampled_sums(per_sequence, resamples, seed)), level)


def resampled_sums(per_sequence: torch.Tensor, resamples: int = 2000, seed: int = 0) -> torch.Tensor:
    """The column sums of ``per_sequence`` [n, k] over each of ``bootstrap_interval``'s resamples of whole sequences
    for ``seed``, [resamples, k] float64 (what ``bootstrap_sums`` takes percentiles of): for a statistic of the
    resamples that is not an interval, such as how often one settling step precedes another."""
    x = per_sequence.detach().double().cpu().reshape(len(per_sequence), -1)
    rows = _resampled_rows(len(x), resamples, seed)
    weights = torch.zeros(resamples, len(x), dtype=torch.float64).scatter_add_(
        1, rows, torch.ones(rows.shape, dtype=torch.float64))  # how often each sequence is drawn
    return weights @ x
