"""Generalized (edge-emitting) hidden Markov processes: the computational-mechanics wind tunnels.

A process is a set of labelled transition matrices, one S x S matrix per token x:

    T^(x)[i, j] = p(emit x and move to hidden state j | hidden state i)

whose sum T = sum_x T^(x) is a stochastic matrix (every row sums to 1). Shai et al., "Transformers
represent belief state geometry in their residual stream" (2024), train on sequences of such processes
(Mess3, RRXOR) and read the exact belief over the hidden states linearly out of the residual stream.
A subclass declares its tokens and its matrices; everything else lives here, so adding a process is a
few lines (``tasks/mess3.py`` is one).

Sequences (length L, tokens 0..V-1: the process's tokens, nothing else)
- The hidden state s_0 is drawn from T's stationary distribution pi (the unique left eigenvector of
  eigenvalue 1), then L + 1 steps each draw (x_t, s_t) jointly from row s_{t-1} of [T^(0) ... T^(V-1)]
  by inverse CDF on the caller's generator. The input is x_1..x_L; x_{L+1} is only the last target.

Queries, beliefs and the posterior (every position is a query)
- After reading x_1..x_t (position t - 1) the belief over the hidden state s_t is
  eta_t = pi T^(x_1) ... T^(x_t) / its sum (``hypothesis["belief"]``, [B, L, S], float64, normalised
  every step), and the Bayes answer is the next-token distribution p(x_{t+1} = x | x_1..x_t) =
  eta_t T^(x) 1 (``posterior``, [B, L, V]). The posterior is a linear image of the belief; for RRXOR
  (2 tokens, 5 states) it is a lossy one, so the belief, not the answer, is what belief-state reads.
- ``targets`` holds the sampled next token x_{t+1}; ``hypothesis["states"]`` the true s_t (the state
  each query's belief is about), so belief-clusters can colour by it.
"""
from __future__ import annotations

import inspect
import itertools
import random

import torch

from .base import Batch, ConfigError, Corruption, Preset, Task, batch_at_queries, checked_batch_size, whole

ROW_TOLERANCE = 1e-9  # how far a row of T may sum from 1 (float rounding of hand-written entries)


def stationary(T: torch.Tensor) -> torch.Tensor:
    """The stationary distribution of the stochastic matrix ``T`` [S, S] (float64); ConfigError when it is not
    unique (a process whose hidden chain splits into closed classes has no one distribution to start from)."""
    S = T.shape[0]
    system = torch.cat([T.t() - torch.eye(S, dtype=T.dtype), torch.ones(1, S, dtype=T.dtype)])
    if torch.linalg.matrix_rank(system[:S], atol=1e-10) != S - 1:
        raise ConfigError("the hidden chain has more than one stationary distribution (it splits into closed "
                          "classes); give a process whose states all communicate")
    target = torch.zeros(S + 1, 1, dtype=T.dtype)
    target[S] = 1.0
    pi = torch.linalg.lstsq(system, target).solution[:, 0]
    return pi.clamp_min(0) / pi.clamp_min(0).sum()


