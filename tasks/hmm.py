"""Hidden Markov model filtering: a fresh HMM per sequence, its tables shown in the prompt.

Each sequence has its own S-state, O-symbol HMM. The prompt spells out the transition table T
(S x S) and the emission table E (S x O); the model then reads K observations and, at every
observation, states its belief about the current hidden state.

Tokens (vocabulary 104 + O + S)
- ``0..100``: probability tokens; token k means k/100. Only 5..100 occur (every entry is >= 0.05).
- ``101`` TRANS, ``102`` EMIT, ``103`` SEP.
- ``104..104+O-1``: observation tokens o0..o{O-1}.
- ``104+O..104+O+S-1``: state tokens s0..s{S-1}. They never appear in the input; they exist so the
  model has an output logit per answer class (``answer_token_offset = 104 + O``).

Sequence (length 3 + S*S + S*O + K)::

    [TRANS] T[0,0] T[0,1] ... T[S-1,S-1] [EMIT] E[0,0] ... E[S-1,O-1] [SEP] o_1 ... o_K

with both tables row-major (row = current state; T[i, j] = p(s_{t+1} = j | s_t = i),
E[i, k] = p(o_t = k | s_t = i)).

Sampling (per sequence, independently)
- Every row of T and of E is drawn from a symmetric Dirichlet(concentration) (normalised Gamma
  variates, drawn from the caller's generator: -log U for concentration 1, Marsaglia-Tsang
  otherwise, with the U^(1/a) boost for a < 1).
- Quantisation, per row of n entries (n = S or O), in integer units of 0.01:
  1. floor each entry at 0.05 and renormalise the row to sum 1; call the result q;
  2. every entry gets the minimum 5 units; the remaining R = 100 - 5n units are apportioned by
     the largest-remainder (Hamilton) method in proportion to max(100 q - 5, 0) (remainders
     equal on a 2^-40 grid tie, and ties go to the lower index). When every 100 q is >= 5 this
     is exactly largest-remainder rounding of 100 q; an entry that renormalisation pushed below
     0.05 gets exactly 0.05 and the others give up the difference in proportion to their excess.
  The result is integers >= 5 summing to exactly 100 (``hypothesis["T_units"]``, ``["E_units"]``);
  the tables the model sees and the posterior uses are units / 100 (``["T"]``, ``["E"]``, float64).
- The initial state distribution is uniform and is not in the prompt. s_1 ~ uniform,
  s_{t+1} ~ T[s_t], o_t ~ E[s_t]; the first observation is emitted from the initial state with no
  transition. Draws use integer inverse-CDF on the units, so they follow the quantised tables
  exactly.

Queries and posterior
- Every observation position is a query. Its posterior is the filtering distribution
  p(s_t | o_1..o_t) (the current observation included) under the quantised tables and the uniform
  initial distribution, computed by the forward algorithm in log space (``forward_filter``) in
  float64 and stored as float32. Other positions hold a uniform 1/S placeholder.
- ``targets`` holds the true state s_t at observation positions (-100 elsewhere): hard labels for
  ``loss="hard"``; ``loss="soft"`` trains on the posterior.
"""
from __future__ import annotations

import itertools
import math
import random

import torch

from .base import Batch, ConfigError, Corruption, PaperRow, Preset, Primitive, Task, checked_batch_size, whole, batch_at_queries

TRANS, EMIT, SEP = 101, 102, 103
OBS0 = 104
UNITS = 100  # one probability unit is 0.01
MIN_UNITS = 5  # the 0.05 floor, in units


