"""What the causal interventions share: the clean/corrupted pair, the normalised metric, the patchable sites.

A pair is two batches that differ in one known part of the hypothesis (``Task.corrupt``; on a language
model, one shown observation of a prompt task flipped), each with its exact Bayes answer at one query
position. A model's answer there is a vector a: its distribution over the answer classes (a Gaussian
task: its predictive mean). With Delta = b_clean - b_corrupted the difference of the two Bayes answers,
an answer is placed between two references by

    normalised(a) = sum_rows <a - ref, Delta> / sum_rows <target - ref, Delta>

(sums over the batch before dividing, so a row whose corruption barely moves Bayes cannot blow it up):
``bayes`` takes ref, target = the corrupted and clean Bayes answers (1: the answer Bayes gives the clean
input, 0: the one it gives the corrupted input), ``model`` takes the model's own answers on the two inputs
(1 exactly when the model's clean answer is restored). The metric is linear in a, so attribution patching's
first-order estimate of it is exact to first order.

Sites are the activations an intervention may replace, by stable hook names, on every architecture: the
residual stream before each block and after the last; per layer the attention heads' outputs z
(``blocks.l.attn.hook_z``, one head), the attention and MLP outputs (transformers), or the mixer output
(``blocks.l.hook_mixer_out``); the recurrent state (Mamba ``hook_h``; the LSTM's hidden and cell states
together), whose replacement the recurrence carries on; and a token shift's taps (the term
W_shift[j-1] x_{t-j} that tap j adds at position t).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import plotly.graph_objects as go
import torch

from models.base import act_name
from tasks import ConfigError

from .activations import PROMPT_OPTIONS, decode_last, decodes_last, device_of, prompt_set, run_until
from .base import AnalysisError, Option, held_out_batch, is_language_model, n_option, seed_option
from .intervals import bootstrap_sums

ALL = "all"  # the column of a site patched at every position at once


def wind_tunnel_options(n: int = 100) -> tuple[Option, ...]:
    return (Option("corrupt", "", "the task's corruption (auto: its first; the task's `corruptions`)"),
            Option("index", -1, "which pair, observation, table slot or output to corrupt (-1: the task's default)",
                   low=-1, high=10 ** 6),
            n_option(n), seed_option())


POSITIONS = Option("positions", "auto", "auto (around the change and the query) or all")  # the patching maps' columns


def language_options() -> tuple[Option, ...]:
    return PROMPT_OPTIONS + (Option("index", 0, "which shown observation to flip", low=0, high=10 ** 6),)


@dataclass
class Pair:
    model: torch.nn.Module  # the hooked model (a language model's TransformerBridge)
    clean: torch.Tensor  # inputs [B, T] (continuous tasks [B, T, F])
    corrupted: torch.Tensor
    query: int  # the position whose answer is compared
    changed: tuple[int, ...]  # the positions whose inputs differ
    bayes_clean: torch.Tensor  # [B, K] float64: the exact answers at the query
    bayes_corrupted: torch.Tensor
    what: str  # what the corruption changed
    labels: list[str]  # a name per position (row 0's clean tokens)
    read: Callable[[torch.Tensor], torch.Tensor]  # model output -> answer vector [B, K], float64
    subject: str  # the task's (or model's) name, for titles
    kind: str  # "probabilities" or "mean": what the answer vector is
    answer_index: Callable[[torch.Tensor], torch.Tensor] | None = None  # output vocab -> answer classes
    last_only: bool = False  # a language model read at its last position, unembedded there alone (``output``)

    @property
    def delta(self) -> torch.Tensor:
        return self.bayes_clean - self.bayes_corrupted

    def answer(self, tokens: torch.Tensor, hooks=()) -> torch.Tensor:
        with torch.no_grad(), self.model.hooks(fwd_hooks=list(hooks)):
            return self.read(self.output(tokens))

    def output(self, tokens: torch.Tensor) -> torch.Tensor:
        """The model's output on ``tokens`` for ``read``; with ``last_only``, the last position's logits alone
        [B, 1, vocab] (``activations.decode_last``): every other position's unembedding is most of the pass on a
        large vocabulary (262,144 tokens on Gemma 3), and the answer never reads it. Hooks already set run."""
        if not self.last_only:
            return self.model(tokens)
        final = act_name("resid_post", n_layers(self.model) - 1)
        return decode_last(self.model, run_until(self.model, tokens, [final])[final][:, -1])[:, None]

    def positions(self, which: str) -> list[int]:
        """Every position (``all``), or (``auto``) from just before the first change to the end when that is
        at most 48 positions, else a few positions around each change and before the query."""
        T = self.clean.shape[1]
        lo = max(0, min(self.changed) - 2)
        if which == ALL or T - lo <= 48:
            return list(range(0 if which == ALL else lo, T))
        near = {p for c in self.changed for p in range(c - 3, c + 4)} | set(range(self.query - 3, self.query + 1))
        return sorted(p for p in near if 0 <= p < T)


def between(a: torch.Tensor, ref: torch.Tensor, target: torch.Tensor, delta: torch.Tensor) -> float | None:
    """sum <a - ref, delta> / sum <target - ref, delta> over rows; None when the denominator vanishes."""
    den = ((target - ref) * delta).sum().item()
    if vanishes(den, delta):
        return None
    return ((a - ref) * delta).sum().item() / den


def vanishes(den: float, delta: torch.Tensor) -> bool:
    """Whether a score's denominator is float noise against the Bayes change itself."""
    return abs(den) <= 1e-9 * max((delta * delta).sum().item(), 1e-30)


