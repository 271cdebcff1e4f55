"""Key orthogonality: do the keys of the task's hypothesis tokens form a near-orthogonal frame?

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
import torch

from models.base import act_name

from . import activations, style
from .style import error_bars
from .base import Analysis, AnalysisError, Option, Result, untrained_twin

DEFINITION = " ".join("""
 For layer l and head h, and a group of hypothesis tokens (for bijection the V value
tokens, and separately the V key tokens), the key vector of token i is

    k_i = LN_l(W_E[i]) @ W_K[l, h]

(token embedding only, no position; LN_l is the layer's own pre-attention norm; the bias b_K is
left out because a vector shared by every key adds the same score to every key and cannot change
an attention pattern). The statistic is the mean of |cos(k_i, k_j)| over all ordered pairs i != j.
Lower is more orthogonal. It is compared with (a) the same model config at its untrained
initialisation (same seed as the run) and (b) i.i.d. Gaussian vectors of the same shape (n tokens
x d_head), averaged over 200 draws; for those E|cos| is about sqrt(2 / (pi d_head)). These keys come
from the weights alone, with no input sampled, so the trained and init numbers have no sampling error
and no interval (the random baseline is a Monte Carlo mean; random_std is its spread over draws).
""".split())

DESCRIPTIONS = {
    "layer0_trained": "mean |cos| between the hypothesis-frame keys at layer 0, mean over heads: weight geometry "
                      "(embedding -> norm -> W_K), nothing sampled, so no interval",
    "layer0_init": "the same at the untrained initialisation (same seed): weight geometry, no interval",
    "random": "mean |cos| of i.i.d. Gaussian vectors of the frame's shape, mean of 200 draws (spread: random_std)",
}


@torch.no_grad()
def key_vectors(model, layer: int, token_ids: torch.Tensor) -> torch.Tensor:
    """[n_heads, n_tokens, d_head] keys of the given tokens at ``layer`` (embedding -> LN -> W_K)."""
    embedded = model.W_E[token_ids.to(model.W_E.device)]
    normed = model.blocks[layer].ln1(embedded[None])[0]
    return torch.einsum("nd,hde->hne", normed, model.blocks[layer].attn.W_K)


def cosine_matrices(vectors: torch.Tensor) -> torch.Tensor:
    """[..., n, n] cosine similarities between the rows of ``vectors`` [..., n, d]."""
    unit = vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return unit @ unit.transpose(-1, -2)


def mean_abs_offdiagonal(cos: torch.Tensor) -> torch.Tensor:
    """Mean |cos| over the off-diagonal entries of [..., n, n]."""
    n = cos.shape[-1]
    off = ~torch.eye(n, dtype=torch.bool, device=cos.device)
    return cos.abs()[..., off].mean(-1)


def offdiagonal_values(cos: torch.Tensor) -> torch.Tensor:
    n = cos.shape[-1]
    return cos[..., torch.triu(torch.ones(n, n, dtype=torch.bool, device=cos.device), 1)]


def frame_scores(model, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-layer, per-head mean |off-diagonal cosine| [L, H], and the cosine matrices [L, H, n, n]."""
    cos = torch.stack([cosine_matrices(key_vectors(model, l, token_ids)) for l in range(model.cfg.n_layers)])
    return mean_abs_offdiagonal(cos), cos


def random_baseline(n_tokens: int, d_head: int, draws: int = 200, seed: int = 0) -> tuple[float, float, torch.Tensor]:
    """Mean and std of the statistic for i.i.d. Gaussian vectors, and their off-diagonal values."""
    g = torch.Generator().manual_seed(seed)
    cos = cosine_matrices(torch.randn(draws, n_tokens, d_head, generator=g))
    scores = mean_abs_offdiagonal(cos)
    return scores.mean().item(), scores.std().item(), offdiagonal_values(cos[:8]).flatten()


def expected_abs_cos(d: int) -> float:
    """E|cos| between two independent isotropic Gaussian vectors in d dimensions."""
    return math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)


