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

DEFINITION = " ".join("""
 On one held-out batch of n sequences, the residual stream after every block l
(blocks.l.hook_resid_post) is decoded as if it were the last one: the model's own final norm and
unembedding (ln_final, then unembed), restricted to the task's C answer classes and softmaxed. The
last layer's lens is exactly the model's output. At every query position: kl_bits, KL(Bayes ||
lens) in bits; entropy_mae_bits, |H(lens) - H(Bayes)| in bits; agreement, whether the lens's
arg-max class is one of the Bayes posterior's arg-max classes (ties count). Each is the mean over
all query positions, per layer; first_layer_within_twice_final is the first layer whose KL is at most
twice the last layer's. A layer whose lens is already close to Bayes
has done the inference by then; later blocks refine or keep it.
""".split())

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
    sums = None
    for start in range(0, n, CHUNK):
        mask = batch.query_mask[start:start + CHUNK]
        bayes = batch.posterior[start:start + CHUNK][mask].float()
        per_layer = [compare(p[mask], bayes) for p in lens_probs(model, batch.tokens[start:start + CHUNK])]
        part = {key: torch.stack([m[key].sum() for m in per_layer]) for key in per_layer[0]}
        sums = part if sums is None else {key: sums[key] + part[key] for key in sums}
    count = int(batch.query_mask.sum())
    metrics = {key: (value / count).tolist() for key, value in sums.items()}
    metrics.update(layers=list(range(model.cfg.n_layers)), n_sequences=n, n_queries=count, seed=seed,
                   final_kl_bits=metrics["kl_bits"][-1],
                   first_layer_within_twice_final=next(l for l, kl in enumerate(metrics["kl_bits"])
                                                       if kl <= 2 * metrics["kl_bits"][-1]))
    return Result("logit-lens", DEFINITION, metrics, {"by-layer": layer_figure(metrics)}, descriptions={
        "kl_bits": "per layer: mean KL(Bayes || lens) at the query positions, bits",
        "first_layer_within_twice_final": "the first layer whose lens KL is at most twice the output's",
    })


def layer_figure(metrics: dict) -> go.Figure:
    layers = metrics["layers"]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("KL(Bayes || lens), bits", "arg-max agrees with Bayes"))
    fig.add_scatter(x=layers, y=metrics["kl_bits"], mode="lines+markers", name="KL", row=1, col=1)
    fig.add_scatter(x=layers, y=metrics["entropy_mae_bits"], mode="lines+markers", name="entropy MAE", row=1, col=1)
    fig.add_scatter(x=layers, y=metrics["agreement"], mode="lines+markers", name="agreement", row=1, col=2)
    fig.update_xaxes(title_text="layer (its residual stream decoded)", tickvals=layers)
    fig.update_yaxes(type="log", title_text="bits (log)", row=1, col=1)
    fig.update_yaxes(range=[0, 1.02], title_text="fraction of queries", row=1, col=2)
    fig.update_layout(title="Logit lens: the answer distribution read off each layer", 
                      width=900, height=420)
    return fig


ANALYSIS = Analysis(
    "logit-lens", "the answer distribution decoded from each layer's residual stream, against the Bayes posterior",
    DEFINITION, compute, options=(n_option(500), seed_option()), requires=("discrete",), order=12)
