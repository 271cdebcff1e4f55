"""How long the language-model analyses take on the packaged language models, against each model's own forward pass.

    python benchmarks/lm_time.py [--models smollm2-135m,gemma3-270m] [--analyses NAME,...] [--out FILE.json]

For each packaged model that is installed (``models.gguf_model.PACKAGED``): its first conversion (the GGUF dequantised,
bridged and parity-checked, in a fresh cache folder), a cached load, one forward pass over the default prompts (the
two-label task, mixed words, 50 prompts per number of shown examples, seed 0; equal-length batches of 64, no
gradients), then every analysis that runs on language models at its defaults (``analyses.run(NAME, lm)``). Each is
printed in wall and CPU seconds (this process's, all threads) and as ratios to the forward pass's, so a slow
analysis is told apart from a slow machine: on a shared machine the CPU ratios are what to compare. Last, the
explorer's first page for the model (``explorer_page_time.py``: `interp explore --model NAME` started as a user
starts it, the model cached, to every view drawn in headless Chromium), where Chromium is installed. ``--out`` writes
the numbers as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))  # explorer_page_time, beside this file


def timed(fn):
    """(result, wall seconds, CPU seconds) of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def forward_pass(lm) -> None:
    """The model's forward pass over the prompts the analyses read by default."""
    import torch

    from analyses import activations

    prompts = activations.prompt_set(lm, "", "mixed", 50, 0.9, 0)
    with torch.no_grad():
        for _, tokens in activations.equal_length_batches(lm, prompts):
            lm.model(tokens)


def profile(name: str, names: list[str], driver=None) -> dict:
    import analyses
    from models import gguf_model

    rows = {}

    def row(what: str, wall: float, cpu: float) -> None:
        rows[what] = dict(wall_s=round(wall, 2), cpu_s=round(cpu, 2))
        base = rows.get("forward pass")
        ratio = (f"  {wall / base['wall_s']:7.1f} x forward (wall), {cpu / base['cpu_s']:.1f} x (CPU)"
                 if base and what != "forward pass" else "")
        print(f"  {what:<28} {wall:8.1f} s wall {cpu:8.1f} s CPU{ratio}", flush=True)

    saved = os.environ.get("XDG_CACHE_HOME")
    with tempfile.TemporaryDirectory() as fresh:  # a first conversion, whatever the user's cache holds
        os.environ["XDG_CACHE_HOME"] = fresh
        try:
            _, wall, cpu = timed(lambda: gguf_model.open_gguf(name, progress=False))
            row("first conversion", wall, cpu)
            lm, wall, cpu = timed(lambda: gguf_model.open_gguf(name, progress=False))
            row("cached load", wall, cpu)
        finally:
            if saved is None:
                os.environ.pop("XDG_CACHE_HOME")
            else:
                os.environ["XDG_CACHE_HOME"] = saved
    _, wall, cpu = timed(lambda: forward_pass(lm))
    row("forward pass", wall, cpu)
    for analysis in names:
        _, wall, cpu = timed(lambda: analyses.run(analysis, lm))
        row(analysis, wall, cpu)
    if driver is not None:  # in a new process, from the user's own cache (converted there first if need be)
        import explorer_page_time

        gguf_model.open_gguf(name, progress=False)
        page = explorer_page_time.one_run("model", name, driver)
        rows["explorer first page"] = dict(wall_s=page["every_view_s"], cpu_s=None, first_answer_s=page["first_answer_s"])
        print(f"  {'explorer first page':<28} {page['every_view_s']:8.1f} s wall (every view drawn; the page answered "
              f"in {page['first_answer_s']:.1f} s)", flush=True)
    forward = rows["forward pass"]
    for values in (v for v in rows.values() if v["cpu_s"] is not None):
        values.update(x_forward_wall=round(values["wall_s"] / forward["wall_s"], 1),
                      x_forward_cpu=round(values["cpu_s"] / forward["cpu_s"], 1))
    return rows


def main() -> None:
    import torch

    import analyses
    from models import gguf_model

    language = [n for n, a in analyses.REGISTRY.items() if a.on_language_model is not None]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(name for name, _, ok in gguf_model.installed() if ok))
    parser.add_argument("--analyses", default=",".join(language))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    chosen = [n for n in args.analyses.split(",") if n]
    unknown = [n for n in chosen if n not in language]
    if unknown:
        sys.exit(f"lm_time: {', '.join(unknown)} do not run on language models; these do: {', '.join(language)}")
    machine = dict(cpus=os.cpu_count(), threads=torch.get_num_threads(), load_before=round(os.getloadavg()[0], 2))
    print(f"load average before: {machine['load_before']} on {machine['cpus']} CPUs, {machine['threads']} threads")
    results = {}
    driver = None
    if shutil.which("chromium") and shutil.which("chromedriver"):
        import explorer_page_time

        driver = explorer_page_time.browser()
    try:
        for name in (n for n in args.models.split(",") if n):
            print(name, flush=True)
            results[name] = profile(name, chosen, driver)
    finally:
        if driver is not None:
            driver.quit()
    machine["load_after"] = round(os.getloadavg()[0], 2)
    print(f"load average after: {machine['load_after']}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dict(machine=machine, models=results), indent=1) + "\n")


if __name__ == "__main__":
    main()
