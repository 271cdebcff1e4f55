"""Throughput of the HMM sampler (tokens, hidden path and exact filtering posteriors) on one thread.

    python benchmarks/hmm_sampler.py                  # HMM() defaults: S=O=5, K=20, batch 1024
    python benchmarks/hmm_sampler.py --K 50 --repeat 50

Prints the median sequences per second over the repeats and its ratio to the 100,000 seq/s target.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from tasks.hmm import HMM

TARGET = 100_000  # sequences per second


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--S", type=int, default=5)
    parser.add_argument("--O", type=int, default=5)
    parser.add_argument("--K", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = HMM(S=args.S, O=args.O, K=args.K)
    g = torch.Generator().manual_seed(0)
    task.sample(args.batch, generator=g)  # warm-up
    rates = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        task.sample(args.batch, generator=g)
        rates.append(args.batch / (time.perf_counter() - start))
    median = statistics.median(rates)
    print(f"{task!r}, batch {args.batch}, 1 thread: {median:,.0f} seq/s median over {args.repeat} "
          f"(min {min(rates):,.0f}, max {max(rates):,.0f})")
    print(f"ratio to the {TARGET:,} seq/s target: {median / TARGET:.2f}x")


if __name__ == "__main__":
    main()
