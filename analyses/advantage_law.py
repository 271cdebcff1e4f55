"""Advantage law: the score and value gradients of every head, by autograd and in closed form.

Paper II of the trilogy (Agarwal, Dalal, Misra, "Gradient Dynamics of Attention", arXiv 2512.22473)
explains the geometry by two equations; this analysis checks both on a model and decomposes them.
The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import copy

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from models.base import training_loss

from models.base import act_name

from . import style
from .base import Analysis, AnalysisError, Option, Result, eval_batch, n_option, seed_option
from .intervals import bootstrap_sums

DEFINITION = " ".join("""
 On one held-out batch of n sequences, a float64 copy of the model computes the training loss L
(soft cross-entropy against the exact Bayes posterior at the task's query positions; for a
continuous task the expected Gaussian NLL under the Bayes predictive), and autograd gives the
gradients at three hook points of every layer l and head h: the pre-softmax scores s_ij
(blocks.l.attn.hook_attn_scores: scaled, causally masked), the values v_j (hook_v) and the head
outputs z_i = sum_j alpha_ij v_j (hook_z), whose gradient is the upstream gradient u_i = dL/dz_i.
With alpha the attention pattern (hook_pattern) and b_ij = u_i . v_j, the closed forms are
dL/ds_ij = alpha_ij (b_ij - sum_k alpha_ik b_ik) (the advantage law: a key's score rises when its
value helps more than the attention-weighted average) and dL/dv_j = sum_i alpha_ij u_i (each value
moves toward the responsibility-weighted upstream gradients). score_error and value_error: per head,
max |closed form - autograd| / max |autograd| over the batch (absolute when autograd is all zero);
float64 arithmetic puts both near 1e-15, and the law is said to hold below TOLERANCE = 1e-6.
Decomposition, per head: advantage_spread, the mean over sequences and positions i of the
attention-weighted standard deviation of b_ij over keys j, sqrt(sum_j alpha_ij (b_ij - mean_i)^2),
with u from each sequence's own loss (n times the batch-mean loss's), which is 0 exactly when every
attended key has the same advantage (the routing signal: scores stop
moving); score_grad_norm and value_grad_norm, sqrt(n) times the Frobenius norms of dL/ds and dL/dv of
the batch-mean loss, i.e. the root-mean-square over sequences of each sequence's own gradient norm
(the value gradient is the precision signal: it is non-zero as long as u is). The batch is done in
chunks of sequences; each chunk's loss is weighted by its share of the batch, so every number but the
errors (a maximum over chunks) is the one batch's.
Gradient share by key group: at the query positions i, sum_j |dL/ds_ij| split by what key position
j holds, as in qk-alignment: the query's own position ("self"), an earlier token of each hypothesis-
token group of the task ("earlier_<group>"; on bijection the earlier value tokens are exactly the
eliminated hypotheses, since feasible values never appear as tokens), or anything else
("earlier_other"); the shares sum to 1 per head. Layer values are means over the layer's heads.
Uncertainty: advantage_spread, the two gradient norms and the gradient shares (per head, per layer and over
the model) are sums over sequences of what each sequence contributes, so each has a 95% percentile bootstrap
interval resampling whole sequences of the batch (2,000 resamples of the sums, no new backward pass), in
``intervals``. The errors are not sample statistics: each is a float64 check of an identity that holds on every
sequence, a maximum over the batch, and carries no interval.
""".split())

TOLERANCE = 1e-6
CHUNK = Option("chunk", 32, "sequences per backward pass (memory; the numbers do not depend on it)", low=1)
HOOKS = ("attn_scores", "pattern", "v", "z")


def float64_copy(model):
    """A float64 copy of ``model`` in eval mode (the model itself is left as it is)."""
    return copy.deepcopy(model).double().eval()


def captured(model, batch, weight: float = 1.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss on ``batch`` and, per hook point of HOOKS in every layer, its activation with ``.grad`` set:
    the gradients of ``weight`` times the loss (a chunk of a batch weighs its share of the batch)."""
    names = [act_name(kind, l) for l in range(model.cfg.n_layers) for kind in HOOKS]
    missing = [name for name in names if name not in model.hook_dict]
    if missing:
        raise AnalysisError(f"advantage-law needs the hook point(s) {', '.join(missing)}, which this model lacks")
    saved = {}

    def keep(activation, hook):
        activation.retain_grad()
        saved[hook.name] = activation

    model.zero_grad(set_to_none=True)
    with torch.enable_grad(), model.hooks(fwd_hooks=[(name, keep) for name in names]):
        loss = training_loss(model, batch)
        (weight * loss).backward()
    return loss.detach(), saved