def _gamma_weights(shape, concentration: float, generator: torch.Generator | None) -> torch.Tensor:
    """Gamma(concentration, 1) variates along the last axis, each row scaled by a positive constant.

    Normalising a row gives a Dirichlet sample, so the per-row scale is free; it is used to keep
    small-concentration rows (where U^(1/a) underflows float64) representable. float64, driven only
    by ``generator``: torch's own Gamma sampler ignores generators, so batches would not replay.
    """
    a = float(concentration)
    if a == 1.0:
        # Exponential(1) = -log U with U = 1 - rand in (0, 1]; a row of S exact zeros has odds 2^-53S.
        return torch.rand(shape, dtype=torch.float64, generator=generator).neg_().log1p_().neg_()
    boost = a < 1.0
    d = (a + 1.0 if boost else a) - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    n = math.prod(shape)
    log_g = torch.empty(n, dtype=torch.float64)
    pending = torch.arange(n)
    # Marsaglia-Tsang accepts > 95% of proposals, so a handful of vectorised rounds suffice.
    while pending.numel():
        m = pending.numel()
        x = torch.randn(m, dtype=torch.float64, generator=generator)
        u = torch.rand(m, dtype=torch.float64, generator=generator)
        v = (1.0 + c * x) ** 3
        ok = v > 0
        logv = torch.log(v.clamp_min(1e-300))
        ok &= torch.log(u) < 0.5 * x * x + d - d * v + d * logv
        log_g[pending[ok]] = math.log(d) + logv[ok]
        pending = pending[~ok]
    log_g = log_g.view(shape)
    if boost:
        # Gamma(a) = Gamma(a + 1) * U^(1/a) for a < 1, done in logs for the same underflow reason.
        u = 1.0 - torch.rand(shape, dtype=torch.float64, generator=generator)
        log_g = log_g + torch.log(u) / a
    return (log_g - log_g.amax(-1, keepdim=True)).exp()


