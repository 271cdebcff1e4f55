"""How far k steps of gradient descent on the context are from the Bayes predictive mean (regression).

    python benchmarks/gd_baseline.py [--steps 1,2,3,4,6,8] [--n 4000]

A transformer layer can implement one step of gradient descent on the in-context least-squares loss
(von Oswald et al. 2023), so a model of L layers is a reference point against k-step GD with k <= L.
At each query i the predictor starts from w = 0 and takes k steps on
1/2 sum_{j<i} (w.x_j - y_j)^2 with one step size eta shared by every position and sequence (as fixed
weights would), then predicts w.x_i. Printed per k: the best eta on a log grid and the relative
mean error E[(mu_GD - mu_Bayes)^2 / var_Bayes] on the `cpu` preset's task (d=8, n=40), the
number `interp run calibration` reports for a model. Plain numpy/torch, seconds on a CPU. ``--json PATH``
writes the printed numbers there too, with the command (figures/readme/gd-baseline.json).
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import torch

from tasks.regression import Regression


def gd_means(x: torch.Tensor, y: torch.Tensor, steps: int, eta: float) -> torch.Tensor:
    """[B, n] predictions w_k . x_i after ``steps`` GD steps from 0 on the pairs before i."""
    B, n, d = x.shape
    before = torch.ones(n, n, dtype=torch.bool).tril(-1)  # before[i, j]: pair j precedes query i
    w = torch.zeros(B, n, d, dtype=x.dtype)  # one weight vector per query position
    for _ in range(steps):
        residual = torch.einsum("bid,bjd->bij", w, x) - y[:, None, :]  # [B, i, j]: w_i.x_j - y_j
        w = w - eta * torch.einsum("bij,bjd->bid", residual * before, x)
    return (w * x).sum(-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default="1,2,3,4,6,8", help="comma-separated numbers of GD steps")
    parser.add_argument("--n", type=int, default=4000, help="sequences")
    parser.add_argument("--json", type=Path, help="also write the printed numbers here, with the command")
    args = parser.parse_args()
    record = dict(command=shlex.join(["python", *sys.argv]), n=args.n, steps={})
    task = Regression()
    batch = task.sample(args.n, torch.Generator().manual_seed(0))
    x, y = batch.hypothesis["x"].double(), batch.hypothesis["y"].double()
    mean, var = task.predictive(x, y)
    etas = torch.logspace(-3.5, -0.5, 61).tolist()
    print("| GD steps | best eta | relative mean error |\n|---|---|---|")
    for k in (int(s) for s in args.steps.split(",")):
        errors = [(((gd_means(x, y, k, eta) - mean) ** 2 / var).mean().item(), eta) for eta in etas]
        error, eta = min(e for e in errors if e == e)  # NaN (diverged) never wins
        print(f"| {k} | {eta:.4f} | {error:.2f} |")
        record["steps"][str(k)] = dict(eta=eta, relative_mean_error=error)
    if args.json:
        args.json.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
