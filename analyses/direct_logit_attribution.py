"""Direct logit attribution: how much of the answer's logit difference does each component write directly?

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import plotly.graph_objects as go
import torch

from models.base import act_name

from . import interventions as P
from .interventions import differs
from .base import Analysis, Result
from .intervals import bootstrap_sums

DEFINITION = " ".join("""
 On the clean and on the corrupted input of the task's corruption (see activation-patching), at the
compared query position, the final residual stream is the sum of what each component wrote: the
embeddings (the residual stream before the first block, token shift included), each attention head
(its z times its W_O), the attention output biases b_O, each MLP (transformers), or each block's mixer
output (other architectures). The answer direction of a row is d = Delta / (|Delta|_1 / 2) over the
answer classes, Delta = Bayes(clean) - Bayes(corrupted) (a two-class swap: the logit of the clean answer
minus that of the corrupted one); on a Gaussian task the sign of Delta on the predictive mean. The
logit difference is <logits, d>. With the final norm's scale frozen at its value in that run, the
norm is linear, so the logit difference is exactly the sum over components of <norm(component) W_U, d>
plus a constant (the norm's and the unembedding's biases): a component's direct logit attribution.
Reported as means over the batch, clean and corrupted, and share = sum over rows of (clean - corrupted)
over the same sum for the whole logit difference: the fraction of the change the component writes
directly (the shares add up to 1). sum_check: the largest |sum of attributions + bias - logit
difference| over rows, float error only. intervals: 95% bootstrap intervals over the pairs of the mean
logit differences, the bias term, and per component of its clean and corrupted means, its share and its
paired change (clean - corrupted on the same pairs; differs: that interval excludes 0); largest_share's
component is chosen once, on all pairs.
""".split())


def compute(model, corrupt: str = "", index: int = -1, n: int = 100, seed: int = 1234) -> Result:
    return attribute(model, dict(corrupt=corrupt, index=index, n=n, seed=seed))


def on_language_model(lm, prompts: str, words: str, per_shot: int, alpha: float, seed: int, index: int) -> Result:
    return attribute(lm, dict(prompts=prompts, words=words, per_shot=per_shot, alpha=alpha, seed=seed, index=index))


def final_read(model):
    """(norm, W_U [d, out], b_U [out]) of the model's final norm and unembedding."""
    unembed = model.unembed
    if isinstance(unembed, torch.nn.Linear):
        return model.ln_final, unembed.weight.T, unembed.bias
    return model.ln_final, model.W_U, model.b_U


def norm_rule(model, norm) -> tuple[bool, float | None]:
    """(whether the final norm centres, its epsilon): a TransformerLens model's config says (``normalization_type``
    "LN"/"LNPre" centre, "RMS"/"RMSPre" do not; a bridge's norm modules are all one wrapper class); otherwise the
    module's class does (a LayerNorm centres, an RMSNorm does not)."""
    cfg = getattr(model, "cfg", None)
    kind = getattr(cfg, "normalization_type", None)
    if kind is not None:
        return kind.startswith("LN"), getattr(cfg, "eps", None)
    return type(norm).__name__ in ("LayerNorm", "LayerNormPre"), getattr(norm, "eps", None)


