"""Jacobian lens: each layer's residual stream carried to the last layer by the model's own average Jacobian,
then decoded, against the Bayes posterior (and against the logit lens on the same inputs).

The definition is TransformerLens 4.3's (``transformer_lens.tools.analysis.jacobian_lens``, after Gurnee et
al., "Verbalizable Representations Form a Global Workspace in Language Models", Transformer Circuits Thread,
2026, and Anthropic's reference implementation ``anthropics/jacobian-lens``). For each block l below the
last, one d_model x d_model matrix

    J_l = mean over fitting sequences s of  (1/|V_s|) sum_{t in V_s} sum_{t' in V_s, t' >= t}  d h_{L-1,t'} / d h_{l,t}

where h_{l,t} is the residual stream after block l at position t (``blocks.{l}.hook_resid_post``; a
TransformerBridge's ``blocks.{l}.hook_out``), h_{L-1} the last block's output before the final norm, and V_s
the positions of sequence s from ``skip_first`` to its second-to-last (TransformerLens excludes the first 16
positions, attention sinks of long text, and the last one; our sequences are short and have no sink, so
``skip_first`` defaults to 0). The effects on every later target position are summed, the source positions
and the sequences averaged, each sequence with equal weight. Its estimator is theirs: one forward pass per
batch, then one backward pass per output dimension with a one-hot cotangent planted at every position of V
at once (the models are causal, so the gradient at t is already the sum over t' >= t); here those backward passes
run many at once (``jacobian_sums``), which gives the same numbers (tests/test_jacobian_batched.py). The lens reads
h_l as unembed(ln_final(J_l h_l)), the final norm's statistics recomputed on J_l h_l; the last block's
transport is the identity, so its lens is the model's output; J_l = I everywhere is the logit lens.

Every architecture here is causal and exposes the same hook names (models/base.py), so the same code fits
the transformer, Mamba, the LSTM, the MLP and a TransformerBridge language model. On a wind tunnel J is
fitted on ``n_fit`` sequences of one held-out batch and measured on another (``n`` sequences, ``seed``),
at the query positions, against ``batch.posterior``. The definition of every number is ``DEFINITION`` below
(also written into each result's JSON).
"""
from __future__ import annotations

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from tqdm import tqdm

from models.base import act_name
from tasks.base import SEED_LIMIT, entropy_bits

from . import activations
from .base import Analysis, AnalysisError, Option, Result, eval_batch, n_option, seed_option
from .intervals import bootstrap_difference, bootstrap_interval
from .logit_lens import compare
from .style import error_bars

KEYS = ("kl_bits", "entropy_mae_bits", "agreement")
CHUNK = 64  # fitting sequences per forward pass (the backward passes hold its graph)
CHUNK_BYTES = 2 ** 28  # what one batch of the fit's backward passes may hold of residual-stream gradients

_COMMON = """
 J_l = mean over fitting sequences of (1/|V|) sum_{t in V} sum_{t' in V, t' >= t} d h_{L-1,t'} / d h_{l,t}, with
h_l the residual stream after block l (blocks.l.hook_resid_post), h_{L-1} the last block's output before the
final norm and V the positions from skip_first to the second-to-last: TransformerLens 4.3's Jacobian lens
(transformer_lens.tools.analysis.JacobianLens.fit, after Gurnee et al. 2026), its estimator exactly (one-hot
cotangents planted at every position of V, one backward pass per output dimension, each sequence weighted
equally). The Jacobian lens of layer l decodes unembed(ln_final(J_l h_l)), the final norm's statistics
recomputed; the last layer's transport is the identity (its lens is the model's output), and J_l = I is
the logit lens, measured beside it on the same inputs. transport_distance: ||J_l - I||_F / sqrt(d_model)
(0: the lens is the logit lens).
""".split()