INTERVALS = ("95% percentile bootstrap intervals resampling the clean/corrupted pairs (2,000 resamples, seeded): a "
             "score is a ratio of sums over the pairs, so each resample sums numerator and denominator anew; a "
             "comparison (gain: a patched answer minus the unpatched corrupted one on the same scale) resamples the "
             "same pairs for both, and differs is true when its interval excludes 0")
DESCRIPTIONS = {  # the keys every patching analysis shares (``Scorer.baselines``), for its Result
    "clean_on_bayes_scale": "the model's own clean answer on the Bayes scale (1 = Bayes's clean answer)",
    "corrupted_on_bayes_scale": "the model's own corrupted answer on the Bayes scale (0 = Bayes's corrupted answer)",
    "model_move_on_bayes_scale": "the model's clean minus its corrupted answer on the Bayes scale (Bayes moves 1)",
    "n_sequences": "clean/corrupted pairs every score sums over",
    "intervals": INTERVALS,
}


class Scorer:
    """The model's answers on the clean and corrupted inputs and the two normalisations of any other answer."""

    def __init__(self, pair: Pair):
        self.pair = pair
        self.clean = pair.answer(pair.clean)
        self.corrupted = pair.answer(pair.corrupted)
        # (reference, target) projections per scale: a score is sum(p - ref) / sum(target - ref) over the rows
        self.refs = {"bayes": (self.project(pair.bayes_corrupted), self.project(pair.bayes_clean)),
                     "model": (self.project(self.corrupted), self.project(self.clean))}

    def project(self, a: torch.Tensor) -> torch.Tensor:
        """<a, Delta> per row [B] (float64, CPU): all a row adds to any score of the answer ``a``, so an interval
        needs only these, not the answers."""
        return (a.double() * self.pair.delta.double()).sum(-1).cpu()

    def intervals(self, scale: str, projected: list[torch.Tensor], minus: list[torch.Tensor] | None = None) -> list:
        """The 95% bootstrap interval over pairs of the score on ``scale`` of each answer in ``projected`` (per-row
        projections, ``project``); with ``minus`` (one projection each, on the same rows), of the paired difference
        score(answer) - score(minus). None for each when the scale is undefined (its denominator vanishes)."""
        ref, target = self.refs[scale]
        if not projected or vanishes((target - ref).sum().item(), self.pair.delta):
            return [None] * len(projected)
        minus = minus or [ref] * len(projected)
        columns = torch.stack([p - m for p, m in zip(projected, minus)] + [target - ref], 1)
        return bootstrap_sums(columns, lambda sums: sums[:, :-1] / sums[:, -1:])

    def interval(self, scale: str, projected: torch.Tensor, minus: torch.Tensor | None = None) -> list[float] | None:
        return self.intervals(scale, [projected], None if minus is None else [minus])[0]

    def cell_intervals(self, projected: list[torch.Tensor]) -> list[dict]:
        """For chosen cells (each the patched answer's projection): the interval of the score on both scales and the
        paired gain over the unpatched corrupted answer on the Bayes scale, differs when that excludes 0."""
        both = {scale: self.intervals(scale, projected) for scale in ("bayes", "model")}
        gains = self.intervals("bayes", projected, [self.refs["model"][0]] * len(projected))
        return [dict(bayes_scale=b, model_scale=m, gain=g, differs=differs(g))
                for b, m, g in zip(both["bayes"], both["model"], gains)]

    def bayes(self, a: torch.Tensor) -> float | None:
        p = self.pair
        return between(a, p.bayes_corrupted, p.bayes_clean, p.delta)

    def model(self, a: torch.Tensor) -> float | None:
        return between(a, self.corrupted, self.clean, self.pair.delta)

    def both(self, a: torch.Tensor) -> dict:
        return dict(bayes=self.bayes(a), model=self.model(a))

    def baselines(self) -> dict:
        """Where the model's own clean and corrupted answers sit on the Bayes scale (1 and 0 for Bayes itself)."""
        clean, corrupted = self.bayes(self.clean), self.bayes(self.corrupted)
        return dict(clean_on_bayes_scale=clean, corrupted_on_bayes_scale=corrupted,
                    model_move_on_bayes_scale=None if clean is None or corrupted is None else clean - corrupted,
                    model_moves=self.model(self.clean) is not None)

    def baseline_intervals(self) -> dict:
        """The intervals of ``baselines``' two scores, and the paired interval of the model's own move (clean minus
        corrupted answer) on the Bayes scale: differs says the model moves its answer beyond the noise."""
        clean, corrupted = self.refs["model"][1], self.refs["model"][0]
        move = self.interval("bayes", clean, corrupted)
        return dict(clean_on_bayes_scale=self.interval("bayes", clean),
                    corrupted_on_bayes_scale=self.interval("bayes", corrupted),
                    model_move_on_bayes_scale=move, model_move_differs=differs(move))


