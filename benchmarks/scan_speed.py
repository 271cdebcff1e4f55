"""Mamba's selective scan: the sequential loop against the chunked parallel scan, forward + backward.

    python benchmarks/scan_speed.py [--device auto] [--batch 1024] [--T 329] [--E 128] [--N 16]
                                    [--repeats 5] [--dtype float32]

Times ``models.mamba.selective_scan`` with INTERP_MAMBA_SCAN forced to "loop" (``LinearRecurrence``:
one step per position, what CUDA ran without mamba-ssm before the parallel scan) and to "parallel"
(``parallel_scan``: a recursive pairwise scan, about 2 log2(T) whole-tensor steps), on
random inputs of the recall Mamba's shape (E = 2 d_model, N = d_state; T = 329, the paper's recall
length), and prints each median and the ratio. On the CPU the C++ kernel (``kernel``, what training
uses there) is timed as well. Runs on whatever device is present.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import models.mamba as mamba


def inputs(batch: int, T: int, E: int, N: int, device: str, dtype: torch.dtype, seed: int = 0):
    """Random scan inputs with Mamba's ranges: delta from softplus, A = -(1..N)-like negatives."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, T, E, generator=g)
    delta = torch.nn.functional.softplus(torch.randn(batch, T, E, generator=g) - 2)
    A = -torch.rand(E, N, generator=g) * N
    B, C = (torch.randn(batch, T, N, generator=g) for _ in range(2))
    D = torch.randn(E, generator=g)
    return [t.to(device, dtype).requires_grad_() for t in (x, delta, A, B, C, D)]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_scan(method: str, xs, repeats: int, device: str) -> float:
    """Median seconds of one forward + backward of the scan with ``method`` forced (or the kernel)."""
    os.environ["INTERP_MAMBA_SCAN"] = "auto" if method == "kernel" else method
    times = []
    try:
        for i in range(repeats + 1):  # the first is a warm-up
            sync(device)
            start = time.perf_counter()
            y, _ = mamba.selective_scan(*xs)
            y.sum().backward()
            sync(device)
            if i:
                times.append(time.perf_counter() - start)
    finally:
        os.environ.pop("INTERP_MAMBA_SCAN", None)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="auto", help="auto: cuda when present, else cpu")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--T", type=int, default=329)
    parser.add_argument("--E", type=int, default=128)
    parser.add_argument("--N", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    args = parser.parse_args()
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    xs = inputs(args.batch, args.T, args.E, args.N, device, getattr(torch, args.dtype))
    print(f"selective scan forward + backward on {device}, batch {args.batch}, T={args.T}, E={args.E}, N={args.N}, "
          f"{args.dtype}, {torch.get_num_threads()} threads, median of {args.repeats}")
    loop = time_scan("loop", xs, args.repeats, device)
    print(f"  loop (LinearRecurrence)      {loop * 1e3:9.1f} ms")
    if device == "cpu" and mamba.cpu_kernels() is not None:
        kernel = time_scan("kernel", xs, args.repeats, device)
        print(f"  C++ kernel                   {kernel * 1e3:9.1f} ms   {loop / kernel:6.2f}x the loop's speed")
    parallel = time_scan("parallel", xs, args.repeats, device)
    print(f"  parallel (pairwise scan)     {parallel * 1e3:9.1f} ms   {loop / parallel:6.2f}x the loop's speed")


if __name__ == "__main__":
    main()