def filter_beliefs(matrices: torch.Tensor, start: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(beliefs [B, L, S], the probability of each prefix [B, L]) after each token of ``tokens`` [B, L], from the
    belief ``start`` [S]: eta_t = eta_{t-1} T^(x_t), normalised every step (float64). A prefix of probability 0
    leaves a belief of zeros."""
    B, L = tokens.shape
    eta = start.expand(B, -1).clone()
    beliefs = torch.empty(B, L, start.shape[0], dtype=torch.float64)
    prefix = torch.ones(B, dtype=torch.float64)
    probability = torch.empty(B, L, dtype=torch.float64)
    for t in range(L):
        eta = torch.einsum("bi,bij->bj", eta, matrices[tokens[:, t]])
        mass = eta.sum(-1)
        prefix = prefix * mass
        probability[:, t] = prefix
        eta = torch.where(mass[:, None] > 0, eta / mass.clamp_min(1e-300)[:, None], torch.zeros_like(eta))
        beliefs[:, t] = eta
    return beliefs, probability


def enumerated_beliefs(matrices: list, start: list, tokens: list) -> tuple[list, list]:
    """(belief over s_t, next-token distribution) after each prefix of ``tokens``, by summing the joint
    probability of the prefix over every hidden path s_0..s_t (plain lists in and out): an independent route
    to ``filter_beliefs``, for small cases only."""
    S, V = len(start), len(matrices)
    beliefs, nexts = [], []
    for t in range(1, len(tokens) + 1):
        mass = [0.0] * S
        for path in itertools.product(range(S), repeat=t + 1):
            p = start[path[0]]
            for i in range(t):
                p *= matrices[tokens[i]][path[i]][path[i + 1]]
            mass[path[-1]] += p
        total = sum(mass)
        belief = [m / total for m in mass]
        beliefs.append(belief)
        nexts.append([sum(belief[i] * sum(matrices[x][i]) for i in range(S)) for x in range(V)])
    return beliefs, nexts


class GHMM(Task):
    """Base class of a process wind tunnel. A subclass sets ``name`` and ``token_labels``, takes its own
    parameters and ``L`` in ``__init__`` (stored under the same names, then ``super().__init__(L)``), and returns
    its matrices from ``matrices()`` as nested lists [V][S][S]."""

    token_labels: tuple[str, ...] = ()
    state_labels: tuple[str, ...] = ()  # names of the hidden states (s0, s1, ... when empty)
    length_setting = "L"
    belief_over = "hidden states"
    query_latent, query_latent_classes = "states", "S"
    # Shai et al. train 4 layers; the read-out per layer is the question here, so every architecture gets 4.
    # Positions are sized for twice the default length, so length generalisation can be measured.
    presets = {"cpu": Preset(model=dict(n_layers=4), longest=20,
                             train=dict(steps=2_000, batch_size=64, lr=3e-3, warmup=200, eval_every=250,
                                        eval_size=1_000))}

    def __init__(self, L: int = 10):
        self.L = whole(self.name, "L", L)
        matrices = torch.tensor(self.matrices(), dtype=torch.float64)
        if matrices.dim() != 3 or matrices.shape[1] != matrices.shape[2] or len(matrices) < 2:
            raise ConfigError(f"{self.name}: matrices() must give one S x S matrix per token, at least 2 tokens; "
                              f"got shape {list(matrices.shape)}")
        if not torch.isfinite(matrices).all() or (matrices < 0).any():
            raise ConfigError(f"{self.name}: every transition entry must be a probability >= 0")
        rows = matrices.sum((0, 2))
        if ((rows - 1).abs() > ROW_TOLERANCE).any():
            raise ConfigError(f"{self.name}: the matrices summed over tokens must be stochastic (rows summing to 1); "
                              f"row sums {[round(r, 6) for r in rows.tolist()]}")
        self.transitions = matrices
        self.V, self.S = matrices.shape[0], matrices.shape[1]
        self.pi = stationary(matrices.sum(0))
        self.vocab_size = self.n_classes = self.V
        self.seq_len = self.L

    corruptions = {"token": "one token replaced by another (index: which token, default the third from last); the "
                            "belief and the next-token posterior at the last position move"}

    def corrupt(self, batch: Batch, generator: torch.Generator | None = None, kind: str = "",
                index: int | None = None) -> Corruption:
        """Token ``index`` replaced by a different token (uniform over the other V - 1)."""
        self.corruption_kind(kind)
        index = max(self.L - 3, 0) if index is None else index
        if not 0 <= index < self.L:
            raise ConfigError(f"{self.name}: the token to corrupt must be from 0 to {self.L - 1}, got {index}")
        tokens = batch.tokens.clone()
        tokens[:, index] = (tokens[:, index] + torch.randint(1, self.V, (len(tokens),), generator=generator)) % self.V
        return Corruption(batch, self.batch_from_tokens(tokens), query=self.L - 1, changed=(index,),
                          what=f"token {index} replaced by another")

    def matrices(self) -> list:
        raise NotImplementedError(f"{type(self).__name__} must return its transition matrices")

    def config(self) -> dict:
        own = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return dict(name=self.name, **{p: getattr(self, p) for p in own})

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        B, L, S = checked_batch_size(batch_size), self.L, self.S
        joint = self.transitions.permute(1, 0, 2).reshape(S, self.V * S)  # row s: p(x, s' | s), index x * S + s'
        cumulative = joint.cumsum(-1)
        cumulative[:, -1] = float("inf")  # rounding can leave the last sum a hair under a uniform draw
        state = torch.searchsorted(self.pi.cumsum(0), torch.rand(B, dtype=torch.float64, generator=generator))
        state = state.clamp_max(S - 1)
        emitted, states = torch.empty(B, L + 1, dtype=torch.long), torch.empty(B, L + 1, dtype=torch.long)
        for t in range(L + 1):
            draw = torch.rand(B, 1, dtype=torch.float64, generator=generator)
            edge = torch.searchsorted(cumulative[state], draw)[:, 0]
            emitted[:, t], state = edge // S, edge % S
            states[:, t] = state
        tokens, labels = emitted[:, :L], emitted[:, 1:]
        beliefs, _ = filter_beliefs(self.transitions, self.pi, tokens)
        return batch_at_queries(tokens, torch.arange(L), self.next_token(beliefs), labels,
                                hypothesis=dict(belief=beliefs, states=states[:, :L]))

    def next_token(self, beliefs: torch.Tensor) -> torch.Tensor:
        """p(next token) [..., V] from beliefs [..., S]: eta T^(x) 1 for every token x."""
        return beliefs @ self.transitions.sum(-1).t()

    def batch_from_tokens(self, tokens: torch.Tensor) -> Batch:
        """The beliefs and next-token posteriors of typed sequences (any length); ConfigError for a sequence the
        process cannot emit (its belief is undefined)."""
        tokens = (tokens if tokens.dim() == 2 else tokens[None]).long().cpu()
        if tokens.shape[1] == 0:
            raise ConfigError(f"{self.name}: a sequence needs at least one token")
        if ((tokens < 0) | (tokens >= self.V)).any():
            raise ConfigError(f"{self.name}: tokens are {', '.join(self.token_labels)} (ids 0 to {self.V - 1})")
        beliefs, probability = filter_beliefs(self.transitions, self.pi, tokens)
        impossible = (probability <= 0).any(1)
        if impossible.any():
            first = int((probability[impossible.nonzero()[0, 0]] <= 0).nonzero()[0, 0])  # in the first such row
            raise ConfigError(f"{self.name}: the process never emits this sequence (its first {first + 1} tokens "
                              f"have probability 0), so there is no belief to compare with")
        return batch_at_queries(tokens, torch.arange(tokens.shape[1]), self.next_token(beliefs),
                                torch.full(tokens.shape, -100), hypothesis=dict(belief=beliefs))

    def brute_force(self, batch: Batch, row: int) -> torch.Tensor:
        _, nexts = enumerated_beliefs(self.transitions.tolist(), self.pi.tolist(), batch.tokens[row].tolist())
        return torch.tensor(nexts, dtype=torch.float64)

    @classmethod
    def small_config(cls, rng: random.Random) -> dict:
        return dict(L=rng.randint(1, 5))

    def token_names(self, tokens: torch.Tensor) -> list[str]:
        return [self.token_labels[int(t)] if 0 <= int(t) < len(self.token_labels) else str(int(t)) for t in tokens]

    def state_names(self) -> list[str]:
        return list(self.state_labels) or [f"s{i}" for i in range(self.S)]

    def latent_path(self, batch: Batch, row: int) -> tuple[str, list[int]] | None:
        states = batch.hypothesis.get("states")
        return None if states is None else ("true hidden state", states[row].tolist())

    def latent_tables(self, batch: Batch, row: int) -> dict:
        states = self.state_names()
        return {f"T^({label})[s, s']": (self.transitions[x], states, states) for x, label in enumerate(self.token_labels)}