def differs(interval: list[float] | None) -> bool | None:
    """Whether a paired difference's interval excludes 0 (None: no interval)."""
    return None if interval is None else bool(interval[0] > 0 or interval[1] < 0)


def wind_tunnel_pair(model, corrupt: str, index: int, n: int, seed: int) -> Pair:
    batch = held_out_batch(model.task, n, seed)
    try:
        c = model.task.corrupt(batch, torch.Generator().manual_seed(seed), corrupt, None if index < 0 else index)
    except ConfigError as err:
        raise AnalysisError(str(err)) from None
    return pair_of(model, c)


def pair_of(model, c) -> Pair:
    """The Pair of a wind-tunnel model and one of its task's corruptions (``tasks.base.Corruption``)."""
    task = model.task
    device = next(model.parameters()).device
    q, length = c.query, c.clean.tokens.shape[1]
    if not 0 <= q < length:  # a typed sequence shorter than the task's: the answer's position is not in it
        raise AnalysisError(f"the {task.name} corruption reads its answer at position {q}, beyond this sequence of "
                            f"{length} tokens; patch a full sequence (sample one by seed, or type all of it)")
    if task.continuous:
        bayes = [b.posterior_mean[:, q, None].double() for b in (c.clean, c.corrupted)]
        read = lambda out: out[:, q, :1].double()  # noqa: E731  (the Gaussian head's mean)
        index_of = None
    else:
        bayes = [b.posterior[:, q].double() for b in (c.clean, c.corrupted)]
        read = lambda out: task.answer_logits(out[:, q]).double().softmax(-1)  # noqa: E731
        index_of = task.answer_logits
    names = task.token_names(c.clean.tokens[0])
    labels = [f"{t} {name}" for t, name in enumerate(names)]
    return Pair(model, c.clean.tokens.to(device), c.corrupted.tokens.to(device), q, c.changed,
                *(b.to(device) for b in bayes), c.what, labels, read, task.name,
                "mean" if task.continuous else "probabilities", index_of)