def linear_norm(norm, x: torch.Tensor, reference: torch.Tensor, centred: bool, eps: float | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The final norm applied to the component ``x`` with the scale frozen at ``reference``'s (the whole residual),
    without its bias; and the bias (added once). LayerNorm centres and divides; RMSNorm only divides."""
    weight = getattr(norm, "weight", None)
    weight = getattr(norm, "w", None) if weight is None else weight
    bias = getattr(norm, "bias", None)
    bias = getattr(norm, "b", None) if bias is None else bias
    eps = torch.finfo(reference.dtype).eps if eps is None else eps
    ref = reference - reference.mean(-1, keepdim=True) if centred else reference
    scale = (ref.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    out = (x - x.mean(-1, keepdim=True) if centred else x) / scale
    if weight is not None:
        out = out * weight
    return out, (torch.zeros_like(reference[..., :1]) if bias is None else bias.expand_as(reference))


def components(pair: P.Pair, cache: dict) -> list[tuple[str, torch.Tensor]]:
    """(label, what it wrote into the final residual at the query [B, d]) for every component."""
    model, q, L = pair.model, pair.query, P.n_layers(pair.model)
    out = [("embeddings", cache[act_name("resid_pre", 0)][:, q])]
    for l in range(L):
        if P.has(model, act_name("z", l)):
            z, attn = cache[act_name("z", l)][:, q], model.blocks[l].attn
            W_O = attn.W_O  # [heads, d_head, d]
            out += [(f"L{l}H{h}", z[:, h] @ W_O[h]) for h in range(z.shape[1])]
            # no row for a missing bias (a bridged Llama's is None) or a zero one (SmolLM2's, converted under TL 3)
            if attn.b_O is not None and bool((attn.b_O != 0).any()):
                out.append((f"L{l} attention bias", attn.b_O.expand(len(z), -1)))
            if P.has(model, act_name("mlp_out", l)):
                out.append((f"L{l} MLP", cache[act_name("mlp_out", l)][:, q]))
        else:
            out.append((f"L{l} mixer", cache[act_name("mixer_out", l)][:, q]))
    return out


def needed(model) -> list[str]:
    L = P.n_layers(model)
    names = [act_name("resid_pre", 0), act_name("resid_post", L - 1)]
    for l in range(L):
        kinds = ("z", "mlp_out") if P.has(model, act_name("z", l)) else ("mixer_out",)
        names += [act_name(kind, l) for kind in kinds if P.has(model, act_name(kind, l))]
    return names


def direction(pair: P.Pair) -> torch.Tensor:
    """Per row, the answer direction over the answer vector's entries [B, K]."""
    delta = pair.delta
    if pair.kind == "mean":
        return delta.sign()
    return delta / (delta.abs().sum(-1, keepdim=True) / 2).clamp_min(1e-30)


def output_direction(pair: P.Pair, W_U: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """[B, d_model]: the residual-space direction whose dot with a normalised residual is the logit difference."""
    cols = torch.arange(W_U.shape[1], device=W_U.device)
    picked = cols[:1] if pair.kind == "mean" else pair.answer_index(cols)
    return d.to(W_U.dtype) @ W_U[:, picked].T


def decompose(pair: P.Pair, tokens: torch.Tensor) -> dict:
    """Attributions [B] per component, the bias term [B] and the logit difference [B] on ``tokens``."""
    model = pair.model
    norm, W_U, b_U = final_read(model)
    rule = norm_rule(model, norm)
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens, names_filter=needed(model))
        L = P.n_layers(model)
        final = cache[act_name("resid_post", L - 1)][:, pair.query]
        d = direction(pair)
        u = output_direction(pair, W_U, d)
        parts = {label: (linear_norm(norm, x, final, *rule)[0] * u).sum(-1).double() for label, x in components(pair, cache)}
        _, norm_bias = linear_norm(norm, final, final, *rule)
        out = logits[:, pair.query]
        picked = out[:, :1] if pair.kind == "mean" else pair.answer_index(out)
        b_pick = b_U[:1] if pair.kind == "mean" else pair.answer_index(b_U)
        bias = ((norm_bias * u).sum(-1) + (b_pick * d).sum(-1)).double()
        total = (picked.double() * d).sum(-1)
    return dict(parts=parts, bias=bias, total=total, sum_check=(sum(parts.values()) + bias - total).abs().max().item())


def attribute(model, options: dict) -> Result:
    pair = P.make_pair(model, options)
    clean, corrupted = decompose(pair, pair.clean), decompose(pair, pair.corrupted)
    change = (clean["total"] - corrupted["total"]).sum().item()
    rows = []
    for label in clean["parts"]:
        a, b = clean["parts"][label], corrupted["parts"][label]
        rows.append(dict(component=label, clean=a.mean().item(), corrupted=b.mean().item(),
                         share=(a - b).sum().item() / change if abs(change) > 1e-12 else None))
    metrics = dict(subject=pair.subject, corruption=pair.what, query=pair.query, answer=pair.kind, n_sequences=len(pair.clean),
                   logit_difference_clean=clean["total"].mean().item(),
                   logit_difference_corrupted=corrupted["total"].mean().item(),
                   bias_term=clean["bias"].mean().item(), components=rows,
                   largest_share=max((r for r in rows if r["share"] is not None), key=lambda r: r["share"],
                                     default=None),
                   sum_check=max(clean["sum_check"], corrupted["sum_check"]))
    metrics["logit_difference_change"] = metrics["logit_difference_clean"] - metrics["logit_difference_corrupted"]
    metrics["intervals"] = intervals(clean, corrupted, metrics["largest_share"])
    return Result("direct-logit-attribution", DEFINITION, metrics, {"components": figure(metrics)},
                  descriptions=DESCRIPTIONS)


DESCRIPTIONS = {
    "sum_check": "largest |sum of attributions + bias - logit difference| (float error)",
    "n_sequences": "clean/corrupted pairs every mean and share is over",
    "logit_difference_change": "mean logit difference, clean minus corrupted (paired: the same pairs)",
    "intervals": "95% percentile bootstrap intervals resampling the clean/corrupted pairs (2,000 resamples, seeded): "
                 "means, shares (a ratio of two sums over the pairs, each resample summing both anew) and the paired "
                 "change clean - corrupted (the same resample for both; differs: its interval excludes 0)",
}


def intervals(clean: dict, corrupted: dict, largest: dict | None) -> dict:
    """Every mean, share and paired change of ``attribute`` with its interval, from the per-pair attributions
    ``decompose`` returned on both inputs: one resampling of the pairs serves them all."""
    labels = list(clean["parts"])
    a = torch.stack([clean["parts"][k] for k in labels], 1).cpu()  # [B, components]
    b = torch.stack([corrupted["parts"][k] for k in labels], 1).cpu()
    totals = torch.stack([clean["total"], corrupted["total"], clean["bias"]], 1).cpu()
    n, k = a.shape
    means = bootstrap_sums(torch.cat([a, b, a - b, totals, (totals[:, :1] - totals[:, 1:2])], 1), lambda s: s / n)
    change = totals[:, 0] - totals[:, 1]
    shares = (bootstrap_sums(torch.cat([a - b, change[:, None]], 1), lambda s: s[:, :-1] / s[:, -1:])
              if abs(change.sum().item()) > 1e-12 else [None] * k)
    rows = [dict(component=label, clean=means[i], corrupted=means[k + i], share=shares[i], change=means[2 * k + i],
                 differs=differs(means[2 * k + i])) for i, label in enumerate(labels)]
    return dict(logit_difference_clean=means[3 * k], logit_difference_corrupted=means[3 * k + 1],
                bias_term=means[3 * k + 2], logit_difference_change=means[3 * k + 3],
                change_differs=differs(means[3 * k + 3]), components=rows,
                largest_share=None if largest is None else shares[labels.index(largest["component"])])


SHOWN = 24  # components drawn one bar each; past that, the ones that change least are drawn as one bar


def figure(metrics: dict) -> go.Figure:
    """Horizontal bars, the components that change most between the inputs first; a language model's
    hundreds of heads are cut to the ``SHOWN`` that matter, the rest summed in one bar (the JSON has all)."""
    rows = sorted(metrics["components"], key=lambda r: -abs(r["clean"] - r["corrupted"]))
    if len(rows) > SHOWN:
        rest = rows[SHOWN - 1:]
        shares = [r["share"] for r in rest]
        rows = rows[:SHOWN - 1] + [dict(component=f"the other {len(rest)} components",
                                        clean=sum(r["clean"] for r in rest), corrupted=sum(r["corrupted"] for r in rest),
                                        share=None if None in shares else sum(shares))]
    labels = [r["component"] for r in rows]
    spans = {r["component"]: r for r in metrics.get("intervals", {}).get("components", [])}  # none on the summed bar
    fig = go.Figure()
    for key, name in (("clean", "clean input"), ("corrupted", "corrupted input")):
        below, above = zip(*[(r[key] - spans[r["component"]][key][0], spans[r["component"]][key][1] - r[key])
                             if r["component"] in spans else (None, None) for r in rows])
        fig.add_bar(y=labels, x=[r[key] for r in rows], name=name, orientation="h",
                    error_x=dict(type="data", array=list(above), arrayminus=list(below), visible=bool(spans)),
                    customdata=[r["share"] if r["share"] is not None else float("nan") for r in rows],
                    hovertemplate="%{y}<br>%{x:.3f}<br>share of the change %{customdata:.3f}<extra>" + name + "</extra>")
    what = "predictive mean, signed toward the clean Bayes answer" if metrics.get("answer") == "mean" else \
        "logit difference along the Bayes change"
    fig.update_layout(title=f"{metrics['subject']}: direct logit attribution at position {metrics['query']}<br><sup>"
                            f"{what}; total {metrics['logit_difference_clean']:.3g} clean, "
                            f"{metrics['logit_difference_corrupted']:.3g} corrupted ({metrics['corruption']})</sup>"
                            + (f"<br><sup>means over {metrics['n_sequences']} pairs, bars with their 95% bootstrap "
                               f"intervals</sup>" if spans else ""),
                      barmode="group", yaxis_title="component", yaxis_autorange="reversed",
                      xaxis_title="direct contribution (logit units)" if metrics.get("answer") != "mean" else
                      "direct contribution (units of the predictive mean)",
                      legend=dict(orientation="v"), width=820, height=max(420, 34 * len(labels) + 200))
    return fig


ANALYSIS = Analysis("direct-logit-attribution", "each head's or block's direct write to the answer's logit difference, "
                    "clean and corrupted", DEFINITION, compute, options=P.wind_tunnel_options(), order=21,
                    on_language_model=on_language_model, language_options=P.language_options(),
                    language_definition=DEFINITION, requires=("corruption",))
