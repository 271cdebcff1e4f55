"""Hugging Face language models as HookedTransformers, offline: tiny GPT-NeoX (fused QKV) and grouped-query
Llama models built from a config (nothing downloaded), whose keys and values per head are checked against
the Hugging Face modules' own projections."""
import pytest
import torch

from tasks import ConfigError
from models.language_model import from_hugging_face, kv_weights, load_language_model, n_kv_heads
from tests.tiny_language_models import tiny


def hf_attention_inputs(hf_model, ids) -> list[torch.Tensor]:
    """The normalised hidden states each layer's attention module receives, caught on the way in."""
    layers = hf_model.gpt_neox.layers if hasattr(hf_model, "gpt_neox") else hf_model.model.layers
    seen, handles = [], []
    for layer in layers:
        attn = getattr(layer, "attention", None) or layer.self_attn
        handles.append(attn.register_forward_pre_hook(
            lambda _m, args, kwargs: seen.append(kwargs.get("hidden_states", args[0] if args else None)),
            with_kwargs=True))
    with torch.no_grad():
        hf_model(ids)
    for h in handles:
        h.remove()
    return seen


def hf_keys_values(hf_model, layer: int, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values [B, T, kv_heads, d_head] as the Hugging Face module computes them (before rotary)."""
    B, T, _ = hidden.shape
    if hasattr(hf_model, "gpt_neox"):
        attn = hf_model.gpt_neox.layers[layer].attention
        qkv = attn.query_key_value(hidden).view(B, T, -1, 3 * attn.head_size)  # (heads, 3, d_head) per row
        _, k, v = qkv.chunk(3, dim=-1)
        return k, v
    attn = hf_model.model.layers[layer].self_attn
    return (attn.k_proj(hidden).view(B, T, -1, attn.head_dim), attn.v_proj(hidden).view(B, T, -1, attn.head_dim))


@pytest.mark.parametrize("family", ["gpt-neox", "llama-gqa"])
def test_a_converted_model_computes_what_the_hugging_face_model_computes(family):
    hf_model = tiny(family)
    model = from_hugging_face(hf_model)
    ids = torch.randint(64, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(model(ids), hf_model(ids).logits, atol=1e-5)
    assert n_kv_heads(model) == (2 if family == "llama-gqa" else 4)


@pytest.mark.parametrize("family", ["gpt-neox", "llama-gqa"])
def test_keys_and_values_per_head_are_the_hugging_face_projections(family):
    hf_model = tiny(family)
    model = from_hugging_face(hf_model)
    ids = torch.randint(64, (2, 11), generator=torch.Generator().manual_seed(2))
    hidden = hf_attention_inputs(hf_model, ids)
    names = [f"blocks.{l}.attn.hook_{kind}" for l in range(2) for kind in ("k", "v")]
    _, cache = model.run_with_cache(ids, names_filter=names + [f"blocks.{l}.ln1.hook_normalized" for l in range(2)])
    for layer in range(2):
        with torch.no_grad():
            k, v = hf_keys_values(hf_model, layer, hidden[layer])
        assert k.shape[2] == n_kv_heads(model)  # one key per key/value head, not one per query head
        assert torch.allclose(cache[f"blocks.{layer}.attn.hook_k"], k, atol=1e-5)
        assert torch.allclose(cache[f"blocks.{layer}.attn.hook_v"], v, atol=1e-5)
        # kv_weights: the same keys and values from the layer's normalised input
        w = kv_weights(model, layer)
        x = cache[f"blocks.{layer}.ln1.hook_normalized"]
        assert w["W_K"].shape == (n_kv_heads(model), 32, 8)
        assert torch.allclose(torch.einsum("btd,hde->bthe", x, w["W_K"]) + w["b_K"], k, atol=1e-5)
        assert torch.allclose(torch.einsum("btd,hde->bthe", x, w["W_V"]) + w["b_V"], v, atol=1e-5)


def test_the_wrong_fused_layout_would_be_caught():
    # Slicing GPT-NeoX's fused matrix as (3, heads, d_head), the authors' pitfall, gives other keys.
    hf_model = tiny("gpt-neox")
    ids = torch.randint(64, (1, 7), generator=torch.Generator().manual_seed(3))
    hidden = hf_attention_inputs(hf_model, ids)[0]
    attn = hf_model.gpt_neox.layers[0].attention
    with torch.no_grad():
        wrong = attn.query_key_value(hidden).view(1, 7, 3, -1, attn.head_size)[:, :, 1]
        right, _ = hf_keys_values(hf_model, 0, hidden)
    assert not torch.allclose(wrong, right, atol=1e-3)


def test_a_model_missing_from_the_cache_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache
    with pytest.raises(ConfigError) as err:
        load_language_model("EleutherAI/pythia-14m")
    message = str(err.value)
    assert "\n" not in message and "not in the local Hugging Face cache" in message and "from_pretrained" in message
