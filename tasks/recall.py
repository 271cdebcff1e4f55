"""Associative recall: random-access lookup of key -> value bindings shown earlier in the sequence.

Each sequence draws a fresh table: n distinct keys from a pool of ``n_keys`` and n distinct values
from a pool of ``n_values``, paired at random (an injective assignment, uniform over all of them).
The table is shown once, then ``queries`` = M keys are asked about. Two layouts:

``layout="paper"`` (the default; the format of the authors' own data module):

    STORE k1 SEP v1  ...  STORE kn SEP vn  [FILL x 4 per empty slot]  FILL x fillers
    QUERY q1 PAD  FILL x gap  QUERY q2 PAD  FILL x gap  ...  QUERY qM PAD

with the defaults N=64 pairs from pools of 256 keys and 256 values, 32 fillers after the table, 3
queries and 16 fillers between queries: 329 tokens. The answers are never shown (PAD holds their
place). Token ids: keys ``0..n_keys-1``, values ``n_keys..n_keys+n_values-1``, then SEP, STORE,
QUERY, PAD, FILL; ``vocab_size = n_keys + n_values + 5``.

``layout="compact"`` (no markers, no fillers; the small setting of earlier versions):

    k1 v1 k2 v2 ... kN vN SEP q1 a1 q2 a2 ... qM

``vocab_size = n_keys + n_values + 1``, ``seq_len = 2N + 2M``; the answers to all but the last
query are shown.

Table size. The table has ``slots`` places (default N). Each sequence binds n pairs, drawn
uniformly from ``N_min..N`` (default: exactly N), in the first n slots; the rest are filler (paper
layout only: it has the filler token). So ``N_min`` < N trains on a range of table sizes at one
sequence length, and ``slots`` > N evaluates a model on a smaller table than it was trained on
without moving any position: a model that addresses by content keeps its accuracy, one that learned
where slot i sits does not.

Pool. ``pool=P`` (default: all) draws every table's keys and values from the first P keys and the first
P values only (and unbound queries from the never-bound keys among those P), at the same vocabulary; the
answers' posterior is unchanged (a delta on the bound value; unbound answers stay uniform over all values).
A smaller pool is an easier cell of the same model's task: a curriculum stage ``{"pool": 16}`` trains on it
before the full pools (a transformer's plateau before it binds grows with the pool of keys).

Queries. Each query key is one of the n bound keys, uniformly, except that with probability
``p_unbound`` it is instead a key of the pool that was never bound (uniform over those
``n_keys - n``; needs ``n_keys > N``). With ``ask="every"`` (dense supervision, as zoology's MQAR
trains) the first min(M, n) queries ask every bound key once, in a random order, and any further
queries draw uniformly from the bound keys again; so ``queries=N, gap=0, ask="every"`` supervises
every binding of every sequence (64 answers instead of 3) at 480 tokens instead of 329. The answers'
posterior does not depend on which keys are asked, so the Bayes targets are the same. The answer a_i after a bound query is its bound value; after
an unbound query it is a value drawn uniformly from all n_values, independently each time (noise).
Queries are drawn independently, so a key may be asked about more than once.

Labels and posterior. The belief is asked for at the query key q_i itself and labelled with the
value class of a_i, i.e. at the position *before* the answer (labelling the answer token would
teach copying). The exact Bayes predictive at q_i is
- a delta on the bound value if q_i was bound (entropy 0);
- uniform over all n_values if q_i was never bound (entropy log2 n_values). This holds even when
  the same unbound key was asked before: an earlier answer (shown in the compact layout) was an
  independent uniform draw, not a binding, so it carries no information about the next one. Nor do
  the shown values narrow it to the unbound values, since the noise is drawn from the whole pool.
The hard label of an unbound query is the sampled noise answer. Non-query positions hold uniform
1/n_values placeholders in ``posterior`` and -100 in ``targets``.

``batch.hypothesis``: ``keys`` [B, slots] bound key tokens in table order (-1 in an empty slot),
``values`` [B, slots] their value class indices (-1 empty), ``n_pairs`` [B], ``query_keys``
[B, M] key tokens asked, ``bound`` [B, M], ``slot`` [B, M] the table slot each query asks about
(-1 if unbound), ``answers`` [B, M] value class index of each answer.

``length_setting = "queries"``: the number of queries sets the sequence length.
"""
from __future__ import annotations