def compute(model, group: str = "", layer: int = 0, head: int = 0) -> Result:
    """Key-frame orthogonality of ``model`` per layer and head, against init and random vectors."""
    groups = model.task.hypothesis_tokens()
    group = group or model.task.frame  # the task declares its hypothesis frame
    if group not in groups:
        raise AnalysisError(f"unknown group {group!r}; this task has: {', '.join(groups)}")
    n_layers, n_heads, d_head = model.cfg.n_layers, model.cfg.n_heads, model.cfg.d_head
    if not 0 <= layer < n_layers or not 0 <= head < n_heads:
        raise AnalysisError(f"layer {layer}, head {head} out of range: the model has {n_layers} layers "
                            f"of {n_heads} heads")
    init = untrained_twin(model)

    metrics = {"groups": {}, "d_head": d_head, "shown": dict(group=group, layer=layer, head=head)}
    for name, ids in groups.items():
        trained, cos = frame_scores(model, ids)
        untrained, cos_init = frame_scores(init, ids)
        rand_mean, rand_std, rand_values = random_baseline(len(ids), d_head)
        metrics["groups"][name] = dict(
            n_tokens=len(ids),
            trained=trained.tolist(), init=untrained.tolist(),
            trained_layer_mean=trained.mean(1).tolist(), init_layer_mean=untrained.mean(1).tolist(),
            random_mean=rand_mean, random_std=rand_std, random_expected=expected_abs_cos(d_head),
            layer0_trained=trained[0].mean().item(), layer0_init=untrained[0].mean().item(),
        )
        if name == group:
            shown = dict(cos=cos[layer, head], values=dict(trained=offdiagonal_values(cos[0]).flatten(),
                         init=offdiagonal_values(cos_init[0]).flatten(), random=rand_values),
                         trained=trained, untrained=untrained, random=rand_mean, ids=ids)
    g = metrics["groups"][group]
    metrics.update(layer0_trained=g["layer0_trained"], layer0_init=g["layer0_init"], random=g["random_mean"])
    labels = model.task.token_names(shown["ids"])
    return Result("key-orthogonality", DEFINITION, metrics, {
        "cosine-heatmap": heatmap_figure(shown["cos"], labels, layer, head, group),
        "per-head": per_head_figure(shown["trained"], shown["untrained"], shown["random"], group,
                                    note="no bars: keys from the weights alone, nothing sampled"),
        "distribution": distribution_figure(shown["values"], group),
    }, descriptions=DESCRIPTIONS)


LANGUAGE_DEFINITION = " ".join("""
 On a language model, for layer l and key/value head h (a grouped-query model's shared key heads
counted once each, never once per query head), the keys are the model's own keys in context:
hook_k (W_K applied to the layer's normalised residual stream, before any rotary embedding) at every
position of a prompt, minus the bias b_K. The statistic is the mean |cos| over pairs of positions that
hold different tokens, averaged over the prompts of the prompt task. Baselines: the same architecture
re-initialised (seed 0) on the same prompts, as the model's own code initialises it (a bridged Hugging Face
model: a new one built from the same config, transformers' initialisation, e.g. weights drawn from N(0,
initializer_range^2), norms at 1; a boot_native TransformerLens 4 model: its init_weights; a wind-tunnel
transformer: rebuilt from its config), and E|cos| of two independent Gaussian vectors in d_head dimensions.
Intervals: 95% percentile bootstrap (2,000 resamples, seeded) resampling prompts (on wind-tunnel prompts, the
held-out sequences they were cut from) and re-averaging the per-prompt statistic, for the overall means, each
head, and the paired difference trained - re-initialised (the same resampled prompts for both; it differs
beyond the noise of the prompt set when its interval excludes 0).
""".split())

LANGUAGE_DESCRIPTIONS = {
    "mean_trained": "mean |cos| between the keys of different tokens in a prompt, mean over prompts, layers and "
                    "key/value heads",
    "mean_init": "the same for the re-initialised model on the same prompts",
    "mean_difference": "mean_trained - mean_init, paired on the same prompts",
    "differs_from_init": "whether the 95% interval of mean_difference excludes 0",
    "intervals": "95% percentile bootstrap intervals (2,000 resamples), resampling prompts (wind-tunnel prompts: "
                 "the held-out sequences they were cut from); the difference paired (one resample for both models)",
    "n_sequences": "units the intervals resample: held-out sequences (wind-tunnel prompts) or prompts",
}


