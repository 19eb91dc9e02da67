from gateway.proxy.sse import StreamStats, body_usage

ROLE = b'data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
TOKEN = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
USAGE = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}\n\n'
DONE = b"data: [DONE]\n\n"


def test_counts_text_events_and_times_them() -> None:
    s = StreamStats()
    s.feed(ROLE, 1.0)
    s.feed(TOKEN, 1.5)
    s.feed(TOKEN + TOKEN, 2.5)
    s.feed(DONE, 2.6)
    assert (s.first_at, s.last_at, s.tokens) == (1.5, 2.5, 3)
    assert s.tpot() == 0.5
    assert not s.error


def test_events_split_across_reads_are_reassembled() -> None:
    s = StreamStats()
    stream = TOKEN * 3 + USAGE + DONE
    for i in range(0, len(stream), 7):
        s.feed(stream[i : i + 7], float(i))
    assert s.events == 3
    assert s.usage_tokens == 3 and s.prompt_tokens == 7


def test_usage_chunk_overrides_event_count() -> None:
    s = StreamStats()
    s.feed(TOKEN + USAGE.replace(b'"completion_tokens":3', b'"completion_tokens":9'), 1.0)
    assert s.tokens == 9


def test_error_event_on_a_200_stream_marks_failure() -> None:
    s = StreamStats()
    s.feed(TOKEN + b'data: {"error":{"message":"boom","code":500}}\n\n', 1.0)
    assert s.error


def test_completions_text_and_body_usage() -> None:
    s = StreamStats()
    s.feed(b'data: {"choices":[{"index":0,"text":" a"}]}\n\n', 1.0)
    assert s.events == 1
    assert body_usage(b'{"usage":{"prompt_tokens":12,"total_tokens":20,"completion_tokens":8}}') == (12, 8)
    assert body_usage(b"{}") == (0, 0)


def test_a_read_of_many_events_counts_each_token_event_once() -> None:
    """A backend that outruns its client hands over thousands of events in one read."""
    spaced = b'data: {"choices": [{"index": 0, "text": "x"}]}\n\n'
    empty = b'data: {"choices":[{"index":0,"text":""}]}\n\n'
    read = ROLE + TOKEN * 1000 + empty + spaced * 500 + USAGE[:20]
    s = StreamStats()
    s.feed(read, 1.0)
    s.feed(USAGE[20:] + DONE, 2.0)
    assert (s.events, s.first_at, s.last_at) == (1500, 1.0, 1.0)
    assert s.tokens == 3 and not s.error  # the usage chunk, split across the reads, still counts
