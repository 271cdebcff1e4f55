"""Language models from Hugging Face as TransformerLens HookedTransformers, offline (Paper III's setting).

Two ways in, neither of which downloads anything:

- ``from_hugging_face(hf_model)``: a transformers causal LM already in memory (a pretrained one, or one
  built from a config, as the tests do) converted through TransformerLens's own weight conversion;
- ``load_language_model(name)``: ``HookedTransformer.from_pretrained`` with the Hugging Face hub
  offline, so the weights must already be in the local cache; if they are not, one line says how to
  fetch them on a machine with internet.

Keys and values are read per *key/value head*: a grouped-query model (Llama 3, Mistral) has fewer
key/value heads than query heads, and ``kv_weights`` returns one projection per key/value head, never
a copy per query head (copies would count one head's geometry several times). GPT-NeoX's fused QKV
matrix is laid out (heads, 3, d_head) per row block, not (3, heads, d_head); TransformerLens's
conversion slices it that way, and ``tests/test_language_models.py`` checks every head's keys and
values against the Hugging Face module's own projections.
"""
from __future__ import annotations

import copy
import os
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from tasks import ConfigError

# Keep what the analyses read: no LayerNorm folding or centring, which would change W_K and W_V.
RAW_WEIGHTS = dict(fold_ln=False, center_writing_weights=False, center_unembed=False, fold_value_biases=False)


@dataclass
class LanguageModel:
    """A HookedTransformer the analyses run on through prompts (``interp run NAME --model ...``), with the
    tokenizer its prompts are written with (None: prompts of token ids, e.g. a model built from a config)."""

    model: Any  # transformer_lens.HookedTransformer
    name: str
    tokenizer: Any = None
    task: Any = None  # a wind-tunnel transformer's task (its prompts: ``--prompts wind-tunnel``)

    arch = "language model"  # what refusals call it

    @property
    def encode(self) -> Callable[[str], list[int]] | None:
        if self.tokenizer is None:
            return None
        return lambda text: self.tokenizer.encode(text, add_special_tokens=False)


def open_language_model(spec: str, device: str = "cpu") -> LanguageModel:
    """``spec``: a folder holding a Hugging Face causal LM (``save_pretrained``'s files, a tokenizer beside
    it if there is one), a GGUF file or a packaged GGUF model (``smollm2-135m``: models/gguf_model.py), or a
    model name TransformerLens knows whose weights are in the local cache."""
    from .gguf_model import is_gguf_spec, open_gguf

    if is_gguf_spec(str(spec)):
        return open_gguf(str(spec), device=device)
    path = Path(spec).expanduser()
    if not path.is_dir():
        model = load_language_model(spec, device=device)
        return LanguageModel(model, spec.rstrip("/").split("/")[-1], getattr(model, "tokenizer", None))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (path / "config.json").is_file():
        raise ConfigError(f"{path} holds no config.json: --model takes a Hugging Face model folder "
                        f"(save_pretrained's files) or a model name in the local cache")
    try:
        hf_model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path} is not a loadable Hugging Face causal LM: {str(err).splitlines()[0]}") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, TypeError):  # no tokenizer files: prompts of token ids
        tokenizer = None
    return LanguageModel(from_hugging_face(hf_model).to(device, print_details=False), path.resolve().name, tokenizer)


def from_hugging_face(hf_model, dtype: torch.dtype = torch.float32, n_ctx: int | None = None):
    """A HookedTransformer with ``hf_model``'s weights (no download: only its config is written, to a temporary
    folder, for TransformerLens to read the architecture from); ``n_ctx`` caps its context (TransformerLens
    keeps an n_ctx x n_ctx mask per layer, 2 GB over 30 layers at 8192)."""
    import transformer_lens.loading_from_pretrained as loading
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    config = copy.deepcopy(hf_model.config)
    config.architectures = config.architectures or [type(hf_model).__name__]
    with tempfile.TemporaryDirectory() as folder:
        config.save_pretrained(folder)
        try:
            settings = loading.convert_hf_model_config(folder)
        except (NotImplementedError, ValueError, KeyError) as err:
            raise ConfigError(f"TransformerLens cannot convert a {config.architectures[0]}: {err}") from None
        settings.pop("tokenizer_name", None)  # a model built from a config has no tokenizer to load
        if n_ctx is not None:
            settings["n_ctx"] = min(settings["n_ctx"], n_ctx)
        cfg = HookedTransformerConfig(**settings, dtype=dtype)
        state = loading.get_pretrained_state_dict(folder, cfg, hf_model=hf_model, dtype=dtype)
    with quiet_deprecation():
        model = HookedTransformer(cfg)
    model.load_and_process_state_dict(state, **RAW_WEIGHTS)
    return model.eval()


def load_language_model(name: str, device: str = "cpu"):
    """``name`` (e.g. ``EleutherAI/pythia-410m``) from the local Hugging Face cache, without network."""
    from transformer_lens import HookedTransformer

    import huggingface_hub.constants as hub

    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    # huggingface_hub reads the variable once, at import: without its constant set too, a model missing
    # from the cache is first looked up on the network (about 20 s of retries here before the error)
    was_offline, hub.HF_HUB_OFFLINE = hub.HF_HUB_OFFLINE, True
    try:
        with quiet_deprecation():
            return HookedTransformer.from_pretrained(name, device=device, **RAW_WEIGHTS).eval()
    except (OSError, ValueError) as err:
        if "not found" in str(err).lower() and "model" in str(err).lower() and "cache" not in str(err).lower():
            raise ConfigError(f"{name!r} is neither a folder holding a Hugging Face model nor a model TransformerLens "
                            f"knows (transformer_lens.loading.OFFICIAL_MODEL_NAMES lists those)") from None
        raise ConfigError(f"the weights of {name!r} are not in the local Hugging Face cache and this machine does "
                        f"not download; fetch them once where there is internet: python -c \"from transformers "
                        f"import AutoModelForCausalLM as M; M.from_pretrained('{name}')\" (then copy "
                        f"~/.cache/huggingface here)") from None
    finally:
        hub.HF_HUB_OFFLINE = was_offline
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def quiet_deprecation():
    """TransformerLens 3 marks HookedTransformer deprecated in favour of TransformerBridge; the toolkit's hook
    names are HookedTransformer's, so the warning says nothing a user can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*HookedTransformer.*deprecated", category=DeprecationWarning)
        yield


def kv_weights(model, layer: int) -> dict[str, torch.Tensor]:
    """Layer ``layer``'s key and value projections, one per key/value head: W_K, W_V [kv_heads, d_model, d_head]
    and b_K, b_V [kv_heads, d_head] (grouped-query models keep theirs unrepeated)."""
    attn = model.blocks[layer].attn
    grouped = getattr(model.cfg, "n_key_value_heads", None) not in (None, model.cfg.n_heads)
    name = (lambda p: f"_{p}") if grouped else (lambda p: p)  # noqa: E731
    return {p: getattr(attn, name(p)) for p in ("W_K", "b_K", "W_V", "b_V")}


def n_kv_heads(model) -> int:
    return getattr(model.cfg, "n_key_value_heads", None) or model.cfg.n_heads