@torch.no_grad()
def context_key_scores(lm, prompts) -> tuple[torch.Tensor, torch.Tensor]:
    """Per prompt, [n, layers, kv_heads] mean |cos| between the bias-free keys of different tokens within it,
    and [n] whether it holds two different tokens (the prompts that count; the others' scores are 0)."""
    from models.language_model import kv_weights, n_kv_heads

    cfg = lm.model.cfg
    names = [act_name("k", l) for l in range(cfg.n_layers)]
    biases = [kv_weights(lm.model, l)["b_K"] for l in range(cfg.n_layers)]
    n = len(prompts.prompts)
    scores, valid = torch.zeros(n, cfg.n_layers, n_kv_heads(lm.model), dtype=torch.float64), torch.zeros(n)
    for rows, tokens in activations.equal_length_batches(lm, prompts):
        if tokens.shape[1] < 2:
            continue
        cache = activations.run_until(lm.model, tokens, names)  # nothing after the last layer's keys is run
        keys = torch.stack([cache[n] - b for n, b in zip(names, biases)])  # [L, B, T, kv, d]
        cos = cosine_matrices(keys.permute(0, 1, 3, 2, 4).double())  # [L, B, kv, T, T]
        different = (tokens[:, :, None] != tokens[:, None, :])[None, :, None]  # [1, B, 1, T, T]
        pairs = different.sum((-1, -2)).clamp_min(1)
        scores[rows] = ((cos.abs() * different).sum((-1, -2)) / pairs).permute(1, 0, 2).cpu()  # [B, L, kv]
        valid[rows] = (different.sum((-1, -2, -3, -4)) > 0).float().cpu()
    if not valid.any():
        raise AnalysisError("no prompt holds two different tokens to compare keys of")
    return scores, valid


