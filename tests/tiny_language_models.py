"""Tiny language models of real families, built from a config (nothing downloaded), for the tests: a
TransformerLens-native model, a GPT-NeoX (Pythia's family: fused query-key-value matrix, partial rotary), a grouped-query Llama, and a
word-level tokenizer that knows every word the shipped prompt tasks use."""
from __future__ import annotations

import math
from pathlib import Path

import torch

from tasks.prompts import two_label

FAMILIES = ("gpt-neox", "llama-gqa")


def tiny(family: str, vocab_size: int = 64):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if family == "gpt-neox":
        return GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=4, intermediate_size=64,
                                                max_position_embeddings=64, rotary_pct=0.25)).eval()
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2,  # grouped-query: 2 query heads per key head
                                        max_position_embeddings=64)).eval()


def native(**settings):
    """A random-initialised TransformerLens 4 model built from a config (``TransformerBridge.boot_native``), without
    a tokenizer (prompts of token ids): 2 layers, d_model 32, 4 heads of 8, 48 tokens unless ``settings`` say otherwise."""
    from transformer_lens.model_bridge import TransformerBridge

    config = dict(n_layers=2, d_model=32, n_ctx=64, d_head=8, n_heads=4, d_vocab=48, act_fn="gelu", seed=0) | settings
    return TransformerBridge.boot_native(config).eval()


def word_tokenizer():
    """A word-level tokenizer over the prompt tasks' words (a word it does not know is [UNK])."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from tasks.prompts.base import WORDS
    from tasks.prompts.coin import FACES
    from tasks.prompts.two_label import LABELS

    words = {"[UNK]", "->", "Coin", "flips", ":", *LABELS, *FACES}
    for path in WORDS.glob("*.txt"):
        words |= {w.strip() for w in path.read_text().splitlines() if w.strip() and not w.startswith("#")}
    vocab = {w: i for i, w in enumerate(sorted(words))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]")


def saved(family: str, folder: Path) -> Path:
    """``folder`` holding a tiny ``family`` model and the word tokenizer, as save_pretrained writes them."""
    tokenizer = word_tokenizer()
    tiny(family, vocab_size=len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def brute_force_calibration(lm, prompt_set, shown_alpha=None) -> tuple[float, float]:
    """Entropy MAE and KL (bits) computed the slow way: one prompt at a time through the model, the answer
    renormalised by hand, the Bayes predictive by enumeration (two-label) or Laplace's rule from counts (coin)."""
    from tasks.prompts.coin import FACES

    maes, kls = [], []
    for p in prompt_set.prompts:
        with torch.no_grad():
            logits = lm.model(torch.tensor([p.tokens]))[0, -1].double()
        q = [math.exp(logits[a].item()) for a in prompt_set.answers]
        q = [x / sum(q) for x in q]
        if shown_alpha is not None:
            bayes = two_label.brute_force_predictive(p.shown, shown_alpha).tolist()
        else:
            heads = sum(1 for y in p.shown if y == 0)
            bayes = [(heads + 1) / (len(p.shown) + 2), (len(p.shown) - heads + 1) / (len(p.shown) + 2)]
        h = lambda d: -sum(x * math.log2(x) for x in d if x > 0)  # noqa: E731
        maes.append(abs(h(q) - h(bayes)))
        kls.append(sum(b * math.log2(b / x) for b, x in zip(bayes, q) if b > 0))
    assert len(FACES) == 2
    return sum(maes) / len(maes), sum(kls) / len(kls)
