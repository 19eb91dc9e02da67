"""Clients that stop reading: a write that cannot progress within `listen.write_timeout` ends the
exchange, closes the upstream request (the backend aborts it) and gives the slot back."""

from __future__ import annotations

import openai
from abuse_helpers import eventually, inflight, port_of, read_to_end, running_in, stalled_stream

from tests.procs import spawn_gateway, spawn_sim


def test_clients_that_stop_reading_give_their_slots_back() -> None:
    config = {
        "controller": {"algorithm": "fixed", "params": {"limit": 2}},
        "queue": {"timeout": 10},
        "listen": {"write_timeout": 1},
    }
    with spawn_sim("--profile", "instant") as sim, spawn_gateway({**config, "backends": [sim.url]}) as gw:
        # Each stream is megabytes long: far more than the socket buffers between the two ends.
        stalled = [stalled_stream(port_of(gw), "instant", 30_000) for _ in range(2)]
        assert inflight(gw) == 2  # the fixed limit is held by clients that read nothing more

        # It waits for a slot (x-queue-timeout: patient) until the stalled clients are cut.
        client = openai.OpenAI(
            base_url=f"{gw.url}/v1",
            api_key="k",
            max_retries=0,
            timeout=30,
            default_headers={"x-queue-timeout": "10"},
        )
        done = client.completions.create(model="instant", prompt="hello", max_tokens=5)
        assert done.choices[0].text  # served, not left waiting for the queue timeout

        eventually(lambda: inflight(gw) == 0 and running_in(sim) == 0, what="slots and backend freed")
        for sock in stalled:
            assert b"data: [DONE]" not in read_to_end(sock)  # cut, not completed
            sock.close()
        log = gw.stderr()
    assert "Traceback" not in log
