"""Train CPU presets and report entropy MAE against wall time.

    python benchmarks/cpu_preset.py                         # the `cpu` preset on bijection V=20, L=19
    python benchmarks/cpu_preset.py --variant hard-labels   # the same model with the paper's hard labels
    python benchmarks/cpu_preset.py --task hmm              # the `cpu` preset on HMM K=20
    python benchmarks/cpu_preset.py --report runs/bench-*   # table + figure from finished runs

Each variant is a real `interp train` run in runs/bench-TASK-NAME (bijection: runs/bench-NAME).
Run one at a time on an idle machine: two trainings on two cores slow each other down several-fold.
Targets: MAE <= 0.01 bits within 20 minutes on bijection, within 60 minutes on HMM. The report
prints the MAE at fixed minutes and writes figures/readme/cpu-preset-curves[-TASK].{pdf,png}.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

VARIANTS = {
    "cpu": [],  # the preset as shipped: d=96, 2 layers, 4 heads, batch 128, lr 3e-3, soft targets
    "hard-labels": ["--loss", "hard"],
    "d64-4layers": ["-M", "d_model=64", "-M", "n_layers=4", "--batch-size", "64", "--lr", "2e-3"],
}
MARKS_MIN = (2, 5, 10, 15, 20, 30, 45, 60)
BUDGET_MIN = {"bijection": 20, "hmm": 60}


def train(task: str, name: str, extra: list[str]) -> Path:
    out = Path("runs") / (f"bench-{name}" if task == "bijection" else f"bench-{task}-{name}")
    cmd = [sys.executable, "-m", "interp", "train", "--task", task, "--preset", "cpu", "--out", str(out), *extra]
    if (out / "run.json").exists():
        cmd.append("--resume")
    subprocess.run(cmd, check=True)
    return out


def curve(run: Path) -> list[tuple[float, int, float]]:
    """(minutes, step, MAE) at every evaluation of a run."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [(r["elapsed_s"] / 60, r["step"], r["eval_entropy_mae_bits"]) for r in rows if "eval_entropy_mae_bits" in r]


def at_minutes(points, minutes: float):
    before = [p for p in points if p[0] <= minutes]
    return before[-1] if before else None


def report(runs: list[Path]) -> None:
    import plotly.graph_objects as go

    task = json.loads((runs[0] / "run.json").read_text())["task"]["name"]
    budget = BUDGET_MIN.get(task, 20)
    marks = [m for m in MARKS_MIN if m <= budget]
    print("| run | params | steps/s | " + " | ".join(f"MAE @{m} min" for m in marks) + " | final (min) |")
    print("|---|---|---|" + "---|" * len(marks) + "---|")
    fig = go.Figure()
    for run in runs:
        record = json.loads((run / "run.json").read_text())
        points = curve(run)
        if not points:
            continue
        minutes, step, mae = points[-1]
        cells = []
        for m in marks:
            p = at_minutes(points, m)
            cells.append(f"{p[2]:.4f} ({p[1]})" if p and m <= minutes + 0.5 else "-")
        print(f"| {run.name} | {record['n_params']:,} | {step / (minutes * 60):.1f} | " + " | ".join(cells)
              + f" | {mae:.4f} ({minutes:.1f}) |")
        fig.add_scatter(x=[p[0] for p in points], y=[p[2] for p in points], mode="lines+markers", name=run.name)
    fig.add_hline(y=0.01, line_dash="dash", annotation_text="target 0.01 bits")
    fig.add_vline(x=budget, line_dash="dot", annotation_text=f"{budget} min")
    fig.update_layout(title=f"{task}: entropy MAE against training wall time (2-core CPU)",
                      xaxis_title="minutes", yaxis_title="entropy MAE (bits)", yaxis_type="log",
                      template="plotly_white", width=760, height=460)
    out = Path("figures/readme")
    out.mkdir(parents=True, exist_ok=True)
    stem = "cpu-preset-curves" + ("" if task == "bijection" else f"-{task}")
    fig.write_image(out / f"{stem}.pdf")
    fig.write_image(out / f"{stem}.png", scale=2)
    print(f"wrote {out / stem}.pdf and .png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="bijection", help="wind tunnel to train on (default: bijection)")
    parser.add_argument("--variant", action="append", choices=list(VARIANTS), help="variants to train (default: cpu)")
    parser.add_argument("--report", nargs="*", type=Path, help="only report on these run folders")
    args = parser.parse_args()
    if args.report is not None:
        report(args.report)
        return
    runs = [train(args.task, name, VARIANTS[name]) for name in (args.variant or ["cpu"])]
    report(runs)


if __name__ == "__main__":
    main()
