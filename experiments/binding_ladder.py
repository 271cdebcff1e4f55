"""Copy the binding ladder's sweeps (experiments/binding-ladder.sh) into figures/readme/binding-ladder/: each sweep's
sweep.json and its figures (drawn again from it), and summary.json with what the results page reads: per cell, each
architecture's chosen rate, accuracy and sequences to 90% (each seed), Mamba's sequences over the transformer's, and
each architecture's training speed. Run it whenever the ladder has moved on; an unfinished sweep is copied as it stands (its
``complete`` says so).

    python experiments/binding_ladder.py [--runs runs/binding-ladder]
    python experiments/binding_ladder.py --restore   # before resuming in a fresh clone (binding-ladder.sh does it)

``--restore`` writes the points this folder already holds back into the runs folder as finished points (their
numbers, not their weights), so a ladder resumed in a fresh clone trains only what is missing.
"""
import argparse
import json
import shutil
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "figures" / "readme" / "binding-ladder"
SWEEPS = ("plain", "shift", "controls")  # experiments/binding-ladder.sh's sweeps, in the order it runs them
FIGURES = ("learning", "curves")  # the sweep's figures the results page and the folder keep, as PNGs


def draw(sweep: dict, target: Path) -> None:
    """The sweep's figures drawn again from its summary, with this checkout's figure code (a ladder that has run
    for days wrote its own with the code it started with), into ``target``: the PNGs of ``FIGURES`` and the PDF."""
    from interp.export import figure_image, merged_pdf
    from interp.sweep import figures

    drawn = figures(sweep)
    for name in FIGURES:
        if name in drawn:
            (target / f"sweep-{name}.png").write_bytes(figure_image(drawn[name], "png"))
    (target / "sweep.pdf").write_bytes(merged_pdf(drawn))


def rate(lr: float) -> str:
    """A learning rate as the docs write it: 3.2e-4, 1e-3."""
    mantissa, exponent = f"{lr:.1e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def reached_text(lr: float, reached: list, accuracy: float | None) -> str:
    """A cell in words, for the results page (which takes no nulls): each seed's sequences to 90% at the chosen
    rate, the seeds that never got there counted, or where the cell ended when none did."""
    done = [f"{s:,}" for s in reached if s is not None]
    missing = len(reached) - len(done)
    if not done:
        return f"not reached (at best {accuracy:.0%}, at {rate(lr)})" if accuracy is not None else "not reached"
    seeds = " and ".join(done) + (f"; {missing} of {len(reached)} seeds not reached" if missing else "")
    return f"{seeds} (at {rate(lr)})"


def cell_rows(sweep: dict) -> list[dict]:
    """One row per architecture and cell: its chosen rate and what the seeds reached there."""
    rows = []
    for arch, by_curve in sweep["chosen"].items():
        for value, cell in by_curve.get("preset", {}).items():
            rows.append(dict(arch=arch, N=int(value), lr=cell["lr"], accuracy=cell["metric"], accuracies=cell["metrics"],
                             sequences_to_90=cell["sequences_to_threshold"],
                             text=reached_text(cell["lr"], cell["sequences_to_threshold"], cell["metric"]),
                             rates_tried={lr: dict(accuracy=c["metric"], sequences_to_90=c["sequences_to_threshold"],
                                                   diverged=c["diverged"]) for lr, c in cell["by_lr"].items()}))
    return sorted(rows, key=lambda r: (r["N"], sweep["archs"].index(r["arch"])))


def ratio_texts(sweep: dict) -> dict:
    """arch -> N -> its sequences to 90% over the transformer's in words ("2.4x (1.4-3.8x)", or why there is
    none), for every architecture after it; empty for a sweep without the transformer first (the controls)."""
    out = {}
    if sweep["archs"][0] != "transformer":
        return out
    for arch in sweep["archs"][1:]:
        by_value = (sweep.get("ratios") or {}).get(arch, {}).get("preset", {})
        for value in map(str, sweep["values"]):
            r = by_value.get(value) or {}
            out.setdefault(arch, {})[value] = (
                f"{r['ratio']:.1f}× ({r['low']:.1f}–{r['high']:.1f}×)" if r.get("ratio") is not None
                else "none: not every seed of both reached 90%")
    return out


