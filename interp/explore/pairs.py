"""Where the explorers' activation patching (``patching``) takes its pair of inputs from, a *source* each:
``WindTunnelPairs`` takes the sequence shown as the clean input and the task's corruption (chosen in the panel)
makes the corrupted one; ``LanguagePairs`` draws prompts of a prompt task (two-label, coin) with the explorer's seed
and flips one shown observation. A source also says which controls its pair is read from (``states``), which
controls redraw a map already drawn (``follows``), and whether its job lets the other views run between its steps
(``background``).
"""
from __future__ import annotations

import copy
from contextlib import contextmanager

import torch
from dash import State

from analyses import interventions as P
from tasks import ConfigError

from ..errors import UserError
from .hooks import CONTROLS, ablated, chosen_ablations

CORRUPTION_SEED = 0  # which corrupted value or symbol is drawn: fixed, so a view is reproducible
LANGUAGE_PROMPTS = 8  # prompts per number of shown examples drawn for a language model's pair
LANGUAGE_ALPHA = 0.9  # two-label: the chance a shown label is the latent one (the analysis's default)


class WindTunnelPairs:
    """The wind-tunnel explorer's pairs: the sequence shown (at the step slider's checkpoint), corrupted by the
    task's corruption ``kind`` at ``which``."""

    which = "which (pair, observation, slot or output; empty: the task's default)"

    def __init__(self, state):
        self.state, self.lock, self.waits = state, state.lock, state.waits
        self.kinds, self.subject = list(state.task.corruptions), state.task.name
        self.states = (State("step", "value"), State("sequence", "data"))
        self.follows = CONTROLS  # the ablation controls: a map already drawn is drawn again for the model as ablated
        # a small model's map takes seconds: the press waits for it (its progress and cancel shown meanwhile); the job
        # patches a copy of the model, its ablation hooks on the copy, so the other views are served meanwhile
        self.background = False
        self.estimate_first = False  # every cell of the map measured (seconds on a wind tunnel)

    @contextmanager
    def applied(self, index, sequence, heads=None, blocks=None, mode=None):
        """The job's own copy of the model at ``index``, as the ablation controls leave it, while a pair is patched
        (a context): copied under the explorer's lock, which the job then does not hold (a wind tunnel's model is
        small; the views' model never carries the job's hooks)."""
        with self.lock:
            model = copy.deepcopy(self.state.model(index))
        with ablated(self.state, index, chosen_ablations(heads or [], blocks or [], mode or "zero"), model):
            yield model

    def answer_names(self, classes: list[int]) -> list[str]:
        """The task's names of answer classes (v2, s0, ...): the tokens they are read from, where it has them."""
        task, offset = self.state.task, getattr(self.state.task, "answer_token_offset", None)
        if offset is None:
            return [f"class {c}" for c in classes]
        return task.token_names(torch.tensor(classes) + offset)

    def pair(self, kind: str, which: int | None, index: int, sequence: dict, model=None) -> P.Pair:
        ex = self.state
        n, whole = len(sequence["tokens"]), ex.task.seq_len
        if n != whole:  # a task's corruptions change a position of a whole sequence (a typed prefix may lack it)
            raise UserError(f"the {ex.task.name} corruption changes a whole sequence of {whole} tokens, and this one has "
                            f"{n}; patch a full sequence (sample one by seed, or type all of it)")
        with self.lock:  # the explorer's sequences are shared with the views
            batch = ex.batch(sequence["tokens"], sequence.get("seed"))
        try:
            c = ex.task.corrupt(batch, torch.Generator().manual_seed(CORRUPTION_SEED), kind or "", which)
        except ConfigError as err:
            raise UserError(str(err)) from None
        return P.pair_of(ex.model(index) if model is None else model, c)

    def names(self, tokens: torch.Tensor) -> list[str]:
        return self.state.task.position_names(tokens.cpu())


class LanguagePairs:
    """The language-model explorer's pairs: prompts of prompt task ``kind`` drawn with the explorer's seed
    (``LANGUAGE_PROMPTS`` per number of shown examples, those with the most patched together), shown
    observation ``which`` flipped (``analyses.interventions.language_pair``, as ``interp run activation-patching
    --model``)."""

    which = "which shown observation to flip (empty: the first)"

    def __init__(self, state):
        from tasks import prompts as prompt_tasks

        self.lm, self.lock, self.waits = state.lm, state.lock, state.waits
        self.kinds = [n for n in prompt_tasks.NAMES if prompt_tasks.make(n).predictive([0], LANGUAGE_ALPHA) is not None]
        self.subject = state.lm.name
        self.states = (State("seed", "value"),)
        self.follows = ()  # no ablation controls in the language-model explorer
        # minutes on a real language model: the press answers at once, the map arrives when the job is done, and
        # between two steps the job lets the other views (a second tab's too) run on the model (nothing is left on
        # it between steps: the patch hooks live for one step's runs)
        self.background = True
        # every cell of its map estimated to first order, the strongest measured (``lm_patching.estimated_map``): the
        # whole map measured is hours on a CPU
        self.estimate_first = True
        self.model = state.lm.model

    def sites(self) -> list:
        """The sites the map may draw (``lm_patching.default_sites``, the heads of a layer picked)."""
        return P.sites(self.model)

    @contextmanager
    def applied(self, *state):
        """The model, held for the job (between two sites the job lets waiting views in: see ``background``)."""
        with self.lock:
            yield None

    def answer_names(self, classes: list[int]) -> list[str]:
        return [f"class {c}" for c in classes]

    def pair(self, kind: str, which: int | None, seed, model=None) -> P.Pair:
        from tasks.base import SEED_RANGE, is_seed

        seed = 0 if seed is None else seed
        if not is_seed(seed):
            raise UserError(f"the seed must be {SEED_RANGE}, got {seed!r}")
        return P.language_pair(self.lm, kind, "mixed", LANGUAGE_PROMPTS, LANGUAGE_ALPHA, seed, which or 0)

    def names(self, tokens: torch.Tensor) -> list[str]:
        return [self.lm.tokenizer.decode([t]) for t in tokens.tolist()]
