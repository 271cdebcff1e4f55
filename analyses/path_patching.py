"""Path patching: how much of a corruption's effect travels from one component directly into another?

The definition of every number is ``DEFINITION`` below (also written into each result's JSON).
"""
from __future__ import annotations

import torch
from tqdm import tqdm

from models.base import act_name

from . import interventions as P
from .activations import decode_last, run_until
from .base import Analysis, AnalysisError, Option, Result

DEFINITION = " ".join("""
 The clean/corrupted pair and the two scales are those of activation-patching. A sender is a component
that writes into the residual stream: the embeddings (the residual stream before the first block), a
token shift's tap j (its term W_shift[j-1] x_{t-j}), an attention head (its z times W_O), an MLP, or a
non-transformer's mixer. A receiver reads the residual stream: an attention head or a mixer (its block's
input, blocks.l.hook_resid_pre), an MLP (blocks.l.hook_resid_mid; in a parallel block, hook_resid_pre), or the final read-out ("logits").
Path patching sender -> receiver, in two runs on the corrupted input: (1) the receiver's input gets the
sender's write on the clean input minus its write on the corrupted input added, at every position,
and the receiver's output (a head's z, the MLP or mixer output) is recorded; nothing else sees the
change; (2) the receiver's output is replaced by that record at every position, and every later
computation runs on. The answer at the query is scored on both scales. So a cell is the part of the
corruption's effect that travels from the sender directly (through the residual stream alone) into the
receiver and from the receiver on by every route; for the read-out receiver it is the sender's direct
effect on the answer. Only senders upstream of the receiver are paired with it. strongest: the path (not
into the read-out) that restores most on the Bayes scale. intervals: 95% bootstrap intervals over the
pairs of the model's clean and corrupted answers on the Bayes scale, of its move between them, and of
the strongest path on both scales with its paired gain over the unpatched corrupted answer (differs: the
gain's interval excludes 0); the path is chosen once, on all pairs. --receivers picks the columns:
all, logits (the read-out alone: each sender's direct effect on the answer, one stacked pass per 16
senders) or receiver labels separated by commas; a language model's default is the read-out (every path
of a 100M+ model is hours on a CPU), a wind tunnel's every receiver. strongest is then among the
receivers computed (the read-out's when it is the only one).
""".split())


def compute(model, corrupt: str = "", index: int = -1, n: int = 100, seed: int = 1234, receivers: str = "auto") -> Result:
    return paths(model, dict(corrupt=corrupt, index=index, n=n, seed=seed), "all" if receivers == "auto" else receivers)


def on_language_model(lm, prompts: str, words: str, per_shot: int, alpha: float, seed: int, index: int,
                      receivers: str) -> Result:
    return paths(lm, dict(prompts=prompts, words=words, per_shot=per_shot, alpha=alpha, seed=seed, index=index),
                 "logits" if receivers == "auto" else receivers)


def senders(model) -> list[P.Site]:
    return [s for s in P.sites(model, states=False) if s.kind in ("tap", "head", "mlp_out", "mixer")
            or (s.kind == "resid" and s.layer < 0)]


def chosen_receivers(model, which: str) -> list[tuple[P.Site, str | None]]:
    """``receivers`` picked by --receivers: all, logits, or labels separated by commas (in the model's order)."""
    every = receivers(model)
    if which.strip() == "all":
        return every
    asked = [w.strip() for w in which.split(",") if w.strip()]
    labels = [r.label for r, _ in every]
    unknown = [w for w in asked if w not in labels]
    if unknown or not asked:
        raise AnalysisError(f"--receivers: {', '.join(unknown) or 'nothing'} is not a receiver of this model; give all, "
                            f"logits, or labels such as {', '.join(labels[:3])} separated by commas")
    return [r for r in every if r[0].label in asked]


