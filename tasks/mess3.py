"""Mess3: the 3-state, 3-token process whose beliefs form a fractal in the 2-simplex (Shai et al. 2024).

Hidden states 0, 1, 2 and tokens A, B, C (token k belongs to state k). From state i the process moves to
state j, staying with probability y = 1 - 2x and moving to each other state with probability x, and emits
token k with probability a when k is the new state's own token and b = (1 - a) / 2 otherwise:

    T^(k)[i, j] = (a if j == k else b) * (y if i == j else x)
    T^(A) = [[a y, b x, b x], [a x, b y, b x], [a x, b x, b y]]

and T^(B), T^(C) the same with the roles of the states rotated. Every entry is positive for 0 < x < 1/2,
0 < a < 1, so no prefix is ruled out and the belief never reaches a vertex. The stationary distribution is
uniform. Shai et al.'s setting, x = 0.05, a = 0.85, is the default. See ``tasks/ghmm.py`` for the sequences,
beliefs and queries every process shares.
"""
from __future__ import annotations

import math

from .base import ConfigError
from .ghmm import GHMM


class Mess3(GHMM):
    name = "mess3"
    order = 10
    token_labels = ("A", "B", "C")

    def __init__(self, x: float = 0.05, a: float = 0.85, L: int = 10):
        for label, value, top in (("x", x, 0.5), ("a", a, 1.0)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not 0 < value < top:
                raise ConfigError(f"mess3: {label} must be a number strictly between 0 and {top:g}, got {value!r}")
        self.x, self.a = float(x), float(a)
        super().__init__(L)

    def matrices(self) -> list:
        x, a = self.x, self.a
        b, y = (1 - a) / 2, 1 - 2 * x
        emit = lambda token, state: a if token == state else b  # noqa: E731  the new state's own token, or not
        move = lambda i, j: y if i == j else x  # noqa: E731  stay, or move to one of the other two
        return [[[emit(token, j) * move(i, j) for j in range(3)] for i in range(3)] for token in range(3)]