def dirichlet(shape, concentration: float = 1.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """Symmetric Dirichlet(concentration) samples, float64; the simplex is the last axis of ``shape``."""
    w = _gamma_weights(tuple(shape), concentration, generator)
    return w / w.sum(-1, keepdim=True)


def quantise_units(p: torch.Tensor) -> torch.Tensor:
    """Probability rows (last axis) -> integer units of 0.01, each >= 5, each row summing to 100.

    See the module docstring for the exact rule. Needs 5 * n <= 100 for rows of n entries.
    """
    n = p.shape[-1]
    q = p.to(torch.float64).clamp_min(MIN_UNITS / UNITS)
    q = q / q.sum(-1, keepdim=True)
    spare = UNITS - MIN_UNITS * n
    excess = (UNITS * q - MIN_UNITS).clamp_min(0)
    # sum(excess) >= spare, so it is 0 only when spare is 0 and then every share is 0 too.
    share = excess * (spare / excess.sum(-1, keepdim=True).clamp_min(1e-300))
    base = share.floor()
    short = (spare - base.sum(-1, keepdim=True)).round().long()
    # One integer sort key per entry: the remainder on a 2^-40 grid, then the lower index. Keys are
    # distinct, so a fast unstable sort is deterministic, and remainders equal up to float rounding
    # (e.g. three shares of 85/3) tie and go to the lower index instead of to rounding noise.
    key = ((share - base) * 2.0 ** 40).long() * n + torch.arange(n - 1, -1, -1)
    order = torch.argsort(key, dim=-1, descending=True)
    bonus = (torch.arange(n) < short).long()  # in sorted order: the top `short` get one more unit
    return (base.long() + MIN_UNITS).scatter_add_(-1, order, bonus)


def forward_filter(T: torch.Tensor, E: torch.Tensor, observations: torch.Tensor,
                   initial: torch.Tensor | None = None) -> torch.Tensor:
    """Filtering posteriors p(s_t | o_1..o_t) by the forward algorithm in log space.

    T [B, S, S], E [B, S, O] (rows are distributions), observations [B, K] (long), initial [B, S]
    or None for uniform. Returns [B, K, S] in the dtype of T. The first observation is emitted from
    the initial state; each later one follows one transition.

    The filter is carried as log p(s_t | o_1..o_t), normalised every step. Because it is
    normalised, exp of it is a distribution and the prediction sum over s of p(s) T[s, s'] is an
    exact log-sum-exp without a max shift; the emission update and the normalisation are done on
    logs with a max shift, so long sequences and tiny likelihoods cannot underflow.
    """
    B, S, _ = T.shape
    K = observations.shape[1]
    # Batch-last layout: reductions over the few states become element-wise ops over the batch.
    Tt = T.permute(1, 2, 0).contiguous()  # [s, s', B]
    emit = E.log().gather(2, observations[:, None, :].expand(B, S, K))  # [B, S, K]: log E[s, o_t]
    emit = emit.permute(2, 1, 0).contiguous()  # [K, S, B]
    if initial is None:
        log_alpha = torch.full((S, B), -math.log(S), dtype=T.dtype)
    else:
        log_alpha = initial.to(T.dtype).log().t().contiguous()
    out = torch.empty(K, S, B, dtype=T.dtype)
    for t in range(K):
        if t:
            log_alpha = (log_alpha.exp()[:, None, :] * Tt).sum(0).log_()
        log_alpha += emit[t]
        m = log_alpha.amax(0)
        log_alpha -= (log_alpha - m).exp_().sum(0).log_().add_(m)
        out[t] = log_alpha
    return out.exp_().permute(2, 0, 1)


def enumerated_filter(T, E, obs, S) -> torch.Tensor:
    """p(s_t | o_1..o_t) for every t by summing the joint over all S^t paths of the prefix (lists in)."""
    out = []
    for t in range(1, len(obs) + 1):
        mass = [0.0] * S
        for path in itertools.product(range(S), repeat=t):
            p = 1.0 / S * E[path[0]][obs[0]]
            for i in range(1, t):
                p *= T[path[i - 1]][path[i]] * E[path[i]][obs[i]]
            mass[path[-1]] += p
        total = sum(mass)
        out.append([m / total for m in mass])
    return torch.tensor(out, dtype=torch.float64)


class HMM(Task):
    name = "hmm"
    order = 1
    length_setting = "K"
    # The observation tokens: the model looks up an emission column by them. The hidden states'
    # tokens exist only as output classes (never input), so their embeddings hold no keys.
    frame = "observations"
    eliminates = False  # every table entry is >= 0.05, so no hidden state is ever ruled out
    query_latent, query_latent_classes = "states", "S"
    primitive = Primitive("transport", "entropy_mae_bits", "max", 0.05,
                          "between the paper's <= 0.024 bits and the LSTM's 0.41")
    # Filtering looks up table entries chosen by the current observation and composes them over
    # time, which wants more heads and depth than bijection; positions are sized for K=50 so the
    # same model can be tested for length generalisation.
    presets = {"cpu": Preset(model=dict(n_layers=4, n_heads=8), longest=50,
                             train=dict(steps=5_000, batch_size=64, lr=2e-3, warmup=300, eval_every=500),
                             # the transformer: 25k steps compiled under bf16 autocast (a step ~130 ms
                             # on a 2-core AMD EPYC with avx512_bf16, 116 ms with AMX): the error at the end of
                             # the schedule falls roughly as steps^-1.2, so steps per minute are what
                             # buy precision (README "Where the HMM error sits" has the curves; 8 layers
                             # of d=68 were no better per step). Mamba 10k steps (5k gave 0.029).
                             by_arch={"mlp": Preset(train=dict(steps=2_000)),
                                      "mamba": Preset(train=dict(steps=10_000)),
                                      "transformer": Preset(train=dict(steps=25_000, eval_every=1_000,
                                                                       compile=True, bf16=True))})}
    paper_rows = (
        PaperRow("HMM K=20, entropy MAE (bits)", "transformer", "calibration", "entropy_mae_bits", 7.5e-5, "7.5e-5"),
        *(PaperRow(f"HMM K={k} (trained at 20), entropy MAE (bits)", "transformer", "length-generalization",
                   f"lengths.{k}.entropy_mae_bits", float(paper), paper, options={"lengths": "30,50"})
          for k, paper in ((30, "0.012"), (50, "0.029"))),
        *(PaperRow("HMM K=20, entropy MAE (bits)", arch, "calibration", "entropy_mae_bits", float(paper), paper)
          for arch, paper in (("mamba", "0.024"), ("lstm", "0.411"), ("mlp", "0.40"))),
        PaperRow("Mamba final layer on HMM: k-means purity by hidden state", "mamba", "belief-clusters", "purity",
                 1.0, "5 clusters, one per hidden state"),
        PaperRow("HMM K=20, Bayes belief read linearly from the final layer, held-out R²", None, "belief-state", "r2",
                 None, "–"),
    )

    def __init__(self, S: int = 5, O: int = 5, K: int = 20, concentration: float = 1.0):
        for label, value, low in (("S", S, 2), ("O", O, 2), ("K", K, 1)):
            whole("hmm", label, value, low)
        for label, value in (("S", S), ("O", O)):
            if MIN_UNITS * value > UNITS:
                raise ConfigError(f"hmm: {label}={value} is too large for the 0.05 floor "
                                  f"({label} * 0.05 must be <= 1); use {label} <= {UNITS // MIN_UNITS}")
        if isinstance(concentration, bool) or not isinstance(concentration, (int, float)):
            raise ConfigError(f"hmm: concentration must be a number, got {concentration!r}")
        if not (math.isfinite(concentration) and concentration > 0):
            raise ConfigError(f"hmm: concentration must be a finite number > 0, got {concentration!r}")
        self.S, self.O, self.K, self.concentration = S, O, K, float(concentration)
        self.vocab_size = OBS0 + O + S
        self.n_classes = S
        self.answer_token_offset = OBS0 + O  # the state tokens, which never appear in the input
        self.obs_offset = 3 + S * S + S * O  # position of o_1
        self.stream_start = self.obs_offset
        self.seq_len = self.obs_offset + K

    def config(self) -> dict:
        return dict(name=self.name, S=self.S, O=self.O, K=self.K, concentration=self.concentration)

    corruptions = {"observation": "one observation replaced by another symbol (index: which observation, default "
                                  "the third from last); the last observation's filtering posterior moves"}

    def corrupt(self, batch: Batch, generator: torch.Generator | None = None, kind: str = "",
                index: int | None = None) -> Corruption:
        """Observation ``index`` replaced by a different symbol (uniform over the other O - 1)."""
        self.corruption_kind(kind)
        index = max(self.K - 3, 0) if index is None else index
        if not 0 <= index < self.K:
            raise ConfigError(f"hmm: the observation to corrupt must be from 0 to {self.K - 1}, got {index}")
        tokens = batch.tokens.clone()
        position = self.obs_offset + index
        shift = torch.randint(1, self.O, (len(tokens),), generator=generator)
        tokens[:, position] = (tokens[:, position] - OBS0 + shift) % self.O + OBS0
        return Corruption(batch, self.batch_from_tokens(tokens), query=self.seq_len - 1, changed=(position,),
                          what=f"observation {index} replaced by another symbol")

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        S, O, K, B = self.S, self.O, self.K, checked_batch_size(batch_size)
        T_units = quantise_units(dirichlet((B, S, S), self.concentration, generator))
        E_units = quantise_units(dirichlet((B, S, O), self.concentration, generator))
        T, E = T_units.double() / UNITS, E_units.double() / UNITS

        # Integer inverse CDF: with r uniform on 0..99, the number of cumulative units <= r is a
        # draw from the row, exactly as likely as the quantised table says. Batch-last layouts keep
        # the per-step work element-wise over the batch.
        T_cum = T_units.cumsum(-1).permute(1, 2, 0)  # [s, s', B]
        E_cum = E_units.cumsum(-1).permute(1, 2, 0)  # [s, o, B]
        r_move = torch.randint(0, UNITS, (K, 1, B), generator=generator)
        r_emit = torch.randint(0, UNITS, (K, 1, B), generator=generator)
        states = torch.empty(K, 1, 1, B, dtype=torch.long)
        states[0] = torch.randint(0, S, (1, 1, B), generator=generator)
        for t in range(1, K):
            row = T_cum.gather(0, states[t - 1].expand(1, S, B))  # [1, s', B]: T_cum[s_{t-1}]
            states[t] = (row <= r_move[t]).sum(1, keepdim=True)
        states = states.view(K, B)
        rows = E_cum[:, None].expand(S, K, O, B).gather(0, states[None, :, None].expand(1, K, O, B))
        observations = (rows[0] <= r_emit).sum(1).t().contiguous()  # [B, K]
        states = states.t().contiguous()

        tokens = torch.cat([
            torch.full((B, 1), TRANS), T_units.flatten(1),
            torch.full((B, 1), EMIT), E_units.flatten(1),
            torch.full((B, 1), SEP), observations + OBS0,
        ], dim=1)

        return batch_at_queries(tokens, torch.arange(self.obs_offset, self.seq_len),
                                forward_filter(T, E, observations), states,
                                hypothesis=dict(T_units=T_units, E_units=E_units, T=T, E=E, states=states,
                                     observations=observations))

    def batch_from_tokens(self, tokens: torch.Tensor) -> Batch:
        """The tables read back from the prompt, then the filtering posterior at each observation
        (any number of them)."""
        S, O = self.S, self.O
        tokens = (tokens if tokens.dim() == 2 else tokens[None]).long().cpu()
        obs = tokens[:, self.obs_offset:] - OBS0
        markers = tokens[:, [0, 1 + S * S, 2 + S * S + S * O]] if tokens.shape[1] > self.obs_offset else None
        if markers is None or (markers != torch.tensor([TRANS, EMIT, SEP])).any():
            raise ConfigError(f"hmm: a sequence is TRANS, {S * S} probabilities, EMIT, {S * O} probabilities, "
                              f"SEP, then observations")
        T_units, E_units = self.decode_tables(tokens)
        for name, units in (("transition", T_units), ("emission", E_units)):
            if (units > UNITS).any() or (units.sum(-1) != UNITS).any():
                raise ConfigError(f"hmm: every row of the {name} table must be probabilities summing to 1.00")
        if ((obs < 0) | (obs >= O)).any():
            raise ConfigError(f"hmm: after SEP only observations o0..o{O - 1}")
        T, E = T_units.double() / UNITS, E_units.double() / UNITS
        return batch_at_queries(tokens, torch.arange(self.obs_offset, tokens.shape[1]), forward_filter(T, E, obs),
                                torch.full(obs.shape, -100), hypothesis=dict(T_units=T_units, E_units=E_units,
                                                                            T=T, E=E, observations=obs))

    @classmethod
    def small_config(cls, rng: random.Random) -> dict:
        return dict(S=rng.randint(2, 3), O=rng.randint(2, 3), K=rng.randint(1, 4),
                    concentration=rng.uniform(0.1, 5.0))

    def brute_force(self, batch: Batch, row: int) -> torch.Tensor:
        h = batch.hypothesis
        return enumerated_filter(h["T"][row].tolist(), h["E"][row].tolist(), h["observations"][row].tolist(), self.S)

    def decode_tables(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(T_units [B, S, S], E_units [B, S, O]) read back from a token batch [B, seq_len] (or [seq_len])."""
        S, O = self.S, self.O
        t = tokens if tokens.dim() == 2 else tokens[None]
        T_units = t[:, 1:1 + S * S].reshape(-1, S, S)
        E_units = t[:, 2 + S * S:2 + S * S + S * O].reshape(-1, S, O)
        if tokens.dim() == 1:
            return T_units[0], E_units[0]
        return T_units, E_units

    def token_names(self, tokens: torch.Tensor) -> list[str]:
        special = {TRANS: "TRANS", EMIT: "EMIT", SEP: "SEP"}
        names = []
        for t in (int(t) for t in tokens):
            if t <= UNITS:
                names.append(f"{t / UNITS:.2f}")
            elif t in special:
                names.append(special[t])
            elif t < self.answer_token_offset:
                names.append(f"o{t - OBS0}")
            else:
                names.append(f"s{t - self.answer_token_offset}")
        return names

    def position_names(self, tokens: torch.Tensor) -> list[str]:
        """Token names with the table entry each probability token is: "T[s0,s1] 0.25", "E[s2,o1] 0.10"."""
        names = self.token_names(tokens)
        tables = [("T", self.S, [f"s{j}" for j in range(self.S)]), ("E", self.S, [f"o{k}" for k in range(self.O)])]
        start = 1  # after TRANS
        for letter, rows, columns in tables:
            for i in range(rows * len(columns)):
                if start + i < len(names):
                    names[start + i] = f"{letter}[s{i // len(columns)},{columns[i % len(columns)]}] {names[start + i]}"
            start += rows * len(columns) + 1  # and the EMIT or SEP marker
        return names

    def latent_tables(self, batch: Batch, row: int) -> dict:
        h = batch.hypothesis
        states = [f"s{i}" for i in range(self.S)]
        return {"transition T[s, s']": (h["T"][row], states, states),
                "emission E[s, o]": (h["E"][row], states, [f"o{i}" for i in range(self.O)])}

    def latent_path(self, batch: Batch, row: int) -> tuple[str, list[int]] | None:
        states = batch.hypothesis.get("states")
        return None if states is None else ("true hidden state", states[row].tolist())

    def hypothesis_tokens(self) -> dict[str, torch.Tensor]:
        return {"observations": torch.arange(OBS0, OBS0 + self.O),
                "states": torch.arange(self.answer_token_offset, self.answer_token_offset + self.S)}
