"""Node events are typed: readers filter on kind, outcome and refusal, never on log words."""

from __future__ import annotations

from node.events import ROUTINE, EventKind, NodeEvent


def test_the_words_of_an_event_are_rendered_from_its_fields() -> None:
    assert NodeEvent(3, "v0", EventKind.VERDICT, outcome="fail").action == "verdict fail"
    assert NodeEvent(3, "h0", EventKind.COMMITTED, "epoch 3 is in phase reveal", refused=True).action == (
        "committed refused")
    assert NodeEvent(3, "v0", EventKind.VERDICT_OPENED, outcome="pass").action == "opened verdict pass"


def test_what_a_healthy_epoch_does_is_routine_and_the_rest_is_notable() -> None:
    healthy = [NodeEvent(0, "h0", kind) for kind in ROUTINE] + [
        NodeEvent(0, "v0", EventKind.VERDICT, outcome="pass"), NodeEvent(0, "h0", EventKind.TRAPS_OPENED, "no traps")]
    assert not any(e.notable for e in healthy)
    notable = [NodeEvent(0, "v0", EventKind.VERDICT, outcome="fail"),
               NodeEvent(0, "v0", EventKind.VERDICT, outcome="unavailable"),
               NodeEvent(0, "h0", EventKind.JOINED, "epoch 0 is full", refused=True),
               NodeEvent(0, "h0", EventKind.TRAPS_OPENED, "traps [1]"),
               *(NodeEvent(0, "x", kind) for kind in EventKind if kind not in ROUTINE and kind not in (
                   EventKind.VERDICT, EventKind.TRAPS_OPENED))]
    assert all(e.notable for e in notable)