def rate_range(sweep: dict) -> dict:
    """arch -> the rates it was trained at, in words ("3.2e-4 to 1e-2, 4 rates")."""
    by_arch = sweep.get("lrs_by_arch") or {}
    out = {}
    for arch in sweep["archs"]:
        rates = sorted(by_arch.get(arch) or sweep["lrs"])
        out[arch] = f"{rate(rates[0])} to {rate(rates[-1])}, {len(rates)} rates" if len(rates) > 1 else rate(rates[0])
    return out


def speeds(sweep: dict) -> dict:
    """Median training sequences per second of each architecture over its points (one thread each; the machine
    may have been shared, so a ratio between architectures of one sweep says more than the number)."""
    found = {}
    for point in sweep["points"]:
        if point.get("sequences_per_s"):
            found.setdefault(point["arch"], []).append(point["sequences_per_s"])
    return {arch: round(statistics.median(values)) for arch, values in found.items()}


def same_rate_ratios(sweep: dict, arch: str = "mamba", reference: str = "transformer") -> dict:
    """N -> rate -> ``arch``'s mean sequences to 90% over ``reference``'s at that same rate, over the seeds of
    each that reached it so far (their counts beside it): a first reading while the chosen rates' ratios
    (the sweep's ``ratios``, every seed needed) are still open."""
    found = {}
    for value, cell in sweep["chosen"].get(arch, {}).get("preset", {}).items():
        theirs = sweep["chosen"].get(reference, {}).get("preset", {}).get(value)
        for lr, ours in cell["by_lr"].items():
            a = [s for s in ours["sequences_to_threshold"] if s is not None]
            b = [s for s in ((theirs or {}).get("by_lr", {}).get(lr) or {}).get("sequences_to_threshold", [])
                 if s is not None]
            if a and b:
                found.setdefault(value, {})[lr] = dict(ratio=statistics.fmean(a) / statistics.fmean(b),
                                                       seeds=[len(a), len(b)])
    return found


def restore(runs: Path) -> int:
    """Write each point of the shipped sweeps whose run folder under ``runs`` lacks it back as that run's
    ``point.json`` (what the sweep reads to skip a finished point); returns how many it wrote."""
    written = 0
    for name in SWEEPS:
        shipped = OUT / name / "sweep.json"
        if not shipped.exists():
            continue
        for point in json.loads(shipped.read_text())["metrics"]["points"]:
            saved = runs / name / "runs" / Path(point["run"]).name / "point.json"
            if not saved.exists():
                saved.parent.mkdir(parents=True, exist_ok=True)
                saved.write_text(json.dumps(point, indent=1) + "\n")
                written += 1
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "binding-ladder")
    parser.add_argument("--restore", action="store_true", help="write the shipped points back into --runs as finished")
    args = parser.parse_args()
    if args.restore:
        print(f"restored {restore(args.runs)} finished points from {OUT.relative_to(ROOT)}")
        return
    summary = {}
    for name in SWEEPS:
        source = args.runs / name / "sweep.json"
        if not source.exists():
            continue
        sweep = json.loads(source.read_text())["metrics"]
        target = OUT / name
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / "sweep.json")
        draw(sweep, target)
        done = len(sweep["points"])
        by_arch = sweep.get("lrs_by_arch") or {}  # each architecture's own rates (one grid for all before them)
        planned = len(sweep["values"]) * len(sweep["seeds"]) * sum(
            max(1, len(by_arch.get(arch) or sweep["lrs"])) for arch in sweep["archs"])
        summary[name] = dict(complete=sweep["complete"], points_done=done, points_planned=planned,
                             cells=cell_rows(sweep), ratios=sweep.get("ratios", {}), speeds=speeds(sweep),
                             same_rate_ratios=same_rate_ratios(sweep), ratio_texts=ratio_texts(sweep),
                             rates=rate_range(sweep),
                             budget_sequences=sweep["budget"]["steps"] * sweep["budget"]["batch_size"])
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    for name, part in summary.items():
        print(f"{name}: {part['points_done']} of {part['points_planned']} points")


if __name__ == "__main__":
    main()
