"""What parsing a JSON document will cost, bounded before the parser starts.

orjson holds the interpreter (and so the event loop) for the whole of a parse, and its time grows
with the number of values it creates, not with the bytes: 16 MiB of one string parses in
milliseconds, 16 MiB of small values in seconds (containers cost most: each is tracked by the cycle
collector, whose passes during the parse make it super-linear). A thread would not help, since the
parser never lets go of the interpreter lock. So a document is counted first, at memory speed, and
refused when it could hold more than MAX_VALUES values or MAX_CONTAINERS arrays and objects.

The counts are upper bounds read from the bytes alone: every value but the first of each container
follows a comma, so values <= commas + containers + 1, and containers <= the number of `[` and `{`.
Characters inside strings count too, which errs only toward refusing: a prompt would need a comma
every four characters of a 500 KB text to be refused. A document shorter than MIN_COUNTED bytes
cannot reach either bound (a value takes at least two bytes with its comma, a container three) and
is not counted. Counting goes a megabyte at a time and stops at the first that passes a bound, so
a document made to be refused costs no more than its first megabyte.

MAX_VALUES (131,072) holds a prompt of token ids as long as the longest common context (128K
tokens) and parses in about 15 ms; MAX_CONTAINERS (8,192) holds messages, content parts and tool
schemas many times over what a conversation has.
"""

from __future__ import annotations

MAX_VALUES = 131_072
MAX_CONTAINERS = 8_192
MIN_COUNTED = min(2 * MAX_VALUES, 3 * MAX_CONTAINERS)


STRIDE = 1 << 20
"""Bytes counted at a time: a document over a bound is refused after the stride that shows it."""


def json_cost_problem(doc: bytes) -> str | None:
    """Why `doc` is too costly to parse, or None when it is not."""
    if len(doc) < MIN_COUNTED:
        return None
    containers = commas = 0
    for start in range(0, len(doc), STRIDE):
        end = start + STRIDE
        containers += doc.count(b"[", start, end) + doc.count(b"{", start, end)
        if containers > MAX_CONTAINERS:
            return f"more than {MAX_CONTAINERS} JSON arrays and objects"
        commas += doc.count(b",", start, end)
        if commas + containers + 1 > MAX_VALUES:
            return f"more than {MAX_VALUES} JSON values"
    return None
