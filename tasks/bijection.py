"""Bijection elimination: a fresh random permutation pi of V values per sequence.

Tokens ``[k1, v1+V, k2, v2+V, ..., kL]`` with keys 0..V-1 and values V..2V-1 (vocabulary 2V,
length 2L-1). Every key position is a query whose label is the value that follows it, at the
position *before* the answer (labelling the value token itself teaches copying). Having seen t-1
distinct (key, value) pairs, the value of a new key is uniform over the V-t+1 values not yet
revealed, so the Bayes entropy at the t-th key is log2(V-t+1): a staircase from log2 V down.

Options
- ``replacement=True``: keys are drawn with replacement; a repeated key has a delta posterior on
  the value it was bound to (the sawtooth), a new key is uniform over the unrevealed values.
- ``paired=True``: the sequence shows L complete pairs and then ends in one more query key drawn
  uniformly from all V keys: ``[k1, v1+V, ..., kL, vL+V, q]`` (length 2L+1). The final query is a
  delta if q was shown, otherwise uniform over the unrevealed values.
"""
from __future__ import annotations

import itertools
import random

import torch

from .base import Batch, ConfigError, Corruption, PaperRow, Preset, Primitive, Task, checked_batch_size, whole, batch_at_queries


def enumerated_posterior(V: int, keys: list[int], values: list[int], i: int) -> torch.Tensor:
    """P(pi(keys[i]) = v | pairs 0..i-1) by enumerating all V! permutations consistent with them."""
    counts = torch.zeros(V)
    for perm in itertools.permutations(range(V)):
        if all(perm[keys[j]] == values[j] for j in range(i)):
            counts[perm[keys[i]]] += 1
    return counts / counts.sum()


def key_posteriors(keys: torch.Tensor, values: torch.Tensor, V: int) -> torch.Tensor:
    """Bayes posterior [B, n, V] of the value at each key i given the pairs 0..i-1 (keys, values [B, n])."""
    n_keys = keys.shape[1]
    onehot = torch.nn.functional.one_hot(values, V).float()  # [B, n, V]
    revealed = (onehot.cumsum(1) - onehot).clamp(max=1)  # values shown strictly before i
    same_key = keys[:, :, None] == keys[:, None, :]  # [B, i, j]
    earlier = torch.ones(n_keys, n_keys, dtype=torch.bool).tril(-1)  # j < i
    key_seen = (same_key & earlier).any(-1)  # [B, n]
    unrevealed = 1.0 - revealed
    uniform = unrevealed / unrevealed.sum(-1, keepdim=True)
    return torch.where(key_seen[..., None], onehot, uniform)