def receivers(model) -> list[tuple[P.Site, str | None]]:
    """(receiver, the hook its input is read from; None for the read-out)."""
    out = []
    for s in P.sites(model, states=False):
        if s.kind in ("head", "mixer"):
            out.append((s, act_name("resid_pre", s.layer)))
        elif s.kind == "mlp_out":  # a parallel block (GPT-NeoX, GPT-J) has no resid_mid: its MLP reads resid_pre
            mid = act_name("resid_mid", s.layer)
            out.append((s, mid if P.has(model, mid) else act_name("resid_pre", s.layer)))
    L = P.n_layers(model)
    final = act_name("resid_post", L - 1)
    out.append((P.Site("logits", (final,), "logits", L), final))
    return out


def write(pair: P.Pair, site: P.Site, cache: dict) -> torch.Tensor:
    """What ``site`` wrote into the residual stream at every position [B, T, d]."""
    if site.kind == "tap":
        return P.tap_term(pair.model, cache, site.head)
    if site.kind == "head":
        W_O = pair.model.blocks[site.layer].attn.W_O[site.head]
        return cache[site.hooks[0]][:, :, site.head] @ W_O
    return cache[site.hooks[0]]


def upstream(sender: P.Site, receiver: P.Site, entry: str) -> bool:
    """Whether ``sender`` writes into what ``receiver`` reads (an MLP reading resid_pre: a parallel block)."""
    if receiver.kind == "mlp_out" and entry == act_name("resid_pre", receiver.layer):
        return sender.stage < receiver.stage - 1
    return receiver.kind == "logits" or sender.stage < receiver.stage


def path_answers(pair: P.Pair, receiver: P.Site, entry: str, deltas: list[torch.Tensor],
                 corrupted: dict | None = None) -> list[torch.Tensor]:
    """The answer for each sender's difference in ``deltas`` added at the receiver's input (stacked copies). The
    read-out of a ``last_only`` pair (a language model) runs no pass: after the final residual stream comes only
    the decode of the answer position (``activations.decode_last``), so each answer is that of the corrupted run's
    final residual (``corrupted[entry]``) plus the difference there."""
    if receiver.kind == "logits" and pair.last_only and corrupted is not None:
        with torch.no_grad():
            final = corrupted[entry][:, -1]
            return [pair.read(decode_last(pair.model, final + d[:, -1].to(final.dtype))[:, None]) for d in deltas]
    B, k = len(pair.clean), len(deltas)
    stacked = torch.cat(deltas)
    tokens = pair.corrupted.repeat(k, *[1] * (pair.corrupted.dim() - 1))

    def add(resid, hook):
        return resid + stacked.to(resid.dtype)

    if receiver.kind == "logits":
        return list(pair.answer(tokens, [(entry, add)]).split(B))
    name = receiver.hooks[0]
    record = {}

    def keep(act, hook):
        record["out"] = act if receiver.head is None else act[:, :, receiver.head]
    with torch.no_grad(), pair.model.hooks(fwd_hooks=[(entry, add), (name, keep)]):
        if pair.last_only:  # a language model's pass stops once the receiver's output is recorded
            run_until(pair.model, tokens, [name])
        else:
            pair.model(tokens)

    def put(act, hook):
        act = act.clone()
        if receiver.head is None:
            return record["out"].to(act.dtype)
        act[:, :, receiver.head] = record["out"].to(act.dtype)
        return act
    return list(pair.answer(tokens, [(name, put)]).split(B))


