"""Associative recall: random-access lookup of key -> value bindings shown earlier in the sequence.

Each sequence draws a fresh table: N distinct keys from a pool of ``n_keys`` and N distinct values
from a pool of ``n_values``, paired at random (an injective assignment, uniform over all of them).
The table is shown once, then ``queries`` = M keys are asked about:

    k1 v1 k2 v2 ... kN vN SEP q1 a1 q2 a2 ... qM

Token ids: keys ``0..n_keys-1``, values ``n_keys..n_keys+n_values-1``, ``SEP = n_keys+n_values``;
``vocab_size = n_keys + n_values + 1`` and ``seq_len = 2N + 2M`` (2N pair tokens, SEP, then M
query keys with an answer token after every query but the last). The answer classes are the
n_values values (``n_classes = n_values``, ``answer_token_offset = n_keys``: the answer logits are
the model's output logits of the value tokens).

Queries. Each query key is one of the N bound keys, uniformly, except that with probability
``p_unbound`` it is instead a key of the pool that was never bound (uniform over those
``n_keys - N``; needs ``n_keys > N``). The answer a_i shown after a bound query is its bound
value; after an unbound query it is a value drawn uniformly from all n_values, independently each
time (noise). Queries are drawn independently, so a key may be asked about more than once.

Labels and posterior. The belief is asked for at the query key q_i itself and labelled with the
value class of a_i, i.e. at the position *before* the answer (labelling the answer token would
teach copying). The exact Bayes predictive at q_i is
- a delta on the bound value if q_i was bound (entropy 0);
- uniform over all n_values if q_i was never bound (entropy log2 n_values). This holds even when
  the same unbound key was asked before: the earlier answer was an independent uniform draw, not a
  binding, so it carries no information about the next one. Nor do the shown values narrow it to
  the unbound values, since the noise is drawn from the whole value pool.
The hard label of an unbound query is the sampled noise answer, so the achievable cross-entropy
there is log2 n_values. Non-query positions hold uniform 1/n_values placeholders in ``posterior``
and -100 in ``targets``.

Why there is no QUERY marker token: the layout is fixed, so a query key is identified by its
position after SEP (SEP, then alternating query key / answer). A marker would add length and
vocabulary without adding information.

``batch.hypothesis``: ``keys`` [B, N] bound key tokens in order of appearance, ``values`` [B, N]
their value class indices, ``query_keys`` [B, M] key tokens asked, ``bound`` [B, M] whether each
query key was bound, ``answers`` [B, M] value class index of each answer (the last one unshown).

``length_setting = "queries"``: the number of queries sets the sequence length.
"""
from __future__ import annotations

import itertools
import numbers
import random

import torch

from .base import Batch, ConfigError, PaperRow, Preset, Primitive, Task, checked_batch_size, batch_at_queries


def enumerated_posterior(n_keys: int, n_values: int, tokens: list[int], query_index: int) -> torch.Tensor:
    """P(answer to query ``query_index`` = v | everything before it), read off the raw tokens alone.

    Enumerates every hidden world: each injective table from the bound keys to values, and each
    tuple of answers to queries 0..query_index, weighting by the generative process (a bound key
    answers its table value; an unbound key answers a uniform draw from all values). Which keys
    are bound and which are asked does not depend on the values, so those factors cancel.
    """
    sep = n_keys + n_values
    split = tokens.index(sep)
    shown_keys = tokens[0:split:2]
    shown_values = [v - n_keys for v in tokens[1:split:2]]
    query_keys = tokens[split + 1::2]
    shown_answers = [a - n_keys for a in tokens[split + 2::2]]

    counts = [0.0] * n_values
    for table_values in itertools.permutations(range(n_values), len(shown_keys)):
        table = dict(zip(shown_keys, table_values))
        if list(table_values) != shown_values:
            continue
        for answers in itertools.product(range(n_values), repeat=query_index + 1):
            if list(answers[:query_index]) != shown_answers[:query_index]:
                continue
            weight = 1.0
            for q, a in zip(query_keys, answers):
                weight *= float(table[q] == a) if q in table else 1.0 / n_values
            counts[answers[query_index]] += weight
    total = sum(counts)
    return torch.tensor([c / total for c in counts])


