"""QK alignment: does a query look toward the hypotheses that are still feasible?

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import math

import plotly.graph_objects as go
import torch
from tqdm.auto import tqdm

from models.base import act_name
from tasks.base import entropy_bits

from .base import Analysis, AnalysisError, Result, eval_batch, n_option, seed_option
from .key_orthogonality import key_vectors
from .style import error_bars

DEFINITION = " ".join("""
 On one held-out batch of n sequences, at every query position i of the task (where
batch.query_mask is set) and for every layer l and head h, let q_i be the query the model actually
computes, blocks.l.attn.hook_q (LN_l of the residual stream at i, times W_Q, plus b_Q). The
hypothesis frame is the group of hypothesis tokens the task declares as its frame, which must
name its C answer classes, token c <-> class c (bijection: the V value tokens). Its key vectors
are computed as in key-orthogonality: k_c = LN_l(W_E[token c]) @ W_K[l, h] (token embedding only, no position, no b_K). The C hypotheses
are split with the exact Bayes posterior at i: feasible if posterior_c > 0, eliminated if
posterior_c == 0 (bijection: eliminated = the values revealed before i, which are the only values
present in the context as tokens; feasible = the unrevealed ones, which are not). Per (sequence,
query): feasible cosine = mean over feasible c of cos(q_i, k_c), eliminated cosine = the same over
eliminated c (a zero vector has cosine 0 with everything), gap = feasible - eliminated; score gap =
the same difference of q_i . k_c / attn_scale (attn_scale = sqrt(d_head)), the part of an attention
score these keys would get. Only (sequence, query) pairs where both sets are non-empty count (the
first bijection query has nothing eliminated); every reported cosine, gap and score gap is the mean
over the counted pairs, per query index (the k-th query position) and over all query positions.
From the actual attention pattern blocks.l.attn.hook_pattern at the same query positions: attention
entropy -sum_j p_ij log2 p_ij in bits over the attended positions j <= i, its fraction of the
uniform-attention entropy log2(i + 1) (positions with i > 0 only), and the attention mass on the
query's own position ("self") and on earlier positions j < i holding a token of each hypothesis-
token group (bijection: earlier value tokens, earlier key tokens) or of none ("earlier_other"); the
masses sum to 1. These are means over all sequences and query positions. Layer means are means over
the layer's heads. The paper describes early layers attending broadly and deep layers concentrating
on the feasible set: a rising gap and a falling entropy with depth; the numbers here are what the
model does, whichever way they go. A model without attention heads whose mixer can be written as
attention (Mamba: its selective scan's effective attention M, models/mamba.py) gets the entropy and the
masses only, of one "head" per layer whose pattern is |M| averaged over channels with every row
normalised to 1 (the share of position i's mixing that comes from each j, whatever its sign); its
cosines are undefined (it has no queries or keys) and are not reported. Uncertainty of the gap: 95% percentile bootstrap intervals over
sequences (BOOTSTRAP resamples of the n sequences with replacement, drawn with the given seed; each
resample recomputes the same ratio of sums), for every per-head gap, layer mean gap and per-query-
index layer mean gap (the *_ci95 pairs [low, high]); a gap whose interval contains 0 is not told apart
from 0 at this n.
""".split())

BOOTSTRAP = 1000

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def hypothesis_group(task) -> tuple[str, torch.Tensor]:
    """The task's hypothesis frame, which must name its answer classes in order (token c <-> class c)."""
    if task.continuous or task.frame is None:
        raise AnalysisError(f"qk-alignment needs a discrete task with a hypothesis frame; {task.name!r} has none")
    name, ids = task.frame_tokens()
    answer = torch.arange(task.answer_token_offset, task.answer_token_offset + task.n_classes)
    if len(ids) != task.n_classes or not torch.equal(ids.cpu().long(), answer):
        raise AnalysisError(f"qk-alignment needs a hypothesis frame whose tokens are the task's {task.n_classes} "
                            f"answer classes in order; the {name!r} frame of task {task.name!r} is not")
    return name, ids


def attention_entropy_bits(pattern: torch.Tensor) -> torch.Tensor:
    """Entropy in bits over the last axis of an attention pattern, with 0 log 0 = 0."""
    return entropy_bits(pattern.double())


def unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


@torch.no_grad()
def measure(model, batch, group_ids: torch.Tensor, chunk: int = 256) -> dict:
    """Sums and counts per layer, head and query column; see ``summarise``."""
    task = model.task
    heads = model.has_attention()  # else only the masses and entropy of the effective attention (Mamba)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads if heads else 1
    columns = batch.query_mask.any(0).nonzero().flatten()
    Q = len(columns)
    device = batch.tokens.device
    groups = {name: ids.to(device) for name, ids in task.hypothesis_tokens().items()}
    mass_names = ["self"] + [f"earlier_{name}" for name in groups] + ["earlier_other"]
    earlier = torch.arange(batch.tokens.shape[1], device=device)[None, :] < columns[:, None]  # [Q, Tk]
    names = [act_name("q", l) for l in range(n_layers)] if heads else []
    missing = [name for name in names if name not in model.hook_dict]
    if missing:
        raise AnalysisError(f"qk-alignment needs the hook point(s) {', '.join(missing)}, which this model lacks")
    if heads:
        scale = float(getattr(model.cfg, "attn_scale", math.sqrt(model.cfg.d_head)))
        keys = [key_vectors(model, l, group_ids).double() for l in range(n_layers)]  # [H, C, d]
    else:
        chunk = min(chunk, 32)  # an effective attention is [b, channels, T, T] per layer

    z = lambda *shape: torch.zeros(*shape, dtype=torch.float64, device=device)  # noqa: E731
    sums = {k: z(n_layers, n_heads, Q) for k in ("feasible_cos", "eliminated_cos", "score_gap", "entropy",
                                                  "entropy_fraction", *mass_names)}
    counted, queries, fraction_queries = z(Q), z(Q), z(Q)
    n_feasible = z(Q)
    per_sequence = dict(head=[], query=[], valid=[])  # gap sums per sequence, for the bootstrap
    starts = range(0, len(batch), chunk)
    for start in tqdm(starts, desc="qk-alignment", unit="chunk", leave=False, disable=len(starts) < 4):
        tokens = batch.tokens[start:start + chunk]
        at_query = batch.query_mask[start:start + chunk][:, columns].double()  # [b, Q]
        feasible = batch.posterior[start:start + chunk][:, columns] > 0  # [b, Q, C]
        eliminated = ~feasible
        n_f, n_e = feasible.sum(-1).double(), eliminated.sum(-1).double()
        valid = at_query * (n_f > 0) * (n_e > 0)  # [b, Q]
        counted += valid.sum(0)
        queries += at_query.sum(0)
        n_feasible += (n_f * at_query).sum(0)
        uniform = torch.log2(columns.double() + 1)  # [Q]
        fraction_queries += (at_query * (columns > 0)).sum(0)
        member = {name: torch.isin(tokens, ids) for name, ids in groups.items()}  # [b, Tk]
        cache = model.run_with_cache(tokens, names_filter=names)[1] if heads else None
        patterns = model.attention_patterns(tokens, rows=columns)  # [b, H, Q, Tk]: the query rows only
        per_sequence["valid"].append(valid)
        for l in range(n_layers):
            pattern = patterns[l].double()  # [b, H, Q, Tk]
            aq = at_query[:, None]  # [b, 1, Q]
            h_bits = attention_entropy_bits(pattern)  # [b, H, Q]
            sums["entropy"][l] += (h_bits * aq).sum(0)
            frac = torch.where(columns > 0, h_bits / uniform.clamp_min(1e-12), torch.zeros_like(h_bits))
            sums["entropy_fraction"][l] += (frac * aq).sum(0)
            own = pattern.gather(-1, columns[None, None, :, None].expand(*pattern.shape[:3], 1))[..., 0]
            sums["self"][l] += (own * aq).sum(0)
            covered = torch.zeros(tokens.shape[0], tokens.shape[1], dtype=torch.bool, device=device)
            for name, m in member.items():
                where = (earlier[None] & m[:, None, :] & ~covered[:, None, :]).double()  # [b, Q, Tk]
                covered |= m
                sums[f"earlier_{name}"][l] += ((pattern * where[:, None]).sum(-1) * aq).sum(0)
            rest = (earlier[None] & ~covered[:, None, :]).double()
            sums["earlier_other"][l] += ((pattern * rest[:, None]).sum(-1) * aq).sum(0)
            if not heads:
                continue
            q = cache[act_name("q", l)][:, columns].double()  # [b, Q, H, d]
            cos = torch.einsum("bqhd,hcd->bqhc", unit(q), unit(keys[l]))
            score = torch.einsum("bqhd,hcd->bqhc", q, keys[l]) / scale
            f, e = feasible[:, :, None].double(), eliminated[:, :, None].double()  # [b, Q, 1, C]
            mean_f = lambda x: (x * f).sum(-1) / f.sum(-1).clamp_min(1)  # noqa: E731  [b, Q, H]
            mean_e = lambda x: (x * e).sum(-1) / e.sum(-1).clamp_min(1)  # noqa: E731
            w = valid[:, :, None]
            sums["feasible_cos"][l] += (mean_f(cos) * w).sum(0).T
            gap = (mean_f(cos) - mean_e(cos)) * w  # [b, Q, H]
            per_sequence["head"].append(gap.sum(1)), per_sequence["query"].append(gap.sum(2))
            sums["eliminated_cos"][l] += (mean_e(cos) * w).sum(0).T
            sums["score_gap"][l] += ((mean_f(score) - mean_e(score)) * w).sum(0).T
    for key in ("head", "query"):  # [n, L, H] and [n, L, Q]: chunks come layer by layer
        parts = per_sequence[key]
        per_sequence[key] = torch.cat([torch.stack(parts[i:i + n_layers], 1) for i in range(0, len(parts), n_layers)]
                                      ) if parts else None
    per_sequence["valid"] = torch.cat(per_sequence["valid"])  # [n, Q]
    return dict(sums=sums, per_sequence=per_sequence, counted=counted, queries=queries, heads=heads,
                fraction_queries=fraction_queries,
                n_feasible=n_feasible, columns=columns, mass_names=mass_names,
                bayes_entropy=(batch.bayes_entropy[:, columns].double() * batch.query_mask[:, columns]).sum(0))


def _div(num: torch.Tensor, den: torch.Tensor) -> list:
    """num / den elementwise as (nested) lists, None where den == 0."""
    out = (num / den.clamp_min(1)).tolist()

    def fill(x, d):
        return [fill(a, b) for a, b in zip(x, d)] if isinstance(x, list) else (x if d > 0 else None)
    return fill(out, den.expand_as(num).tolist())


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def summarise(m: dict) -> dict:
    s, counted, queries = m["sums"], m["counted"], m["queries"]
    n_layers, n_heads, _ = s["feasible_cos"].shape
    gap = s["feasible_cos"] - s["eliminated_cos"]
    per_position = dict(
        query_index=list(range(1, len(m["columns"]) + 1)), position=m["columns"].tolist(),
        n_counted=counted.long().tolist(), bayes_entropy_bits=_div(m["bayes_entropy"], queries),
        mean_feasible=_div(m["n_feasible"], queries),
        uniform_attention_entropy_bits=torch.log2(m["columns"].double() + 1).tolist(),
        feasible_cos=_div(s["feasible_cos"], counted), eliminated_cos=_div(s["eliminated_cos"], counted),
        gap=_div(gap, counted), score_gap=_div(s["score_gap"], counted),
        attention_entropy_bits=_div(s["entropy"], queries),
        attention_mass={k: _div(s[k], queries) for k in m["mass_names"]},
    )
    total, total_q = counted.sum(), queries.sum()
    per_head = dict(
        feasible_cos=_div(s["feasible_cos"].sum(-1), total), eliminated_cos=_div(s["eliminated_cos"].sum(-1), total),
        gap=_div(gap.sum(-1), total), score_gap=_div(s["score_gap"].sum(-1), total),
        attention_entropy_bits=_div(s["entropy"].sum(-1), total_q),
        attention_entropy_fraction_of_uniform=_div(s["entropy_fraction"].sum(-1), m["fraction_queries"].sum()),
        attention_mass={k: _div(s[k].sum(-1), total_q) for k in m["mass_names"]},
    )
    layer_mean = {k: [_mean(row) for row in v] for k, v in per_head.items() if k != "attention_mass"}
    layer_mean["attention_mass"] = {k: [_mean(row) for row in v] for k, v in per_head["attention_mass"].items()}
    # per query index, mean over heads (what the position figures show)
    layer_mean_by_position = {k: [[_mean([per_position[k][l][h][q] for h in range(n_heads)])
                                   for q in range(len(m["columns"]))] for l in range(n_layers)]
                              for k in ("feasible_cos", "eliminated_cos", "gap", "attention_entropy_bits")}
    for k in m["mass_names"]:
        layer_mean_by_position[f"attention_mass_{k}"] = [
            [_mean([per_position["attention_mass"][k][l][h][q] for h in range(n_heads)])
             for q in range(len(m["columns"]))] for l in range(n_layers)]
    per_position["layer_mean"] = layer_mean_by_position
    return dict(per_head=per_head, layer_mean=layer_mean, per_position=per_position,
                n_counted_queries=int(total), n_queries=int(total_q))


def _interval(samples: torch.Tensor) -> list:
    """[low, high] 95% percentile interval over the first axis, per remaining entry (None where undefined)."""
    bounds = torch.quantile(samples, torch.tensor([0.025, 0.975], dtype=samples.dtype), dim=0)  # [2, ...]
    pairs = bounds.movedim(0, -1).tolist()

    def fill(x):
        return [fill(v) for v in x] if isinstance(x[0], list) else (x if all(map(math.isfinite, x)) else None)
    return fill(pairs)


@torch.no_grad()
def bootstrap_gaps(per_sequence: dict, seed: int, resamples: int = BOOTSTRAP, chunk: int = 50) -> dict:
    """95% bootstrap intervals (resampling sequences) of the per-head, layer mean and per-position gaps."""
    head, query, valid = per_sequence["head"], per_sequence["query"], per_sequence["valid"].double()
    n, n_layers, n_heads = head.shape
    generator = torch.Generator().manual_seed(seed)
    per_head, per_query = [], []
    for start in range(0, resamples, chunk):
        draws = torch.randint(n, (min(chunk, resamples - start), n), generator=generator).to(head.device)
        weights = torch.zeros(len(draws), n, dtype=torch.float64, device=head.device)
        weights.scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))
        counted = weights @ valid  # [r, Q]
        per_head.append(torch.einsum("rn,nlh->rlh", weights, head) / counted.sum(-1)[:, None, None])
        per_query.append(torch.einsum("rn,nlq->rlq", weights, query) / (n_heads * counted[:, None, :]))
    per_head, per_query = torch.cat(per_head).cpu(), torch.cat(per_query).cpu()
    return dict(per_head=_interval(per_head), layer_mean=_interval(per_head.mean(-1)),
                per_position=_interval(per_query))