import itertools
import numbers
import random

import torch

from .base import Batch, ConfigError, Corruption, PaperRow, Preset, Primitive, Task, checked_batch_size, whole, batch_at_queries

LAYOUTS = ("paper", "compact")
ASKS = ("random", "every")  # which bound keys the queries ask: uniform draws, or each one once first
MARKERS = ("SEP", "STORE", "QUERY", "PAD", "FILL")  # paper layout: token ids n_keys + n_values + i


def read_sequence(n_keys: int, n_values: int, tokens: list[int], layout: str):
    """(table keys, table value classes, query keys, shown answer classes) of one raw sequence.

    Reads the tokens left to right, as a person would, independently of where ``sample`` put them.
    """
    K, sep = n_keys, n_keys + n_values
    if layout == "compact":
        split = tokens.index(sep)
        return (tokens[0:split:2], [v - K for v in tokens[1:split:2]], tokens[split + 1::2],
                [a - K for a in tokens[split + 2::2]])
    store, query = sep + 1, sep + 2
    keys, values, queries = [], [], []
    for i, token in enumerate(tokens):
        if token == store:
            assert tokens[i + 2] == sep
            keys.append(tokens[i + 1])
            values.append(tokens[i + 3] - K)
        elif token == query:
            queries.append(tokens[i + 1])
    return keys, values, queries, []


def enumerated_posterior(n_keys: int, n_values: int, tokens: list[int], query_index: int,
                         layout: str = "compact") -> torch.Tensor:
    """P(answer to query ``query_index`` = v | everything before it), read off the raw tokens alone.

    Enumerates every hidden world: each injective table from the bound keys to values, and each
    tuple of answers to queries 0..query_index, weighting by the generative process (a bound key
    answers its table value; an unbound key answers a uniform draw from all values). Answers that
    were not shown (the paper layout's PAD) are summed over. Which keys are bound and which are
    asked does not depend on the values, so those factors cancel.
    """
    shown_keys, shown_values, query_keys, shown_answers = read_sequence(n_keys, n_values, tokens, layout)
    seen = min(query_index, len(shown_answers))  # answers shown before this query
    counts = [0.0] * n_values
    for table_values in itertools.permutations(range(n_values), len(shown_keys)):
        table = dict(zip(shown_keys, table_values))
        if list(table_values) != shown_values:
            continue
        for answers in itertools.product(range(n_values), repeat=query_index + 1):
            if list(answers[:seen]) != shown_answers[:seen]:
                continue
            weight = 1.0
            for q, a in zip(query_keys, answers):
                weight *= float(table[q] == a) if q in table else 1.0 / n_values
            counts[answers[query_index]] += weight
    total = sum(counts)
    return torch.tensor([c / total for c in counts])


# The cpu preset's first stage: tables of up to 8 pairs with 8 queries, 74 tokens instead of 329 (so
# a step costs a fraction and a sequence carries more labels); the keys, values and layout are the paper's.
SHORT_TABLES = dict(N=8, slots=8, fillers=4, gap=2, queries=8)

# Dense answers (zoology's MQAR supervision) at the paper's table: every bound key asked once, no gap between
# queries, so a sequence carries 64 labels at 480 tokens instead of 3 at 329. A training stage, not an
# evaluation: every number is reported on the paper's format (3 queries, 16 fillers apart).
DENSE = dict(queries=64, gap=0, ask="every")

# What the reproduction table needs of content-addressing: full tables and the trained query count only.
FULL_TABLE = dict(sizes="64", queries="3", n=1024)


