"""The parts of uvicorn that are not its public API and that the server builds on.

`GuardedProtocol` (gateway.server.listener) subclasses uvicorn's `HttpToolsProtocol` and
`GatewayServer` (gateway.server.serve) subclasses `uvicorn.Server`; both override and call methods
and read attributes that uvicorn may rename in any release. pyproject.toml pins uvicorn to the
releases this suite has run against; this module says exactly what would break, by name, when the
pin is moved to a release where one of them is gone.
"""

from __future__ import annotations

import asyncio
import inspect

import uvicorn
from uvicorn.config import STARTUP_FAILURE, Config
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from gateway.server.listener import GuardedProtocol

# Methods GuardedProtocol overrides and calls through super(), with the parameters it passes.
OVERRIDDEN = {
    "connection_made": ["transport"],
    "connection_lost": ["exc"],
    "data_received": ["data"],
    "timeout_keep_alive_handler": [],
    "on_header": ["name", "value"],
    "on_headers_complete": [],
    "on_message_begin": [],
    "on_message_complete": [],
    "on_response_complete": [],
    "send_400_response": ["msg"],
}

# Attributes of a live protocol the listener reads or writes.
PROTOCOL_ATTRIBUTES = ("transport", "cycle", "loop", "flow", "client", "scope", "parser", "headers")
# Set to None so that uvicorn never hands the transport to another protocol.
HAND_OVER_ATTRIBUTE = "ws_protocol_class"
CYCLE_ATTRIBUTES = ("response_started", "response_complete", "disconnected", "message_event")


def _parameters(cls: type, method: str) -> list[str]:
    signature = inspect.signature(getattr(cls, method))
    return [p for p in signature.parameters if p != "self"]


def test_every_overridden_method_exists_with_the_parameters_the_listener_passes() -> None:
    moved = {
        name: _parameters(HttpToolsProtocol, name) if hasattr(HttpToolsProtocol, name) else "missing"
        for name in OVERRIDDEN
    }
    assert moved == OVERRIDDEN, "uvicorn's HttpToolsProtocol changed under GuardedProtocol"


def test_the_protocol_is_built_as_the_server_builds_it() -> None:
    assert _parameters(HttpToolsProtocol, "__init__")[:4] == ["config", "server_state", "app_state", "_loop"]
    assert _parameters(FlowControl, "__init__") == ["transport"]
    assert inspect.iscoroutinefunction(FlowControl.drain)
    assert hasattr(FlowControl, "read_paused") or "read_paused" in inspect.getsource(FlowControl.__init__)


async def test_a_live_protocol_has_the_attributes_the_listener_reads() -> None:
    config = Config(app=lambda scope, receive, send: None, http="httptools", log_level="warning")
    config.load()
    protocol = HttpToolsProtocol(config, ServerState(), {}, asyncio.get_running_loop())
    missing = [a for a in PROTOCOL_ATTRIBUTES if a not in dir(protocol) and a not in vars(protocol)]
    # `transport`, `flow`, `client` and `scope` are set in connection_made / on_message_begin: their
    # assignments must still be in uvicorn's source for the listener to find them there.
    source = inspect.getsource(HttpToolsProtocol)
    missing = [a for a in missing if f"self.{a} =" not in source and f"self.{a}:" not in source]
    assert missing == []
    assert f"self.{HAND_OVER_ATTRIBUTE}" in source and "self.parser.should_upgrade()" in source
    cycle_source = inspect.getsource(RequestResponseCycle)
    assert [a for a in CYCLE_ATTRIBUTES if f"self.{a}" not in cycle_source] == []


def test_the_server_hooks_the_gateway_overrides_exist() -> None:
    for name in ("startup", "shutdown", "capture_signals"):
        assert callable(getattr(uvicorn.Server, name, None)), name
    server = uvicorn.Server(Config(app=lambda scope, receive, send: None))
    assert {"should_exit", "started", "server_state", "config"} <= set(vars(server))
    assert "self.lifespan =" in inspect.getsource(uvicorn.Server)
    assert "self.http_protocol_class" in inspect.getsource(Config)
    assert isinstance(STARTUP_FAILURE, int)


def test_the_guarded_protocol_still_subclasses_what_it_was_written_against() -> None:
    assert issubclass(GuardedProtocol, HttpToolsProtocol)
    own = {n for n in vars(GuardedProtocol) if not n.startswith("__")}
    assert set(OVERRIDDEN) <= own
