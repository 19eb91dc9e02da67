"""Token-length distributions for prompts and outputs, parsed from a short spec string.

Specs (whitespace ignored, parameters positional or ``key=value``):

- ``fixed:N``                      always N
- ``uniform:LO,HI``                integer uniform on [LO, HI]
- ``lognormal:MEAN,SIGMA[,MAX]``   log-normal, arithmetic mean MEAN, log-space spread SIGMA

For the log-normal, ``ln X ~ Normal(mu, SIGMA^2)`` with ``mu = ln(MEAN) - SIGMA^2 / 2`` so that
``E[X] = exp(mu + SIGMA^2 / 2) = MEAN``. Real prompt and answer lengths are right-skewed like this
(the ShareGPT and LMSYS-Chat length histograms are roughly log-normal), which is why it is offered
next to the fixed and uniform shapes used by vLLM's ``benchmark_serving`` random dataset.
Every draw is clamped to [1, MAX] (MAX defaults to 32768).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

DEFAULT_MAX = 32768


@dataclass(frozen=True, slots=True)
class Lengths:
    kind: str
    a: float
    b: float = 0.0
    upper: int = DEFAULT_MAX

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            value = self.a
        elif self.kind == "uniform":
            value = rng.randint(int(self.a), int(self.b))
        else:
            mu = math.log(self.a) - self.b * self.b / 2
            value = rng.lognormvariate(mu, self.b)
        return max(1, min(self.upper, round(value)))

    def mean(self) -> float:
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        return self.a


_PARAMS = {"fixed": ("n",), "uniform": ("low", "high"), "lognormal": ("mean", "sigma", "max")}


def parse_lengths(spec: str) -> Lengths:
    """Parse a spec such as ``lognormal:mean=200,sigma=0.6``; raise ValueError with the reason."""
    text = "".join(str(spec).split())
    kind, _, rest = text.partition(":")
    kind = kind.lower()
    if kind not in _PARAMS:
        raise ValueError(f"unknown length distribution {spec!r}: use fixed, uniform or lognormal")
    names = _PARAMS[kind]
    values: dict[str, float] = {}
    for position, item in enumerate(p for p in rest.split(",") if p):
        key, eq, raw = item.partition("=")
        if not eq:
            key, raw = (names[position] if position < len(names) else "?"), item
        if key not in names:
            raise ValueError(f"{spec!r}: unexpected parameter {item!r} for {kind}")
        try:
            values[key] = float(raw)
        except ValueError:
            raise ValueError(f"{spec!r}: {key} must be a number, got {raw!r}") from None
    required = names[:-1] if kind == "lognormal" else names
    missing = [n for n in required if n not in values]
    if missing:
        raise ValueError(f"{spec!r}: missing {', '.join(missing)}")
    if kind == "fixed":
        if values["n"] < 1:
            raise ValueError(f"{spec!r}: n must be >= 1")
        return Lengths("fixed", values["n"], upper=max(DEFAULT_MAX, int(values["n"])))
    if kind == "uniform":
        low, high = values["low"], values["high"]
        if not 1 <= low <= high:
            raise ValueError(f"{spec!r}: need 1 <= low <= high")
        return Lengths("uniform", low, high, upper=max(DEFAULT_MAX, int(high)))
    mean, sigma = values["mean"], values["sigma"]
    upper = int(values.get("max", DEFAULT_MAX))
    if mean < 1 or sigma < 0 or upper < 1:
        raise ValueError(f"{spec!r}: need mean >= 1, sigma >= 0, max >= 1")
    return Lengths("lognormal", mean, sigma, upper=upper)