def compute(model, n: int = 500, seed: int = 1234) -> Result:
    """Query alignment with the keys of feasible vs eliminated hypotheses, and attention breadth, per layer and head."""
    group, ids = hypothesis_group(model.task)
    batch = eval_batch(model, n, seed)
    raw = measure(model, batch, ids)
    if raw["counted"].sum() == 0:
        raise AnalysisError(f"qk-alignment: on task {model.task.name!r} no query in {len(batch)} held-out sequences "
                            f"has both a feasible and an eliminated hypothesis (posterior == 0), so the "
                            f"feasible-vs-eliminated gap is undefined")
    numbers = summarise(raw)
    name = model.task.name
    metrics = dict(n_sequences=len(batch), seed=seed, group=group, n_hypotheses=len(ids),
                   n_layers=model.cfg.n_layers, n_heads=len(numbers["per_head"]["attention_entropy_bits"][0]),
                   patterns="attention heads (hook_pattern)" if raw["heads"] else
                   "effective attention of the selective scan (|M| averaged over channels, rows normalised)")
    figures = {}
    if raw["heads"]:
        intervals = bootstrap_gaps(raw["per_sequence"], seed)
        numbers["per_head"]["gap_ci95"] = intervals["per_head"]
        numbers["layer_mean"]["gap_ci95"] = intervals["layer_mean"]
        numbers["per_position"]["layer_mean"]["gap_ci95"] = intervals["per_position"]
        lm = numbers["layer_mean"]
        metrics.update(gap_first_layer=lm["gap"][0], gap_last_layer=lm["gap"][-1],
                       gap_first_layer_ci95=lm["gap_ci95"][0], gap_last_layer_ci95=lm["gap_ci95"][-1],
                       bootstrap_resamples=BOOTSTRAP)
        figures["gap-by-layer"] = gap_by_layer_figure(numbers, name, group)
        figures["gap-by-position"] = gap_by_position_figure(numbers, name, group)
    else:  # no queries or keys: the cosines are undefined, not zero
        for part in (numbers["per_head"], numbers["layer_mean"], numbers["per_position"],
                     numbers["per_position"]["layer_mean"]):
            for key in COSINE_KEYS:
                part.pop(key, None)
    lm = numbers["layer_mean"]
    metrics.update(attention_entropy_first_layer_bits=lm["attention_entropy_bits"][0],
                   attention_entropy_last_layer_bits=lm["attention_entropy_bits"][-1], **numbers)
    # a model without heads (Mamba) is measured on its effective attention, and its figures say so
    what = ("attention", "mean over heads") if raw["heads"] else (
        "effective attention (the selective scan written as attention)", "mean over channels")
    figures["attention-entropy"] = entropy_figure(numbers, name, group, what)
    figures["attention-mass"] = mass_figure(numbers, name, what)
    return Result("qk-alignment", DEFINITION, metrics, figures)