def closed_forms(alpha: torch.Tensor, v: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(dL/ds [b, H, Tq, Tk], dL/dv [b, Tk, H, d], b [b, H, Tq, Tk]) from the pattern alpha [b, H, Tq, Tk],
    values v [b, Tk, H, d] and upstream gradients u [b, Tq, H, d]."""
    b = torch.einsum("bqhd,bkhd->bhqk", u, v)
    advantage = b - (alpha * b).sum(-1, keepdim=True)
    return alpha * advantage, torch.einsum("bhqk,bqhd->bkhd", alpha, u), b


def relative_error(closed: torch.Tensor, autograd: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """max |closed - autograd| / max |autograd| over ``dims`` (absolute where autograd is all zero)."""
    scale = autograd.abs().amax(dims)
    error = (closed - autograd).abs().amax(dims)
    return torch.where(scale > 0, error / scale.clamp_min(1e-300), error)


def key_groups(task, tokens: torch.Tensor, columns: torch.Tensor) -> dict[str, torch.Tensor]:
    """[b, Q, Tk] masks of what each key position holds, for the query columns: self, earlier tokens of each
    hypothesis group, other earlier tokens."""
    T = tokens.shape[1]
    keys = torch.arange(T, device=tokens.device)
    earlier = (keys[None, :] < columns[:, None])[None]  # [1, Q, Tk]
    groups = {"self": (keys[None, :] == columns[:, None])[None].expand(len(tokens), -1, -1)}
    taken = torch.zeros_like(earlier.expand(len(tokens), -1, -1))
    for name, ids in (task.hypothesis_tokens().items() if not task.continuous else ()):
        member = torch.isin(tokens, ids.to(tokens.device))[:, None, :] & earlier & ~taken
        groups[f"earlier_{name}"] = member
        taken = taken | member
    groups["earlier_other"] = earlier & ~taken
    return groups


def measure(model, batch, n: int) -> dict:
    """Per-layer, per-head sums on ``batch``, a chunk of a batch of ``n`` sequences; ``finish`` turns the sums
    of every chunk into the numbers of DEFINITION. ``model`` is used as given (float64 for the check)."""
    loss, saved = captured(model, batch, weight=len(batch) / n)
    columns = batch.query_mask.any(0).nonzero().flatten()
    at_query = batch.query_mask[:, columns]  # [b, Q]
    groups = key_groups(model.task, batch.tokens, columns)
    sums = {key: [] for key in ("score_error", "value_error", "spread_sum", "score_sq", "value_sq", "flow")}
    shares = {name: [] for name in groups}
    # what each sequence adds to the numbers' sums, [b, L, H] each (for intervals over sequences): its spread summed
    # over positions, its squared gradient norms (n^2 times: of its own loss) and its flow, whole and by key group
    per_sequence = {key: [] for key in ("spread", "score_sq", "value_sq", "flow", *(f"flow_{g}" for g in groups))}
    for l in range(model.cfg.n_layers):
        act = {kind: saved[act_name(kind, l)] for kind in HOOKS}
        alpha, v = act["pattern"].detach(), act["v"].detach()
        zero_if_none = lambda grad, like: torch.zeros_like(like) if grad is None else grad  # noqa: E731
        u = zero_if_none(act["z"].grad, act["z"])  # of the batch-mean loss: the chunk is weighted by its share
        ds = zero_if_none(act["attn_scores"].grad, alpha)
        dv = zero_if_none(act["v"].grad, v)
        closed_s, closed_v, b = closed_forms(alpha, v, u)
        sums["score_error"].append(relative_error(closed_s, ds, (0, 2, 3)))
        sums["value_error"].append(relative_error(closed_v, dv, (0, 1, 3)))
        b = b * n  # each sequence's own loss: a spread that does not shrink with the batch size
        mean = (alpha * b).sum(-1, keepdim=True)
        spread = (alpha * (b - mean) ** 2).sum(-1).clamp_min(0).sqrt()  # [b, H, Tq]
        per_sequence["spread"].append(spread.sum(2))
        per_sequence["score_sq"].append(ds.pow(2).sum((2, 3)) * n ** 2)
        per_sequence["value_sq"].append(dv.pow(2).sum((1, 3)) * n ** 2)
        sums["spread_sum"].append(spread.sum((0, 2)))
        sums["score_sq"].append(ds.pow(2).sum((0, 2, 3)))
        sums["value_sq"].append(dv.pow(2).sum((0, 1, 3)))
        flow = ds[:, :, columns].abs() * at_query[:, None, :, None]  # [b, H, Q, Tk]
        sums["flow"].append(flow.sum((0, 2, 3)))
        per_sequence["flow"].append(flow.sum((2, 3)))
        for name, mask in groups.items():
            shares[name].append((flow * mask[:, None]).sum((0, 2, 3)))
            per_sequence[f"flow_{name}"].append((flow * mask[:, None]).sum((2, 3)))
    out = {key: torch.stack(values) for key, values in sums.items()}  # [L, H] each
    out["group_flow"] = {name: torch.stack(values) for name, values in shares.items()}
    out["points"] = len(batch) * batch.tokens.shape[1]
    out["loss"] = loss.item() * len(batch)
    out["per_sequence"] = torch.stack([torch.stack(values, 1) for values in per_sequence.values()], 1)  # [b, K, L, H]
    out["positions"] = batch.tokens.shape[1]
    return out


def finish(parts: list[dict], n: int) -> dict:
    """The chunks' sums as the numbers of DEFINITION: errors by maximum, the rest exactly as on one batch."""
    total = lambda key: sum(p[key] for p in parts)  # noqa: E731
    flow = total("flow").clamp_min(1e-300)
    return {
        "score_error": torch.stack([p["score_error"] for p in parts]).amax(0).tolist(),
        "value_error": torch.stack([p["value_error"] for p in parts]).amax(0).tolist(),
        "advantage_spread": (total("spread_sum") / sum(p["points"] for p in parts)).tolist(),
        "score_grad_norm": (total("score_sq") * n).sqrt().tolist(),
        "value_grad_norm": (total("value_sq") * n).sqrt().tolist(),
        "gradient_share": {name: (sum(p["group_flow"][name] for p in parts) / flow).tolist()
                           for name in parts[0]["group_flow"]},
        "loss": total("loss") / n,
    }


SIGNALS = ("advantage_spread", "score_grad_norm", "value_grad_norm")


def per_sequence_columns(parts: list[dict]) -> torch.Tensor:
    """What each sequence of the batch adds to the sums of ``finish``'s numbers, [n, K, L, H] (``measure``'s
    per_sequence of every chunk, one under the other)."""
    return torch.cat([p["per_sequence"] for p in parts]).detach().cpu()


def signals_of_sums(sums: torch.Tensor, n: int, positions: int, groups: list[str]) -> dict[str, torch.Tensor]:
    """``finish``'s numbers from summed ``per_sequence_columns`` [..., K, L, H] of ``n`` sequences of ``positions``
    tokens (one resample of the sequences, or all of them): per head, the layer means and the model means
    (over every layer and head) of SIGNALS, and per head the gradient share of each key group."""
    per_head = dict(advantage_spread=sums[..., 0, :, :] / (n * positions),
                    score_grad_norm=(sums[..., 1, :, :] / n).sqrt(), value_grad_norm=(sums[..., 2, :, :] / n).sqrt())
    out = dict(per_head)
    out.update({f"layer_mean_{key}": value.mean(-1) for key, value in per_head.items()})
    out.update({f"model_mean_{key}": value.mean((-2, -1)) for key, value in per_head.items()})
    flow = sums[..., 3, :, :].clamp_min(1e-300)
    out.update({f"share_{name}": sums[..., 4 + i, :, :] / flow for i, name in enumerate(groups)})
    return out


def signal_intervals(columns: torch.Tensor, positions: int, groups: list[str]) -> dict[str, list]:
    """95% bootstrap intervals over sequences of every number of ``signals_of_sums`` (its keys, each a nested list
    of [low, high] in the number's shape): one resampling of ``columns`` ([n, K, L, H], per_sequence_columns)."""
    n, shapes = len(columns), {}

    def statistic(sums):
        values = signals_of_sums(sums.reshape(len(sums), *columns.shape[1:]), n, positions, groups)
        shapes.update({key: value.shape[1:] for key, value in values.items()})
        return torch.cat([value.reshape(len(sums), -1) for value in values.values()], 1)

    bounds, out, start = torch.tensor(bootstrap_sums(columns, statistic), dtype=torch.float64), {}, 0
    for key, shape in shapes.items():
        size = shape.numel()
        out[key] = bounds[start:start + size].reshape(*shape, 2).tolist()
        start += size
    return out


def compute(model, n: int = 64, seed: int = 1234, chunk: int = 32) -> Result:
    """The advantage law and the value law checked on every head of ``model`` in float64, and their decomposition."""
    precise = float64_copy(model)
    batch = eval_batch(precise, n, seed).double()
    parts = [measure(precise, batch.rows(i, i + chunk), n) for i in range(0, n, chunk)]
    metrics = finish(parts, n)
    worst = max(max(max(row) for row in metrics[key]) for key in ("score_error", "value_error"))
    metrics.update(max_relative_error=worst, tolerance=TOLERANCE, holds=worst <= TOLERANCE, n=n, seed=seed)
    metrics["layer_mean"] = {key: [sum(row) / len(row) for row in metrics[key]]
                             for key in ("advantage_spread", "score_grad_norm", "value_grad_norm")}
    bounds = signal_intervals(per_sequence_columns(parts), parts[0]["positions"], list(metrics["gradient_share"]))
    metrics["intervals"] = dict({key: bounds[key] for key in SIGNALS},
                                layer_mean={key: bounds[f"layer_mean_{key}"] for key in SIGNALS},
                                gradient_share={name: bounds[f"share_{name}"] for name in metrics["gradient_share"]})
    metrics["n_sequences"] = n
    return Result("advantage-law", DEFINITION, metrics, {
        "errors": error_figure(metrics),
        "decomposition": decomposition_figure(metrics),
        "gradient-share": share_figure(metrics["gradient_share"], metrics["intervals"]["gradient_share"], n),
    }, descriptions={
        "max_relative_error": "largest relative error of either closed form over every head (float64)",
        "holds": f"whether it is at most {TOLERANCE:g}",
        "advantage_spread": "per layer and head: attention-weighted spread of u_i . v_j over keys (routing signal)",
        "value_grad_norm": "per layer and head: RMS over sequences of |dL/dv| (precision signal)",
        "intervals": "95% percentile bootstrap interval of advantage_spread, score_grad_norm and value_grad_norm (per "
                     "head and per layer mean) and of each gradient share, resampling whole sequences of the batch "
                     "(n_sequences of them; 2,000 resamples); the errors are float64 checks of an identity, no "
                     "sample statistic, and have none",
    })


def head_names(rows: list[list[float]]) -> list[str]:
    return [f"L{l}H{h}" for l, row in enumerate(rows) for h in range(len(row))]


def flat(rows: list[list[float]]) -> list[float]:
    return [x for row in rows for x in row]


def error_figure(metrics: dict) -> go.Figure:
    names = head_names(metrics["score_error"])
    fig = go.Figure()
    for key, label in (("score_error", "dL/ds (advantage law)"), ("value_error", "dL/dv (value law)")):
        fig.add_bar(x=names, y=flat(metrics[key]), name=label)  # drawn as dots on the log axis; a 0 is left out
    fig.update_layout(title="Closed form against autograd, per head (float64): max relative error",
                      barmode="group", xaxis_title="layer and head", yaxis_title="max relative error",
                      yaxis_type="log", width=760, height=440)
    style.reference_line(fig, TOLERANCE, f"tolerance {TOLERANCE:g}")
    return fig


def decomposition_figure(metrics: dict) -> go.Figure:
    names = head_names(metrics["advantage_spread"])
    fig = make_subplots(rows=1, cols=2, subplot_titles=("routing signal: advantage spread",
                                                        "precision signal: RMS |dL/dv| per sequence"))
    bounds = metrics.get("intervals", {})  # none in a record from before the intervals
    for col, (key, name) in enumerate((("advantage_spread", "advantage spread"),
                                       ("value_grad_norm", "value gradient")), start=1):
        values = flat(metrics[key])
        bars = style.error_bars(values, flat(bounds[key])) if key in bounds else None
        fig.add_bar(x=names, y=values, name=name, error_y=bars, row=1, col=col)
    fig.update_yaxes(type="log")
    fig.update_yaxes(title_text="spread of u_i . v_j (log)", row=1, col=1)
    fig.update_yaxes(title_text="|dL/dv| per sequence (log)", row=1, col=2)
    fig.update_xaxes(title_text="layer and head")
    n = metrics.get("n_sequences")
    fig.update_layout(title="What the gradient still asks of each head" + (
        f"<br><sup>bars: 95% bootstrap intervals over the {n:,} sequences</sup>" if bounds else ""), showlegend=False,
                      width=900, height=440)
    return fig


def share_figure(shares: dict, bounds: dict | None = None, n: int | None = None) -> go.Figure:
    """The gradient shares stacked per head; ``bounds`` (their intervals) as bars on each segment's top."""
    first = next(iter(shares.values()))
    names = head_names(first)
    fig = go.Figure()
    for name, rows in shares.items():
        values = flat(rows)
        bars = style.error_bars(values, flat(bounds[name])) if bounds else None
        fig.add_bar(x=names, y=values, name=name.replace("_", " "), error_y=bars)
    fig.update_layout(title="Where the score gradient at the query positions goes, by what the key holds" + (
        f"<br><sup>bars: 95% bootstrap intervals of each share over the {n:,} sequences</sup>" if bounds else ""),
                      barmode="stack", xaxis_title="layer and head", yaxis_title="share of sum |dL/ds|",
                      yaxis_range=[0, 1], width=760, height=440)
    return fig


ANALYSIS = Analysis(
    "advantage-law", "dL/ds and dL/dv of every head by autograd vs the closed forms (Paper II), and their "
    "decomposition", DEFINITION, compute,
    options=(n_option(64), seed_option(), CHUNK),
    requires=("attention",), order=20)
