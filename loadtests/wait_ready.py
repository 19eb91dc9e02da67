"""Wait until an OpenAI-compatible server lists at least one model, or give up.

    python -m loadtests.wait_ready http://127.0.0.1:8080 --timeout 30

Exit 0 once ``GET <url>/v1/models`` answers 200 with a non-empty ``data`` list (the gateway lists only
models of healthy backends, so this also waits for the backends), 1 on timeout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence


def ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}/v1/models", timeout=2.0) as resp:
            body = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return isinstance(body, dict) and bool(body.get("data"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="base URL, e.g. http://127.0.0.1:8080")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds (default 30)")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.timeout
    while not ready(args.url):
        if time.monotonic() > deadline:
            print(f"wait_ready: {args.url} listed no model within {args.timeout:g} s", file=sys.stderr)
            return 1
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
