"""Logit lens: the answer distribution decoded from each layer's residual stream, against Bayes.

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from tasks.base import entropy_bits

from .base import Analysis, Result, eval_batch, n_option, seed_option
from .belief_clusters import resid_name
from .intervals import bootstrap_sums
from .style import error_bars

DEFINITION = " ".join("""
 On one held-out batch of n sequences, the residual stream after every block l
(blocks.l.hook_resid_post) is decoded as if it were the last one: the model's own final norm and
unembedding (ln_final, then unembed), restricted to the task's C answer classes and softmaxed. The
last layer's lens is exactly the model's output. At every query position: kl_bits, KL(Bayes ||
lens) in bits; entropy_mae_bits, |H(lens) - H(Bayes)| in bits; agreement, whether the lens's
arg-max class is one of the Bayes posterior's arg-max classes (ties count). Each is the mean over
all query positions, per layer; first_layer_within_twice_final is the first layer whose KL is at most
twice the last layer's. A layer whose lens is already close to Bayes
has done the inference by then; later blocks refine or keep it. Intervals: 95% percentile bootstrap
(2,000 resamples, seeded) resampling whole sequences (the queries of one sequence share its hidden
truth), every layer's means recomputed from per-sequence sums and first_layer_within_twice_final found
again on each resample's KL curve; the model runs once.
""".split())

DESCRIPTIONS = {
    "kl_bits": "per layer: mean KL(Bayes || lens) at the query positions, bits",
    "first_layer_within_twice_final": "the first layer whose lens KL is at most twice the output's",
    "intervals": "95% percentile bootstrap intervals (2,000 resamples) resampling whole sequences: per layer for "
                 "kl_bits, entropy_mae_bits and agreement, and for final_kl_bits and first_layer_within_twice_final",
    "n_queries": "query positions averaged over, in n_sequences sequences",
}

CHUNK = 256


@torch.no_grad()
def lens_probs(model, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Per layer l = 0..L-1, the answer distribution decoded from blocks.l.hook_resid_post: [B, T, C] each."""
    names = [resid_name(l) for l in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(tokens, names_filter=names)
    return [model.task.answer_logits(model.unembed(model.ln_final(cache[name]))).float().softmax(-1)
            for name in names]


def compare(lens: torch.Tensor, bayes: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per position [..]: KL(Bayes || lens) and |H(lens) - H(Bayes)| in bits, and arg-max agreement (0/1)."""
    kl = (bayes * (torch.log2(bayes.clamp_min(1e-30)) - torch.log2(lens.clamp_min(1e-30)))).where(
        bayes > 0, torch.zeros_like(bayes)).sum(-1)
    best = bayes.amax(-1, keepdim=True)
    agree = (bayes.gather(-1, lens.argmax(-1, keepdim=True)) >= best - 1e-6).squeeze(-1).float()
    return dict(kl_bits=kl, entropy_mae_bits=(entropy_bits(lens) - entropy_bits(bayes)).abs(), agreement=agree)


def compute(model, n: int = 500, seed: int = 1234) -> Result:
    """Calibration of the answer distribution read off every layer's residual stream."""
    batch = eval_batch(model, n, seed)
    L = model.cfg.n_layers
    sums = {key: torch.zeros(n, L, dtype=torch.float64) for key in KEYS}  # per sequence and layer
    for start in range(0, n, CHUNK):
        mask = batch.query_mask[start:start + CHUNK]
        sequence = mask.nonzero()[:, 0].cpu()  # the sequence of each query, in the order mask selects them
        bayes = batch.posterior[start:start + CHUNK][mask].float()
        for l, p in enumerate(lens_probs(model, batch.tokens[start:start + CHUNK])):
            for key, value in compare(p[mask], bayes).items():
                sums[key][start:start + len(mask), l].index_add_(0, sequence, value.double().cpu())
    counts = batch.query_mask.sum(1).double().cpu()
    count = int(counts.sum())
    metrics = {key: (value.sum(0) / count).tolist() for key, value in sums.items()}
    metrics.update(layers=list(range(L)), n_sequences=n, n_queries=count, seed=seed,
                   final_kl_bits=metrics["kl_bits"][-1],
                   first_layer_within_twice_final=first_within_twice_final(torch.tensor(metrics["kl_bits"]))
                   .item())
    metrics["intervals"] = lens_intervals(sums, counts)
    return Result("logit-lens", DEFINITION, metrics, {"by-layer": layer_figure(metrics)}, descriptions=DESCRIPTIONS)


KEYS = ("kl_bits", "entropy_mae_bits", "agreement")


def first_within_twice_final(kl: torch.Tensor) -> torch.Tensor:
    """The first layer whose KL is at most twice the last layer's, for KL curves [..., L]."""
    return (kl <= 2 * kl[..., -1:]).double().argmax(-1)  # argmax: the first True (the last layer always is)


def lens_intervals(sums: dict[str, torch.Tensor], counts: torch.Tensor) -> dict:
    """Per-layer intervals of each key's mean, and of final_kl_bits and first_layer_within_twice_final, from
    per-sequence sums [n, L] and query counts [n]: one resampling of sequences for all of them."""
    L = sums["kl_bits"].shape[1]

    def statistic(resampled):  # [R, 3 L + 1] -> the 3 L means and the first layer within twice the final KL
        means = resampled[:, :-1] / resampled[:, -1:]
        return torch.cat([means, first_within_twice_final(means[:, :L])[:, None]], 1)

    bounds = bootstrap_sums(torch.cat([*(sums[key] for key in KEYS), counts[:, None]], 1), statistic)
    out = {key: bounds[i * L:(i + 1) * L] for i, key in enumerate(KEYS)}
    out.update(final_kl_bits=out["kl_bits"][-1], first_layer_within_twice_final=bounds[-1])
    return out


def layer_figure(metrics: dict) -> go.Figure:
    layers = metrics["layers"]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("KL(Bayes || lens), bits", "arg-max agrees with Bayes"))
    for key, name, col in (("kl_bits", "KL", 1), ("entropy_mae_bits", "entropy MAE", 1), ("agreement", "agreement", 2)):
        fig.add_scatter(x=layers, y=metrics[key], mode="lines+markers", name=name, row=1, col=col,
                        error_y=error_bars(metrics[key], metrics["intervals"][key]))
    fig.update_xaxes(title_text="layer (its residual stream decoded)", tickvals=layers)
    fig.update_yaxes(type="log", title_text="bits (log)", row=1, col=1)
    fig.update_yaxes(range=[0, 1.02], title_text="fraction of queries", row=1, col=2)
    fig.update_layout(title="Logit lens: the answer distribution read off each layer<br><sup>bars: 95% bootstrap "
                            f"intervals over {metrics['n_sequences']:,} sequences ({metrics['n_queries']:,} "
                            f"queries)</sup>",
                      width=900, height=420)
    return fig


ANALYSIS = Analysis(
    "logit-lens", "the answer distribution decoded from each layer's residual stream, against the Bayes posterior",
    DEFINITION, compute, options=(n_option(500), seed_option()), requires=("discrete",), order=12)
