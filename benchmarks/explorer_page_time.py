"""How long `interp explore` makes a user wait, from the command to a page with every view drawn.

    python benchmarks/explorer_page_time.py [--ckpt bijection-transformer-cpu] [--model smollm2-135m] [--repeat 3]

For each model: `interp explore --ckpt NAME` (or `--model NAME`) is started as a user starts it, a new process each
time; the clock starts with it. Printed: the seconds to the first HTTP answer of the page, and to every graph of the
page drawn in headless Chromium (each shows its own figure, not the "computing…" placeholder; the browser is started
before the clock, as a user's is open already). A language model is loaded from the conversion cache (it is converted
once, before the clock, if it is not cached yet). Targets: a wind-tunnel model's page answers within 5 s and draws
every view within 10 s; a language model's first page within 15 s. Run it on a quiet machine; medians of --repeat runs
are printed with the load average, and ``--out`` writes them as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"ckpt": dict(first_answer_s=5.0, every_view_s=10.0), "model": dict(every_view_s=15.0)}
ALL_DRAWN = """
const graphs = [...document.querySelectorAll('.dash-graph')];
if (!graphs.length) return false;
return graphs.every(g => { const p = g.querySelector('.js-plotly-plot');
  const notes = p && p.layout ? (p.layout.annotations || []).map(a => a.text || '').join(' ') : null;
  return p && p.data && notes !== 'computing…'; });
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1500,1300"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def one_run(flag: str, name: str, driver) -> dict:
    """(seconds to the first HTTP answer, to every graph drawn) of one fresh `interp explore`."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    started = time.monotonic()
    server = subprocess.Popen([sys.executable, "-m", "interp", "explore", f"--{flag}", name, "--port", str(port)],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while True:
            if server.poll() is not None:
                sys.exit(f"explorer_page_time: interp explore --{flag} {name} stopped: {server.stderr.read()[-400:]}")
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(0.05)
        first = time.monotonic() - started
        driver.get(url)
        deadline = started + 300
        while not driver.execute_script(ALL_DRAWN):
            if time.monotonic() > deadline:
                sys.exit(f"explorer_page_time: not every view of {name} was drawn in 300 s")
            time.sleep(0.05)
        return dict(first_answer_s=round(first, 2), every_view_s=round(time.monotonic() - started, 2))
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", default="bijection-transformer-cpu")
    parser.add_argument("--model", default="smollm2-135m", help="a language model (empty: none)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs = [("ckpt", args.ckpt)] + ([("model", args.model)] if args.model else [])
    if args.model:  # converted before the clock: the target is for a cached model
        subprocess.run([sys.executable, "-c", f"import interp; interp.load_language_model({args.model!r})"],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    load = round(os.getloadavg()[0], 2)
    driver = browser()
    results = {}
    try:
        for flag, name in runs:
            times = [one_run(flag, name, driver) for _ in range(args.repeat)]
            median = {key: statistics.median(t[key] for t in times) for key in times[0]}
            results[name] = dict(runs=times, median=median, targets=TARGETS[flag])
            said = ", ".join(f"{key} {value:.1f} s" + (f" ({value / TARGETS[flag][key]:.2f} x target)"
                                                        if key in TARGETS[flag] else "") for key, value in median.items())
            print(f"{name}: median of {args.repeat}: {said}", flush=True)
    finally:
        driver.quit()
    print(f"load average before: {load}, after: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if args.out:
        args.out.write_text(json.dumps(dict(load_before=load, models=results), indent=1) + "\n")


if __name__ == "__main__":
    main()
