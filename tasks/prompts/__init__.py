"""Prompt tasks: in-context tasks with exact posteriors for language models (Paper III's setting).

    task = tasks.prompts.make("two-label")
    prompt_set = task.build(tokenizer.encode, vocab_size, words, per_shot=50, alpha=0.9, seed=0)

Every module here that defines a ``PromptTask`` subclass with a ``name`` is a prompt task, found the
way tasks/ finds wind tunnels; input-word lists live in words/ (one word per line; pass your own file).
"""
from __future__ import annotations

from ..plugins import classes_in, discover
from .base import SHOTS, Prompt, PromptSet, PromptTask, read_words

REGISTRY: dict[str, type[PromptTask]] = discover(__name__, __path__, lambda m: classes_in(m, PromptTask, "name"),
                                                 lambda cls: cls.order, "prompt tasks")
NAMES = tuple(REGISTRY)


def make(name: str) -> PromptTask:
    if name not in REGISTRY:
        raise ValueError(f"unknown prompt task {name!r}; valid prompt tasks: {', '.join(NAMES)}")
    return REGISTRY[name]()


__all__ = ["NAMES", "REGISTRY", "SHOTS", "Prompt", "PromptSet", "PromptTask", "make", "read_words"]
