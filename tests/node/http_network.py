"""A run over real HTTP on the embedded chain: every host serves with its real artifact server,
every validator with its holder server, and every read goes through the hardened client — what the
daemons do, driven in one process so a test can interpose attackers between the nodes.

The driver's ticks, the servers' membership lookups and the nodes' fetch and θ-warm threads all
read the one embedded chain, whose lock makes each call atomic (a real chain node serves them
concurrently). The driver mines a few blocks at a time when nobody acts, so a patient validator
sees its deadline come near.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chain.embedded import EmbeddedChain
from chain.embedded.backend import deploy_embedded
from chain.ledger import ContractError, Ledger
from chain.metered import MeteredBackend
from node.daemon import MembershipCache, http_peers
from node.host import HostNode
from node.http import ClientLimits, ServerLimits
from node.server import ServerThread, create_app
from node.validator import Patience, ValidatorNode
from protocol.injective import GENESIS_BALANCE
from protocol.keys import PrivateKey
from protocol.rules.spec import RunSpec
from protocol.views import EpochReport
from trainer.artifacts import LocalArtifacts
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.inner import StepCallback
from trainer.outer import GlobalState

LIMITS = ClientLimits(connect_s=1.0, read_s=1.0, deadline_s=4.0)
# The embedded chain makes a block per transaction, so half the window leaves room for every
# validator's verdicts (on a real chain many fit in one block).
PATIENCE = Patience(margin_blocks=3, margin_fraction=0.5)


def key(name: str) -> PrivateKey:
    return PrivateKey(hashlib.sha256(b"http-network:" + name.encode()).digest())


@dataclass
class Member:
    node: HostNode | ValidatorNode
    server: ServerThread | None
    endpoint: str


@dataclass
class HttpNetwork:
    """Hosts and validators of one run, each behind its real server.

    Args:
        spec: the run spec.
        root: work directories.
        dataset: the run's dataset.
        hosts: one behaviour per host.
        validators: how many (honest, patient) validators.
        endpoints: host index -> the endpoint it registers instead of its server's (an attacker's
            server in front of an honest node's work).
        wrap: member index (the hosts first, then the validators) -> a wrapper of its server app
            (an ASGI middleware that misbehaves).
        extra_keys: more funded keys (sybils).
        on_step: host index -> its inner-loop step callback (a host slowed down).
    """

    spec: RunSpec
    root: Path
    dataset: Dataset
    hosts: list[HostBehaviour]
    validators: int = 2
    endpoints: dict[int, str] = field(default_factory=dict)
    wrap: dict[int, Callable[[Any], Any]] = field(default_factory=dict)
    extra_keys: list[PrivateKey] = field(default_factory=list)
    on_step: dict[int, StepCallback] = field(default_factory=dict)

    def __post_init__(self) -> None:
        spec = self.spec
        self.operator, self.treasury = key("operator"), key("treasury").address()
        host_keys = [key(f"host-{i}") for i in range(len(self.hosts))]
        validator_keys = [key(f"validator-{i}") for i in range(self.validators)]
        funded = [self.operator, *host_keys, *validator_keys, *self.extra_keys]
        chain = EmbeddedChain(genesis_balances={k.address(): {spec.economics.denom: GENESIS_BALANCE} for k in funded})
        deployed = deploy_embedded(chain, self.operator, spec, GlobalState.initial(spec).hash().hex(), self.treasury)
        self.backend = MeteredBackend(deployed.backend)
        self.ledger = Ledger(self.backend)
        self.audited = [self.treasury, self.ledger.contract_address, *(k.address() for k in funded)]
        self.initial_funds = self.total_funds()
        self.ledger.fund_rewards(self.operator, 10 * int(spec.economics.reward_per_epoch))
        self.members: list[Member] = []
        run = spec.run_id().hex()
        for i, (k, behaviour) in enumerate(zip(host_keys, self.hosts, strict=True)):
            node = HostNode(self.ledger, k, spec, self.dataset, self.root / f"host-{i}", self._peers(k),
                            behaviour=behaviour, name=f"host-{i}", on_step=self.on_step.get(i))
            app = create_app(node.source, run, node.address, authorize=MembershipCache(self.ledger))
            server = ServerThread(self.wrap[i](app) if i in self.wrap else app,
                                  limits=ServerLimits(max_connections=128, header_timeout_s=2.0)).start()
            endpoint = self.endpoints.get(i, server.url)
            self.ledger.bond(k, "host", endpoint, 2 * int(spec.economics.min_host_stake))
            self.members.append(Member(node, server, endpoint))
        for i, k in enumerate(validator_keys):
            validator = ValidatorNode(self.ledger, k, spec, self.dataset, self.root / f"validator-{i}",
                                      self._peers(k), name=f"validator-{i}", patience=PATIENCE)
            app = create_app(LocalArtifacts(validator.root, spec.run_id(), validator.address), run, validator.address,
                             authorize=MembershipCache(self.ledger))
            j = len(self.hosts) + i
            server = ServerThread(self.wrap[j](app) if j in self.wrap else app).start()
            self.ledger.bond(k, "validator", server.url, 2 * int(spec.economics.min_validator_stake))
            self.members.append(Member(validator, server, server.url))

    def _peers(self, k: PrivateKey) -> Callable[[str], Any]:
        return http_peers(k, self.spec, self.ledger.prefix, allow_private=True, limits=LIMITS, retry_budget_s=1.0)

    @property
    def nodes(self) -> list[HostNode | ValidatorNode]:
        return [m.node for m in self.members]

    def host(self, i: int) -> Member:
        return self.members[i]

    def total_funds(self) -> int:
        return sum(self.ledger.balance(a) for a in self.audited) + self.backend.fees_paid

    def tick_all(self) -> bool:
        # Every node ticks each round (no short-circuit); an exception here is a daemon that would
        # have had to survive it, so the test sees it.
        return any([node.tick() for node in self.nodes])  # noqa: C419

    def run_epoch(self, between: Callable[[HttpNetwork], None] | None = None, max_rounds: int = 2000) -> EpochReport:
        """Drive the current epoch to its end, calling ``between`` after every round."""
        epoch = self.ledger.epoch().epoch
        for _ in range(max_rounds):
            acted = self.tick_all()
            if between is not None:
                between(self)
            info = self.ledger.epoch()
            if info.epoch != epoch:
                return self.ledger.report(epoch)
            if not acted:
                height = self.ledger.height()
                if height < info.phase_deadline:
                    step = max(1, (info.phase_deadline - height) // 3)
                    self.ledger.wait_for_height(min(info.phase_deadline, height + step))
                else:
                    with contextlib.suppress(ContractError):  # closed meanwhile
                        self.ledger.advance(self.operator)
        raise AssertionError(f"epoch {epoch} did not finish")

    def close(self) -> None:
        """Close every node (what its daemon does when it stops: fetch and training threads end),
        then stop the servers. Idempotent, so a test's ``finally`` may call it whatever happened."""
        for node in self.nodes:
            node.close()
        for m in self.members:
            if m.server is not None:
                m.server.stop()
