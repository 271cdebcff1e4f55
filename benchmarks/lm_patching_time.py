"""How long the language-model explorer's activation-patching map takes, the exhaustive way and the default one.

    python benchmarks/lm_patching_time.py [--model smollm2-135m] [--old-sites 2] [--seed 0] [--out FILE.json]

The pair is the one the explorer's panel draws by default (``interp.explore.pairs.LanguagePairs``: two-label prompts
with the page's seed, the first shown observation flipped). Timed, in wall and CPU seconds (this process's, all
threads; on a shared machine the CPU seconds are what to compare):

- before: activation patching's exhaustive map (``analyses.activation_patching.measure``, what the explorer ran for
  every site): both runs' caches, then ``--old-sites`` sites (every position of the map stacked into one pass each,
  the heaviest kind of site: each costs the same forward passes), projected to every site of the model;
- after: the explorer's default map (``interp.explore.lm_patching.estimated_map``) run whole: every cell's first-order
  estimate (one forward pass on the clean prompts, one forward and backward pass on the corrupted ones), then the
  ``EXACT_CELLS`` cells of the largest estimates measured, ``CELLS_PER_STEP`` a step.

The machine's load average is printed at the start and the end: the numbers are only as good as the machine was
quiet. ``--out`` writes them as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class Clock:
    """Wall and CPU seconds since it was made."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self) -> dict:
        return dict(wall_s=round(time.perf_counter() - self.wall, 2), cpu_s=round(time.process_time() - self.cpu, 2))


class Steps:
    """A stand-in for the explorer's job (``interp.explore.jobs.Job``): when each step ended."""

    def __init__(self):
        self.what, self.total, self.clock, self.ends = "", None, Clock(), []

    def step(self, n: int = 1) -> None:
        self.ends.append((n, self.clock.read()))


def line(what: str, t: dict, extra: str = "") -> None:
    print(f"  {what:<44} {t['wall_s']:8.1f} s wall {t['cpu_s']:8.1f} s CPU{extra}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--old-sites", type=int, default=2, help="sites of the exhaustive map to time (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    parser.add_argument("--figure", default=None, help="write the map as the panel draws it to this PNG")
    args = parser.parse_args()

    import torch

    import interp
    from analyses import interventions as P
    from interp.explore.pairs import LANGUAGE_ALPHA, LANGUAGE_PROMPTS
    from interp.explore.lm_patching import (CELLS_PER_STEP, EXACT_CELLS, MAP_FRAME_PX, MAP_ROW_PX, default_sites,
                                            estimated_map)
    from interp.explore.patching import map_figure

    out = dict(model=args.model, load_average_start=os.getloadavg(), cpus=os.cpu_count(),
               torch_threads=torch.get_num_threads())
    print(f"{args.model}: load average {out['load_average_start']} on {out['cpus']} CPUs, "
          f"{out['torch_threads']} torch threads", flush=True)
    clock = Clock()
    lm = interp.load_language_model(args.model)
    line("load", clock.read())
    pair = P.language_pair(lm, "two-label", "mixed", LANGUAGE_PROMPTS, LANGUAGE_ALPHA, args.seed, 0)
    chosen, where = P.sites(pair.model), pair.positions("auto")
    out.update(prompts=len(pair.clean), tokens=pair.clean.shape[1], sites=len(chosen), positions=len(where),
               default_sites=len(default_sites(chosen)))
    print(f"  {len(pair.clean)} prompts of {pair.clean.shape[1]} tokens; {len(chosen)} sites, {len(where)} positions "
          f"and all at once", flush=True)
    clock = Clock()
    scorer = P.Scorer(pair)
    out["scorer"] = clock.read()
    line("the model's clean and corrupted answers", out["scorer"])

    if args.old_sites:
        names = P.cache_names(pair.model, chosen)
        clock = Clock()
        clean, corrupted = P.run_cache(pair, pair.clean, names), P.run_cache(pair, pair.corrupted, names)
        out["before_caches"] = clock.read()
        line("before: both runs' caches", out["before_caches"])
        timed = [s for s in chosen if s.kind == "head"][:args.old_sites]  # (every site costs the same passes)
        clock = Clock()
        for site in timed:
            P.patched_answers(pair, site, [*where, None], clean, corrupted)
        t = clock.read()
        per = {k: v / len(timed) for k, v in t.items()}
        whole = {k: out["scorer"][k] + out["before_caches"][k] + len(chosen) * per[k] for k in per}
        out["before_per_site"], out["before_projected_map"] = per, whole
        line(f"before: a site ({len(where) + 1} cells, mean of {len(timed)})", per)
        line(f"before: projected map ({len(chosen)} sites)", whole, f"  ({whole['wall_s'] / 3600:.1f} h wall)")
        del clean, corrupted

    steps, clock = Steps(), Clock()
    result = estimated_map(pair, scorer, chosen, where, steps)
    total = clock.read()
    estimate = steps.ends[0][1]  # the first step (of 0 cells) ends with the estimate
    measuring = {k: total[k] - estimate[k] for k in total}
    n = steps.total  # (the residual stream at all positions is the clean answer: no pass)
    per_cell = {k: v / max(n, 1) for k, v in measuring.items()}
    whole = {k: out["scorer"][k] + total[k] for k in total}
    out.update(after_estimate=estimate, after_measuring=measuring, after_cells=n, after_per_cell=per_cell,
               after_map=whole, exact_cells=EXACT_CELLS, cells_per_step=CELLS_PER_STEP,
               after_per_default_site={k: v / len(default_sites(chosen)) for k, v in whole.items()})
    line("after: every cell's first-order estimate", estimate)
    line(f"after: {n} cells measured ({CELLS_PER_STEP} a step)", measuring)
    line("after: a cell measured", per_cell)
    line(f"after: the map (answers, estimate, {n} cells)", whole, f"  ({whole['wall_s'] / 60:.1f} min wall)")
    line(f"after: per row of the map ({len(default_sites(chosen))})", out["after_per_default_site"])
    out["load_average_end"] = os.getloadavg()
    print(f"  load average at the end {out['load_average_end']}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    if args.figure:  # the page's size: the panel's width, the height it gives the map's rows
        from interp.export import figure_image

        fig = map_figure(*result[:5], lm.name, result.measured)
        fig.update_layout(width=1100, height=MAP_FRAME_PX + MAP_ROW_PX * len(default_sites(chosen)))
        Path(args.figure).write_bytes(figure_image(fig, "png"))


if __name__ == "__main__":
    main()
