"""Wall time of `interp run ANALYSIS --ckpt CKPT` as a user sees it (fresh process, PDF included).

    python benchmarks/run_time.py                       # key-orthogonality on the shipped model, 3 runs
    python benchmarks/run_time.py --analysis calibration --repeat 5

Prints each run, the median, and its ratio to the 20 s target. Also prints how long the imports
alone take, since transformer-lens's import is most of a cold start, and `interp list` twice: built
(into an empty cache folder) and then served from its cache, against the 3 s target, and a run's
overhead above its imports (the median JSON-only run minus the import time), against its 3 s target,
and what exporting the figures (PDF through Chromium, HTML) adds to it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_S = 20.0
LIST_TARGET_S = 3.0
OVERHEAD_TARGET_S = 3.0  # a run's time above importing what it needs


def timed(cmd: list[str], env: dict | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--analysis", default="key-orthogonality")
    parser.add_argument("--ckpt", default="models/pretrained/bijection-transformer-cpu")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, XDG_CACHE_HOME=cache)
        built, kept = (timed([sys.executable, "-m", "interp", "list"], env) for _ in range(2))
    print(f"interp list: {built:.1f} s built, {kept:.2f} s from its cache "
          f"({kept / LIST_TARGET_S:.2f} of the {LIST_TARGET_S:.0f} s target)")
    imports = timed([sys.executable, "-c", "import interp.checkpoint, analyses, plotly, kaleido"])
    print(f"imports alone: {imports:.1f} s")
    medians = {}
    with tempfile.TemporaryDirectory() as out:
        for formats in ("pdf,html,json", "json"):
            times = []
            for i in range(args.repeat):
                times.append(timed([sys.executable, "-m", "interp", "run", args.analysis, "--ckpt", args.ckpt,
                                    "--out", out, "--format", formats]))
                print(f"run {i + 1} ({formats}): {times[-1]:.1f} s")
            medians[formats] = statistics.median(times)
    median = medians["pdf,html,json"]
    print(f"median {median:.1f} s for `interp run {args.analysis}` (pdf, html, json); "
          f"{median / TARGET_S:.2f} of the {TARGET_S:.0f} s target")
    overhead = medians["json"] - imports
    print(f"overhead above the imports, the analysis included, JSON only: {overhead:.1f} s "
          f"({overhead / OVERHEAD_TARGET_S:.2f} of the {OVERHEAD_TARGET_S:.0f} s target)")
    print(f"the figures' export on top (PDF through Chromium, and HTML): {median - medians['json']:.1f} s")


if __name__ == "__main__":
    main()
