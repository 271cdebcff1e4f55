"""The activation layer the analyses and the explorer share: activations by one naming function
(``models.base.act_name``), collected once per batch; the hooks that ablate heads and blocks; and one
interface over a model's inputs, whether a wind tunnel's batches or a language model's prompt sets.

    cache = collect(model, tokens, [act_name("z", 0), act_name("resid_post", 1)])
    with model.hooks(fwd_hooks=part_hooks("block", 1) + [(z_hook_name(0), ablation_hook(2, None))]):
        ...

A wind-tunnel model's query positions and posterior come from its task; a language model's come from a
prompt task (tasks/prompts/): every prompt ends where one of two answer tokens is predicted, and the
model's answer is its next-token distribution there, renormalised over the two (``prompt_set``,
``last_positions``). The numeric helpers every analysis uses live beside the data they read:
``tasks.base.entropy_bits`` and ``analyses.base.readout_r2``.
"""
from __future__ import annotations

import weakref
from contextlib import contextmanager

import torch

from tasks import prompts as prompt_tasks
from tasks.base import SEED_LIMIT, entropy_bits
from tasks.prompts import PromptSet, read_words

from models.base import act_name

from .base import AnalysisError, Option
from .intervals import bootstrap_sums

PROMPT_OPTIONS = (
    Option("prompts", "", "prompt task: " + ", ".join(prompt_tasks.NAMES) + " (auto: wind-tunnel on a wind-tunnel "
           "transformer, else two-label)"),
    Option("words", "mixed", "input words: a shipped domain (math, mixed) or a file with one word per line"),
    Option("per_shot", 50, "prompts per number of shown examples", low=1, high=100_000),
    Option("alpha", 0.9, "two-label: chance a shown label is the latent one", low=0.5, high=1.0),
    Option("seed", 0, "seed of the prompts", low=0, high=SEED_LIMIT - 1),
)


def prompt_set(lm, prompts: str, words: str, per_shot: int, alpha: float, seed: int) -> PromptSet:
    """The prompts of task ``prompts`` for ``lm``'s tokenizer (token ids when it has none)."""
    try:
        task = prompt_tasks.make(prompts or ("wind-tunnel" if lm.task is not None else "two-label"))
        built = task.build(lm, read_words(words), per_shot, alpha, seed)
    except ValueError as err:
        raise AnalysisError(str(err)) from None
    built.description = f"{task.name} prompts" + (f", {words} words" if task.uses_words else "")
    return built


def device_of(lm) -> torch.device:
    return next(lm.model.parameters()).device


def equal_length_batches(lm, prompts: PromptSet, chunk: int = 64):
    """(rows, tokens [b, T]) over the prompts, equal lengths together: no padding, so no attention mask to
    get wrong."""
    by_length: dict[int, list[int]] = {}
    for i, p in enumerate(prompts.prompts):
        by_length.setdefault(len(p.tokens), []).append(i)
    if lm.model.cfg.n_ctx < max(by_length):
        raise AnalysisError(f"the longest prompt has {max(by_length)} tokens; {lm.name} has n_ctx={lm.model.cfg.n_ctx}")
    from tqdm.auto import tqdm

    # a bar on a terminal only (disable=None), where a real language model takes minutes
    with tqdm(total=len(prompts.prompts), desc=f"{lm.name}: prompts", unit="prompt", leave=False,
              disable=None) as bar:
        for length, idx in sorted(by_length.items()):
            for start in range(0, len(idx), chunk):
                rows = idx[start:start + chunk]
                yield rows, torch.tensor([prompts.prompts[i].tokens for i in rows], device=device_of(lm))
                bar.update(len(rows))


class _Enough(Exception):
    """Raised by ``run_until``'s hooks once the forward pass has computed every activation asked of it."""


def run_until(model, tokens: torch.Tensor, names: list[str]) -> dict[str, torch.Tensor]:
    """The activations ``names`` of a forward pass over ``tokens`` (name -> tensor, keyed by the names asked),
    the pass stopped once the last of them is computed: what comes after is never run. For a language model
    that is at least the unembedding of every position (262,144 x 640 per position on Gemma 3 270M)."""
    wanted, cache = set(names), {}

    def keep(name: str):
        def hook(value, hook):
            cache[name] = value
            if len(cache) == len(wanted):
                raise _Enough
        return hook
    try:
        with model.hooks(fwd_hooks=[(name, keep(name)) for name in wanted]):
            model(tokens)
    except _Enough:
        pass
    missing = wanted - cache.keys()
    if missing:
        raise AnalysisError(f"the forward pass never ran the hook point(s) {', '.join(sorted(missing))}")
    return cache


def decode_last(model, resid: torch.Tensor) -> torch.Tensor:
    """Next-token logits [b, vocab] from the last block's output at one position per sequence, ``resid`` [b, d]:
    after its last block a causal model only normalises each position and unembeds it."""
    return model.unembed(model.ln_final(resid[:, None]))[:, 0]


_DECODES_LAST = weakref.WeakKeyDictionary()  # model -> whether decode_last gives its own logits


