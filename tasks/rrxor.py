"""RRXOR: two random bits, then their XOR, repeated (Shai et al. 2024; Crutchfield's random-random-XOR).

Tokens 0 and 1; hidden states S (start), 0 and 1 (the first bit read), T and F (the XOR to come is 1 or 0):

    S --0 (p1)--> "0"    S --1 (1 - p1)--> "1"
    "0" --0 (p2)--> F    "0" --1 (1 - p2)--> T
    "1" --0 (p2)--> T    "1" --1 (1 - p2)--> F
    T --1--> S           F --0--> S

The stationary distribution is [S, 0, 1, T, F] = [1/3, p1/3, (1 - p1)/3, ., .] ([2, 1, 1, 1, 1] / 6 at the
default p1 = p2 = 1/2). Once the phase is known, every third token is determined, so the next-token posterior
can be certain (it eliminates) and some sequences are impossible: a typed one the process cannot emit is
refused. With 2 tokens and 5 states the next-token posterior is a lossy image of the belief, and Shai et al.
find the belief spread across the transformer's layers. See ``tasks/ghmm.py`` for what every process shares.
"""
from __future__ import annotations

import math

from .base import ConfigError
from .ghmm import GHMM

START, ZERO, ONE, TRUE, FALSE = range(5)


class RRXOR(GHMM):
    name = "rrxor"
    order = 11
    token_labels = ("0", "1")
    state_labels = ("S", "0", "1", "T", "F")
    eliminates = True
    # A token changed in a sampled sequence almost always breaks the XOR of its triple, leaving a sequence the
    # process never emits (no belief, no Bayes answer to score a patch against): RRXOR declares no corruption.
    corruptions = {}

    def __init__(self, p1: float = 0.5, p2: float = 0.5, L: int = 10):
        for label, value in (("p1", p1), ("p2", p2)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not 0 < value < 1:
                raise ConfigError(f"rrxor: {label} must be a probability strictly between 0 and 1, got {value!r}")
        self.p1, self.p2 = float(p1), float(p2)
        super().__init__(L)

    def matrices(self) -> list:
        T = [[[0.0] * 5 for _ in range(5)] for _ in range(2)]
        T[0][START][ZERO], T[1][START][ONE] = self.p1, 1 - self.p1
        T[0][ZERO][FALSE], T[1][ZERO][TRUE] = self.p2, 1 - self.p2
        T[0][ONE][TRUE], T[1][ONE][FALSE] = self.p2, 1 - self.p2
        T[1][TRUE][START] = T[0][FALSE][START] = 1.0
        return T
