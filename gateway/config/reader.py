"""Typed values out of a nested config mapping, every problem recorded with its dotted path.

Every number must be finite and in its range: YAML reads `.nan` and `.inf` as numbers, and a NaN
timeout made every request fail, an infinite grace crashed `serve`, a NaN interval killed the health
loop. Durations are at most `MAX_SECONDS`, so that every timer they arm is in range.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

MAX_SECONDS = 86_400.0
"""Longest duration any setting may have (a day): longer than any wait worth configuring."""


def default(cls: type[Any], name: str) -> Any:
    """The default the config dataclass `cls` declares for its field `name`: every default is written
    once, on its dataclass, and the parsers read it from there."""
    f = cls.__dataclass_fields__[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    return f.default_factory()


class ConfigReader:
    """Pulls typed values out of a nested mapping, recording problems with their dotted paths."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.problems: list[str] = []
        self.env = env

    def section(self, data: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
        value = data.get(key, {})
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problems.append(f"{path}{key}: must be a mapping")
            return {}
        return value

    def unknown(self, data: Mapping[str, Any], allowed: set[str], path: str) -> None:
        for key in data:
            if key not in allowed:
                self.problems.append(f"{path}{key}: unknown key (allowed: {', '.join(sorted(allowed))})")

    def number(
        self,
        data: Mapping[str, Any],
        key: str,
        default: float,
        path: str,
        *,
        minimum: float = 0.0,
        maximum: float = math.inf,
        integer: bool = False,
        exclusive: bool = False,
    ) -> Any:
        value = data.get(key, default)
        kind = "an integer" if integer else "a number"
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or (integer and not isinstance(value, int))
        ):
            self.problems.append(f"{path}{key}: must be {kind}, got {value!r}")
            return default
        if not math.isfinite(value):
            self.problems.append(f"{path}{key}: must be a finite number, got {value!r}")
            return default
        if value < minimum or (exclusive and value == minimum):
            sign = ">" if exclusive else ">="
            self.problems.append(f"{path}{key}: must be {sign} {minimum}, got {value!r}")
            return default
        if value > maximum:
            self.problems.append(f"{path}{key}: must be <= {maximum:g}, got {value!r}")
            return default
        return value

    def seconds(self, data: Mapping[str, Any], key: str, default: float, path: str) -> float:
        """A duration: > 0, finite, at most MAX_SECONDS."""
        return float(self.number(data, key, default, path, exclusive=True, maximum=MAX_SECONDS))

    def names(self, data: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
        """A list of header names (ASCII letters, digits and '-'), lower-cased."""
        value = data.get(key, [])
        ok = isinstance(value, list) and all(
            isinstance(v, str) and v and v.isascii() and v.replace("-", "").isalnum() for v in value
        )
        if not ok:
            self.problems.append(f"{path}{key}: must be a list of header names, got {value!r}")
            return ()
        return tuple(v.lower() for v in value)

    def optional_seconds(self, data: Mapping[str, Any], key: str, path: str) -> float | None:
        if data.get(key) is None:
            return None
        value = self.seconds(data, key, 0.0, path)
        return value if value else None

    def secret(self, data: Mapping[str, Any], key: str, path: str) -> str | None:
        """`key: literal` or `key_env: VAR` (read from the environment, which must define it)."""
        literal = data.get(key)
        env_name = data.get(f"{key}_env")
        if literal is not None and env_name is not None:
            self.problems.append(f"{path}{key}: give either {key} or {key}_env, not both")
        if env_name is not None:
            if not isinstance(env_name, str) or env_name not in self.env:
                self.problems.append(f"{path}{key}_env: environment variable {env_name!r} is not set")
                return None
            return self.env[env_name]
        if literal is not None and not isinstance(literal, str):
            self.problems.append(f"{path}{key}: must be a string")
            return None
        return literal
