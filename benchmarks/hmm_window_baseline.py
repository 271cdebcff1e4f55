"""How far a filter that remembers only the last w observations is from Bayes (HMM).

    python benchmarks/hmm_window_baseline.py [--windows 0,1,2,3,4,5] [--n 4000] [--concentration 1.0]
    python benchmarks/hmm_window_baseline.py --models hmm-transformer-cpu runs/bench-hmm-8-layers-d64

Exact filtering carries the belief through every transition since the first observation. A model
of finitely many layers can only compose so many transition-and-emission steps, so a reference
point is the *window-w filter*: at observation t it forgets o_1..o_{t-w-1}, starts from a fixed
prior over s_{t-w} and runs the forward algorithm exactly over o_{t-w}..o_t (positions t <= w,
whose window reaches the start, are exact: the true initial distribution is uniform). Two priors:
uniform, and the stationary distribution of the sequence's own T (the belief of someone who knows
the chain has run a while but saw nothing). w = 0 with the stationary prior is "stationary
distribution times the current emission", the first thing a model learns. Printed per w: entropy
MAE in bits against the Bayes filter on the `cpu` preset's task (S=O=5, K=20), the number
`interp run calibration` reports for a model, overall and at the last position. Seconds on a CPU.

``--models`` (shipped names or run folders, on the same sequences) adds each model's error per
observation position beside the windows' and writes figures/readme/hmm-window-baseline.{pdf,png}:
a model whose error levels off beside the window-w curve remembers about w observations. ``--json PATH``
writes the printed numbers there too, with the command (figures/readme/hmm-window-baseline.json).
``--figure-from JSON`` draws the figure again from such a record: the models' errors as it holds them, the
windows' computed again on the same sequences (seconds; no model is loaded).
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path

import torch

from tasks.base import entropy_bits
from tasks.hmm import HMM, OBS0, forward_filter


def stationary(T: torch.Tensor, iterations: int = 200) -> torch.Tensor:
    """[B, S] stationary distributions of the row-stochastic T [B, S, S] (every entry >= 0.05, so the
    chain is ergodic and aperiodic and power iteration converges geometrically)."""
    pi = torch.full(T.shape[:2], 1.0 / T.shape[1], dtype=T.dtype)
    for _ in range(iterations):
        pi = (pi[:, None, :] @ T)[:, 0]
    return pi / pi.sum(-1, keepdim=True)


def window_filter(T: torch.Tensor, E: torch.Tensor, observations: torch.Tensor, window: int,
                  prior: torch.Tensor | None = None) -> torch.Tensor:
    """[B, K, S] beliefs of the window-``window`` filter; ``prior`` [B, S] over the window's first
    state (None: uniform). A window that reaches o_1 starts from the true (uniform) initial."""
    B, K = observations.shape
    out = torch.empty(B, K, T.shape[1], dtype=T.dtype)
    for t in range(K):
        start = max(0, t - window)
        initial = prior if start > 0 else None
        out[:, t] = forward_filter(T, E, observations[:, start:t + 1], initial)[:, -1]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", default="0,1,2,3,4,5", help="comma-separated window lengths w")
    parser.add_argument("--n", type=int, default=4000, help="sequences")
    parser.add_argument("--concentration", type=float, default=1.0,
                        help="Dirichlet concentration of the tables (smaller: peakier; the preset's is 1)")
    parser.add_argument("--models", nargs="*", default=[], help="shipped model names or run folders to compare")
    parser.add_argument("--json", type=Path, help="also write the printed numbers here, with the command")
    parser.add_argument("--figure-from", type=Path, help="a record written with --json and --models: its figure again")
    args = parser.parse_args()
    drawn = None
    if args.figure_from:
        drawn = json.loads(args.figure_from.read_text())
        args.n, args.concentration, args.windows = drawn["n"], drawn["concentration"], ",".join(drawn["windows"])
    record = dict(command=shlex.join(["python", *sys.argv]), n=args.n, concentration=args.concentration,
                  windows={}, models={})
    task = HMM(concentration=args.concentration)
    batch = task.sample(args.n, torch.Generator().manual_seed(0))
    T, E = batch.hypothesis["T"].double(), batch.hypothesis["E"].double()
    observations = batch.tokens[:, task.obs_offset:] - OBS0
    bayes = entropy_bits(forward_filter(T, E, observations))
    priors = {"uniform": None, "stationary": stationary(T)}
    print("| window w | MAE, uniform prior (bits) | MAE, stationary prior | last position, stationary |")
    print("|---|---|---|---|")
    by_position = {}  # window w (int) or model name -> mean |H - H_Bayes| per observation position
    for w in (int(s) for s in args.windows.split(",")):
        errors = {name: (entropy_bits(window_filter(T, E, observations, w, prior)) - bayes).abs()
                  for name, prior in priors.items()}
        print(f"| {w} | {errors['uniform'].mean():.4f} | {errors['stationary'].mean():.4f} | "
              f"{errors['stationary'][:, -1].mean():.4f} |")
        record["windows"][str(w)] = dict(uniform=errors["uniform"].mean().item(),
                                         stationary=errors["stationary"].mean().item(),
                                         stationary_last=errors["stationary"][:, -1].mean().item())
        by_position[w] = errors["stationary"].mean(0)
    if drawn:
        figure(by_position | {name: torch.tensor(m["per_position"]) for name, m in drawn["models"].items()})
    elif args.models:
        import interp

        print("\n| model | MAE (bits) | position 1 | position 2 | position 5 | positions 5-20 |\n|---|---|---|---|---|---|")
        for spec in args.models:
            model = interp.load(spec).eval()
            with torch.no_grad():
                probs = torch.cat([model.answer_probs(chunk)[:, task.obs_offset:].double()
                                   for chunk in batch.tokens.split(500)])
            error = (entropy_bits(probs) - bayes).abs()
            print(f"| {spec} | {error.mean():.4f} | {error[:, 0].mean():.4f} | {error[:, 1].mean():.4f} | "
                  f"{error[:, 4].mean():.4f} | {error[:, 4:].mean():.4f} |")
            by_position[spec] = error.mean(0)
            record["models"][spec] = dict(mae=error.mean().item(), position_1=error[:, 0].mean().item(),
                                          position_2=error[:, 1].mean().item(), position_5=error[:, 4].mean().item(),
                                          positions_5_on=error[:, 4:].mean().item(),
                                          per_position=error.mean(0).tolist())
        figure(by_position)
    if args.json:
        args.json.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.json}")


ARCH_COLOURS = {"transformer": "#1f77b4", "mamba": "#d62728", "lstm": "#2ca02c", "mlp": "#9467bd"}


def figure(by_position: dict) -> None:
    import plotly.graph_objects as go

    from analyses import style
    from interp.export import figure_image, figure_pdf

    fig = go.Figure()
    for name, error in by_position.items():
        positions = list(range(1, len(error) + 1))
        if isinstance(name, int):  # a window: exact (zero error) up to position w + 1, so drawn from w + 2
            fig.add_scatter(x=positions[name + 1:], y=error[name + 1:].tolist(), mode="lines", showlegend=False,
                            legendgroup="windows", line=dict(dash="dot", color="gray", width=1.5), hoverinfo="skip")
            fig.add_annotation(x=positions[-1], y=math.log10(error[-1]), text=f"w = {name}", showarrow=False,
                               xanchor="left", xshift=6, font=dict(color="gray", size=11))
        else:  # each model in its architecture's colour
            colour = next((c for arch, c in ARCH_COLOURS.items() if arch in str(name)), None)
            fig.add_scatter(x=positions, y=error.tolist(), name=name, mode="lines+markers",
                            line=dict(width=2.5, color=colour))
    fig.update_layout(title="HMM K=20: error per position; dotted: filters that keep the last w observations",
                      xaxis_title="observation position t", yaxis_title="entropy MAE (bits)", yaxis_type="log",
                      width=760, height=460)
    style.apply(fig)
    out = Path("figures/readme")
    out.mkdir(parents=True, exist_ok=True)
    (out / "hmm-window-baseline.pdf").write_bytes(figure_pdf(fig))
    (out / "hmm-window-baseline.png").write_bytes(figure_image(fig, "png"))
    print(f"wrote {out}/hmm-window-baseline.pdf and .png")


if __name__ == "__main__":
    main()