def decodes_last(model, tokens: torch.Tensor) -> bool:
    """Whether ``decode_last`` of the last block's output gives ``model``'s own logits (to 1e-6 in every
    probability), checked once per model on one sequence of ``tokens``: a model that does more after its last
    block (a logit soft-cap, say) or names those parts otherwise keeps its whole forward pass."""
    if model not in _DECODES_LAST:
        one = tokens[:1]
        final = act_name("resid_post", model.cfg.n_layers - 1)
        try:
            with torch.no_grad():
                short = decode_last(model, run_until(model, one, [final])[final][:, -1])
                whole = model(one)[:, -1]
            same = torch.allclose(short.double().softmax(-1), whole.double().softmax(-1), rtol=1e-4, atol=1e-6)
        except (AttributeError, RuntimeError, TypeError, AnalysisError):
            same = False
        _DECODES_LAST[model] = same
    return _DECODES_LAST[model]


def last_logits(lm, tokens: torch.Tensor, names: list[str] = ()) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The next-token logits at the last position [b, vocab] and the activations ``names`` of one forward pass
    over ``tokens``, unembedding the last position alone where that gives the model's own logits
    (``decodes_last``); the analyses read a language model's answer only there."""
    model = lm.model
    if decodes_last(model, tokens):
        final = act_name("resid_post", model.cfg.n_layers - 1)
        cache = run_until(model, tokens, [*names, final])
        return decode_last(model, cache[final][:, -1]), cache
    logits, cache = model.run_with_cache(tokens, names_filter=lambda name: name in names)
    return logits[:, -1], cache


@torch.no_grad()
def last_positions(lm, prompts: PromptSet, names: list[str]) -> tuple[torch.Tensor, dict[str, list]]:
    """The model's answer distribution renormalised over the answer tokens [n, answers] (float64), and per
    hook in ``names`` each prompt's activation at its last position (a pattern's last query row), float64."""
    n = len(prompts.prompts)
    probs = torch.zeros(n, len(prompts.answers), dtype=torch.float64)
    caught: dict[str, list] = {name: [None] * n for name in names}
    for rows, tokens in equal_length_batches(lm, prompts):
        logits, cache = last_logits(lm, tokens, names)
        probs[rows] = torch.softmax(logits[:, list(prompts.answers)].double(), -1).cpu()
        for name in names:
            # a pattern is [batch, head, query, key]: its last query row; anything else its last position
            value = cache[name][:, :, -1] if name.endswith("hook_pattern") else cache[name][:, -1]
            for r, v in zip(rows, value.double().cpu()):
                caught[name][r] = v
    return probs, caught


def calibration_terms(probs: torch.Tensor, prompts: PromptSet) -> tuple[torch.Tensor, torch.Tensor]:
    """Per prompt, |H(model) - H(Bayes predictive)| and KL(Bayes predictive || model) in bits: [n] each."""
    bayes = prompts.bayes
    gap = (entropy_bits(probs) - entropy_bits(bayes)).abs()
    kl = (bayes * (torch.log2(bayes.clamp_min(1e-300)) - torch.log2(probs.clamp_min(1e-300)))).sum(-1)
    return gap, kl


def calibration(probs: torch.Tensor, prompts: PromptSet) -> dict:
    """Entropy MAE and KL(Bayes predictive || model) in bits, over all prompts and per number shown."""
    gap, kl = calibration_terms(probs, prompts)
    shots = prompts.shots
    return dict(entropy_mae_bits=gap.mean().item(), kl_bits=kl.mean().item(),
                by_shots={int(k): dict(entropy_mae_bits=gap[shots == k].mean().item(),
                                       kl_bits=kl[shots == k].mean().item()) for k in shots.unique()})


def mean_intervals(values: torch.Tensor, prompts: PromptSet, weights: torch.Tensor | None = None) -> list:
    """95% bootstrap intervals of the mean over prompts of each column of ``values`` [n, k] (per-prompt numbers;
    ``weights`` [n, k]: a weighted mean, 0/1 to average a column over a subset of the prompts). Whole units are
    resampled (``bootstrap_sums``): the held-out sequence a wind-tunnel prompt was cut from, since the prompts of
    one sequence share its hidden truth, else each prompt. A difference of two models on the same prompts is
    paired when its per-prompt differences are the values."""
    n = len(prompts.prompts)
    values = values.double().reshape(n, -1)
    weights = torch.ones_like(values) if weights is None else weights.double().reshape(n, -1)
    k = values.shape[1]
    sums = unit_sums(torch.cat([values * weights, weights], 1), prompts)
    sums = sums[sums[:, k:].sum(1) > 0]  # a unit with no weight (no prompt counted) is no unit
    return bootstrap_sums(sums, lambda resampled: resampled[:, :k] / resampled[:, k:])