COSINE_KEYS = ("feasible_cos", "eliminated_cos", "gap", "score_gap")


def mass_figure(numbers: dict, task_name: str, what: tuple[str, str] = ("attention", "mean over heads")) -> go.Figure:
    """Where the attention at query positions goes, per layer (mean over heads): stacked shares."""
    mass = numbers["layer_mean"]["attention_mass"]
    layers = list(range(len(next(iter(mass.values())))))
    fig = go.Figure()
    for i, (key, shares) in enumerate(mass.items()):
        label = key.replace("_", " ")
        fig.add_bar(x=layers, y=shares, name=label, marker_color=PALETTE[i % len(PALETTE)],
                    hovertemplate=f"layer %{{x}}<br>{label}: %{{y:.3f}}<extra></extra>")
    fig.update_layout(barmode="stack", title=f"{task_name}: where {what[0]} at query positions goes, by layer "
                                             f"({what[1]} and queries)",
                      xaxis=dict(title="layer", tickmode="array", tickvals=layers),
                      yaxis=dict(title="share of attention", range=[0, 1]),
                      width=760, height=460)
    return fig


def gap_by_layer_figure(numbers: dict, task_name: str, group: str) -> go.Figure:
    ph, lm = numbers["per_head"], numbers["layer_mean"]
    n_layers, n_heads = len(ph["gap"]), len(ph["gap"][0])
    layers = list(range(n_layers))
    fig = go.Figure()
    for h in range(n_heads):
        custom = [(ph["feasible_cos"][l][h], ph["eliminated_cos"][l][h], ph["score_gap"][l][h]) for l in layers]
        fig.add_scatter(x=layers, y=[ph["gap"][l][h] for l in layers], name=f"head {h}", mode="lines+markers",
                        line=dict(width=1, color=PALETTE[h % len(PALETTE)]), opacity=0.6, customdata=custom,
                        hovertemplate=f"layer %{{x}}, head {h}<br>gap %{{y:.4f}}<br>feasible cos %{{customdata[0]:.4f}}"
                                      "<br>eliminated cos %{customdata[1]:.4f}<br>score gap %{customdata[2]:.4f}"
                                      "<extra></extra>")
    fig.add_scatter(x=layers, y=lm["gap"], name="mean over heads (95% CI)", mode="lines+markers",
                    line=dict(width=3, color="black"), error_y=error_bars(lm["gap"], lm["gap_ci95"]),
                    customdata=[(f, e, *(ci or (math.nan, math.nan)))
                                for f, e, ci in zip(lm["feasible_cos"], lm["eliminated_cos"], lm["gap_ci95"])],
                    hovertemplate="layer %{x}, mean over heads<br>gap %{y:.4f} (95% CI %{customdata[2]:.4f} … "
                                  "%{customdata[3]:.4f})<br>feasible cos %{customdata[0]:.4f}"
                                  "<br>eliminated cos %{customdata[1]:.4f}<extra></extra>")
    fig.add_hline(y=0, line_color="gray", line_dash="dot")
    fig.update_layout(title=f"{task_name}: cos(query, keys of feasible {group}) − cos(query, keys of eliminated {group})"
                            f"<br><sup>mean over {numbers['n_counted_queries']} queries with both sets non-empty; "
                            f"bars: 95% bootstrap intervals over sequences</sup>",
                      xaxis=dict(title="layer", tickmode="array", tickvals=layers), yaxis_title="cosine gap",
                      width=760, height=460)
    return fig


