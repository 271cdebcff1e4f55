"""Paper II's EM-vs-SGD experiment, with held-out evaluation and the controls the claim needs.

    python benchmarks/em_vs_sgd.py                    # sticky chain, 5 seeds, then a bijection wind tunnel
    python benchmarks/em_vs_sgd.py --steps 200 --seeds 1 --no-tunnel    # a quick look
    python benchmarks/em_vs_sgd.py --out figures/readme/em-vs-sgd         # also writes results.json

The authors' setting (shared/REFERENCE.md, "Paper II"): a sticky Markov chain over 8 symbols (self-
transition 0.3, the rest in proportion to 1 / circular distance), inputs x_t = mu_{y_{t-1}} + N(0, I)
in d = 20, one causal attention head (d_k 10, d_v 15) and W_O predicting y_t, trained full-batch on
one sequence of T = 2000 by gradient descent for 1000 steps. Their "EM" is the same gradient with a 10x
step on W_V only, applied simultaneously. Here every schedule is evaluated on 4 held-out sequences of
the same chain (same means), in nats and in bits above the exact Bayes predictor (the forward filter
over y_{t-1} given x_1..x_t, pushed through the transition matrix), and the controls are:

- ``sgd``: step 0.01 on every matrix (their baseline);
- ``em``: step 0.1 on W_V, 0.01 on the rest, simultaneously (their "EM");
- ``all-x10``: step 0.1 on every matrix (is the gain only a larger step?);
- ``alternate``: a schedule that really alternates, E-step then M-step: even steps move only W_Q and
  W_K (0.01), odd steps only W_V (0.1) and W_O (0.01); each counts as a step, so it sees the same
  number of gradients.

Speed-up as the authors define it: steps / (first step whose training loss is below sgd's final
training loss), and the same on the held-out loss. The wind tunnel repeats the four schedules with
AdamW (same multipliers on every W_V, step 1e-3) on bijection V=8 with a 2-layer transformer, held-out
entropy MAE at the end. Seeds vary the chain's means, the sequences and the initialisation.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SCHEDULES = ("sgd", "em", "all-x10", "alternate")
LOG2E = 1 / math.log(2)


# -- the sticky chain -------------------------------------------------------------------------------
def transition_matrix(K: int = 8, stay: float = 0.3) -> torch.Tensor:
    i = torch.arange(K)
    distance = (i[:, None] - i[None, :]).abs()
    distance = torch.minimum(distance, K - distance).double()
    weight = torch.where(distance > 0, 1 / distance.clamp_min(1), torch.zeros_like(distance))
    return stay * torch.eye(K, dtype=torch.float64) + (1 - stay) * weight / weight.sum(1, keepdim=True)


def sample_chain(P: torch.Tensor, means: torch.Tensor, T: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """(x [T, d], y [T]) with y a path of the chain and x_t = mu_{y_{t-1}} + N(0, I) (y_{-1} uniform)."""
    K = P.shape[0]
    y = torch.empty(T + 1, dtype=torch.long)
    y[0] = torch.randint(K, (1,), generator=g)
    for t in range(1, T + 1):
        y[t] = torch.multinomial(P[y[t - 1]], 1, generator=g)
    x = means[y[:-1]] + torch.randn(T, means.shape[1], generator=g, dtype=torch.float64)
    return x, y[1:]


def bayes_predictive(P: torch.Tensor, means: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """p(y_t | x_1..x_t) [T, K]: the forward filter over the hidden y_{t-1} (which emits x_t), then one step of P."""
    log_lik = -0.5 * ((x[:, None, :] - means[None]) ** 2).sum(-1)  # [T, K], constants cancel
    belief = torch.full((P.shape[0],), 1 / P.shape[0], dtype=torch.float64)  # y_{-1} uniform
    out = []
    for t in range(len(x)):
        prior = belief if t == 0 else belief @ P  # p(y_{t-1} | x_<t)
        post = prior * torch.exp(log_lik[t] - log_lik[t].max())
        belief = post / post.sum()  # p(y_{t-1} | x_<=t)
        out.append(belief @ P)
    return torch.stack(out)


class OneHead(torch.nn.Module):
    """One causal softmax attention head and an output map: logits_t = W_O sum_s alpha_ts W_V x_s."""

    def __init__(self, d: int, d_k: int, d_v: int, K: int, g: torch.Generator):
        super().__init__()
        init = lambda *shape: torch.nn.Parameter(torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
                                                 / math.sqrt(shape[0]))
        self.W_Q, self.W_K, self.W_V, self.W_O = init(d, d_k), init(d, d_k), init(d, d_v), init(d_v, K)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = (x @ self.W_Q) @ (x @ self.W_K).T / math.sqrt(self.W_Q.shape[1])
        scores = scores.masked_fill(~torch.ones_like(scores, dtype=torch.bool).tril(), -math.inf)
        return scores.softmax(-1) @ (x @ self.W_V) @ self.W_O


def step_sizes(schedule: str, step: int, base: float, names: tuple[str, ...]) -> dict[str, float]:
    """The step size of each matrix at ``step`` (0 = not moved this step); value matrices' names contain W_V."""
    big = 10 * base
    if schedule == "sgd":
        return {n: base for n in names}
    if schedule == "em":
        return {n: big if "W_V" in n else base for n in names}
    if schedule == "all-x10":
        return {n: big for n in names}
    if schedule == "alternate":  # E-step (queries, keys) on even steps, M-step (values, read-out) on odd ones
        e_step = step % 2 == 0
        return {n: (base if e_step else 0.0) if ("W_Q" in n or "W_K" in n) else
                (0.0 if e_step else (big if "W_V" in n else base)) for n in names}
    raise ValueError(f"unknown schedule {schedule!r}; choose from {', '.join(SCHEDULES)}")


