"""A model of a config's log step time over the knobs a study searches: a term per value of each knob and a term per
pair of values of two knobs, fitted by Bayesian linear regression.

Knob effects on step time are close to multiplicative, so the log step time is close to a sum of one term per knob
value; the few strong interactions (a compiled loss helps only beside compiled layers) are pair terms. Every term
has a Gaussian prior centred on 0, the pair terms a tighter one, so that a pair the trials never showed together
is predicted from the main terms, with the uncertainty its prior leaves. The noise is a process's own: separate
processes of one config differ by up to 15-30% on a GPU host. The fit is closed-form (numpy): the posterior mean
and covariance of the terms, hence each config's predicted log step time with its standard deviation, and the
factor each knob's value is worth with an interval.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Params = Mapping[str, Any]

MAIN_SD = 0.5  # prior sd of one knob value's log term: two values differ by about 2x at one sd of the difference
PAIR_SD = 0.2  # prior sd of a pair term: interactions are the exception
NOISE_SD = 0.15  # sd of one measured config's log step time around its truth: a process's offset and drift
INTERCEPT_SD = 3.0


@dataclass(frozen=True)
class Encoding:
    """The model's columns for a space (each key's values, the reference first): an intercept, one indicator per
    value but the reference, one per pair of such values of two keys. A config at the reference is the intercept
    alone; a config that moves one key from it touches that value's term alone, so a pair of moves never measured
    together is predicted as the product of the two (its pair term at its prior's 0)."""

    space: tuple[tuple[str, tuple[Any, ...]], ...]

    @classmethod
    def of(cls, space: Mapping[str, Sequence[Any]], reference: Params | None = None) -> Encoding:
        """The encoding of `space` around `reference` (each key's first value where it names none)."""
        found = []
        for key, values in space.items():
            if len(values) > 1:
                first = reference[key] if reference and reference.get(key) in values else values[0]
                found.append((key, (first, *(v for v in values if v != first))))
        return cls(tuple(found))

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(key for key, _ in self.space)

    def columns(self) -> list[tuple]:
        """("main", key, value) and ("pair", key1, value1, key2, value2), in a fixed order."""
        mains = [("main", key, value) for key, values in self.space for value in values[1:]]
        pairs = [
            ("pair", k1, v1, k2, v2)
            for (k1, vs1), (k2, vs2) in itertools.combinations(self.space, 2)
            for v1 in vs1[1:]
            for v2 in vs2[1:]
        ]
        return mains + pairs

    def prior_sd(self) -> np.ndarray:
        return np.array([MAIN_SD if c[0] == "main" else PAIR_SD for c in self.columns()])

    def row(self, params: Params) -> np.ndarray:
        """The config's row: the intercept's 1, then its values' and pairs' indicators."""
        index = self._index
        names = [("main", key, params[key]) for key in self.keys]
        names += [("pair", k1, params[k1], k2, params[k2]) for k1, k2 in itertools.combinations(self.keys, 2)]
        row = np.zeros(len(index) + 1)
        row[0] = 1.0
        row[[1 + index[n] for n in names if n in index]] = 1.0
        return row

    @property
    def _index(self) -> dict[tuple, int]:
        found = self.__dict__.get("_cached_index")
        if found is None:
            found = {column: i for i, column in enumerate(self.columns())}
            object.__setattr__(self, "_cached_index", found)
        return found


@dataclass(frozen=True)
class Factor:
    """What moving one knob from `before` to `after` does to the step time, the others held: the step time's ratio
    (before / after: above 1 means `after` is faster) with its interval."""

    key: str
    before: Any
    after: Any
    ratio: float
    low: float
    high: float

    def text(self) -> str:
        """`batch.split=4x1 (from 1x4): 1.28x (model estimate, 95% [0.88, 1.87])`: an estimate, said so beside it."""
        return f"{self._move}: {self.ratio:.2f}x (model estimate, 95% [{self.low:.2f}, {self.high:.2f}])"

    def estimate_text(self) -> str:
        """The estimate without its interval, where nothing paired decided the move: `1.49x (model estimate, not
        decided by the round)`."""
        return f"{self._move}: {self.ratio:.2f}x (model estimate, not decided by the round)"

    @property
    def _move(self) -> str:
        return f"{self.key}={self.after} (from {self.before})"


@dataclass(frozen=True)
class Posterior:
    """The posterior over the terms: predictions of log step time with their standard deviation."""

    encoding: Encoding
    mean: np.ndarray
    cov: np.ndarray
    centre: float  # the mean log step time of the observations, which the terms are fitted around
    observed: int

    def predict(self, params: Params) -> tuple[float, float]:
        """(mean, sd) of the config's log step time."""
        x = self.encoding.row(params)
        return self.centre + float(x @ self.mean), math.sqrt(max(float(x @ self.cov @ x), 0.0))

    def seconds(self, params: Params) -> float:
        return math.exp(self.predict(params)[0])

    def optimistic(self, params: Params, optimism: float) -> float:
        """The lower confidence bound of the log step time: `optimism` standard deviations under the mean."""
        mean, sd = self.predict(params)
        return mean - optimism * sd

    def factor(self, params: Params, key: str, before: Any, z: float = 1.96) -> Factor:
        """What `params`' value of `key` is worth against `before`, the other keys as in `params`."""
        other = {**params, key: before}
        d = self.encoding.row(other) - self.encoding.row(params)
        delta, sd = float(d @ self.mean), math.sqrt(max(float(d @ self.cov @ d), 0.0))
        return Factor(key, before, params[key], math.exp(delta), math.exp(delta - z * sd), math.exp(delta + z * sd))


def fit(encoding: Encoding, observations: Sequence[tuple[Params, float]], noise_sd: float = NOISE_SD) -> Posterior:
    """The posterior of the terms given measured step times (seconds) of configs; several of one config pool as
    independent measurements."""
    width = len(encoding.columns()) + 1
    x = np.array([encoding.row(params) for params, _ in observations]).reshape(len(observations), width)
    y = np.log(np.array([seconds for _, seconds in observations], dtype=float))
    centre = float(y.mean()) if len(y) else 0.0
    prior = np.concatenate([[INTERCEPT_SD], encoding.prior_sd()])
    precision = x.T @ x / noise_sd**2 + np.diag(1.0 / prior**2)
    cov = np.linalg.inv(precision)
    mean = cov @ (x.T @ (y - centre)) / noise_sd**2
    return Posterior(encoding, mean, cov, centre, len(y))
