"""Wall time of the default (fast) test suite, `python -m pytest`, against the 4-minute target.

    python benchmarks/suite_time.py            # the fast suite, with its 15 slowest tests
    python benchmarks/suite_time.py -m slow    # the slow suite instead (no target; CI's budget is the bound)

Prints the machine (CPU model, cores, load average before and after: a busy machine is slower, so
compare runs only at a similar load), the pytest summary line, the slowest tests, and the ratio to
the target. Timed here, never inside a test: this machine is shared and noisy.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

TARGET_S = 240.0


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


def main() -> None:
    extra = sys.argv[1:]
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; load average before: {os.getloadavg()[0]:.2f}")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=15", *extra],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    lines = done.stdout.splitlines()
    slowest = [line for line in lines if re.match(r"^\d+\.\d+s (call|setup|teardown)", line)]
    summary = next((line for line in reversed(lines) if re.search(r"\d+ (passed|failed)", line)), "(no summary)")
    print("slowest tests:")
    print("\n".join(f"  {line}" for line in slowest))
    print(f"pytest: {summary}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    target = "" if extra else f" ({wall / TARGET_S:.2f} of the {TARGET_S / 60:.0f}-minute target)"
    print(f"wall time {wall:.0f} s{target}")
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
