"""Language models as TransformerLens 4 ``TransformerBridge``s, offline (Paper III's setting).

Three ways in, none of which downloads anything:

- ``from_hugging_face(hf_model)``: a transformers causal LM already in memory (a pretrained one, or one
  built from a config, as the tests do) wrapped in a bridge (``build_bridge_from_module``: the bridge's
  own ``boot_transformers`` looks the tokenizer up on the Hub even when handed a model, so it cannot run
  offline on a model without one);
- ``load_language_model(name)``: ``TransformerBridge.boot_transformers`` with the Hugging Face hub
  offline, so the weights must already be in the local cache; if they are not, one line says how to
  fetch them on a machine with internet;
- ``LanguageModel(model, name, tokenizer)`` around any TransformerLens model built in Python (a
  ``TransformerBridge`` from ``boot_transformers`` or ``boot_native``, or a ``HookedRootModule`` with
  TransformerLens's hook names, such as a wind-tunnel transformer).

Bridges run in compatibility mode without weight processing: HookedTransformer's hook names and shapes
(``blocks.{l}.attn.hook_z`` per head, ``ln1.hook_normalized``, ...) on the model's raw weights. No LayerNorm
folding or centring, which would change W_K and W_V, the geometry the analyses read.

Keys and values are read per *key/value head*: a grouped-query model (Llama 3, Mistral) has fewer
key/value heads than query heads, and ``kv_weights`` returns one projection per key/value head, never
a copy per query head (copies would count one head's geometry several times). GPT-NeoX's fused QKV
matrix is laid out (heads, 3, d_head) per row block, not (3, heads, d_head); the bridge slices it that
way, and ``tests/test_language_models.py`` checks every head's keys and values against the Hugging Face
module's own projections.

``LanguageModel``, ``from_hugging_face``, ``compatible`` and ``read_folder`` live in ``models/hf_bridge.py``, which
``models/gguf_model.py`` shares (this module imports that one, never the other way round); they are importable
from here as before.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path

import torch

from tasks import ConfigError

from .gguf_model import Report, is_gguf_spec, open_gguf
# the bridge and the model type live in hf_bridge, which gguf_model shares; named here too, where callers look
from .hf_bridge import LanguageModel, compatible, from_hugging_face, read_folder  # noqa: F401


def open_language_model(spec: str, device: str = "cpu", report: Report | None = None) -> LanguageModel:
    """``spec``: a folder holding a Hugging Face causal LM (``save_pretrained``'s files, a tokenizer beside
    it if there is one), a GGUF file or a packaged GGUF model (``smollm2-135m``: models/gguf_model.py), or a
    model name TransformerLens knows whose weights are in the local cache. ``report`` is told what is being done
    (a GGUF's first conversion, minutes, step by step)."""
    if is_gguf_spec(str(spec)):
        return open_gguf(str(spec), device=device, report=report)
    if report is not None:
        report(f"loading {spec}", 0, 1)
    path = Path(spec).expanduser()
    if not path.is_dir():
        model = load_language_model(spec, device=device)
        return LanguageModel(model, spec.rstrip("/").split("/")[-1], getattr(model, "tokenizer", None))
    hf_model, tokenizer = read_folder(path)
    return LanguageModel(from_hugging_face(hf_model, tokenizer, path.resolve().name).to(device),
                         path.resolve().name, tokenizer)


def load_language_model(name: str, device: str = "cpu"):
    """``name`` (e.g. ``EleutherAI/pythia-410m``) from the local Hugging Face cache, without network."""
    from transformer_lens.model_bridge import TransformerBridge

    import huggingface_hub.constants as hub

    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    # huggingface_hub reads the variable once, at import: without its constant set too, a model missing
    # from the cache is first looked up on the network (about 20 s of retries here before the error)
    was_offline, hub.HF_HUB_OFFLINE = hub.HF_HUB_OFFLINE, True
    try:
        return compatible(TransformerBridge.boot_transformers(name, device=device))
    except (OSError, ValueError):
        from transformer_lens.supported_models import MODEL_ALIASES, OFFICIAL_MODEL_NAMES

        if name not in {*OFFICIAL_MODEL_NAMES, *(alias for aliases in MODEL_ALIASES.values() for alias in aliases)}:
            raise ConfigError(f"{name!r} is neither a folder holding a Hugging Face model nor a model TransformerLens "
                              f"knows (transformer_lens.supported_models.OFFICIAL_MODEL_NAMES lists those), and the "
                              f"local Hugging Face cache holds no model of that name") from None
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


def reinitialised(model, seed: int = 0):
    """A twin of ``model`` with freshly initialised weights, as its architecture initialises them: a wind-tunnel
    model rebuilt from its config, a ``boot_native`` bridge re-initialised by TransformerLens, a bridge over a
    Hugging Face model around a new one built from the same config."""
    from transformer_lens.model_bridge.sources.native.model import NativeModel

    from .base import AnswerHead

    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if isinstance(model, AnswerHead):
            from . import build

            return build(model.arch, model.task, model.config.to_dict(), seed=seed).to(device).eval()
        original = model.original_model
        if isinstance(original, NativeModel):
            fresh = copy.deepcopy(model)
            fresh.init_weights()
            return fresh.eval()
        return from_hugging_face(type(original)(original.config).to(device)).eval()


def kv_weights(model, layer: int) -> dict[str, torch.Tensor]:
    """Layer ``layer``'s key and value projections, one per key/value head: W_K, W_V [kv_heads, d_model, d_head]
    and b_K, b_V [kv_heads, d_head] (grouped-query models keep theirs unrepeated)."""
    attn = model.blocks[layer].attn
    out = {}
    for weight, bias in (("W_K", "b_K"), ("W_V", "b_V")):
        out[weight] = getattr(attn, weight)  # a bridge's are per key/value head already
        b = getattr(attn, bias, None)  # Llama's projections have no bias: a zero one
        out[bias] = b if b is not None else out[weight].new_zeros(out[weight].shape[0], out[weight].shape[2])
    return out


def n_kv_heads(model) -> int:
    return getattr(model.cfg, "n_key_value_heads", None) or model.cfg.n_heads
