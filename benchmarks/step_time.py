"""Training-step time of each architecture at matched capacity, relative to the transformer.

    python benchmarks/step_time.py [--preset paper] [--task bijection] [--batch-size 128] [--steps 10]
                                   [--deterministic both]

One step = forward, soft-target loss, backward and an AdamW update, on the task's training batches
(batch 128, T=39 for bijection V=20 L=19). Steps are interleaved across architectures (round-robin)
so a noisy neighbour slows all of them alike; the median per architecture is reported with its ratio
to the transformer. Issue target: Mamba at the paper size <= 1.5x the transformer.

``--deterministic both`` times every step twice, with and without the deterministic kernels that
training uses (interp.train.deterministic), interleaved, and prints their ratio per architecture.
Issue target: <= 1.10x.
"""
from __future__ import annotations

import argparse
import statistics
import time
from contextlib import nullcontext

import torch

import models
import tasks
from interp.train import deterministic, loss_fn, retain_freed_memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="paper")
    parser.add_argument("--task", default="bijection")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--archs", default=",".join(models.ARCHS))
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--deterministic", choices=("on", "off", "both"), default="on",
                        help="time with training's deterministic kernels (as `interp train` runs), without, or both")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    retain_freed_memory()  # as `interp train` does, for every architecture alike

    task = tasks.make(args.task)
    setups = {}
    for arch in args.archs.split(","):
        model = models.build(arch, task, models.model_config(arch, args.preset, task)).train()
        setups[arch] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4))
        print(f"{arch:<12} {models.n_params(model):>10,} params")
    batch = task.sample(args.batch_size, generator=torch.Generator().manual_seed(0))
    print(f"batch {args.batch_size}, T={batch.tokens.shape[1]}, {torch.get_num_threads()} threads, "
          f"{args.steps} timed steps after 2 warm-up steps")

    modes = {"on": [True], "off": [False], "both": [True, False]}[args.deterministic]
    times = {(arch, mode): [] for arch in setups for mode in modes}
    for i in range(args.steps + 2):
        for arch, (model, optim) in setups.items():
            for mode in modes:
                with deterministic("cpu") if mode else nullcontext():
                    start = time.perf_counter()
                    loss = loss_fn(model, batch, "soft")
                    optim.zero_grad(set_to_none=True)
                    loss.backward()
                    optim.step()
                    if i >= 2:
                        times[arch, mode].append(time.perf_counter() - start)
    median = {key: statistics.median(ts) for key, ts in times.items()}
    for (arch, mode), ts in times.items():
        base = median.get(("transformer", mode))
        ratio = f"{median[arch, mode] / base:.2f}x transformer" if base else ""
        label = f"{arch} ({'deterministic' if mode else 'default'})" if len(modes) > 1 else arch
        print(f"{label:<28} median {median[arch, mode] * 1000:8.1f} ms/step  (min {min(ts) * 1000:.1f})  {ratio}")
    if len(modes) > 1:
        for arch in setups:
            print(f"{arch:<12} deterministic / default: {median[arch, True] / median[arch, False]:.3f}x (target <= 1.10x)")

if __name__ == "__main__":
    main()
