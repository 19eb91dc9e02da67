"""A ticket's decision keeps everything else the request brought."""

from __future__ import annotations

import dataclasses

from gateway.admission.ticket import Ticket
from gateway.routing import RouteKey


def test_deciding_a_ticket_changes_only_its_class_and_wait() -> None:
    ticket = Ticket(
        tenant="acme",
        priority=3,
        timeout=12.0,
        request_id="r1",
        route=RouteKey(prompt="hello"),
        background=True,
        exclude=frozenset({"b1"}),
        arrived=5.0,
        prompt_tokens=42,
        most_tokens=1042,
    )
    decided = ticket.decided(patient=True, wait=9.0, budgeted=True)
    changed = {"patient": True, "wait": 9.0, "budgeted": True}
    for field in dataclasses.fields(Ticket):
        expected = changed.get(field.name, getattr(ticket, field.name))
        assert getattr(decided, field.name) == expected, field.name
    # Every field but the decided ones was given a value other than its default above, so a field
    # added to Ticket and left out of `decided` fails here.
    for field in dataclasses.fields(Ticket):
        if field.name not in changed:
            assert getattr(ticket, field.name) != field.default, field.name