def language_pair(lm, prompts: str, words: str, per_shot: int, alpha: float, seed: int, index: int) -> Pair:
    """The prompts with the most shown observations; the corrupted copy flips shown observation ``index``."""
    from tasks import prompts as prompt_tasks

    built = prompt_set(lm, prompts, words, per_shot, alpha, seed)
    task = prompt_tasks.make(prompts or ("wind-tunnel" if lm.task is not None else "two-label"))
    shots = max(len(p.shown) for p in built.prompts)
    if task.predictive([0] * shots, alpha) is None or shots == 0:
        raise AnalysisError(f"{task.name} prompts declare no corruption (a shown observation to flip); use two-label "
                            f"or coin")
    if not index < shots:
        raise AnalysisError(f"--index must be below {shots}, the shown observations of the longest prompts")
    answers = list(built.answers)
    rows, clean, corrupted, b_clean, b_corrupted = [], [], [], [], []
    for p in built.prompts:
        where = [i for i, t in enumerate(p.tokens) if t in answers]
        if len(p.shown) != shots or len(where) != shots:  # another length, or an input that is an answer token
            continue
        flipped = list(p.shown)
        flipped[index] = 1 - flipped[index]
        tokens = list(p.tokens)
        tokens[where[index]] = answers[flipped[index]]
        rows.append(where[index])
        clean.append(p.tokens)
        corrupted.append(tokens)
        b_clean.append(p.bayes)
        b_corrupted.append(task.predictive(flipped, alpha))
    if not clean or len(set(rows)) != 1 or len({len(t) for t in clean}) != 1:
        raise AnalysisError("the prompts with the most shown observations differ in layout; no aligned pair to patch")
    device = device_of(lm)
    names = ([lm.tokenizer.decode([t]) for t in clean[0]] if lm.tokenizer is not None else [str(t) for t in clean[0]])
    labels = [f"{t} {name.strip()}" for t, name in enumerate(names)]
    to = lambda x: torch.tensor(x, device=device)  # noqa: E731
    return Pair(lm.model, to(clean), to(corrupted), len(clean[0]) - 1, (rows[0],),
                torch.stack(b_clean).to(device), torch.stack(b_corrupted).to(device),
                f"shown observation {index} flipped", labels,
                lambda out: out[:, -1, answers].double().softmax(-1), lm.name, "probabilities",
                lambda logits: logits[..., answers], last_only=decodes_last(lm.model, to(clean)))


def make_pair(model, options: dict) -> Pair:
    if is_language_model(model):
        return language_pair(model, options["prompts"], options["words"], options["per_shot"], options["alpha"],
                             options["seed"], options["index"])
    return wind_tunnel_pair(model, options["corrupt"], options["index"], options["n"], options["seed"])


# ---------------------------------------------------------------------------------------------- sites

@dataclass(frozen=True)
class Site:
    label: str
    hooks: tuple[str, ...]  # replaced together (the LSTM's hidden and cell states)
    kind: str  # resid, head, attn, mlp_out, mixer, state, tap
    layer: int  # -1: before the first block
    head: int | None = None  # a head's index (axis 2 of hook_z); a tap's j

    @property
    def stage(self) -> int:
        """Order along the residual stream: embeddings 0; block l's attention (or mixer) 2l+1, its MLP 2l+2."""
        if self.kind in ("tap", "resid") and self.layer < 0:
            return 0
        return 2 * self.layer + (2 if self.kind == "mlp_out" else 1)


def has(model, name: str) -> bool:
    return name in model.hook_dict


def n_layers(model) -> int:
    return model.cfg.n_layers


def shift_width(model) -> int:
    shift = getattr(model, "token_shift", None)
    return 0 if shift is None or not has(model, "hook_token_shift") else shift.W_shift.shape[0]


