"""Copy the paper-scale binding runs (experiments/binding-paper-scale.sh) into figures/readme/binding-paper/: each
run's record and metrics log, summary.json with what the results page reads (per run: steps and sequences
trained so far, the last evaluation's accuracy on full 64-pair tables, the first evaluation at 90% or more), and
the learning figure (accuracy against training sequences, one line per architecture). Run it whenever the runs
have moved on; a run still training is copied as it stands (its ``status`` says so).

    python experiments/binding_paper_scale.py [--runs runs/binding-paper]
"""
import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "figures" / "readme" / "binding-paper"
RUNS = ("transformer-plain", "mamba-plain")  # binding-paper-scale.sh's runs
BAR = 0.9  # the paper's binding bar, on full 64-pair tables


def summarise(run: dict, rows: list[dict]) -> dict:
    """One run's standing: how far it has trained, its evaluations in sequences, and where it first met the bar."""
    batch = run["train"]["batch_size"]
    evals = [(r["step"] * batch, r["eval_accuracy"]) for r in rows if "eval_accuracy" in r]
    first = next((s for s, a in evals if a >= BAR), None)
    step = rows[-1]["step"] if rows else 0
    return dict(arch=run["arch"], status=run["status"], n_params=run["n_params"], lr=run["train"]["lr"],
                batch_size=batch, budget_steps=run["train"]["steps"], steps_done=step, sequences_done=step * batch,
                last_accuracy=evals[-1][1] if evals else None, best_accuracy=max((a for _, a in evals), default=None),
                sequences_to_90=first, eval_size=run["train"]["eval_size"],
                curve=[dict(sequences=s, accuracy=a) for s, a in evals])


def learning_figure(summary: dict):
    import plotly.graph_objects as go

    fig = go.Figure()
    for name, r in summary.items():
        fig.add_scatter(x=[p["sequences"] for p in r["curve"]], y=[p["accuracy"] for p in r["curve"]],
                        mode="lines", name=f"{r['arch']} (lr {r['lr']:g})")
    fig.add_hline(y=BAR, line_dash="dot", annotation_text="the bar, 90%")
    fig.update_layout(title="Full 64-pair tables from scratch, one recipe (batch 64): accuracy while training",
                      xaxis_title="training sequences", yaxis_title="accuracy (held-out, full tables)",
                      yaxis_range=[0, 1], width=900, height=500)
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="runs/binding-paper", help="the folder binding-paper-scale.sh trains in")
    args = parser.parse_args()
    from interp.export import figure_image
    from interp.files import RunFolder, atomic_write_bytes, atomic_write_json

    summary = {}
    for name in RUNS:
        src, target = RunFolder(Path(args.runs) / name), RunFolder(OUT / name)
        if not src.has_record():
            raise SystemExit(f"error: {src.root} holds no run; run experiments/binding-paper-scale.sh first")
        target.root.mkdir(parents=True, exist_ok=True)
        for source, copy in ((src.record, target.record), (src.metrics, target.metrics)):
            atomic_write_bytes(copy, source.read_bytes())  # whole or not at all, like every file the project writes
        run = summarise(target.read_record(), target.logged_lines())  # the copies, so they agree
        summary[run["arch"]] = dict(run=name, **run)  # keyed by architecture, as the results page reads it
        print(f"{name}: step {run['steps_done']:,} of {run['budget_steps']:,}, "
              f"accuracy {run['last_accuracy']:.3f}, sequences to 90%: {run['sequences_to_90']}")
    atomic_write_json(OUT / "summary.json", summary)
    atomic_write_bytes(OUT / "learning.png", figure_image(learning_figure(summary), "png"))
    print(f"wrote {OUT.relative_to(ROOT)}/summary.json and learning.png")


if __name__ == "__main__":
    main()
