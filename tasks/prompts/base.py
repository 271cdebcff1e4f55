"""What a prompt task is: prompts for a language model, each with the exact Bayes answer over its answer tokens.

A prompt task is the text-model counterpart of a wind tunnel. It builds prompts whose next token is
one of a few answer tokens (two for the language-model tasks), and gives for each prompt the Bayes
predictive over those tokens and the entropy of the Bayes posterior over the task's latent (the
quantity a value manifold is ordered by). A model's answer is its next-token distribution at the
prompt's end, renormalised over the answer tokens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

SHOTS = (0, 1, 2, 4, 8)  # Paper III's numbers of shown examples
WORDS = Path(__file__).parent / "words"  # the shipped input-word lists, one word per line


@dataclass(frozen=True)
class Prompt:
    tokens: list[int]  # the prompt, ending where an answer token is predicted
    shown: list[int]  # the observations it shows (two-label, coin: 0 or 1, which of the two answer tokens)
    bayes: torch.Tensor  # [answers] float64: the Bayes predictive over the answer tokens
    posterior_entropy_bits: float  # entropy of the Bayes posterior over the task's latent


@dataclass
class PromptSet:
    prompts: list[Prompt]
    answers: tuple[int, ...]  # the answer token ids (two for a language-model task)
    description: str = ""  # e.g. "two-label prompts, mixed words", for titles
    # per prompt, the held-out sequence it was cut from (wind-tunnel prompts: the prompts of one sequence share
    # its hidden truth, so a bootstrap resamples sequences, not prompts); None: every prompt stands alone
    sequence: list[int] | None = None

    @property
    def bayes(self) -> torch.Tensor:
        return torch.stack([p.bayes for p in self.prompts])

    @property
    def posterior_entropy(self) -> torch.Tensor:
        return torch.tensor([p.posterior_entropy_bits for p in self.prompts], dtype=torch.float64)

    @property
    def shots(self) -> torch.Tensor:
        return torch.tensor([len(p.shown) for p in self.prompts])


class PromptTask:
    """A prompt task plugin: a subclass with a ``name`` in a module of tasks/prompts/."""

    name: str = ""
    summary: str = ""
    order: int = 100
    uses_words: bool = False  # whether its prompts show input words (so a domain's word list matters)

    def build(self, lm, words: Sequence[str], per_shot: int, alpha: float, seed: int) -> PromptSet:
        """``per_shot`` prompts per number of shown examples for the language model ``lm``: ``lm.encode``
        (text -> token ids) is its tokenizer, None without one (a model built from a config: prompts are
        made of token ids directly), ``lm.model.cfg.d_vocab`` its vocabulary, ``lm.task`` the wind tunnel
        a wind-tunnel transformer was trained on (None for a language model)."""
        raise NotImplementedError

    def predictive(self, shown: Sequence[int], alpha: float) -> torch.Tensor | None:
        """The Bayes predictive over the answer tokens after the observations ``shown`` (each 0 or 1: which
        answer token was shown), for a prompt whose shown observations were edited (causal interventions flip
        one); None when the answer does not follow from the shown observations alone."""
        return None


def one_token(encode: Callable[[str], list[int]], word: str) -> int:
    """The single token id of " word"; a clear error when the tokenizer splits it."""
    ids = encode(" " + word)
    if len(ids) != 1:
        raise ValueError(f"{word!r} is {len(ids)} tokens for this tokenizer; choose words that are one token each")
    return ids[0]


# A prompt set draws a few hundred input words; a longer list changes nothing but the wait, since every
# word is tokenised one at a time to check it is one token (a 48 MB list took minutes, silently). So a
# list is refused beyond these, at once and in one line, rather than tokenised behind a progress bar.
MAX_WORDS = 100_000
MAX_WORDS_BYTES = 4 << 20


def read_words(spec: str) -> list[str]:
    """A shipped domain's words (``math``, ``mixed``) or a file's, one word per line (``#`` starts a comment),
    at most MAX_WORDS words in at most MAX_WORDS_BYTES bytes of UTF-8."""
    path = WORDS / f"{spec}.txt" if (WORDS / f"{spec}.txt").is_file() else Path(spec)
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in WORDS.glob("*.txt")))
        raise ValueError(f"no word list {spec!r}: name a shipped domain ({shipped}) or a file with one word per line")
    if path.stat().st_size > MAX_WORDS_BYTES:
        raise ValueError(f"{path} is {path.stat().st_size / 2 ** 20:.1f} MB; a word list is at most "
                         f"{MAX_WORDS_BYTES >> 20} MB ({MAX_WORDS:,} words): prompts use a few hundred, pass a shorter list")
    try:
        text = path.read_bytes().decode()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read the word list {path} ({getattr(err, 'strerror', None) or err})") from None
    words = [w.split("#")[0].strip() for w in text.splitlines()]
    words = [w for w in words if w]
    if len(words) < 2:
        raise ValueError(f"{path} holds {len(words)} word(s); a prompt set needs at least 2")
    if len(words) > MAX_WORDS:
        raise ValueError(f"{path} holds {len(words):,} words; a word list has at most {MAX_WORDS:,}: prompts use "
                         f"a few hundred, pass a shorter list")
    return words


def log2_beta(a: float, b: float) -> float:
    return (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)) / math.log(2)