def mean_over(scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """[layers, kv_heads] mean of per-prompt scores over the prompts that count."""
    return (scores * valid[:, None, None]).sum(0) / valid.sum()


def on_language_model(lm, prompts: str, words: str, per_shot: int, alpha: float, seed: int) -> Result:
    """Key orthogonality per layer and key/value head of a language model, against re-initialised and Gaussian."""
    from models.language_model import LanguageModel, n_kv_heads, reinitialised

    prompt_set = activations.prompt_set(lm, prompts, words, per_shot, alpha, seed)
    per_trained, valid = context_key_scores(lm, prompt_set)
    fresh = reinitialised(lm.model, seed=0)
    per_init, _ = context_key_scores(LanguageModel(fresh, lm.name), prompt_set)  # the same prompts count
    trained, untrained = mean_over(per_trained, valid), mean_over(per_init, valid)
    d_head = lm.model.cfg.d_head
    metrics = dict(trained=trained.tolist(), init=untrained.tolist(), trained_layer_mean=trained.mean(1).tolist(),
                   init_layer_mean=untrained.mean(1).tolist(), random_expected=expected_abs_cos(d_head),
                   d_head=d_head, n_kv_heads=n_kv_heads(lm.model), n_prompts=len(prompt_set.prompts),
                   mean_trained=trained.mean().item(), mean_init=untrained.mean().item())
    metrics["mean_difference"] = metrics["mean_trained"] - metrics["mean_init"]
    metrics["intervals"] = key_intervals(per_trained, per_init, valid, prompt_set)
    low, high = metrics["intervals"]["mean_difference"]
    metrics.update(differs_from_init=not low <= 0 <= high, n_counted_prompts=int(valid.sum()),
                   n_sequences=activations.n_sequences(prompt_set),
                   bootstrap_unit="prompts" if prompt_set.sequence is None else "sequences")
    note = (f"bars: 95% bootstrap intervals over {metrics['n_sequences']:,} {metrics['bootstrap_unit']} "
            f"({int(valid.sum()):,} prompts); trained - re-initialised {metrics['mean_difference']:+.3f} "
            f"(95% {low:+.3f} … {high:+.3f})")
    return Result("key-orthogonality", LANGUAGE_DEFINITION, metrics, {
        "per-head": per_head_figure(trained, untrained, expected_abs_cos(d_head), "prompts",
                                    head="key/value head", intervals=metrics["intervals"], note=note)},
        descriptions=LANGUAGE_DESCRIPTIONS)


def key_intervals(trained: torch.Tensor, init: torch.Tensor, valid: torch.Tensor, prompt_set) -> dict:
    """Intervals over resampled prompts of the overall means, their paired difference and every head's mean,
    from per-prompt scores [n, L, kv] of the two models (one resampling for all)."""
    n, L, H = trained.shape
    values = torch.cat([trained.mean((1, 2))[:, None], init.mean((1, 2))[:, None],
                        (trained - init).mean((1, 2))[:, None], trained.reshape(n, -1), init.reshape(n, -1)], 1)
    bounds = activations.mean_intervals(values, prompt_set, valid[:, None].expand_as(values))
    heads = lambda first: [bounds[first + l * H:first + (l + 1) * H] for l in range(L)]  # noqa: E731
    return dict(mean_trained=bounds[0], mean_init=bounds[1], mean_difference=bounds[2], trained=heads(3),
                init=heads(3 + L * H))


def heatmap_figure(cos: torch.Tensor, labels: list[str], layer: int, head: int, group: str) -> go.Figure:
    score = mean_abs_offdiagonal(cos).item()
    fig = go.Figure(go.Heatmap(z=cos.cpu().numpy(), x=labels, y=labels, zmin=-1, zmax=1, colorscale="RdBu_r",
                               colorbar=dict(title="cos"),
                               hovertemplate="%{y} · %{x}<br>cos %{z:.3f}<extra></extra>"))
    fig.update_layout(title=f"Key cosines of the {group[:-1]} tokens, layer {layer} head {head} "
                            f"(mean |off-diag| {score:.3f})",
                      yaxis_autorange="reversed", width=640, height=600)
    return fig


def per_head_figure(trained: torch.Tensor, untrained: torch.Tensor, random: float, group: str,
                    head: str = "head", intervals: dict | None = None, note: str = "") -> go.Figure:
    names = [f"L{l}H{h}" for l in range(trained.shape[0]) for h in range(trained.shape[1])]
    fig = go.Figure()
    for name, values, key in (("trained", trained, "trained"), ("untrained init", untrained, "init")):
        flat = values.flatten().tolist()
        bars = None if intervals is None else error_bars(flat, [ci for row in intervals[key] for ci in row])
        fig.add_bar(x=names, y=flat, name=name, error_y=bars)
    fig.update_layout(title=f"Mean |off-diagonal key cosine| of the {group[:-1]} tokens per {head} (lower = more orthogonal)"
                            + (f"<br><sup>{note}</sup>" if note else ""),
                      barmode="group", xaxis_title=f"layer and {head}", yaxis_title="mean |cos|", width=760, height=440)
    style.reference_line(fig, random, "random Gaussian")
    return fig


def distribution_figure(values: dict, group: str) -> go.Figure:
    fig = go.Figure()
    for name, v in values.items():
        fig.add_histogram(x=v.cpu().numpy(), name=name, histnorm="probability density", opacity=0.6,
                          xbins=dict(start=-1, end=1, size=0.05))
    fig.update_layout(title=f"Off-diagonal key cosines of the {group[:-1]} tokens, layer 0 (all heads)",
                      barmode="overlay", xaxis_title="cos", yaxis_title="density", 
                      width=720, height=420)
    return fig


ANALYSIS = Analysis(
    "key-orthogonality", "mean |cos| between the keys of the hypothesis tokens, per layer and head, vs init "
    "and random", DEFINITION, compute,
    options=(Option("group", "", "hypothesis-token group (default: the task's hypothesis frame)"),
             Option("layer", 0, "layer of the cosine matrix drawn", low=0),
             Option("head", 0, "head of the cosine matrix drawn", low=0)),
    requires=("attention", "frame"), order=1,
    on_language_model=on_language_model, language_options=activations.language_options(),
    language_definition=LANGUAGE_DEFINITION)
