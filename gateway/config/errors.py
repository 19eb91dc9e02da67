"""The one exception a config that cannot be used raises: every problem found, one line each."""

from __future__ import annotations


class ConfigError(Exception):
    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