def unit_sums(columns: torch.Tensor, prompts: PromptSet) -> torch.Tensor:
    """Per-prompt ``columns`` [n, k] summed within each unit ``mean_intervals`` resamples (a wind-tunnel prompt's
    held-out sequence, else the prompt): [units, k] float64, for ``bootstrap_sums`` of any function of sums."""
    n = len(prompts.prompts)
    unit = torch.tensor(prompts.sequence if prompts.sequence is not None else range(n))
    return torch.zeros(int(unit.max()) + 1, columns.shape[1], dtype=torch.float64).index_add_(
        0, unit, columns.double().reshape(n, -1))


def n_sequences(prompts: PromptSet) -> int:
    """How many units ``mean_intervals`` resamples: held-out sequences for wind-tunnel prompts, else prompts."""
    return len(set(prompts.sequence)) if prompts.sequence is not None else len(prompts.prompts)


@contextmanager
def projected_out(lm, layer: int, direction: torch.Tensor):
    """Within the block, layer ``layer``'s residual stream (hook_resid_post) at every position has its
    component along ``direction`` removed."""
    unit = (direction / direction.norm()).to(device=device_of(lm), dtype=lm.model.cfg.dtype)

    def remove(resid, hook):
        return resid - (resid @ unit)[..., None] * unit

    with lm.model.hooks(fwd_hooks=[(act_name("resid_post", layer), remove)]):
        yield


def as_language_model(model):
    """A wind-tunnel transformer as a LanguageModel whose prompts are its own task's (``wind-tunnel``)."""
    from models.language_model import LanguageModel

    return LanguageModel(model, model.task.name, task=model.task)


def language_options(*own: Option) -> tuple[Option, ...]:
    """An analysis's options on language models: the prompt options, then its own."""
    return PROMPT_OPTIONS + own


# -- collection and hooks -------------------------------------------------------------------------

@torch.no_grad()
def collect(model, tokens: torch.Tensor, names: list[str], chunk: int = 1024,
            mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """The named activations of one forward pass over ``tokens`` (in chunks), on the CPU: name -> tensor
    [B, T, ...]; with ``mask`` [B, T] (e.g. a batch's query_mask) only those positions, [N, ...] in
    (sequence, position) order."""
    parts: dict[str, list] = {name: [] for name in names}
    for i in range(0, len(tokens), chunk):
        _, cache = model.run_with_cache(tokens[i:i + chunk], names_filter=list(names))
        for name in names:
            values = cache[name] if mask is None else cache[name][mask[i:i + chunk]]
            parts[name].append(values.cpu())
    return {name: torch.cat(values) for name, values in parts.items()}


def z_hook_name(layer: int) -> str:
    """The hook of layer ``layer``'s per-head attention outputs z [batch, pos, head, d_head]."""
    return act_name("z", layer)


@torch.no_grad()
def mean_z(model, tokens: torch.Tensor, chunk: int = 1024) -> list[torch.Tensor]:
    """Per layer, the [n_heads, d_head] mean of z over all sequences and positions of ``tokens``."""
    names = [z_hook_name(l) for l in range(model.cfg.n_layers)]
    sums, count = [None] * len(names), 0
    for i in range(0, len(tokens), chunk):
        _, cache = model.run_with_cache(tokens[i:i + chunk], names_filter=names)
        for l, name in enumerate(names):
            # float64 running sums: the mean must not depend on how the batch is chunked
            s = cache[name].double().sum((0, 1))
            sums[l] = s if sums[l] is None else sums[l] + s
        count += cache[names[0]].shape[0] * cache[names[0]].shape[1]
    return [s / count for s in sums]


def ablation_hook(head: int, replacement: torch.Tensor | None):
    """A hook_z hook that overwrites one head's z with 0 (``replacement`` None) or a fixed vector."""
    def hook(z, hook):
        z = z.clone()  # do not write into a tensor another hook or the cache may hold
        if replacement is None:
            z[:, :, head] = 0
        else:
            z[:, :, head] = replacement.to(z.dtype)
        return z
    return hook


SUBLAYER_OUT = {"attention_only": "attn_out", "mlp_only": "mlp_out"}  # TransformerLens's sublayer outputs


def skip_block_hooks(layer: int) -> list:
    """Hooks that make block ``layer`` an identity: resid_post := resid_pre of the same forward pass."""
    seen = {}

    def capture(resid_pre, hook):
        seen["resid_pre"] = resid_pre  # the block never writes into its input, so a reference is enough
        return resid_pre

    def replace(resid_post, hook):
        return seen.pop("resid_pre")  # pop: a stale input from an earlier chunk can never be reused

    return [(act_name("resid_pre", layer), capture), (act_name("resid_post", layer), replace)]


def zero_hooks(name: str) -> list:
    return [(name, lambda x, hook: x.new_zeros(x.shape))]


def part_hooks(part: str, layer: int) -> list:
    """Hooks that remove one part of block ``layer``: the whole block, or its attention or MLP output."""
    if part == "block":
        return skip_block_hooks(layer)
    return zero_hooks(act_name(SUBLAYER_OUT[part], layer))


def needed_hooks(part: str, layer: int) -> list[str]:
    """The hook names ``part_hooks`` needs (a model without them cannot have that part removed)."""
    return [name for name, _ in part_hooks(part, layer)]