class Recall(Task):
    name = "recall"
    order = 3
    length_setting = "queries"
    frame = "values"
    eliminates = True  # a bound key's answer is a delta: every other value is ruled out
    primitive = Primitive("binding", "accuracy", "min", 0.9, "between the paper's >= 97.8% and the LSTM's 0.5%")
    # The paper's task on a CPU budget, one recipe for every architecture (equal footing): tables of
    # 1..64 pairs at the paper's length (``N_min=1``), 2,000 steps of 64 sequences, the first 600 on
    # tables of 1..8 pairs at a short length (SHORT_TABLES: 8 queries, 74 tokens), and the same
    # scaffold for all, a token shift of 3 on the embeddings (models/base.py TokenShift; Mamba has its
    # own short convolution inside every block as well). The transformer (the capacity reference) has
    # rotary positions and a tied unembedding, as the paper's model has, and lr 3e-3, found by probing
    # (models/pretrained/recall-transformer-cpu/README.md: without the shift no probe left the plateau
    # of copying any table value). Mamba's lr 3.2e-3 is the best of the equal search over 1e-3, 3.2e-3
    # and 1e-2 at this budget (docs/results/binding.md, "At 2,000 × 64: only the shifted transformer binds"); the LSTM and the MLP
    # train on the same recipe.
    presets = {"cpu": Preset(task=dict(N_min=1), model=dict(shift=3),
                             train=dict(steps=2_000, batch_size=64, lr=3.2e-3, curriculum=[[600, SHORT_TABLES]]),
                             by_arch={"transformer": Preset(model=dict(d_model=64, n_heads=2, positional="rotary",
                                                                       tied=True),
                                                            train=dict(lr=3e-3))})}
    # Accuracy on the paper's task itself: every table full (64 pairs), whatever range a preset trains on.
    paper_rows = (*(PaperRow("associative recall (64 pairs from pools of 256, fillers, 3 queries), accuracy", arch,
                             "content-addressing", "accuracy_full_table", paper, text, options=FULL_TABLE,
                             variants=True)
                    for arch, paper, text in (("transformer", 1.0, "100%"), ("mamba", 0.978, "97.8%"),
                                              ("lstm", 0.005, "0.5%"), ("mlp", None, "–"))),
                  PaperRow("  the same, worst of the 64 table slots (content, not position)", "transformer",
                           "content-addressing", "per_slot_min", None, "–", options=FULL_TABLE))

    def __init__(self, N: int = 64, n_keys: int = 256, n_values: int = 256, queries: int = 3,
                 p_unbound: float = 0.0, layout: str = "paper", fillers: int | None = None,
                 gap: int | None = None, N_min: int | None = None, slots: int | None = None, ask: str = "random",
                 pool: int | None = None):
        if layout not in LAYOUTS:
            raise ConfigError(f"recall: layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        paper = layout == "paper"
        N, n_keys, n_values, queries = (whole("recall", label, value, 1) for label, value in
                                        (("N", N), ("n_keys", n_keys), ("n_values", n_values), ("queries", queries)))
        fillers = whole("recall", "fillers", (32 if paper else 0) if fillers is None else fillers, 0)
        gap = whole("recall", "gap", (16 if paper else 0) if gap is None else gap, 0)
        N_min = whole("recall", "N_min", N if N_min is None else N_min, 1)
        slots = whole("recall", "slots", N if slots is None else slots, 1)
        if N_min > N:
            raise ConfigError(f"recall: N_min={N_min} is more than N={N}; the table holds N_min..N pairs")
        if slots < N:
            raise ConfigError(f"recall: slots={slots} cannot hold N={N} pairs; raise slots or lower N")
        if not paper and (fillers or gap or N_min != N or slots != N):
            raise ConfigError("recall: fillers, gap, N_min and slots need layout='paper' (the compact layout "
                              "has no filler token)")
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
        if ask not in ASKS:
            raise ConfigError(f"recall: ask must be one of {', '.join(ASKS)}, got {ask!r}")
        if pool is not None:
            pool = whole("recall", "pool", pool, 1)
            if not N <= pool <= min(n_keys, n_values):
                raise ConfigError(f"recall: pool={pool} must hold the table (at least N={N}) and fit in both pools "
                                  f"(at most n_keys={n_keys}, n_values={n_values})")
            if p_unbound > 0 and pool <= N:
                raise ConfigError(f"recall: p_unbound={p_unbound} needs keys that are never bound; raise pool above "
                                  f"N={N} or set p_unbound=0")
        if ask == "every" and p_unbound > 0:
            raise ConfigError("recall: ask='every' asks each bound key once; it takes no unbound queries (p_unbound=0)")
        if p_unbound > 0 and n_keys <= N:
            raise ConfigError(f"recall: p_unbound={p_unbound} needs keys that are never bound; "
                              f"raise n_keys above N={N} or set p_unbound=0")
        self.N, self.n_keys, self.n_values, self.queries = N, n_keys, n_values, queries
        self.p_unbound = float(p_unbound)
        self.layout, self.fillers, self.gap, self.N_min, self.slots = layout, fillers, gap, N_min, slots
        self.ask, self.pool = ask, pool
        for i, marker in enumerate(MARKERS if paper else MARKERS[:1]):
            setattr(self, marker, n_keys + n_values + i)
        self.vocab_size = n_keys + n_values + (len(MARKERS) if paper else 1)
        self.n_classes = n_values
        self.answer_token_offset = n_keys  # answers are read off the value tokens' output logits
        if paper:
            self.first_query = 4 * slots + fillers  # the first QUERY marker
            self.seq_len = self.first_query + 3 * queries + gap * (queries - 1)
        else:
            self.seq_len = 2 * N + 2 * queries

    def config(self) -> dict:
        return dict(name=self.name, N=self.N, n_keys=self.n_keys, n_values=self.n_values, queries=self.queries,
                    p_unbound=self.p_unbound, layout=self.layout, fillers=self.fillers, gap=self.gap,
                    N_min=self.N_min, slots=self.slots, ask=self.ask) | ({"pool": self.pool} if self.pool else {})

    def vary(self, setting: str, value) -> "Task":
        """N as a difficulty axis: exactly that many pairs in the same table (``with_table``)."""
        return self.with_table(value) if setting == "N" else super().vary(setting, value)

    def judged_on(self) -> "Recall":
        """Binding is judged on full tables, the paper's 64 pairs: accuracy over a range of table sizes
        would count the small tables that even a model without binding answers (1/n of them by chance)."""
        return self if self.N_min == self.N else self.with_table(self.N)

    def with_table(self, n: int) -> "Recall":
        """Exactly ``n`` pairs; in the paper layout at the same length (the other slots filler), so no
        query moves."""
        config = self.config() | dict(N=n, N_min=n)
        if self.layout == "paper":
            config["slots"] = max(self.slots, n)
        else:
            config["slots"] = n
        config.pop("name")
        return Recall(**config)

    curricula = {"dense-mix": "every step on a mixture of dense tables (every bound key asked once, no gap) of N/8, "
                              "N/4, N/2 and N pairs, and the task itself in turn: the start of binding is faster "
                              "than on the task's own sparse answers (measured on the paper's 64-pair tables)"}

    def curriculum(self, name: str, steps: int) -> list:
        """``dense-mix``: the binding recipe's stages. Each smaller table is its own full table at a length
        of its own (fillers half its pairs, as the mixture the shipped binding models trained on); the
        full-size dense table keeps the task's layout; ``{}`` is the task itself, what every evaluation uses."""
        if name != "dense-mix":
            raise ConfigError(self.unknown_curriculum(name))
        if self.layout != "paper":
            raise ConfigError("recall: the dense-mix curriculum needs layout='paper' (its smaller tables have fillers)")
        sizes = sorted({max(1, self.N // k) for k in (8, 4, 2)} - {self.N})
        dense = dict(gap=0, ask="every", p_unbound=0.0)
        mixture = [dict(N=n, N_min=n, slots=n, fillers=max(1, n // 2), queries=n, **dense) for n in sizes]
        mixture += [dict(queries=self.N, **dense), {}]
        return [[steps, mixture]]

    corruptions = {"value": "the binding the last query asks about shows another value, one bound nowhere (index: "
                            "which table slot, default 0); the answer moves from one value to the other",
                   "key": "the binding the last query asks about shows another key, one bound nowhere (index: which "
                          "table slot, default 0); the query is then unbound and its answer uniform"}

    def corrupt(self, batch: Batch, generator: torch.Generator | None = None, kind: str = "",
                index: int | None = None) -> Corruption:
        """The last query pointed at table slot ``index`` (the clean batch); then that slot's value (or key)
        replaced by one bound nowhere in the row, uniform over those (the corrupted batch)."""
        kind = self.corruption_kind(kind)
        slot = 0 if index is None else index
        paper = self.layout == "paper"
        if not paper:  # its shown answers would contradict a changed binding
            raise ConfigError("recall: corruptions are defined for the paper layout")
        filled = int(batch.hypothesis["n_pairs"].min())
        if not 0 <= slot < filled:
            raise ConfigError(f"recall: the slot to corrupt must be bound in every sequence: from 0 to {filled - 1} "
                              f"here (this task binds {self.N_min}..{self.N} pairs), got {slot}")
        pool, size = (self.n_values, self.n_keys) if kind == "value" else (self.n_keys, 0)
        bound = batch.hypothesis["values" if kind == "value" else "keys"]
        if pool <= self.N:
            raise ConfigError(f"recall: a {kind} bound nowhere needs more than N={self.N} {kind}s in the pool")
        query = int(self.query_positions()[-1])
        key_pos, value_pos = (4 * slot + 1, 4 * slot + 3) if paper else (2 * slot, 2 * slot + 1)
        tokens = batch.tokens.clone()
        tokens[:, query] = tokens[:, key_pos]  # the clean sequence asks about the slot
        clean = self.batch_from_tokens(tokens)
        taken = torch.nn.functional.one_hot(bound + 1, pool + 1)[..., 1:].any(1)  # an empty slot's -1 drops out
        free = ~taken
        noise = torch.rand(len(tokens), pool, generator=generator).masked_fill(~free, -1.0)
        position = value_pos if kind == "value" else key_pos
        tokens = tokens.clone()
        tokens[:, position] = noise.argmax(1) + size
        return Corruption(clean, self.batch_from_tokens(tokens), query=query, changed=(position,),
                          what=f"the {kind} of table slot {slot} (asked by the last query) replaced by one bound nowhere")

    def move_pair(self, tokens: torch.Tensor, slot: torch.Tensor, to: int) -> torch.Tensor:
        """``tokens`` [B, T] with row i's table slot ``slot[i]`` and slot ``to`` swapped (their whole blocks:
        STORE key SEP value, or key value), so the same pair sits at ``to`` and nothing else in the row moves
        but the pair that was there. The bindings, and so every answer, stay as they were."""
        width = 4 if self.layout == "paper" else 2
        if not 0 <= to < self.slots or bool(((slot < 0) | (slot >= self.slots)).any()):
            raise ConfigError(f"recall: slots to move between must lie from 0 to {self.slots - 1}")
        moved = tokens.clone()
        offsets = torch.arange(width)
        rows = torch.arange(len(tokens))[:, None]
        source = width * slot[:, None] + offsets  # [B, width]
        target = width * to + offsets
        moved[rows, source] = tokens[:, target]
        moved[rows, target] = tokens[rows, source]
        return moved

    def query_positions(self, queries: int | None = None) -> torch.Tensor:
        """Positions of the query keys, where beliefs are asked for."""
        M = self.queries if queries is None else queries
        if self.layout == "paper":
            return self.first_query + 1 + (3 + self.gap) * torch.arange(M)
        return 2 * self.N + 1 + 2 * torch.arange(M)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        N, K, V, M, B = self.N, self.n_keys, self.n_values, self.queries, checked_batch_size(batch_size)
        S = self.slots
        # Distinct draws as argsort of i.i.d. uniform noise. The first n of the key permutation are
        # bound; the rest is the pool of never-bound keys unbound queries draw from. With ``pool`` the
        # tables (and unbound queries) use only the first ``pool`` keys and values.
        key_perm = torch.rand(B, self.pool or K, generator=generator).argsort(dim=1)
        value_perm = torch.rand(B, self.pool or V, generator=generator).argsort(dim=1)
        n_pairs = self.N_min + (torch.rand(B, generator=generator) * (N - self.N_min + 1)).long().clamp(max=N - self.N_min)
        filled = torch.arange(S) < n_pairs[:, None]  # [B, S]
        empty = torch.full((B, S), -1)
        keys = empty.clone()
        keys[:, :N] = key_perm[:, :N]
        keys = keys.where(filled, empty)
        values = empty.clone()
        values[:, :N] = value_perm[:, :N]
        values = values.where(filled, empty)

        # Every random tensor is drawn whatever the settings, so the stream a seed produces does
        # not depend on which branch a query takes.
        bound = torch.rand(B, M, generator=generator) >= self.p_unbound
        bound_slot = (torch.rand(B, M, generator=generator) * n_pairs[:, None]).long().clamp(max=n_pairs[:, None] - 1)
        # placeholder width when no key is free (bound is all True)
        n_free = (key_perm.size(1) - n_pairs[:, None]).clamp(min=1)
        free_slot = n_pairs[:, None] + (torch.rand(B, M, generator=generator) * n_free).long().clamp(max=n_free - 1)
        noise = torch.randint(0, V, (B, M), generator=generator)
        if self.ask == "every":  # drawn last and only here: the random layout's stream is unchanged
            bound_slot = self._every_slot(bound_slot, filled, n_pairs, generator)
        query_keys = key_perm.gather(1, torch.where(bound, bound_slot, free_slot.clamp(max=key_perm.size(1) - 1)))
        bound_answer = values.gather(1, bound_slot)
        answers = torch.where(bound, bound_answer, noise)

        # Unbound: uniform over all values, also on a repeat, since earlier answers were noise.
        delta = torch.nn.functional.one_hot(bound_answer, V).float()
        query_posterior = torch.where(bound[..., None], delta, torch.full_like(delta, 1.0 / V))

        query_pos = self.query_positions()
        if self.layout == "paper":
            tokens = torch.full((B, self.seq_len), self.FILL)
            pair_pos = 4 * torch.arange(S)
            for offset, content in enumerate((torch.full_like(keys, self.STORE), keys,
                                              torch.full_like(keys, self.SEP), values + K)):
                tokens[:, pair_pos + offset] = content.where(filled, torch.full_like(keys, self.FILL))
            tokens[:, query_pos - 1] = self.QUERY
            tokens[:, query_pos + 1] = self.PAD
        else:
            tokens = torch.empty(B, self.seq_len, dtype=torch.long)
            tokens[:, 0:2 * N:2] = keys
            tokens[:, 1:2 * N:2] = values + K
            tokens[:, 2 * N] = self.SEP
            tokens[:, query_pos[:-1] + 1] = answers[:, :-1] + K
        tokens[:, query_pos] = query_keys

        return batch_at_queries(tokens, query_pos, query_posterior, answers,
                                hypothesis=dict(keys=keys, values=values, n_pairs=n_pairs, query_keys=query_keys,
                                                bound=bound, slot=bound_slot.where(bound, torch.full_like(bound_slot, -1)),
                                                answers=answers))

    def _every_slot(self, drawn: torch.Tensor, filled: torch.Tensor, n_pairs: torch.Tensor,
                    generator: torch.Generator | None) -> torch.Tensor:
        """The slot each query asks with ``ask="every"``: a random order of the n bound slots for the first
        min(M, n) queries, ``drawn`` (uniform over the bound slots) for the rest."""
        B, M = drawn.shape
        order = torch.rand(B, self.slots, generator=generator).masked_fill(~filled, 2.0).argsort(1)  # bound first
        ordered = torch.cat([order, drawn[:, self.slots:]], 1)[:, :M]  # M > slots: the extra queries are drawn
        return torch.where(torch.arange(M) < n_pairs[:, None], ordered, drawn)

    def batch_from_tokens(self, tokens: torch.Tensor) -> Batch:
        """The table, then any number of queries laid out as in ``sample`` (shown answers carry nothing)."""
        K, V = self.n_keys, self.n_values
        tokens = (tokens if tokens.dim() == 2 else tokens[None]).long().cpu()
        is_key = lambda x: ((x >= 0) & (x < K)).all()
        is_value = lambda x: ((x >= K) & (x < K + V)).all()
        if self.layout == "paper":
            keys, values, queries, ok = self._read_paper(tokens, is_key, is_value)
        else:
            N = self.N
            keys, values = tokens[:, 0:2 * N:2], tokens[:, 1:2 * N:2] - K
            queries, answers = tokens[:, 2 * N + 1::2], tokens[:, 2 * N + 2::2]
            ok = (tokens.shape[1] > 2 * N + 1 and bool((tokens[:, 2 * N] == self.SEP).all()) and is_key(keys)
                  and is_value(values + K) and is_key(queries) and is_value(answers))
        if not ok:
            layout = (f"up to {self.slots} slots of STORE key SEP value (or FILL x4), {self.fillers} FILL, then "
                      f"QUERY key PAD separated by {self.gap} FILL" if self.layout == "paper" else
                      f"{self.N} key-value pairs, SEP, then query keys each followed by an answer value")
            raise ConfigError(f"recall: a sequence is {layout}")
        bound_keys = keys.where(keys >= 0, torch.full_like(keys, -2))
        if ((bound_keys[:, :, None] == bound_keys[:, None, :]) & (bound_keys[:, :, None] >= 0)).sum((1, 2)).gt(
                (keys >= 0).sum(1)).any():
            raise ConfigError("recall: the table binds a key twice")
        match = queries[:, :, None] == bound_keys[:, None, :]  # [B, M, S]: at most one bound slot per query
        bound = match.any(-1)
        slot = torch.where(bound, match.long().argmax(-1), torch.full_like(bound, -1, dtype=torch.long))
        delta = torch.nn.functional.one_hot(values.clamp(min=0).gather(1, slot.clamp(min=0)), V).float()
        posterior = torch.where(bound[..., None], delta, torch.full_like(delta, 1.0 / V))
        return batch_at_queries(tokens, self.query_positions(queries.shape[1]), posterior,
                                torch.full(queries.shape, -100),
                                hypothesis=dict(keys=keys, values=values, n_pairs=(keys >= 0).sum(1),
                                                query_keys=queries, bound=bound, slot=slot))

    def _read_paper(self, tokens: torch.Tensor, is_key, is_value):
        """Keys, value classes (-1 in empty slots), query keys and whether the layout holds, at fixed positions."""
        K, S, T = self.n_keys, self.slots, tokens.shape[1]
        rest = T - self.first_query + self.gap
        M = rest // (3 + self.gap)
        if T <= self.first_query or M < 1 or rest % (3 + self.gap):
            return None, None, None, False
        table = tokens[:, :4 * S].reshape(-1, S, 4)
        filled = table[:, :, 0] == self.STORE
        empty = (table == self.FILL).all(-1)
        keys = table[:, :, 1].where(filled, torch.full_like(filled, -1, dtype=torch.long))
        values = (table[:, :, 3] - K).where(filled, torch.full_like(filled, -1, dtype=torch.long))
        query_pos = self.query_positions(M)
        queries = tokens[:, query_pos]
        fill = torch.ones(T, dtype=torch.bool)
        fill[:4 * S] = False
        for offset in (-1, 0, 1):
            fill[query_pos + offset] = False
        ok = (bool((filled | empty).all()) and bool((table[:, :, 2][filled] == self.SEP).all())
              and is_key(table[:, :, 1][filled]) and is_value(table[:, :, 3][filled]) and is_key(queries)
              and bool((tokens[:, query_pos - 1] == self.QUERY).all()) and bool((tokens[:, query_pos + 1] == self.PAD).all())
              and bool((tokens[:, fill] == self.FILL).all()))
        return keys, values, queries, ok

    @classmethod
    def small_config(cls, rng: random.Random) -> dict:
        N = rng.randint(1, 3)
        n_keys, n_values = rng.randint(N, 4), rng.randint(N, 4)
        # unbound queries need a free key; a third of the configs have none, so ask="every" is drawn too
        p_unbound = rng.uniform(0.0, 0.9) if n_keys > N and rng.random() < 0.7 else 0.0
        config = dict(N=N, n_keys=n_keys, n_values=n_values, queries=rng.randint(1, 3), p_unbound=p_unbound)
        if p_unbound == 0.0 and rng.random() < 0.5:
            config["ask"] = "every"
        if rng.random() < 0.5:
            return config | dict(layout="compact")
        return config | dict(layout="paper", fillers=rng.randint(0, 2), gap=rng.randint(0, 2),
                             N_min=rng.randint(1, N), slots=N + rng.randint(0, 1))

    def brute_force(self, batch: Batch, row: int) -> torch.Tensor:
        tokens = batch.tokens[row].tolist()
        return torch.stack([enumerated_posterior(self.n_keys, self.n_values, tokens, i, self.layout)
                            for i in range(self.queries)]).double()

    def token_names(self, tokens: torch.Tensor) -> list[str]:
        K, V = self.n_keys, self.n_values
        markers = MARKERS if self.layout == "paper" else MARKERS[:1]
        return [f"k{t}" if t < K else f"v{t - K}" if t < K + V else markers[t - K - V] for t in map(int, tokens)]

    def hypothesis_tokens(self) -> dict[str, torch.Tensor]:
        K, V = self.n_keys, self.n_values
        return {"values": torch.arange(K, K + V), "keys": torch.arange(K)}