class Bijection(Task):
    name = "bijection"
    order = 0
    length_setting = "L"
    frame = "values"  # the V value tokens: one per hypothesis about a key's value
    eliminates = True  # a revealed value is ruled out for every other key
    primitive = Primitive("accumulation", "entropy_mae_bits", "max", 0.05,
                          "between the paper's 0.007-0.010 bits and the MLP's 1.85")
    # Mamba, LSTM and MLP: the transformer's budget of the equal search (2,000 x 128, not its own 6,000)
    # and each one's best learning rate in it (1e-3, 3.2e-3, 1e-2, 3.2e-2 tried)
    presets = {"cpu": Preset(by_arch={"mamba": Preset(train=dict(steps=2_000, lr=1e-2)),
                                      "lstm": Preset(train=dict(steps=2_000, lr=1e-2)),
                                      "mlp": Preset(train=dict(steps=2_000, lr=1e-3))})}
    paper_rows = (
        *(PaperRow("bijection V=20, entropy MAE (bits)", arch, "calibration", "entropy_mae_bits", float(paper), paper)
          for arch, paper in (("transformer", "0.007"), ("mamba", "0.010"), ("lstm", "0.009"), ("mlp", "1.85"))),
        PaperRow("layer-0 key orthogonality, mean |off-diagonal cos|", "transformer", "key-orthogonality",
                 "layer0_trained", 0.052, "0.052 (0.082 random)"),
        PaperRow("  the same for random Gaussian vectors", "transformer", "key-orthogonality", "random",
                 0.082, "0.082"),
        PaperRow("hypothesis-frame head ablation, MAE ratio", "transformer", "head-ablation",
                 "hypothesis_frame_head.mae_ratio_to_intact", 10.0, ">10x", claim="over"),
        PaperRow("single-layer ablation, smallest MAE ratio", "transformer", "layer-ablation",
                 "min_block_ratio", 10.0, ">10x", claim="over"),
    )

    corruptions = {"value": "one revealed pair shows a value that was not revealed (index: which pair, default 0); "
                            "the last key's posterior trades that value for the one it replaced"}

    def __init__(self, V: int = 20, L: int | None = None, replacement: bool = False,
                 paired: bool = False):
        whole("bijection", "V", V, 2)  # V first: L defaults to V - 1
        for label, value in (("replacement", replacement), ("paired", paired)):
            if not isinstance(value, bool):  # bool("no") is True: refuse instead of guessing
                raise ConfigError(f"bijection: {label} must be true or false, got {value!r}")
        L = whole("bijection", "L", V - 1 if L is None else L)
        if L > V and not replacement:
            raise ConfigError(f"bijection: L={L} > V={V} needs keys drawn with replacement "
                              f"(pass replacement=True) or L <= V")
        self.V, self.L, self.replacement, self.paired = V, L, replacement, paired
        self.vocab_size = 2 * V
        self.n_classes = V
        self.answer_token_offset = V  # answers are read off the value tokens' output logits
        self.seq_len = 2 * L + 1 if paired else 2 * L - 1

    def config(self) -> dict:
        return dict(name=self.name, V=self.V, L=self.L, replacement=self.replacement,
                    paired=self.paired)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        V, L, B = self.V, self.L, checked_batch_size(batch_size)
        # A uniform random permutation per row: argsort of i.i.d. uniform noise.
        perm = torch.rand(B, V, generator=generator).argsort(dim=1)  # perm[b, key] = value
        if self.replacement:
            keys = torch.randint(0, V, (B, L), generator=generator)
        else:
            keys = torch.rand(B, V, generator=generator).argsort(dim=1)[:, :L]
        n_keys = L
        if self.paired:
            query = torch.randint(0, V, (B, 1), generator=generator)
            keys = torch.cat([keys, query], dim=1)
            n_keys = L + 1
        values = perm.gather(1, keys)  # [B, n_keys]
        key_posterior = key_posteriors(keys, values, V)

        T = self.seq_len
        tokens = torch.empty(B, T, dtype=torch.long)
        key_pos = torch.arange(n_keys) * 2
        tokens[:, key_pos] = keys
        n_pairs = n_keys - 1 if not self.paired else L
        tokens[:, key_pos[:n_pairs] + 1] = values[:, :n_pairs] + V

        return batch_at_queries(tokens, key_pos, key_posterior, values,
                                hypothesis=dict(permutation=perm, keys=keys, values=values))

    def corrupt(self, batch: Batch, generator: torch.Generator | None = None, kind: str = "",
                index: int | None = None) -> Corruption:
        """Pair ``index``'s value replaced by one of the values not revealed before the last key (uniform)."""
        self.corruption_kind(kind)
        if self.replacement or self.paired:
            raise ConfigError("bijection: corruptions are defined for keys drawn without replacement, unpaired")
        pairs = self.L - 1
        index = 0 if index is None else index
        if not 0 <= index < pairs:
            raise ConfigError(f"bijection: the pair to corrupt must be from 0 to {pairs - 1} (L={self.L} keys, "
                              f"{pairs} revealed pairs), got {index}")
        tokens = batch.tokens.clone()
        shown = tokens[:, 1:2 * pairs:2] - self.V  # [B, pairs]
        unrevealed = torch.ones(len(tokens), self.V, dtype=torch.bool)
        unrevealed[torch.arange(len(tokens))[:, None], shown] = False
        noise = torch.rand(len(tokens), self.V, generator=generator).masked_fill(~unrevealed, -1.0)
        tokens[:, 2 * index + 1] = noise.argmax(1) + self.V  # a uniform draw among the unrevealed values
        return Corruption(batch, self.batch_from_tokens(tokens), query=self.seq_len - 1, changed=(2 * index + 1,),
                          what=f"pair {index} shows a value never revealed")

    def latent_tables(self, batch: Batch, row: int) -> dict:
        perm = batch.hypothesis.get("permutation")
        if perm is None:  # a typed sequence: only its shown pairs are known, not the whole bijection
            return {}
        matrix = torch.zeros(self.V, self.V)
        matrix[torch.arange(self.V), perm[row]] = 1.0
        return {"the bijection (key -> value)": (matrix, [f"k{i}" for i in range(self.V)],
                                                 [f"v{i}" for i in range(self.V)])}

    def batch_from_tokens(self, tokens: torch.Tensor) -> Batch:
        """Keys at even positions, values at odd ones (any length); every key is a query."""
        V = self.V
        tokens = (tokens if tokens.dim() == 2 else tokens[None]).long().cpu()
        keys, shown = tokens[:, 0::2], tokens[:, 1::2]
        if ((keys < 0) | (keys >= V)).any() or ((shown < V) | (shown >= 2 * V)).any():
            raise ConfigError(f"bijection: keys k0..k{V - 1} go at even positions and values v0..v{V - 1} "
                              f"at odd positions")
        same_key, same_value = (x[:, :, None] == x[:, None, :] for x in (keys[:, :shown.shape[1]], shown))
        if (same_key != same_value).any():
            raise ConfigError("bijection: the pairs shown are not consistent with any bijection "
                              "(a key with two values, or a value with two keys)")
        # A key with no value after it (the last one) gets the value it was bound to earlier, if
        # any: that is all its posterior depends on, and no later position reads it.
        values = torch.zeros_like(keys)
        values[:, :shown.shape[1]] = shown - V
        if keys.shape[1] > shown.shape[1]:
            bound = (keys[:, :-1] == keys[:, -1:]) * values[:, :-1]  # consistent, so one value or none
            values[:, -1] = torch.cat([bound, torch.zeros_like(keys[:, :1])], 1).amax(1)
        positions = torch.arange(keys.shape[1]) * 2
        return batch_at_queries(tokens, positions, key_posteriors(keys, values, V),
                                torch.full(keys.shape, -100), hypothesis=dict(keys=keys, values=shown - V))

    @classmethod
    def small_config(cls, rng: random.Random) -> dict:
        V, replacement = rng.randint(2, 5), rng.random() < 0.5
        return dict(V=V, L=rng.randint(1, 6 if replacement else V), replacement=replacement,
                    paired=rng.random() < 0.5)

    def brute_force(self, batch: Batch, row: int) -> torch.Tensor:
        keys, values = batch.hypothesis["keys"][row].tolist(), batch.hypothesis["values"][row].tolist()
        return torch.stack([enumerated_posterior(self.V, keys, values, i) for i in range(len(keys))]).double()

    def token_names(self, tokens: torch.Tensor) -> list[str]:
        V = self.V
        return [f"k{int(t)}" if int(t) < V else f"v{int(t) - V}" for t in tokens]

    def hypothesis_tokens(self) -> dict[str, torch.Tensor]:
        return {"values": torch.arange(self.V, 2 * self.V), "keys": torch.arange(self.V)}
