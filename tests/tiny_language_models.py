"""Tiny language models of real families, built from a config (nothing downloaded), for the tests: a
GPT-NeoX (Pythia's family: fused query-key-value matrix, partial rotary), a grouped-query Llama, and a
word-level tokenizer that knows every word the shipped prompt tasks use."""
from __future__ import annotations

from pathlib import Path

import torch

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
