"""Write a benchmark's tables into a generated block of a Markdown document (docs/benchmarks.md).

A block is everything between `<!-- generated: NAME -->` and `<!-- /generated: NAME -->`. Its
first line names the command that made it, so every number in the document can be remade; the
commit that wrote the block is the code that made it (git log). Only the block is replaced: the
prose around it is written by hand and stays.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- generated: {name} -->", f"<!-- /generated: {name} -->"


def command_line() -> str:
    """How this process was started, as `python -m MODULE ARGS`."""
    module = sys.modules["__main__"].__spec__
    head = f"python -m {module.name}" if module is not None else f"python {sys.argv[0]}"
    return " ".join([head, *map(shlex.quote, sys.argv[1:])])


def write_block(doc: Path, name: str, body: str, command: str | None = None) -> None:
    """Replace block NAME of DOC with BODY, headed by the command that made it."""
    begin, end = _markers(name)
    text = doc.read_text()
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"{doc}: no block {begin} ... {end} to write into")
    head = f"Made by `{command or command_line()}`:"
    block = f"{begin}\n{head}\n\n{body.strip()}\n"
    doc.write_text(text[:start] + block + text[stop:])
