"""A whole veriloco network in one process, on the embedded chain: what ``veriloco simulate`` runs.

Hosts and validators are the real nodes (``trainer.host.HostNode``, ``verifier.validator.ValidatorNode``)
on a real contract (the committed ``.wasm`` under wasmtime). Only two things differ from a
multi-process network: artifacts move through the same :class:`~trainer.artifacts.ArtifactSource`
interface without HTTP, and time is driven here — when no node has anything to do, the network
mines blocks up to the current phase's deadline and calls ``advance``. Phases close early when
everyone has acted, so a simulated epoch costs only its training and replays.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chain.embedded import EmbeddedChain
from chain.embedded.backend import deploy_embedded
from chain.ledger import Ledger
from protocol.keys import PrivateKey
from protocol.spec import RunSpec
from protocol.views import EpochReport
from trainer.artifacts import ArtifactSource, ArtifactUnavailable
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.host import HostNode
from trainer.outer import GlobalState
from trainer.participant import EventSink, Participant
from veriloco.errors import VerilocoError

GENESIS_BALANCE = 10**24


def sim_key(name: str) -> PrivateKey:
    """A deterministic key for a simulated participant (never use these outside a simulation)."""
    return PrivateKey(hashlib.sha256(b"veriloco-simulation:" + name.encode()).digest())


@dataclass
class Roster:
    """Who takes part: host behaviours (one per host) and validator behaviours (one per validator)."""

    hosts: Sequence[HostBehaviour]
    validators: Sequence[object] = field(default_factory=list)
    host_stake: int | None = None
    validator_stake: int | None = None
    reward_pool: int | None = None


class LocalNetwork:
    """An embedded chain, a deployed contract and every participant, driven in one process.

    Args:
        spec: the run spec.
        root: a directory for every participant's work files.
        roster: the participants and their behaviours.
        dataset: the run's dataset (loaded once, shared by everyone).
        on_event: receives every node event.
        validator_factory: builds a validator node; ``None`` when the run has no validators.
    """

    def __init__(self, spec: RunSpec, root: Path, roster: Roster, dataset: Dataset,
                 on_event: EventSink | None = None,
                 validator_factory: Callable[..., Participant] | None = None) -> None:
        self.spec = spec
        self.root = Path(root)
        econ = spec.economics
        self.operator = sim_key("operator")
        self.treasury = sim_key("treasury").address()
        host_keys = [sim_key(f"host-{i}") for i in range(len(roster.hosts))]
        validator_keys = [sim_key(f"validator-{i}") for i in range(len(roster.validators))]
        everyone = [self.operator, *host_keys, *validator_keys]
        self.chain = EmbeddedChain(genesis_balances={k.address(): {econ.denom: GENESIS_BALANCE} for k in everyone})
        self.ledger: Ledger = deploy_embedded(self.chain, self.operator, spec,
                                              GlobalState.initial(spec).hash().hex(), self.treasury)
        pool = roster.reward_pool if roster.reward_pool is not None else 10 * int(econ.reward_per_epoch)
        if pool:
            self.ledger.fund_rewards(self.operator, pool)
        self._sources: dict[str, Callable[[], ArtifactSource]] = {}
        self.hosts: list[HostNode] = []
        for i, (key, behaviour) in enumerate(zip(host_keys, roster.hosts)):
            name = f"host-{i}" + ("" if behaviour.name == "honest" else f" ({behaviour.name})")
            endpoint = f"http://host-{i}.sim"
            node = HostNode(self.ledger, key, spec, dataset, self.root / f"host-{i}", self.resolve,
                            behaviour=behaviour, name=name, on_event=on_event)
            self._sources[endpoint] = lambda node=node: node.source
            stake = roster.host_stake or 2 * int(econ.min_host_stake)
            self.ledger.bond(key, "host", endpoint, stake)
            self.hosts.append(node)
        self.validators: list[Participant] = []
        for i, (key, behaviour) in enumerate(zip(validator_keys, roster.validators)):
            if validator_factory is None:
                raise VerilocoError("validators need a validator factory")
            node = validator_factory(self.ledger, key, spec, dataset, self.root / f"validator-{i}", self.resolve,
                                     behaviour=behaviour, name=f"validator-{i}", on_event=on_event)
            stake = roster.validator_stake or 2 * int(econ.min_validator_stake)
            self.ledger.bond(key, "validator", f"http://validator-{i}.sim", stake)
            self.validators.append(node)
        self.initial_funds = self.total_funds()

    @property
    def nodes(self) -> list[Participant]:
        return [*self.hosts, *self.validators]

    def resolve(self, endpoint: str) -> ArtifactSource:
        """A host's artifacts by its advertised endpoint (in-process, no HTTP)."""
        if endpoint not in self._sources:
            raise ArtifactUnavailable(f"nobody serves at {endpoint}")
        return self._sources[endpoint]()

    def total_funds(self) -> int:
        """Bank balances of every participant, the treasury and the contract: conserved by every epoch."""
        addresses = {self.operator.address(), self.treasury, self.ledger.contract_address}
        addresses |= {n.address for n in self.nodes}
        return sum(self.ledger.balance(a) for a in addresses)

    def run_epoch(self, max_rounds: int = 10_000) -> EpochReport:
        """Drive the current epoch to its end; return its report.

        Raises:
            VerilocoError: the epoch did not end within ``max_rounds`` rounds (a stuck phase).
        """
        epoch = self.ledger.epoch().epoch
        for _ in range(max_rounds):
            acted = [node.tick() for node in self.nodes]
            info = self.ledger.epoch()
            if info.epoch != epoch:
                return self.ledger.report(epoch)
            if not any(acted):
                # Nobody can act: let time pass to the phase's deadline and close it.
                if self.ledger.height() < info.phase_deadline:
                    self.ledger.wait_for_height(info.phase_deadline)
                self.ledger.advance(self.operator)
        raise VerilocoError(f"epoch {epoch} did not finish within {max_rounds} rounds")