def paths(model, options: dict, which: str) -> Result:
    pair = P.make_pair(model, options)
    scorer = P.Scorer(pair)
    send, receive = senders(pair.model), chosen_receivers(pair.model, which)
    readout = {entry for r, entry in receive if r.kind == "logits"}  # what path_answers decodes from, on a language model
    names = sorted(set(P.cache_names(pair.model, send)) | {act_name("resid_pre", 0)} | readout)
    clean, corrupted = P.run_cache(pair, pair.clean, names), P.run_cache(pair, pair.corrupted, names)
    deltas = [write(pair, s, clean) - write(pair, s, corrupted) for s in send]
    grid = {"bayes": [[None] * len(receive) for _ in send], "model": [[None] * len(receive) for _ in send]}
    projected = {}  # (sender, receiver) -> the per-pair projection, for the intervals
    work = [(j, rows[start:start + 16]) for j, (receiver, entry) in enumerate(receive)  # 16 senders per stacked pass
            for rows in [[i for i, s in enumerate(send) if upstream(s, receiver, entry)]]
            for start in range(0, len(rows), 16)]
    for j, chunk in tqdm(work, desc="path patching", unit="pass", leave=False, disable=None):
        receiver, entry = receive[j]
        for i, answer in zip(chunk, path_answers(pair, receiver, entry, [deltas[i] for i in chunk], corrupted)):
            scored = scorer.both(answer)
            grid["bayes"][i][j], grid["model"][i][j] = scored["bayes"], scored["model"]
            projected[send[i].label, receiver.label] = scorer.project(answer)
    best = strongest(send, receive, grid)
    intervals = scorer.baseline_intervals()
    if best is not None:
        intervals["strongest"] = scorer.cell_intervals([projected[best["sender"], best["receiver"]]])[0]
    metrics = dict(subject=pair.subject, corruption=pair.what, query=pair.query, changed=list(pair.changed),
                   n_sequences=len(pair.clean), senders=[s.label for s in send],
                   receivers=[r.label for r, _ in receive], **scorer.baselines(),
                   bayes_scale=grid["bayes"], model_scale=grid["model"], strongest=best, intervals=intervals)
    hover = [[f"model scale {P.short(m)}" for m in row] for row in grid["model"]]
    fig = P.grid_figure(grid["bayes"], metrics["senders"], metrics["receivers"],
                        f"{pair.subject}: path patching, sender -> receiver ({pair.what})<br><sup>the answer at "
                        f"position {pair.query} on the Bayes scale when only the path from the sender into the "
                        f"receiver carries the clean input</sup>" + P.interval_line(
                            ([(f"strongest {best['sender']} -> {best['receiver']}", best["bayes_scale"],
                               intervals["strongest"]["bayes_scale"])] if best else []) + P.baseline_numbers(metrics),
                            len(pair.clean)), "Bayes scale", hover)
    fig.update_layout(xaxis_title="receiver", yaxis_title="sender")
    return Result("path-patching", DEFINITION, metrics, {"senders-by-receivers": fig}, descriptions=DESCRIPTIONS)


DESCRIPTIONS = P.DESCRIPTIONS | {
    "intervals": P.INTERVALS + "; strongest: the strongest path's (chosen once, on all pairs)"}


def strongest(send, receive, grid) -> dict | None:
    """The sender -> receiver path (not into the read-out, unless it is the only receiver) that restores most, on
    the Bayes scale."""
    readout_only = all(r.kind == "logits" for r, _ in receive)
    cells = [(v, s.label, r.label) for s, row in zip(send, grid["bayes"]) for (r, _), v in zip(receive, row)
             if v is not None and (r.kind != "logits" or readout_only)]
    if not cells:
        return None
    v, s, r = max(cells)
    return dict(sender=s, receiver=r, bayes_scale=v)


RECEIVERS = Option("receivers", "auto", "the receivers: all, logits (each sender's direct effect on the answer) or "
                   "labels such as 'L1H0,L1 MLP'; auto: logits on a language model, all on a wind tunnel")
ANALYSIS = Analysis("path-patching", "the corruption's effect carried from each component directly into each later "
                    "one, scored between the two Bayes answers", DEFINITION, compute,
                    options=(*P.wind_tunnel_options(), RECEIVERS), order=23, on_language_model=on_language_model,
                    language_options=(*P.language_options(), RECEIVERS), language_definition=DEFINITION,
                    requires=("corruption",))
