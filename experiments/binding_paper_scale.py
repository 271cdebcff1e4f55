"""Copy the paper-scale binding runs (experiments/binding-paper-scale.sh) into figures/readme/binding-paper/: each
run's record and metrics log, summary.json with what the results page reads (per run: steps and sequences
trained so far, the last evaluation's accuracy on full 64-pair tables, the first evaluation at 90% or more), and
the learning figure (accuracy against training sequences, one line per architecture). Run it whenever the runs
have moved on; a run still training is copied as it stands (its ``status`` says so).

``--ship-mamba STEP`` also ships the Mamba run as the model recall-mamba-plain-scratch as it stood at checkpoint
STEP (``final``: once it has finished) and measures it on the paper's format (content-addressing, 1,024 fresh full
tables) into figures/readme/binding-paper/shipped/, which its card and the results page read, and refreshes the
paper's table (figures/readme/reproduction/); then ``python docs/gen_results.py`` fills the pages.

    python experiments/binding_paper_scale.py [--runs runs/binding-paper] [--ship-mamba STEP|final]
"""
import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "figures" / "readme" / "binding-paper"
# binding-paper-scale.sh's runs, by the key summary.json gives each (the results page reads them by these keys)
RUNS = {"transformer": "transformer-plain", "mamba": "mamba-plain", "transformer_lr1e-3": "transformer-plain-lr1e-3"}
# runs stopped on purpose, not to be resumed: their record still says "running", so the summary says why instead
STOPPED = {"transformer-plain-lr1e-3": "stopped at chance: 1e-3 also stayed at chance at the ladder's 16 pairs"}
BAR = 0.9  # the paper's binding bar, on full 64-pair tables
SHIPPED_NAME = "recall-mamba-plain-scratch"
# what the card states and the page reads: the paper's format, 1,024 held-out sequences, 3 queries each
MEASURE = ["content-addressing", "--ckpt", SHIPPED_NAME, "--sizes", "1,4,16,64", "--queries", "3", "--n", "1024",
           "--out", str(OUT.relative_to(ROOT) / "shipped"), "--format", "pdf,png,json"]


def summarise(run: dict, rows: list[dict], stopped: str | None = None) -> dict:
    """One run's standing: how far it has trained, its evaluations in sequences, and where it first met the bar;
    ``stopped``: why a run was stopped for good (its status then)."""
    batch = run["train"]["batch_size"]
    evals = [(r["step"] * batch, r["eval_accuracy"]) for r in rows if "eval_accuracy" in r]
    first = next((s for s, a in evals if a >= BAR), None)
    step = rows[-1]["step"] if rows else 0
    return dict(arch=run["arch"], status=f"stopped: {stopped}" if stopped else run["status"],
                n_params=run["n_params"], lr=run["train"]["lr"],
                batch_size=batch, budget_steps=run["train"]["steps"], steps_done=step, sequences_done=step * batch,
                last_accuracy=evals[-1][1] if evals else None, best_accuracy=max((a for _, a in evals), default=None),
                sequences_to_90=first, eval_size=run["train"]["eval_size"],
                curve=[dict(sequences=s, accuracy=a) for s, a in evals])


def learning_figure(summary: dict):
    import plotly.graph_objects as go

    fig = go.Figure()
    colours = dict(transformer="#1f77b4", mamba="#d62728")
    for r in summary.values():
        stopped = r["status"].startswith("stopped")
        fig.add_scatter(x=[p["sequences"] for p in r["curve"]], y=[p["accuracy"] for p in r["curve"]],
                        mode="lines", name=f"{r['arch']} (lr {r['lr']:g}{', stopped' if stopped else ''})",
                        line=dict(color=colours.get(r["arch"]), dash="dot" if stopped else "solid"))
    fig.add_hline(y=BAR, line_dash="dot", annotation_text="the bar, 90%", annotation_position="bottom right")
    fig.update_layout(title="Full 64-pair tables from scratch, one recipe (batch 64): accuracy while training",
                      xaxis_title="training sequences", yaxis_title="accuracy (held-out, full tables)",
                      yaxis_range=[0, 1], width=900, height=500)
    return fig


def ship_mamba(run_dir: Path, step: str) -> None:
    """Ship the Mamba run at checkpoint ``step`` (or finished) and measure it, as the card's command says."""
    import shutil
    import subprocess
    import sys

    from interp.pretrained import ship

    note = f"(its note: docs/results/src/cards/{SHIPPED_NAME}.md.in, filled by `python docs/gen_results.py`)"
    print(ship(run_dir, SHIPPED_NAME, note=note, at_step=None if step == "final" else int(step)))
    # the measurement of the checkpoint shipped before is of weights no longer shipped (interp run would keep it
    # and write beside it, under a hashed name)
    shutil.rmtree(OUT / "shipped" / SHIPPED_NAME, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "interp", "run", *MEASURE], cwd=ROOT, check=True)
    # the paper's table lists it among the binding models (the other rows' results are read back, not redone)
    subprocess.run([sys.executable, "-m", "interp", "reproduce", "--runs", "shipped", "--out",
                    "figures/readme/reproduction"], cwd=ROOT, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="runs/binding-paper", help="the folder binding-paper-scale.sh trains in")
    parser.add_argument("--ship-mamba", metavar="STEP", help="also ship the Mamba run at checkpoint STEP ('final' once "
                        f"finished) as {SHIPPED_NAME} and measure it")
    args = parser.parse_args()
    if args.ship_mamba:
        ship_mamba(Path(args.runs) / RUNS["mamba"], args.ship_mamba)
    from interp.export import figure_image
    from interp.files import RunFolder, atomic_write_bytes, atomic_write_json

    summary = {}
    for key, name in RUNS.items():
        src, target = RunFolder(Path(args.runs) / name), RunFolder(OUT / name)
        if not src.has_record():
            raise SystemExit(f"error: {src.root} holds no run; run experiments/binding-paper-scale.sh first")
        target.root.mkdir(parents=True, exist_ok=True)
        for source, copy in ((src.record, target.record), (src.metrics, target.metrics)):
            atomic_write_bytes(copy, source.read_bytes())  # whole or not at all, like every file the project writes
        run = summarise(target.read_record(), target.logged_lines(), STOPPED.get(name))  # the copies, so they agree
        summary[key] = dict(run=name, **run)
        print(f"{name}: step {run['steps_done']:,} of {run['budget_steps']:,}, "
              f"accuracy {run['last_accuracy']:.3f}, sequences to 90%: {run['sequences_to_90']}")
    atomic_write_json(OUT / "summary.json", summary)
    atomic_write_bytes(OUT / "learning.png", figure_image(learning_figure(summary), "png"))
    print(f"wrote {OUT.relative_to(ROOT)}/summary.json and learning.png")


if __name__ == "__main__":
    main()
