"""How long the explorer makes a researcher wait, view by view, on the shipped models.

    python benchmarks/explorer_time.py                     # bijection and HMM transformers, HMM Mamba
    python benchmarks/explorer_time.py --models recall-transformer-cpu --repeat 5

Times what a browser triggers, through the same view functions the Dash callbacks call (no
browser or HTTP in the numbers): the first render (load the model, then every view of the first
sequence: posterior panel with held-out calibration, attention, geometry), a new sequence (the
posterior and attention views; calibration and geometry do not depend on the sequence and are
cached), another attention head, and a head ablation (everything recomputed once for the ablated
model, then cached). Prints the median of --repeat fresh explorers per model and the ratios to the
targets: any update <= 0.5 s on the shipped bijection model, first render <= 3 s on the HMM model.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

UPDATE_TARGET_S, FIRST_TARGET_S = 0.5, 3.0


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(name: str) -> dict:
    from interp.catalog import shipped
    from interp.explore import Explorer
    from interp.explore.attention import attention_view
    from interp.explore.geometry import geometry_view
    from interp.explore.posterior import posterior_views

    times = {}
    holder = {}
    times["load"] = timed(lambda: holder.setdefault("e", Explorer(shipped()[name])))
    e = holder["e"]
    last, info = len(e.checkpoints) - 1, e.layout_info(len(e.checkpoints) - 1)
    first, second = e.sample(0), e.sample(1)
    views = lambda tokens, seed, choices: (  # noqa: E731
        posterior_views(e, last, tokens, seed, choices), attention_view(e, last, tokens, seed, choices, 0, 0),
        geometry_view(e, last, choices, "residual"))
    times["first render"] = times["load"] + timed(lambda: views(first, 0, []))
    times["new sequence"] = timed(lambda: views(second, 1, []))
    if info["attention"] or info["scan"]:
        times["another layer"] = timed(lambda: attention_view(e, last, second, 1, [], info["n_layers"] - 1, 0))
    if info["attention"]:
        times["ablate a head (first time)"] = timed(lambda: views(second, 1, ["H0.0"]))
        times["ablate a head (again)"] = timed(lambda: views(first, 0, ["H0.0"]))
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+",
                        default=["bijection-transformer-cpu", "hmm-transformer-cpu", "hmm-mamba-cpu"])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import torch
    torch.set_num_threads(2)
    for name in args.models:
        runs = [measure(name) for _ in range(args.repeat)]
        print(f"\n{name} (median of {args.repeat} fresh explorers)")
        for key in runs[0]:
            median = statistics.median(r[key] for r in runs)
            target = FIRST_TARGET_S if key == "first render" else UPDATE_TARGET_S if key != "load" else None
            ratio = "" if target is None else f"  ({median / target:.2f} of the {target:g} s target)"
            print(f"  {key:<28} {median:7.3f} s{ratio}")


if __name__ == "__main__":
    main()