def sites(model, states: bool = True) -> list[Site]:
    """Every patchable site of ``model`` in residual-stream order (``states``: include recurrent states)."""
    out = [Site(f"shift tap {j}", ("hook_token_shift",), "tap", -1, j) for j in range(1, shift_width(model) + 1)]
    L = n_layers(model)
    for l in range(L):
        out.append(Site(f"resid before L{l}", (act_name("resid_pre", l),), "resid", l if l else -1))
        if has(model, act_name("z", l)):
            out += [Site(f"L{l}H{h}", (act_name("z", l),), "head", l, h) for h in range(model.cfg.n_heads)]
            out.append(Site(f"L{l} attention", (act_name("attn_out", l),), "attn", l))
            if has(model, act_name("mlp_out", l)):
                out.append(Site(f"L{l} MLP", (act_name("mlp_out", l),), "mlp_out", l))
            continue
        if states and has(model, act_name("mixer.h", l)):
            out.append(Site(f"L{l} state h", (act_name("mixer.h", l),), "state", l))
        if states and has(model, act_name("mixer.hidden", l)) and has(model, act_name("mixer.cell", l)):
            out.append(Site(f"L{l} state (h, c)", (act_name("mixer.hidden", l), act_name("mixer.cell", l)), "state", l))
        out.append(Site(f"L{l} mixer", (act_name("mixer_out", l),), "mixer", l))
    out.append(Site(f"resid after L{L - 1}", (act_name("resid_post", L - 1),), "resid", L))
    return out


def cache_names(model, chosen: list[Site]) -> list[str]:
    names = sorted({h for s in chosen for h in s.hooks})
    if any(s.kind == "tap" for s in chosen):
        names += [n for n in ("hook_embed", "hook_pos_embed") if has(model, n)]
    return names


def run_cache(pair: Pair, tokens: torch.Tensor, names: list[str]) -> dict[str, torch.Tensor]:
    """The activations ``names`` of a pass over ``tokens``; a ``last_only`` pair's pass stops after the last of them."""
    with torch.no_grad():
        if pair.last_only:
            return run_until(pair.model, tokens, names)
        _, cache = pair.model.run_with_cache(tokens, names_filter=names)
    return {name: cache[name] for name in names}


def tap_input(cache: dict) -> torch.Tensor:
    """The token shift's input (the embeddings, plus learned positions where there are any)."""
    x = cache["hook_embed"]
    return x + cache["hook_pos_embed"] if "hook_pos_embed" in cache else x


def tap_term(model, cache: dict, j: int) -> torch.Tensor:
    """Tap j's term W_shift[j-1] x_{t-j} at every position [B, T, d] (zero where t < j)."""
    x = tap_input(cache)
    shifted = torch.nn.functional.pad(x, (0, 0, j, 0))[:, :x.shape[1]]
    return model.token_shift.W_shift[j - 1].to(x.dtype) * shifted


def patch_hooks(pair: Pair, site: Site, positions: list[int | None], source: dict, into: dict) -> list:
    """Hooks for a run on ``len(positions)`` stacked copies of the batch: copy k gets ``source``'s (the clean
    run's) activation of ``site`` at ``positions[k]`` (None: at every position) in place of its own, whose
    values are ``into`` (the corrupted run's; taps add the difference of their terms)."""
    B = len(pair.clean)
    wheres = [slice(None) if p is None else p for p in positions]
    if site.kind == "tap":
        term = tap_term(pair.model, source, site.head) - tap_term(pair.model, into, site.head)

        def add(act, hook):
            act = act.clone()
            for k, where in enumerate(wheres):
                act[k * B:(k + 1) * B, where] += term[:, where].to(act.dtype)
            return act
        return [(site.hooks[0], add)]

    def make(name):
        value = source[name]

        def put(act, hook):
            act = act.clone()
            for k, where in enumerate(wheres):
                index = (slice(k * B, (k + 1) * B), where) + (() if site.head is None else (site.head,))
                act[index] = value[(slice(None), where) + index[2:]].to(act.dtype)
            return act
        return put
    return [(name, make(name)) for name in site.hooks]


TOKEN_BUDGET = 1 << 16  # positions per stacked forward pass; a recurrent state's is per its E * N numbers


