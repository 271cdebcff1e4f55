"""What the analyses share on a language model: the prompt options, the prompt set, and one batched
forward pass that keeps each prompt's last position (where the answer is predicted).

A wind-tunnel model's query positions and posterior come from its task; a language model's come from a
prompt task (tasks/prompts/): every prompt ends where one of two answer tokens is predicted, and the
model's answer is its next-token distribution there, renormalised over the two.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

from tasks import prompts as prompt_tasks
from tasks.base import SEED_LIMIT, entropy_bits
from tasks.prompts import PromptSet, read_words

from models.base import act_name

from .base import AnalysisError, Option

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


@torch.no_grad()
def last_positions(lm, prompts: PromptSet, names: list[str]) -> tuple[torch.Tensor, dict[str, list]]:
    """The model's answer distribution renormalised over the answer tokens [n, answers] (float64), and per
    hook in ``names`` each prompt's activation at its last position (a pattern's last query row), float64."""
    n = len(prompts.prompts)
    probs = torch.zeros(n, len(prompts.answers), dtype=torch.float64)
    caught: dict[str, list] = {name: [None] * n for name in names}
    for rows, tokens in equal_length_batches(lm, prompts):
        logits, cache = lm.model.run_with_cache(tokens, names_filter=lambda name: name in names)
        probs[rows] = torch.softmax(logits[:, -1, list(prompts.answers)].double(), -1).cpu()
        for name in names:
            # a pattern is [batch, head, query, key]: its last query row; anything else its last position
            value = cache[name][:, :, -1] if name.endswith("hook_pattern") else cache[name][:, -1]
            for r, v in zip(rows, value.double().cpu()):
                caught[name][r] = v
    return probs, caught


def calibration(probs: torch.Tensor, prompts: PromptSet) -> dict:
    """Entropy MAE and KL(Bayes predictive || model) in bits, over all prompts and per number shown."""
    bayes = prompts.bayes
    gap = (entropy_bits(probs) - entropy_bits(bayes)).abs()
    kl = (bayes * (torch.log2(bayes.clamp_min(1e-300)) - torch.log2(probs.clamp_min(1e-300)))).sum(-1)
    shots = prompts.shots
    return dict(entropy_mae_bits=gap.mean().item(), kl_bits=kl.mean().item(),
                by_shots={int(k): dict(entropy_mae_bits=gap[shots == k].mean().item(),
                                       kl_bits=kl[shots == k].mean().item()) for k in shots.unique()})


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
