"""The language-model explorer's state (``LanguageExplorer``), which every view of it receives: the model, the
prompt the page opens on, the lock the views and a background job take turns on, and the model's run on the prompt
shown (``run``: its logits and the attention patterns and residual streams the views draw).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from analyses import activations
from models.base import act_name

from ..errors import UserError
from ..waits import Waits
from .jobs import TakingTurns

MAX_TOKENS = 256  # a typed prompt's length limit: the views draw T x T patterns for every head


def token_text(piece: str) -> str:
    """A token's text as an axis label: spaces and line breaks made visible."""
    return piece.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥") or "∅"


@dataclass(frozen=True, eq=False)
class LanguageExplorer:
    """One language model (``models.language_model.LanguageModel``), shown on one prompt at a time.

    Views and a background job (patching) take turns on the model (``lock``): a view waits at most one of the job's
    steps. ``cache`` keeps the model's run on the last prompt only (a long prompt's patterns are large)."""

    lm: object
    initial: str = "The capital of France is"  # the prompt the page opens on
    waits: Waits = field(default_factory=Waits, repr=False)  # what a slow view waits on, in the page and terminal
    lock: TakingTurns = field(init=False, repr=False, default_factory=TakingTurns)
    cache: dict = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self):
        if self.lm.tokenizer is None:
            raise UserError(f"{self.lm.name} has no tokenizer: the explorer shows prompts as text")

    def encode(self, text: str) -> list[int]:
        ids = self.lm.tokenizer.encode(text, add_special_tokens=False)
        if not ids:
            raise UserError("the prompt is empty: type some text")
        if len(ids) > min(MAX_TOKENS, self.lm.model.cfg.n_ctx):
            raise UserError(f"the prompt is {len(ids)} tokens; the explorer shows at most "
                            f"{min(MAX_TOKENS, self.lm.model.cfg.n_ctx)}")
        return ids

    def labels(self, ids: list[int]) -> list[str]:
        """One axis label per position, unique (a category axis would merge repeated tokens)."""
        return [f"{token_text(self.lm.tokenizer.decode([t]))} ·{i}" for i, t in enumerate(ids)]

    @torch.no_grad()
    def run(self, ids: list[int]) -> dict:
        """The model on the prompt ``ids``: its logits, and per layer its attention patterns and residual stream."""
        key = tuple(ids)
        found = self.cache.get(key)  # (another thread may replace the cache meanwhile: read it once)
        if found is None:
            model = self.lm.model
            names = [act_name(kind, l) for l in range(model.cfg.n_layers) for kind in ("pattern", "resid_post")]
            with self.lock, self.waits.on(f"{self.lm.name} on the {len(ids)} tokens of the prompt"):
                logits, cache = model.run_with_cache(torch.tensor([ids], device=activations.device_of(self.lm)),
                                                     names_filter=lambda name: name in names)
            found = dict(logits=logits[0].cpu(), cache={n: cache[n][0].cpu() for n in names})
            self.cache.clear()
            self.cache[key] = found
        return found