def chain_run(schedule: str, seed: int, steps: int, T: int = 2000, held_out: int = 4) -> dict:
    g = torch.Generator().manual_seed(seed)
    P = transition_matrix()
    means = torch.randn(8, 20, generator=g, dtype=torch.float64)
    x, y = sample_chain(P, means, T, g)
    tests = [sample_chain(P, means, T, g) for _ in range(held_out)]
    bayes = statistics.mean(-torch.log(bayes_predictive(P, means, xt)[torch.arange(T), yt]).mean().item()
                            for xt, yt in tests)
    model = OneHead(20, 10, 15, 8, torch.Generator().manual_seed(seed + 1))
    names = tuple(n for n, _ in model.named_parameters())

    @torch.no_grad()
    def held_out_loss():
        return statistics.mean(torch.nn.functional.cross_entropy(model(xt), yt).item() for xt, yt in tests)

    train, test = [], []
    for step in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        model.zero_grad()
        loss.backward()
        sizes = step_sizes(schedule, step, 0.01, names)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p -= sizes[name] * p.grad
        train.append(loss.item())
        if step % 25 == 24 or step == steps - 1:
            test.append((step + 1, held_out_loss()))
    return dict(train=train, test=test, bayes_nats=bayes)


def first_below(curve: list[tuple[int, float]], level: float) -> int | None:
    return next((step for step, value in curve if value <= level), None)


