"""Wall time of the README's main job against its targets: at most 8 s, at most 3 s over the TransformerLens import.

    python benchmarks/main_job_time.py [--repeat 3]

The main job is `interp run key-orthogonality --ckpt models/pretrained/bijection-transformer-cpu --out DIR` (a PDF, an
HTML page and a JSON), started as a user starts it, a new process each time. `import transformer_lens` is timed the
same way, in fresh processes, since it is most of a cold start and no change here can make it faster; the difference
is what the toolkit itself costs (its other imports, loading the model, the analysis, the export, the browser start
that draws the PDF). Medians are printed with the load average, since a busy machine moves all three: on a shared
machine compare the difference, not the totals, and rerun when the load is high. The CPU seconds each process used
(user and system, the browser's included) are printed beside the wall times: other processes' load moves them less.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_S, OVER_IMPORT_TARGET_S = 8.0, 3.0
MAIN_JOB = ["run", "key-orthogonality", "--ckpt", "models/pretrained/bijection-transformer-cpu"]


def cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of ``cmd`` run to its end (the CPU time of every process it waited for)."""
    start, cpu = time.perf_counter(), cpu_seconds()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start, cpu_seconds() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    timed([sys.executable, "-c", "import transformer_lens"])  # warm the file cache for both
    imports, runs = [], []
    with tempfile.TemporaryDirectory() as out:
        for i in range(args.repeat):
            imports.append(timed([sys.executable, "-c", "import transformer_lens"]))
            runs.append(timed([sys.executable, "-m", "interp", *MAIN_JOB, "--out", out]))
            print(f"run {i + 1}: main job {runs[-1][0]:.2f} s ({runs[-1][1]:.2f} CPU s), "
                  f"import transformer_lens {imports[-1][0]:.2f} s ({imports[-1][1]:.2f} CPU s)")
    (run, run_cpu), (tl, tl_cpu) = ([statistics.median(t[k] for t in times) for k in (0, 1)]
                                    for times in (runs, imports))
    print(f"main job (pdf, html, json): {run:.2f} s median ({run / TARGET_S:.2f} of the {TARGET_S:.0f} s target)")
    print(f"import transformer_lens:    {tl:.2f} s median")
    print(f"over the import:            {run - tl:.2f} s ({(run - tl) / OVER_IMPORT_TARGET_S:.2f} of the "
          f"{OVER_IMPORT_TARGET_S:.0f} s target)")
    print(f"CPU seconds: main job {run_cpu:.2f}, import {tl_cpu:.2f}, over the import {run_cpu - tl_cpu:.2f}; "
          f"main job / import: {run / tl:.2f} wall, {run_cpu / tl_cpu:.2f} CPU")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
