"""The equal-footing search on recall: every trial's curve against training compute, and its records.

    python benchmarks/equal_footing.py runs/tune-recall-mamba runs/tune-recall-transformer

Each argument is an ``interp tune`` folder. Writes figures/readme/equal-footing/curves.{pdf,png} (every
trial's held-out score against the tokens it trained on: a short-table stage costs what its shorter
sequences cost) and trials-STUDY.{json,csv} (every trial of each search: settings, state, score, curve,
budget), and prints one line per search with its best trial.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

OUT = Path("figures/readme/equal-footing")


def tokens_seen(summary: dict, trial: dict) -> dict[int, int]:
    """Training tokens after each evaluated step of a trial (its curriculum stages at their own length)."""
    import tasks

    budget = summary["budget"]
    task = tasks.from_config(summary["task"])
    run = json.loads((Path(trial["run"]) / "run.json").read_text())
    stages = [(end, tasks.from_config(task.config() | settings).seq_len) for end, settings in run["train"]["curriculum"]]
    def at(step: int) -> int:
        total, start = 0, 0
        for end, length in stages:
            total += (min(step, end) - start) * length if step > start else 0
            start = end
        return (total + max(0, step - start) * task.seq_len) * budget["batch_size"]
    return {int(step): at(int(step)) for step in trial["curve"]}


def label(summary: dict, trial: dict) -> str:
    arch = summary["arch"]
    params = dict(trial["params"])
    shift = params.pop("shift", None)
    if shift is not None:
        arch += " plain" if shift == "0" and arch == "transformer" else f" shift {shift}" if shift != "0" else " no shift"
    return f"{arch}, " + ", ".join(f"{k} {v}" for k, v in params.items())


def main() -> None:
    import plotly.graph_objects as go

    from analyses import style
    from interp.export import figure_image, figure_pdf

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tunes", nargs="+", type=Path)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    fig = go.Figure()
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
    i = 0
    for folder in args.tunes:
        summary = json.loads((folder / "tune.json").read_text())
        for trial in summary["trials"]:
            if trial["run"] and (Path(trial["run"]) / "run.json").exists() and trial["curve"]:
                seen = tokens_seen(summary, trial)
                trial["tokens_seen"] = {str(k): v for k, v in seen.items()}
                steps = sorted(seen)
                fig.add_scatter(x=[seen[s] for s in steps], y=[trial["curve"][str(s)] if str(s) in trial["curve"]
                                                              else trial["curve"][s] for s in steps],
                                mode="lines+markers", name=f"{label(summary, trial)} ({trial['state']})",
                                line=dict(color=colours[i % len(colours)],
                                          dash="dash" if trial["state"] == "pruned" else "solid"))
                i += 1
        for trial in summary["trials"]:  # the records name runs by their place in the search, not this machine
            trial["run"] = trial["run"] and str(Path(trial["run"]).relative_to(folder.parent.parent)
                                                if Path(trial["run"]).is_absolute() else trial["run"])
        record = {k: v for k, v in summary.items() if k != "storage"}
        (OUT / f"trials-{summary['study']}.json").write_text(json.dumps(record, indent=1) + "\n")
        shutil.copyfile(folder / "trials.csv", OUT / f"trials-{summary['study']}.csv")
        best = summary["best"]
        done = sum(t["state"] in ("complete", "pruned") for t in summary["trials"])
        print(f"{summary['study']}: {done} of {summary['n_trials']} trials, budget {summary['budget']['steps']:,} steps x "
              f"{summary['budget']['batch_size']}; best " + (f"{best['name']} {summary['metric']} {best['score']:.4f}"
                                                               if best else "none yet"))
    style.reference_line(fig, 1 / 256, "chance 0.4%", color="black")
    fig.update_layout(title="recall: held-out accuracy against training tokens, every trial of the equal search",
                      xaxis_title="training tokens (sequences x length)", yaxis_title="held-out accuracy (tables of 1-64 pairs)",
                      xaxis_type="log", height=520, width=980)
    style.apply(fig)
    (OUT / "curves.pdf").write_bytes(figure_pdf(fig))
    (OUT / "curves.png").write_bytes(figure_image(fig, "png"))
    print(f"wrote {OUT / 'curves.pdf'} and .png")


if __name__ == "__main__":
    main()