DEFINITION = " ".join(_COMMON + """
 J is fitted on n_fit held-out sequences (seed + 1) and measured on n others (seed). With same_position=true
J_l is instead the mean of the same-position Jacobian d h_{L-1,t} / d h_{l,t}, one position t of V per fitting
sequence (sequence b takes the (b mod |V|)-th), leaving out the effects on later positions that the
definition above sums. At every query
position, the lens's answer distribution (restricted to the task's C answer classes, softmaxed) against the
exact Bayes posterior: kl_bits, KL(Bayes || lens); entropy_mae_bits, |H(lens) - H(Bayes)|; agreement, the
lens's arg-max is one of Bayes's (ties count); each the mean over query positions, per layer, for the
Jacobian lens (jacobian) and the logit lens (logit), with 95% percentile-bootstrap intervals resampling
whole sequences (the fitted J held fixed), and kl_gain_bits, logit-lens KL minus Jacobian-lens KL, with a
paired bootstrap interval (above 0: the Jacobian lens is nearer Bayes). first_layer_within_twice_final: the
first layer whose Jacobian-lens KL is at most twice the output's.
""".split())

LANGUAGE_DEFINITION = " ".join(_COMMON + """
 On a language model, J is fitted on fit_per_shot prompts per number of shown examples of a prompt task
(two-label, coin) drawn with seed + 1 and measured on per_shot per number drawn with seed. At each prompt's
last position (where one of the answer tokens is predicted), each lens's next-token distribution renormalised over the answer tokens is scored against the
exact Bayes predictive: kl_bits, entropy_mae_bits and agreement (over prompts where Bayes is not a tie) as on
a wind tunnel, the means over prompts per layer, with 95% bootstrap intervals over prompts. The fit's
stability: fit_halves_kl_bits, per layer the Jacobian lens's KL with J fitted on each of two halves of the
fitting prompts (whole equal-length batches, split by count), and fit_halves_max_gap_bits, the largest
difference between the two over layers (small against kl_gain_bits: the fit has enough prompts).
""".split())

DESCRIPTIONS = {
    "jacobian": "per metric, per layer: the Jacobian lens against Bayes (means over queries) and its 95% intervals",
    "logit": "the same for the logit lens (J = I) on the same inputs",
    "kl_gain_bits": "per layer: logit-lens KL minus Jacobian-lens KL (bits), and its paired 95% interval",
    "transport_distance": "per layer: ||J_l - I||_F / sqrt(d_model)",
    "first_layer_within_twice_final": "the first layer whose Jacobian-lens KL is at most twice the output's",
    "fit_halves_kl_bits": "language models: per half of the fitting prompts, the Jacobian lens's KL per layer with J "
                          "fitted on that half alone",
    "fit_halves_max_gap_bits": "language models: the largest difference of the two halves' KL over layers",
}


class _Frozen:
    """Parameters frozen for the fit (the graph is rooted at the residual stream), their flags restored after."""

    def __init__(self, model):
        self.model, self.saved = model, []

    def __enter__(self):
        self.saved = [(p, p.requires_grad) for p in self.model.parameters()]
        for p, _ in self.saved:
            p.requires_grad_(False)

    def __exit__(self, *exc):
        for p, flag in self.saved:
            p.requires_grad_(flag)