def summarise(runs: dict, steps: int) -> dict:
    """Per schedule: held-out loss (nats, and bits above Bayes), speed-ups against sgd, over seeds."""
    out = {}
    for schedule in SCHEDULES:
        rows = []
        for seed, run in runs[schedule].items():
            base = runs["sgd"][seed]
            train_steps = [(i + 1, v) for i, v in enumerate(run["train"])]
            reach_train = first_below(train_steps, base["train"][-1])
            reach_test = first_below(run["test"], base["test"][-1][1])
            rows.append(dict(seed=seed, final_train_nats=run["train"][-1], final_held_out_nats=run["test"][-1][1],
                             excess_bits=(run["test"][-1][1] - run["bayes_nats"]) * LOG2E,
                             train_speedup=steps / reach_train if reach_train else None,
                             held_out_speedup=steps / reach_test if reach_test else None))
        mean = lambda key: statistics.mean(r[key] for r in rows if r[key] is not None) if any(  # noqa: E731
            r[key] is not None for r in rows) else None
        out[schedule] = dict(seeds=rows, **{f"mean_{k}": mean(k) for k in ("final_train_nats", "final_held_out_nats",
                                                                            "excess_bits", "train_speedup",
                                                                            "held_out_speedup")})
    return out


# -- a wind tunnel ----------------------------------------------------------------------------------
def tunnel_run(schedule: str, seed: int, steps: int) -> float:
    import models
    import tasks
    from analyses.base import held_out_batch
    from analyses.calibration import measure
    from models.base import training_loss

    task = tasks.make("bijection", V=8, L=7)
    model = models.build("transformer", task, {"d_model": 32, "n_layers": 2, "n_heads": 4}, seed=seed)
    names = tuple(n for n, _ in model.named_parameters())
    groups = {}
    for name, p in model.named_parameters():
        groups.setdefault(name, []).append(p)
    optimizer = torch.optim.AdamW([{"params": ps, "name": n} for n, ps in groups.items()], lr=1e-3, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        sizes = step_sizes(schedule, step, 1e-3, names)
        for group in optimizer.param_groups:
            group["lr"] = sizes[group["name"]]
        loss = training_loss(model, task.sample(64, generator=g))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        return measure(model.eval(), held_out_batch(task, 1000, seed))["entropy_mae_bits"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--tunnel-steps", type=int, default=1500)
    parser.add_argument("--no-tunnel", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    seeds = [42, 2024, 1337, 7777, 9999][:args.seeds]
    runs = {s: {} for s in SCHEDULES}
    for schedule in SCHEDULES:
        for seed in seeds:
            runs[schedule][seed] = chain_run(schedule, seed, args.steps)
            print(f"chain {schedule:<9} seed {seed:<5} train {runs[schedule][seed]['train'][-1]:.4f} nats, held-out "
                  f"{runs[schedule][seed]['test'][-1][1]:.4f} nats (Bayes {runs[schedule][seed]['bayes_nats']:.4f})",
                  flush=True)
    summary = summarise(runs, args.steps)
    print(f"\nsticky chain, {len(seeds)} seeds, {args.steps} steps (means over seeds):")
    print("| schedule | train loss (nats) | held-out loss (nats) | held-out above Bayes (bits) | "
          "speed-up, train | speed-up, held-out |\n|---|---|---|---|---|---|")
    fmt = lambda v, spec: "never" if v is None else format(v, spec)  # noqa: E731
    for schedule, s in summary.items():
        print(f"| {schedule} | {s['mean_final_train_nats']:.4f} | {s['mean_final_held_out_nats']:.4f} | "
              f"{s['mean_excess_bits']:.4f} | {fmt(s['mean_train_speedup'], '.2f')}x | "
              f"{fmt(s['mean_held_out_speedup'], '.2f')}x |")
    tunnel = {}
    if not args.no_tunnel:
        for schedule in SCHEDULES:
            tunnel[schedule] = [tunnel_run(schedule, seed, args.tunnel_steps) for seed in seeds[:3]]
            print(f"tunnel {schedule:<9} held-out entropy MAE {statistics.mean(tunnel[schedule]):.4f} bits "
                  f"({', '.join(f'{v:.4f}' for v in tunnel[schedule])})", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(dict(
            steps=args.steps, seeds=seeds, chain=summary, tunnel_steps=args.tunnel_steps,
            tunnel_entropy_mae_bits=tunnel, schedules=SCHEDULES, setting=__doc__), indent=1))


if __name__ == "__main__":
    main()
