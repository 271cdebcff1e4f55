"""The wind-tunnel explorer's state (``Explorer``), which every view of it receives: the checkpoints of one run
folder or file, their models as loaded, the task and its sequences (sampled by seed, typed, the held-out batch),
and the lock and the cache the views share. What a view computes from it is in the view's own file, or, where
two views use it, a function in ``hooks`` (the model as ablated) or ``computed`` (one sequence's numbers,
held-out calibration).
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch

from analyses.activations import needed_hooks, z_hook_name
from analyses.base import held_out_batch
from models.base import act_name
from tasks import ConfigError

from ..checkpoint import list_checkpoints, load, resolve
from ..errors import UserError
from ..waits import Waits


def parse_tokens(task, text: str) -> list[int]:
    """Token ids from text: token names as the task prints them (``k3 v7``) or plain ids."""
    if task.continuous:
        raise UserError(f"{task.name} feeds real-valued inputs, which cannot be typed as tokens; sample by seed")
    vocab = range(task.vocab_size)
    by_name = {name: i for i, name in zip(vocab, task.token_names(torch.tensor(list(vocab))))}
    ids = []
    for word in re.split(r"[\s,]+", text.strip()):
        if word in by_name:
            ids.append(by_name[word])
        # not "²" or "٣"; and no more digits than a token id has (int() refuses 4,300 digits with a ValueError)
        elif word.isascii() and word.isdigit() and len(word) <= len(str(task.vocab_size)) and int(word) < task.vocab_size:
            ids.append(int(word))
        elif word:
            shown = word if len(word) <= 40 else f"{word[:20]}...({len(word):,} characters)"
            raise UserError(f"unknown token {shown!r}; write names such as {' '.join(examples(by_name))} "
                            f"or ids 0..{task.vocab_size - 1}")
    if not ids:
        raise UserError("type at least one token")
    return ids


def examples(names) -> list[str]:
    """Three token names to suggest: words, not the HMM's table values (0.00, 0.01), where the task has them."""
    def number(name: str) -> bool:
        try:
            float(name)
            return True
        except ValueError:
            return False
    words = [n for n in names if not number(n)]
    return (words or list(names))[:3]


@dataclass(frozen=True, eq=False)
class Explorer:
    """The models of one checkpoint or run folder (``source``) and what every view of them uses.

    Views are computed under ``lock``: a Dash server answers callbacks on several threads, and ablation hooks live
    on the (shared) model while a view runs. ``cache`` holds what views computed, keyed by a tuple whose first item
    names what it is ("sequence", "held-out", "patterns", ...). The fields after ``waits`` follow from ``source``.
    """

    source: Path
    n_calibration: int = 100  # held-out sequences of the calibration, mean ablation and head-ablation's map
    n_geometry: int = 150  # sequences of the geometry's PCA
    seed: int = 1234  # of the held-out batch and the geometry's sequences
    waits: Waits = field(default_factory=Waits, repr=False)  # what a slow view waits on, in the page and terminal
    checkpoints: list = field(init=False, repr=False)  # (step, path) in step order; one (None, path) for a file
    steps: list = field(init=False, repr=False)  # each checkpoint's step (a file's own)
    task: object = field(init=False, repr=False)
    info: dict = field(init=False, repr=False)  # ``layout_info`` of the last checkpoint: the page is laid out for it
    lock: threading.RLock = field(init=False, repr=False, default_factory=threading.RLock)
    cache: dict = field(init=False, repr=False, default_factory=dict)
    models: dict = field(init=False, repr=False, default_factory=dict)  # by slider position, loaded when first used

    def __post_init__(self):
        source = Path(self.source)
        derive = object.__setattr__  # (a frozen dataclass: its derived fields are set once, here)
        derive(self, "source", source)
        derive(self, "checkpoints", (list_checkpoints(source) if source.is_dir() else []) or [(None, resolve(source))])
        last = self.model(self.last)  # fails here, before the server starts, on a bad file
        derive(self, "task", last.task)
        derive(self, "steps", [step if step is not None else last.step for step, _ in self.checkpoints])
        derive(self, "info", self.layout_info(self.last))

    def keep_newest(self, kind: str, n: int) -> None:
        """Forget the oldest entries of ``kind`` in the cache beyond the newest ``n``."""
        while len([k for k in self.cache if k[0] == kind]) > n:
            del self.cache[next(k for k in self.cache if k[0] == kind)]

    @property
    def last(self) -> int:
        """The slider position of the last checkpoint (the one the page opens on)."""
        return len(self.checkpoints) - 1

    def model(self, index: int):
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.checkpoints):
            raise UserError(f"no checkpoint at slider position {index!r}; there are {len(self.checkpoints)}")
        if index not in self.models:
            self.models[index] = load(self.checkpoints[index][1], device="cpu")
        return self.models[index]

    def layout_info(self, index: int) -> dict:
        """What can be ablated and looked at in this model: layers, heads, attention."""
        model = self.model(index)
        n_layers = model.cfg.n_layers
        attention = model.has_attention() and all(
            z_hook_name(l) in model.hook_dict for l in range(n_layers))
        blocks = [l for l in range(n_layers) if all(n in model.hook_dict for n in needed_hooks("block", l))]
        return dict(n_layers=n_layers, n_heads=model.cfg.n_heads if attention else 0, attention=attention,
                    scan=not attention and model.has_patterns(),
                    attention_out=all(act_name("attn_out", l) in model.hook_dict for l in range(n_layers)),
                    blocks=blocks, arch=getattr(model, "arch", type(model).__name__))

    # --- sequences ---------------------------------------------------------------------------
    def typed(self, text: str) -> list[int]:
        """The token ids of a typed sequence, refused (UserError) if the model or the task cannot take it."""
        tokens = parse_tokens(self.task, text)
        model = self.model(self.last)
        # Only an architecture with a learned position table has a longest input; recurrent ones take any length.
        if model.positions and len(tokens) > model.cfg.n_ctx:
            raise UserError(f"{len(tokens)} tokens is longer than the model's context ({model.cfg.n_ctx})")
        self.batch(tokens, None)  # refuse a sequence the task cannot give a posterior for
        return tokens

    def sample(self, seed: int) -> list:
        return held_out_batch(self.task, 1, seed).tokens[0].tolist()

    def batch(self, tokens: list, seed: int | None):
        """The batch of one sequence: the sampled one (with its true answers) or a typed one."""
        if seed is not None:
            return held_out_batch(self.task, 1, seed)
        try:
            return self.task.batch_from_tokens(torch.tensor([tokens]))
        except ConfigError as err:
            raise UserError(str(err)) from None

    def held_out(self):
        """The held-out calibration batch, sampled once (every checkpoint shares the task)."""
        if "held_out" not in self.cache:
            self.cache["held_out"] = held_out_batch(self.task, self.n_calibration, self.seed)
        return self.cache["held_out"]

    def names(self, tokens) -> list[str]:
        """Position-tagged token names, unique so they can label heat-map axes."""
        tensor = torch.as_tensor(tokens)
        return [f"{i}:{name}" for i, name in enumerate(self.task.position_names(tensor))]

    def class_names(self) -> list[str]:
        offset = self.task.answer_token_offset
        return self.task.token_names(torch.arange(offset, offset + self.task.n_classes))