class Recall(Task):
    name = "recall"
    order = 3
    length_setting = "queries"
    frame = "values"
    eliminates = True  # a bound key's answer is a delta: every other value is ruled out
    primitive = Primitive("binding", "accuracy", "min", 0.9, "between the paper's >= 97.8% and the LSTM's 0.5%")
    presets = {"cpu": Preset(train=dict(steps=3_000),
                             by_arch={"mamba": Preset(train=dict(steps=2_000)),
                                      "lstm": Preset(train=dict(steps=2_000)),
                                      "mlp": Preset(train=dict(steps=1_000))})}
    paper_rows = tuple(PaperRow("associative recall, accuracy", arch, "calibration", "accuracy", paper, text)
                       for arch, paper, text in (("transformer", 1.0, "100%"), ("mamba", 0.978, "97.8%"),
                                                 ("lstm", 0.005, "0.5%"), ("mlp", None, "–")))

    def __init__(self, N: int = 8, n_keys: int = 16, n_values: int = 16, queries: int = 4,
                 p_unbound: float = 0.0):
        for label, value in (("N", N), ("n_keys", n_keys), ("n_values", n_values),
                             ("queries", queries)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"recall: {label} must be an integer >= 1, got {value!r}")
            if value < 1:
                raise ConfigError(f"recall: {label} must be at least 1, got {label}={value}")
        if N > n_keys:
            raise ConfigError(f"recall: N={N} bindings need N distinct keys; raise n_keys to at "
                              f"least {N} or lower N (n_keys={n_keys})")
        if N > n_values:
            raise ConfigError(f"recall: N={N} bindings need N distinct values; raise n_values to "
                              f"at least {N} or lower N (n_values={n_values})")
        if isinstance(p_unbound, bool) or not isinstance(p_unbound, numbers.Real):
            raise ConfigError(f"recall: p_unbound must be a number in [0, 1), got {p_unbound!r}")
        if not 0 <= p_unbound < 1:
            raise ConfigError(f"recall: p_unbound must be in [0, 1), got p_unbound={p_unbound}")
        if p_unbound > 0 and n_keys <= N:
            raise ConfigError(f"recall: p_unbound={p_unbound} needs keys that are never bound; "
                              f"raise n_keys above N={N} or set p_unbound=0")
        self.N, self.n_keys, self.n_values, self.queries = N, n_keys, n_values, queries
        self.p_unbound = float(p_unbound)
        self.SEP = n_keys + n_values
        self.vocab_size = n_keys + n_values + 1
        self.n_classes = n_values
        self.answer_token_offset = n_keys  # answers are read off the value tokens' output logits
        self.seq_len = 2 * N + 2 * queries

    def config(self) -> dict:
        return dict(name=self.name, N=self.N, n_keys=self.n_keys, n_values=self.n_values,
                    queries=self.queries, p_unbound=self.p_unbound)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        N, K, V, M, B = self.N, self.n_keys, self.n_values, self.queries, checked_batch_size(batch_size)
        # Distinct draws as argsort of i.i.d. uniform noise. The first N of the key permutation are
        # bound; the rest is the pool of never-bound keys unbound queries draw from.
        key_perm = torch.rand(B, K, generator=generator).argsort(dim=1)
        values = torch.rand(B, V, generator=generator).argsort(dim=1)[:, :N]
        keys = key_perm[:, :N]

        # Every random tensor is drawn whatever the settings, so the stream a seed produces does
        # not depend on which branch a query takes.
        bound = torch.rand(B, M, generator=generator) >= self.p_unbound
        bound_slot = torch.randint(0, N, (B, M), generator=generator)
        n_free = max(K - N, 1)  # placeholder width when no key is free (then bound is all True)
        free_slot = N + torch.randint(0, n_free, (B, M), generator=generator)
        noise = torch.randint(0, V, (B, M), generator=generator)
        slot = torch.where(bound, bound_slot, free_slot.clamp(max=K - 1))
        query_keys = key_perm.gather(1, slot)
        bound_answer = values.gather(1, bound_slot)
        answers = torch.where(bound, bound_answer, noise)

        # Unbound: uniform over all values, also on a repeat, since earlier answers were noise.
        delta = torch.nn.functional.one_hot(bound_answer, V).float()
        query_posterior = torch.where(bound[..., None], delta, torch.full_like(delta, 1.0 / V))

        T = self.seq_len
        tokens = torch.empty(B, T, dtype=torch.long)
        pair_pos = torch.arange(N) * 2
        tokens[:, pair_pos] = keys
        tokens[:, pair_pos + 1] = values + K
        tokens[:, 2 * N] = self.SEP
        query_pos = 2 * N + 1 + 2 * torch.arange(M)
        tokens[:, query_pos] = query_keys
        tokens[:, query_pos[:-1] + 1] = answers[:, :-1] + K

        return batch_at_queries(tokens, query_pos, query_posterior, answers,
                                hypothesis=dict(keys=keys, values=values, query_keys=query_keys,
                                                bound=bound, answers=answers))

    def batch_from_tokens(self, tokens: torch.Tensor) -> Batch:
        """The table before SEP, then any number of queries (answers shown after them carry nothing)."""
        N, K, V = self.N, self.n_keys, self.n_values
        tokens = (tokens if tokens.dim() == 2 else tokens[None]).long().cpu()
        keys, shown = tokens[:, 0:2 * N:2], tokens[:, 1:2 * N:2]
        queries, answers = tokens[:, 2 * N + 1::2], tokens[:, 2 * N + 2::2]
        is_key, is_value = (lambda x: ((x >= 0) & (x < K)).all()), (lambda x: ((x >= K) & (x < K + V)).all())
        if tokens.shape[1] <= 2 * N + 1 or not ((tokens[:, 2 * N] == self.SEP).all() and is_key(keys)
                                                and is_value(shown) and is_key(queries) and is_value(answers)):
            raise ConfigError(f"recall: a sequence is {N} key-value pairs, SEP, then query keys each followed "
                              f"by an answer value")
        if (keys[:, :, None] == keys[:, None, :]).sum((1, 2)).gt(N).any():
            raise ConfigError("recall: the table binds a key twice")
        match = queries[:, :, None] == keys[:, None, :]  # [B, M, N]: at most one bound slot per query
        bound = match.any(-1)
        delta = torch.nn.functional.one_hot((match.long() * (shown - K)[:, None, :]).sum(-1), V).float()
        posterior = torch.where(bound[..., None], delta, torch.full_like(delta, 1.0 / V))
        return batch_at_queries(tokens, 2 * N + 1 + 2 * torch.arange(queries.shape[1]), posterior,
                                torch.full(queries.shape, -100), hypothesis=dict(keys=keys, values=shown - K,
                                                                                query_keys=queries, bound=bound))

    @classmethod
    def small_config(cls, rng: random.Random) -> dict:
        N = rng.randint(1, 3)
        n_keys, n_values = rng.randint(N, 4), rng.randint(N, 4)
        p_unbound = rng.uniform(0.0, 0.9) if n_keys > N else 0.0  # unbound queries need a free key
        return dict(N=N, n_keys=n_keys, n_values=n_values, queries=rng.randint(1, 3), p_unbound=p_unbound)

    def brute_force(self, batch: Batch, row: int) -> torch.Tensor:
        tokens = batch.tokens[row].tolist()
        return torch.stack([enumerated_posterior(self.n_keys, self.n_values, tokens, i)
                            for i in range(self.queries)]).double()

    def token_names(self, tokens: torch.Tensor) -> list[str]:
        K = self.n_keys
        names = []
        for t in tokens:
            t = int(t)
            names.append(f"k{t}" if t < K else "SEP" if t == self.SEP else f"v{t - K}")
        return names

    def hypothesis_tokens(self) -> dict[str, torch.Tensor]:
        K, V = self.n_keys, self.n_values
        return {"values": torch.arange(K, K + V), "keys": torch.arange(K)}
