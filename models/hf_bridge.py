"""A Hugging Face causal LM as a TransformerLens ``TransformerBridge``, and the ``LanguageModel`` the analyses run
on: the part that ``models/language_model.py`` (which opens any ``--model``) and ``models/gguf_model.py`` (which
converts a GGUF file) share. It imports neither of them, so the two depend on it one way and never on each
other both ways (``tests/test_source_rules.py`` fails on any import circle).

Bridges run in compatibility mode without weight processing (``compatible``): HookedTransformer's hook names
and shapes on the model's raw weights; see ``models/language_model.py`` for why.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from tasks import ConfigError


@dataclass
class LanguageModel:
    """A TransformerLens model the analyses run on through prompts (``interp run NAME --model ...``), with the
    tokenizer its prompts are written with (None: prompts of token ids, e.g. a model built from a config)."""

    model: Any  # a transformer_lens TransformerBridge, or a HookedRootModule with its hook names
    name: str
    tokenizer: Any = None
    task: Any = None  # a wind-tunnel transformer's task (its prompts: ``--prompts wind-tunnel``)

    arch = "language model"  # what refusals call it

    @property
    def encode(self) -> Callable[[str], list[int]] | None:
        if self.tokenizer is None:
            return None
        return lambda text: self.tokenizer.encode(text, add_special_tokens=False)


def read_folder(path: Path, tokenizer: bool = True):
    """The Hugging Face causal LM (float32) in ``path`` and its tokenizer (None: the folder has none, or
    ``tokenizer`` is False: the caller reads its own, and a 262,144-token vocabulary is seconds to read)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (path / "config.json").is_file():
        raise ConfigError(f"{path} holds no config.json: --model takes a Hugging Face model folder "
                          f"(save_pretrained's files) or a model name in the local cache")
    try:
        hf_model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path} is not a loadable Hugging Face causal LM: {str(err).splitlines()[0]}") from None
    if not tokenizer:
        return hf_model.eval(), None
    try:
        found = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, TypeError):  # no tokenizer files: prompts of token ids
        found = None
    return hf_model.eval(), found


def from_hugging_face(hf_model, tokenizer=None, name: str = "external"):
    """A TransformerBridge around ``hf_model`` (no download, and ``hf_model`` itself is wrapped, not copied), in
    compatibility mode on its raw weights."""
    from transformer_lens.model_bridge.sources import build_bridge_from_module

    architecture = (hf_model.config.architectures or [type(hf_model).__name__])[0]
    try:
        model = build_bridge_from_module(hf_model, architecture, hf_config=hf_model.config, tokenizer=tokenizer,
                                         model_name=name)
    except (NotImplementedError, ValueError, KeyError) as err:
        raise ConfigError(f"TransformerLens has no bridge for a {architecture}: {str(err).splitlines()[0]}") from None
    return compatible(model)


def compatible(model):
    """``model`` (a TransformerBridge) with HookedTransformer's hook names and shapes, its weights unprocessed."""
    model.enable_compatibility_mode(no_processing=True, disable_warnings=True)
    return model.eval()