def per_position(numbers: dict) -> tuple[dict, dict, list]:
    """The per-position numbers, their means over heads, and the query-index axis."""
    pp = numbers["per_position"]
    return pp, pp["layer_mean"], pp["query_index"]


def gap_by_position_figure(numbers: dict, task_name: str, group: str) -> go.Figure:
    pp, lm, x = per_position(numbers)
    fig = go.Figure()
    for l, gaps in enumerate(lm["gap"]):
        heads = pp["gap"][l]
        custom = [(lm["feasible_cos"][l][q], lm["eliminated_cos"][l][q],
                   _none_min([hd[q] for hd in heads]), _none_max([hd[q] for hd in heads]),
                   pp["position"][q], pp["mean_feasible"][q]) for q in range(len(x))]
        custom = [tuple(float("nan") if v is None else v for v in row) for row in custom]
        fig.add_scatter(x=x, y=gaps, name=f"layer {l}", mode="lines+markers",
                        line=dict(color=PALETTE[l % len(PALETTE)]), customdata=custom,
                        error_y=error_bars(gaps, lm["gap_ci95"][l]),
                        hovertemplate=f"layer {l}, query %{{x}} (token %{{customdata[4]}})<br>gap %{{y:.4f}} "
                                      "(heads %{customdata[2]:.3f} … %{customdata[3]:.3f})<br>feasible cos "
                                      "%{customdata[0]:.4f}<br>eliminated cos %{customdata[1]:.4f}"
                                      "<br>feasible hypotheses %{customdata[5]:.2f}<extra></extra>")
    fig.add_hline(y=0, line_color="gray", line_dash="dot")
    fig.update_layout(title=f"{task_name}: feasible − eliminated cosine with the keys of the {group}, by query position "
                            f"(mean over heads)<br><sup>bars: 95% bootstrap intervals over sequences</sup>",
                      xaxis_title="query index", yaxis_title="cosine gap",
                      width=760, height=460)
    return fig


