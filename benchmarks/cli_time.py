"""Wall time of the CLI's instant answers in fresh processes, against the 1 s target.

    python benchmarks/cli_time.py [--repeat 5]

Each of `interp --help`, `interp run --help`, `interp run NAME --help`, `interp list` (and the other
commands' help, a refusal on a shipped model, a misspelt analysis and a misspelt model) is started as a user starts it, as a new process,
and the median of the repeats is printed with its ratio to the target. They read the shipped
manifest (interp/manifest.py) and import no torch; a stale manifest (sources changed since it was
written) makes the first `interp list` rebuild it, which this script reports as such.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

TARGET_S = 1.0
COMMANDS = [["--help"], ["run", "--help"], ["run", "key-orthogonality", "--help"], ["list"], ["train", "--help"],
            ["explore", "--help"], ["reproduce", "--help"], ["sweep", "--help"],
            ["run", "qk-alignment", "--ckpt", "hmm-transformer-cpu"],
            # typos: answered with a suggestion, before torch loads
            ["run", "head-ablaton", "--ckpt", "bijection-transformer-cpu"],
            ["run", "calibration", "--ckpt", "bijection-transfomer-cpu"]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from interp import manifest

    if manifest.current(build_if_missing=False) is None:
        print("the manifest is stale for these sources: the first `interp list` rebuilds it (run "
              "`python -m interp.manifest` to ship a current one)")
    worst = 0.0
    for command in COMMANDS:
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "interp", *command], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        worst = max(worst, median)
        print(f"interp {' '.join(command):<48} {median:.2f} s  ({median / TARGET_S:.2f} of the {TARGET_S:.0f} s target)")
    print(f"slowest: {worst:.2f} s ({worst / TARGET_S:.2f} of the target)")


if __name__ == "__main__":
    main()
