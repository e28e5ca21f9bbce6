"""A small pipelined run on the embedded chain (``LocalNetwork``) for the node tests of two epochs in
flight, and a driver that ticks it to a chosen moment — where a test then stops a node, or looks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path
from typing import Any

from node.participant import Participant
from protocol.rules.spec import DataSpec
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.presets import tiny
from veriloco.behaviours import validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster


def pipelined_network(root: Path, load_dataset: Callable[[DataSpec], Dataset], hosts: Sequence[HostBehaviour],
                      validators: int, **preset: Any) -> LocalNetwork:
    """The tiny preset at 8 inner steps (segments of 2, batches of 4), ``preset`` sections merged in,
    as a pipelined simulation of ``hosts`` and ``validators`` honest validators under ``root``."""
    spec = simulation_spec(tiny().with_changes(train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4},
                                               **preset),
                           validators=validators, hosts=len(hosts)).with_changes(phases={"pipelined": True})
    roster = Roster(hosts=list(hosts), validators=[validator_behaviour("honest")] * validators)
    return LocalNetwork(spec, root, roster, load_dataset(spec.data))


def tick_until(net: LocalNetwork, reached: Callable[[Participant], bool],
               quiet: Callable[[Participant], bool] | None = None, rounds: int = 400) -> None:
    """Every node ticks in turn, a block a round, until ``reached(node)`` holds when ``node``'s turn
    comes: that node and those after it in the round do not tick. A node for which ``quiet`` holds
    skips its turn. While a host trains the round waits for a training to end; when nobody acted,
    for epoch 0's phase deadline. After ``rounds`` rounds it returns too: the caller asserts the
    moment it wanted."""
    for _ in range(rounds):
        acted = []
        for node in net.nodes:
            if reached(node):
                return
            if quiet is not None and quiet(node):
                continue
            acted.append(node.tick())
        net.ledger.end_block()
        busy = [job for h in net.hosts if (job := h.training) is not None]
        if busy:
            wait(busy, timeout=60, return_when=FIRST_COMPLETED)
        elif not any(acted) and net.ledger.height() < (deadline := net.ledger.epoch(0).phase_deadline):
            net.ledger.wait_for_height(deadline)