def patched_answers(pair: Pair, site: Site, positions: list[int | None], source: dict, into: dict) -> list:
    """The answer [B, K] with ``site`` patched at each of ``positions`` in turn, from stacked forward passes."""
    B, T = pair.clean.shape[:2]
    per = TOKEN_BUDGET // (B * T) if site.kind != "state" else TOKEN_BUDGET // (B * T * 64)
    per = max(1, per)
    out = []
    for i in range(0, len(positions), per):
        chunk = positions[i:i + per]
        tokens = pair.corrupted.repeat(len(chunk), *[1] * (pair.corrupted.dim() - 1))
        answers = pair.answer(tokens, patch_hooks(pair, site, chunk, source, into))
        out += list(answers.split(B))
    return out


# ---------------------------------------------------------------------------------------------- figures

def grid_figure(values: list[list[float | None]], rows: list[str], cols: list[str], title: str, colorbar: str,
                hover: list[list[str]] | None = None, zmax: float = 1.0) -> go.Figure:
    """A site x position heat map of normalised values, red toward the clean answer (1), blue beyond the
    corrupted one (below 0)."""
    z = np.array([[np.nan if v is None else v for v in row] for row in values], dtype=float)
    finite = np.abs(z[np.isfinite(z)])
    span = max(zmax, float(finite.max()) if finite.size else zmax)
    fig = go.Figure(go.Heatmap(
        z=z, x=cols, y=rows, colorscale="RdBu_r", zmid=0, zmin=-span, zmax=span, text=hover,
        colorbar=dict(title=colorbar),
        hovertemplate="%{y} at %{x}<br>%{z:.3f}" + ("<br>%{text}" if hover else "") + "<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="position (token)", yaxis_autorange="reversed",
                      width=min(1400, 260 + 26 * len(cols)), height=min(1400, 220 + 22 * len(rows)),
                      xaxis=dict(type="category", tickangle=-60, dtick=1), yaxis=dict(type="category"))  # every label
    return fig


def patching_map(pair, chosen, where, grid: dict, baselines: dict, scale: str, title: str) -> go.Figure:
    """activation patching's site x position map on ``scale`` ("bayes": 1 the clean input's Bayes answer, 0 the
    corrupted one's; "model": the fraction of the model's own effect restored), the other scale in the hover, and
    where the model's unpatched answers sit on the Bayes scale in the title's second line."""
    other = "model" if scale == "bayes" else "bayes"
    cols = [pair.labels[p] for p in where] + ["all positions"]
    hover = [[f"{other} scale {short(v)}" for v in row] for row in grid[other]]
    spans = baselines.get("intervals", {})  # an analysis's metrics have them, the explorer's one sequence not
    base = (f"unpatched, the model's clean answer scores {short(baselines['clean_on_bayes_scale'])}"
            f"{span(spans.get('clean_on_bayes_scale'))} on the Bayes scale and its corrupted one "
            f"{short(baselines['corrupted_on_bayes_scale'])}{span(spans.get('corrupted_on_bayes_scale'))}"
            + (f" (95% intervals over {len(pair.clean)} pairs)" if spans else ""))
    return grid_figure(grid[scale], [s.label for s in chosen], cols, f"{title}<br><sup>{base}</sup>",
                       "Bayes scale" if scale == "bayes" else "effect restored", hover)


def short(x: float | None) -> str:
    """Three decimals; a value that rounds to zero is shown as 0.000, never -0.000."""
    if x is None or x != x:  # None or NaN: nothing to show
        return "–"
    text = f"{x:.3f}"
    return "0.000" if text == "-0.000" else text


def interval_line(numbers: list[tuple[str, float | None, list[float] | None]], n: int) -> str:
    """A title's line of (name, number, its 95% interval), and how many pairs the intervals are over."""
    text = "; ".join(f"{name} {short(value)}{span(interval)}" for name, value, interval in numbers)
    return f"<br><sup>{text} (95% intervals over {n} pairs)</sup>"


def baseline_numbers(metrics: dict) -> list[tuple[str, float | None, list[float] | None]]:
    """``interval_line``'s entries for where the model's own answers sit on the Bayes scale."""
    return [(f"the model's {which} answer", metrics[f"{which}_on_bayes_scale"],
             metrics["intervals"][f"{which}_on_bayes_scale"]) for which in ("clean", "corrupted")]


def span(interval: list[float] | None) -> str:
    """ " [low, high]" for a title, or nothing."""
    return "" if interval is None else f" [{interval[0]:.3f}, {interval[1]:.3f}]"