def entropy_figure(numbers: dict, task_name: str, group: str,
                   what: tuple[str, str] = ("attention", "mean over heads")) -> go.Figure:
    pp, lm, x = per_position(numbers)
    masses = [k for k in pp["attention_mass"]]
    fig = go.Figure()
    fig.add_scatter(x=x, y=pp["uniform_attention_entropy_bits"], name="uniform over attended positions",
                    mode="lines", line=dict(color="gray", dash="dash"),
                    hovertemplate="query %{x}<br>log2(#attended) %{y:.3f} bits<extra></extra>")
    for l, ent in enumerate(lm["attention_entropy_bits"]):
        custom = [[pp["position"][q]] + [lm[f"attention_mass_{k}"][l][q] for k in masses] for q in range(len(x))]
        lines = "".join(f"<br>mass {k.replace('_', ' ')} %{{customdata[{i + 1}]:.3f}}" for i, k in enumerate(masses))
        fig.add_scatter(x=x, y=ent, name=f"layer {l}", mode="lines+markers",
                        line=dict(color=PALETTE[l % len(PALETTE)]), customdata=custom,
                        hovertemplate=f"layer {l}, query %{{x}} (token %{{customdata[0]}})<br>"
                                      f"entropy %{{y:.3f}} bits{lines}<extra></extra>")
    fig.update_layout(title=f"{task_name}: entropy of the {what[0]} at query positions ({what[1]})",
                      xaxis_title="query index", yaxis_title="attention entropy (bits)",
                      width=760, height=460)
    return fig


def _none_min(values):
    values = [v for v in values if v is not None]
    return min(values) if values else None


def _none_max(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


ANALYSIS = Analysis(
    "qk-alignment", "do queries align with the keys of still-feasible hypotheses, more with depth?",
    DEFINITION, compute, options=(n_option(500), seed_option()), requires=("patterns", "frame", "eliminates"), order=5)