def jacobian_sums(model, tokens: torch.Tensor, skip_first: int = 0, layers: list[int] | None = None,
                  same_position: bool = False, offset: int = 0) -> tuple[dict[int, torch.Tensor], int]:
    """Per source layer, the sum over the sequences of ``tokens`` [B, T] (one length) of each sequence's
    (1/|V|) sum_{t in V} sum_{t' in V, t' >= t} d h_{L-1,t'} / d h_{l,t}, float64 [d, d] (row i: output
    dimension i), and the number of sequences summed (0 when T leaves V empty). ``same_position``: instead
    the same-position Jacobian d h_{L-1,t} / d h_{l,t} at one position t of V per sequence, sequence b (counted
    from ``offset``) taking the (b mod |V|)-th, so a fit over a multiple of |V| sequences averages every
    position of V equally (the cross-position effects that TransformerLens's sum includes left out).

    How: a zero probe p_l [d] is added to h_l at the source positions (every t in V, or each sequence's own t), so
    d (sum of h_{L-1,i} over the target positions) / d p_l is row i of the sum above times |V|, summed over the
    sequences. One forward pass, then the d rows' backward passes in batches of cotangents (``torch.autograd.grad``
    with ``is_grads_batched``, a vmap over the backward pass), as many at once as ``CHUNK_BYTES`` allows."""
    n_layers, d = model.cfg.n_layers, model.cfg.d_model
    layers = list(range(n_layers - 1)) if layers is None else sorted(layers)
    B, T = tokens.shape
    valid = torch.arange(min(skip_first, T - 1), T - 1, device=tokens.device)  # empty (never a bad range) when short
    if not len(valid) or not layers:
        return {l: torch.zeros(d, d, dtype=torch.float64) for l in layers}, 0
    rows = torch.arange(B, device=tokens.device)
    own = valid[(offset + rows) % len(valid)]  # same_position: each sequence's one target and source position
    where = torch.zeros(B, T, 1, device=tokens.device)  # the source (and target) positions
    if same_position:
        where[rows, own] = 1.0
    else:
        where[:, valid] = 1.0
    names = [act_name("resid_post", l) for l in [*layers, n_layers - 1]]
    probes, captured = {}, {}

    def capture(name: str):  # keyed by the name asked for (a bridge's hook calls itself blocks.{l}.hook_out)
        def hook(resid, hook):
            if name == names[0]:  # the graph starts here: nothing before the first source layer is needed
                resid = resid.detach()
            if name != names[-1]:
                probes[name] = torch.zeros(d, dtype=resid.dtype, device=resid.device, requires_grad=True)
                resid = resid + where.to(resid.dtype) * probes[name]
            captured[name] = resid
            return resid
        return hook

    sums, batched = {l: torch.zeros(d, d, dtype=torch.float64) for l in layers}, True
    per_source = 1.0 if same_position else 1.0 / len(valid)
    with torch.enable_grad(), _Frozen(model), model.hooks(fwd_hooks=[(name, capture(name)) for name in names]):
        model(tokens)
        target, sources = captured[names[-1]], [probes[name] for name in names[:-1]]
        # per cotangent the vmapped backward holds a few gradients the size of the residual stream (or an MLP's
        # wider hidden layer) at a time: the probes' are [d] each
        chunk = max(1, min(d, CHUNK_BYTES // (target.numel() * target.element_size() * 8)))
        for start in tqdm(range(0, d, chunk), desc=f"jacobian lens: fit on {B} sequences",
                          unit=f"{chunk} dims", leave=False, disable=None):
            dims = torch.arange(start, min(start + chunk, d), device=tokens.device)
            cotangents = torch.zeros(len(dims), *target.shape, dtype=target.dtype, device=target.device)
            cotangents[torch.arange(len(dims)), ..., dims] = where[..., 0].to(target.dtype)
            grads, batched = backward(target, sources, cotangents, batched)
            for l, grad in zip(layers, grads):
                if grad is not None:  # None: no path from this source to the output (a model that ignores it)
                    sums[l][start:start + len(dims)] = grad.double().cpu() * per_source
    return sums, B


def backward(target: torch.Tensor, sources: list[torch.Tensor], cotangents: torch.Tensor,
             batched: bool) -> tuple[list[torch.Tensor | None], bool]:
    """The gradients of ``target`` with respect to ``sources`` for each of ``cotangents`` [k, *target.shape],
    stacked [k, *source.shape] (None: no path), and whether they were computed in one batched backward pass:
    where the backward has no vmap rule (Mamba's C++ kernels), one pass per cotangent, and so on after."""
    if batched:
        try:
            return list(torch.autograd.grad(target, sources, cotangents, retain_graph=True, allow_unused=True,
                                            is_grads_batched=True)), True
        except RuntimeError:
            pass
    each = [torch.autograd.grad(target, sources, cotangent, retain_graph=True, allow_unused=True)
            for cotangent in cotangents]
    return [None if grads[0] is None else torch.stack(grads) for grads in zip(*each)], False


def check_fit(model, longest: int, skip_first: int, sequences: str) -> None:
    """What the fit needs, checked before it starts, the one check for a run or checkpoint (--ckpt) and a
    language model (--model) alike: a layer below the last, and a position left after ``skip_first`` in the
    longest fitting sequence (``longest`` tokens; ``sequences`` names them in the message)."""
    if model.cfg.n_layers < 2:
        raise AnalysisError(f"the Jacobian lens carries each layer below the last to the last, and this model has "
                            f"{model.cfg.n_layers} layer: there is no layer to fit (it needs 2 or more layers)")
    if longest <= skip_first + 1:
        raise AnalysisError(f"--skip-first {skip_first} leaves no position of {sequences} to fit on (at most "
                            f"--skip-first {max(longest - 2, 0)} leaves one)")


def fit(model, batches, skip_first: int = 0, same_position: bool = False,
        halves: bool = False) -> dict[int, torch.Tensor] | tuple[dict[int, torch.Tensor], ...]:
    """J_l (float64 [d, d]) for every layer below the last, over ``batches`` (an iterable of token tensors
    [B, T], one length each), each sequence weighted equally (``same_position``: see ``jacobian_sums``).
    ``halves``: also the J fitted on each of two halves of the batches (each batch goes whole to the half with
    fewer sequences so far), at no extra cost: (J, J_first_half, J_second_half)."""
    parts, counts, count = [None, None], [0, 0], 0
    for tokens in batches:
        sums, n = jacobian_sums(model, tokens, skip_first, same_position=same_position, offset=count)
        half = int(counts[1] < counts[0])
        parts[half] = sums if parts[half] is None else {l: parts[half][l] + sums[l] for l in sums}
        counts[half] += n
        count += n
    if not count:
        raise AnalysisError(f"no fitting sequence is longer than skip_first + 1 = {skip_first + 1} tokens")
    total = parts[0] if parts[1] is None else {l: parts[0][l] + parts[1][l] for l in parts[0]}
    whole = {l: s / count for l, s in total.items()}
    if not halves:
        return whole
    return (whole,) + tuple(None if not n else {l: s / n for l, s in part.items()} for part, n in zip(parts, counts))


def lens_logits(model, resid: torch.Tensor, jacobian: torch.Tensor | None) -> torch.Tensor:
    """unembed(ln_final(J h)) for a residual stream ``resid`` [..., d] (``jacobian`` None: the identity)."""
    if jacobian is not None:
        resid = (resid.double() @ jacobian.to(resid.device).T).to(resid.dtype)
    return model.unembed(model.ln_final(resid))


@torch.no_grad()
def lens_probs(model, tokens: torch.Tensor, jacobians: dict[int, torch.Tensor] | None) -> list[torch.Tensor]:
    """Per layer, the answer distribution [B, T, C] of the Jacobian lens (``jacobians`` None: the logit lens)."""
    n_layers = model.cfg.n_layers
    names = [act_name("resid_post", l) for l in range(n_layers)]
    _, cache = model.run_with_cache(tokens, names_filter=names)
    return [model.task.answer_logits(lens_logits(model, cache[names[l]], None if jacobians is None or
                                                 l == n_layers - 1 else jacobians[l])).float().softmax(-1)
            for l in range(n_layers)]


def transport_distance(jacobians: dict[int, torch.Tensor], n_layers: int) -> list[float]:
    out = []
    for l in range(n_layers):
        if l not in jacobians:
            out.append(0.0)
            continue
        J = jacobians[l]
        out.append(((J - torch.eye(len(J), dtype=J.dtype)).norm() / len(J) ** 0.5).item())
    return out


def summarise(per_row: dict[str, dict[str, torch.Tensor]], counts: torch.Tensor, n_layers: int) -> dict:
    """Means and intervals from per-sequence sums: per_row[lens][key] is [n_layers, B] sums, counts [B] (or
    per key a [n_layers, B] count, for agreement over non-ties)."""
    out = {}
    for lens, sums in per_row.items():
        out[lens] = {}
        for key, value in sums.items():
            asked = counts[key] if isinstance(counts, dict) else counts
            out[lens][key] = [(value[l].sum() / asked.sum().clamp(min=1)).item() if asked.sum() else None
                              for l in range(n_layers)]
            out[lens][key + "_interval"] = [bootstrap_interval(value[l], asked) for l in range(n_layers)]
    asked = counts["kl_bits"] if isinstance(counts, dict) else counts
    out["kl_gain_bits"] = [out["logit"]["kl_bits"][l] - out["jacobian"]["kl_bits"][l] for l in range(n_layers)]
    out["kl_gain_interval"] = [bootstrap_difference((per_row["logit"]["kl_bits"][l], asked),
                                                    (per_row["jacobian"]["kl_bits"][l], asked))
                               for l in range(n_layers)]
    kls = out["jacobian"]["kl_bits"]
    out["first_layer_within_twice_final"] = next(l for l, kl in enumerate(kls) if kl <= 2 * kls[-1])
    return out


def compute(model, n: int = 500, n_fit: int = 200, skip_first: int = 0, same_position: bool = False,
            seed: int = 1234) -> Result:
    """Both lenses on ``n`` held-out sequences, J fitted on ``n_fit`` others."""
    model.eval()
    fitting = eval_batch(model, n_fit, (seed + 1) % SEED_LIMIT)
    check_fit(model, fitting.tokens.shape[1], skip_first, f"this task's {fitting.tokens.shape[1]}-token sequences")
    jacobians = fit(model, (fitting.tokens[i:i + CHUNK] for i in range(0, n_fit, CHUNK)), skip_first, same_position)
    batch = eval_batch(model, n, seed)
    L = model.cfg.n_layers
    sums = {lens: {key: torch.zeros(L, n, dtype=torch.float64) for key in KEYS} for lens in ("jacobian", "logit")}
    for start in range(0, n, 256):
        rows = slice(start, start + 256)
        mask = batch.query_mask[rows]
        seq = torch.arange(mask.shape[0], device=mask.device)[:, None].expand_as(mask)[mask].cpu()
        bayes = batch.posterior[rows][mask].float()
        for lens, J in (("jacobian", jacobians), ("logit", None)):
            for l, p in enumerate(lens_probs(model, batch.tokens[rows], J)):
                for key, value in compare(p[mask], bayes).items():
                    sums[lens][key][l, start:start + mask.shape[0]] = torch.zeros(
                        mask.shape[0], dtype=torch.float64).index_add_(0, seq, value.double().cpu())
    counts = batch.query_mask.sum(1).double().cpu()
    metrics = summarise(sums, counts, L)
    metrics.update(layers=list(range(L)), transport_distance=transport_distance(jacobians, L), n_sequences=n,
                   n_fit=n_fit, skip_first=skip_first, same_position=same_position, n_queries=int(counts.sum()), seed=seed,
                   final_kl_bits=metrics["jacobian"]["kl_bits"][-1])
    return Result("jacobian-lens", DEFINITION, metrics, {"by-layer": layer_figure(metrics, "queries")},
                  descriptions=DESCRIPTIONS)


def on_language_model(lm, prompts: str, words: str, per_shot: int, alpha: float, seed: int,
                      skip_first: int, fit_per_shot: int) -> Result:
    """Both lenses at each prompt's answer position, J fitted on ``fit_per_shot`` prompts per number of shown
    examples drawn with seed + 1: the fit costs one backward pass per residual dimension for every fitting token
    (hours for a few hundred prompts on a CPU), so it is fitted on a few prompts and its stability is reported,
    as the lens of J fitted on each half of them."""
    model = lm.model.eval()
    fitting = activations.prompt_set(lm, prompts, words, fit_per_shot, alpha, (seed + 1) % SEED_LIMIT)
    longest = max(len(p.tokens) for p in fitting.prompts)
    check_fit(model, longest, skip_first, f"the fitting prompts (the longest has {longest} tokens)")
    jacobians, *halves = fit(model, (tokens for _, tokens in activations.equal_length_batches(lm, fitting, chunk=16)),
                             skip_first, halves=True)
    measured = activations.prompt_set(lm, prompts, words, per_shot, alpha, seed)
    L, n, answers = model.cfg.n_layers, len(measured.prompts), list(measured.answers)
    lenses = {"jacobian": jacobians, "logit": None} | {f"half_{i}": J for i, J in enumerate(halves) if J}
    probs = {lens: torch.zeros(L, n, len(answers), dtype=torch.float64) for lens in lenses}
    names = [act_name("resid_post", l) for l in range(L)]
    with torch.no_grad():
        for rows, tokens in activations.equal_length_batches(lm, measured):
            _, cache = model.run_with_cache(tokens, names_filter=names)
            for lens, J in lenses.items():
                for l in range(L):
                    logits = lens_logits(model, cache[names[l]][:, -1:], None if J is None or l == L - 1 else J[l])
                    probs[lens][l, rows] = torch.softmax(logits[:, -1, answers].double(), -1).cpu()
    bayes = measured.bayes
    decided = ((bayes[:, 0] - bayes[:, 1]).abs() > 1e-9).double() if len(answers) == 2 else torch.ones(n)
    sums = {lens: {key: torch.stack([compare(p[l], bayes)[key].double() for l in range(L)]) for key in KEYS}
            for lens, p in probs.items()}
    for lens in sums:
        sums[lens]["agreement"] = sums[lens]["agreement"] * decided
    ones = torch.ones(n, dtype=torch.float64)
    half_kls = [(sums.pop(lens)["kl_bits"].sum(1) / n).tolist() for lens in [k for k in sums if k.startswith("half_")]]
    metrics = summarise(sums, {"kl_bits": ones, "entropy_mae_bits": ones, "agreement": decided}, L)
    metrics.update(layers=list(range(L)), transport_distance=transport_distance(jacobians, L), n_prompts=n,
                   n_fit_prompts=len(fitting.prompts), skip_first=skip_first, seed=seed,
                   prompts=measured.description, final_kl_bits=metrics["jacobian"]["kl_bits"][-1],
                   bayes_entropy_bits=entropy_bits(bayes).mean().item(), fit_halves_kl_bits=half_kls,
                   fit_halves_max_gap_bits=(max(abs(a - b) for a, b in zip(*half_kls)) if len(half_kls) == 2
                                            else None))
    return Result("jacobian-lens", LANGUAGE_DEFINITION, metrics,
                  {"by-layer": layer_figure(metrics, f"{measured.description}, last position")},
                  descriptions=DESCRIPTIONS)


def layer_figure(metrics: dict, where: str) -> go.Figure:
    layers = metrics["layers"]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("KL(Bayes || lens), bits", "arg-max agrees with Bayes"))
    colours = {"jacobian": "#d62728", "logit": "#1f77b4"}
    for lens, label in (("jacobian", "Jacobian lens"), ("logit", "logit lens")):
        m = metrics[lens]
        fig.add_scatter(x=layers, y=m["kl_bits"], mode="lines+markers", name=f"{label}: KL",
                        line=dict(color=colours[lens]), row=1, col=1,
                        error_y=error_bars(m["kl_bits"], m["kl_bits_interval"]))
        fig.add_scatter(x=layers, y=m["entropy_mae_bits"], mode="lines+markers", name=f"{label}: entropy MAE",
                        line=dict(color=colours[lens], dash="dot"), row=1, col=1)
        fig.add_scatter(x=layers, y=m["agreement"], mode="lines+markers", name=f"{label}: agreement",
                        line=dict(color=colours[lens]), row=1, col=2, showlegend=False)
    fig.update_xaxes(title_text="layer (its residual stream decoded)", tickvals=layers)
    fig.update_yaxes(type="log", title_text="bits (log)", row=1, col=1)
    fig.update_yaxes(range=[0, 1.02], title_text="fraction", row=1, col=2)
    fig.update_layout(title=f"Jacobian lens vs logit lens against Bayes, per layer ({where}; 95% intervals)",
                      width=960, height=440)
    return fig


SKIP_FIRST = Option("skip_first", 0, "leading positions left out of the fit (TransformerLens's default for long text: "
                    "16)", low=0, high=10 ** 6)

ANALYSIS = Analysis(
    "jacobian-lens", "each layer's residual stream carried to the output by the average Jacobian, then decoded, "
    "against Bayes and the logit lens", DEFINITION, compute,
    options=(n_option(500), Option("n_fit", 200, "held-out sequences J is fitted on", low=1, high=10 ** 6),
             SKIP_FIRST, Option("same_position", False, "fit the same-position Jacobian d h_{L-1,t} / d h_{l,t} "
                                "instead (one position per fitting sequence, cycling), without the effects on later "
                                "positions that TransformerLens's lens sums"), seed_option()),
    requires=("discrete",), order=13, on_language_model=on_language_model,
    language_options=activations.language_options(
        SKIP_FIRST, Option("fit_per_shot", 2, "prompts per number of shown examples J is fitted on (drawn with seed + 1;"
                           " the fit's time grows with their tokens: with 2, about 23 CPU minutes on SmolLM2-135M "
                           "and 26 on Gemma 3 270M)",
                           low=1, high=100_000)),
    language_definition=LANGUAGE_DEFINITION)
