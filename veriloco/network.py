"""A whole veriloco network in one process: what ``veriloco simulate`` runs.

Hosts and validators are the real nodes (``node.host.HostNode``, ``node.validator.ValidatorNode``,
or the wrapper an adversary's behaviour needs: ``node.adversaries``) on the real contract: under
wasmtime on the embedded chain (default), or on a real injectived devnet (``EmbeddedChainFactory`` /
``DevnetChainFactory``). Only a few things differ from a multi-process network: artifacts move
through the same :class:`~trainer.artifacts.ArtifactSource` interface without HTTP (each reader gets
its own view of a host, as over HTTP, where the server knows who signed); every node ticks once per
round and each round's transactions go into one block, as a real node includes many transactions in
a block; and when no node has anything to do the network lets time pass to the current phase's
deadline (on the embedded chain, waiting mines the blocks), after which the nodes themselves send
``advance`` (the network does too, if none did). Phases close early when everyone has acted, so a
simulated epoch costs about its training and replays.

Funds are audited: every transaction's fee is metered, and the sum of all participants' balances,
the treasury's and the contract's, plus the fees paid, stays what it was at genesis.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chain.devnet import Devnet, DevnetPorts, GenesisAccount
from chain.ledger import ContractBackend, ContractError, Ledger, instantiate_msg
from chain.metered import MeteredBackend
from node.adversaries import host_node, validator_node
from node.events import EventSink
from node.global_store import PeerResolver
from node.host import HostNode
from node.participant import Participant
from node.validator import ValidatorNode
from protocol.injective import GENESIS_BALANCE
from protocol.keys import PrivateKey
from protocol.rules.spec import RunSpec
from protocol.views import EpochReport
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, LocalArtifacts
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.outer import GlobalState
from veriloco.errors import CommandError

if TYPE_CHECKING:  # the backends load only when a factory deploys on one
    from chain.cosmos import CosmosChain
    from chain.embedded import EmbeddedChain


SIM_BLOCK_TXS = 500
"""Transactions one block of a simulation's embedded chain includes (a real block is bounded by gas;
each of the contract's messages takes well under 1 % of a 10M-gas block, ``docs/benchmarks.md``)."""


def _source_of(node: HostNode) -> Callable[[str], ArtifactSource]:
    """``node``'s artifacts as one reader sees them, looked up when asked."""
    return lambda requester: node.source_for(requester)


def _holdings_of(root: Path, run_id: bytes, address: str) -> Callable[[str], ArtifactSource]:
    """A validator's holdings (``veriloco validator run`` serves the same over HTTP), for any reader."""
    return lambda requester: LocalArtifacts(root, run_id, address)


def sim_key(name: str) -> PrivateKey:
    """A deterministic key for a simulated participant (never use these outside a simulation)."""
    return PrivateKey(hashlib.sha256(b"veriloco-simulation:" + name.encode()).digest())


ChainFactory = Callable[[RunSpec, PrivateKey, str, Sequence[PrivateKey]], ContractBackend]
"""(spec, operator key, treasury address, keys to fund at genesis) -> a backend on a freshly deployed contract."""


class EmbeddedChainFactory:
    """Deploys on a new in-process chain; :attr:`chain` keeps it (to save its state afterwards)."""

    def __init__(self) -> None:
        self.chain: EmbeddedChain | None = None

    def __call__(self, spec: RunSpec, operator: PrivateKey, treasury: str,
                 funded: Sequence[PrivateKey]) -> ContractBackend:
        from chain.embedded import EmbeddedChain  # noqa: PLC0415 (wasmtime loads only for an embedded chain)
        from chain.embedded.backend import deploy_embedded  # noqa: PLC0415 (as above)

        chain = EmbeddedChain(genesis_balances={k.address(): {spec.economics.denom: GENESIS_BALANCE} for k in funded},
                              block_txs=SIM_BLOCK_TXS)
        self.chain = chain
        ledger = deploy_embedded(chain, operator, spec, GlobalState.initial(spec).hash().hex(), treasury)
        return ledger.backend


class DevnetChainFactory:
    """Starts a fresh injectived devnet in ``home`` (funding the keys at genesis) and deploys on it.

    Call :meth:`stop` when done. The node is tied to this process (``Devnet.up(tied=True)``): it
    stops when the process dies, even by SIGKILL.
    """

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.devnet: Devnet | None = None
        self._chain: CosmosChain | None = None

    def __call__(self, spec: RunSpec, operator: PrivateKey, treasury: str,
                 funded: Sequence[PrivateKey]) -> ContractBackend:
        from chain.cosmos import CosmosBackend  # noqa: PLC0415 (cosmpy loads only for a devnet)

        accounts = [GenesisAccount.of_key(f"sim-{i}", k, amount=GENESIS_BALANCE) for i, k in enumerate(funded)]
        devnet = self.devnet = Devnet(self.home, ports=DevnetPorts.free(), accounts=accounts)
        # Tied: a simulation killed before stop() takes its node down with it (a CLI's
        # `veriloco devnet start` on the workdir brings the chain back).
        devnet.up(tied=True)
        chain = self._chain = devnet.connect()
        msg = instantiate_msg(spec, GlobalState.initial(spec).hash().hex(), treasury)
        return CosmosBackend.deploy(chain, operator, msg)

    def stop(self) -> None:
        if self._chain is not None:
            self._chain.close()
        if self.devnet is not None:
            self.devnet.stop()


@dataclass
class Roster:
    """Who takes part: one behaviour per host, one per validator, and their stakes."""

    hosts: Sequence[HostBehaviour]
    validators: Sequence[object] = field(default_factory=list)
    host_stake: int | None = None
    validator_stake: int | None = None
    reward_pool: int | None = None


class LocalNetwork:
    """A deployed contract and every participant, driven in one process.

    Args:
        spec: the run spec.
        root: a directory for every participant's work files.
        roster: the participants and their behaviours.
        dataset: the run's dataset (loaded once, shared by everyone).
        on_event: receives every node event.
        validator_factory: builds a validator node (default: :func:`node.adversaries.validator_node`,
            the node its behaviour needs).
        chain: deploys the contract (default: a new embedded chain).
        device: where every node trains and replays (``cpu``, ``cuda``, ``cuda:N``).
        full_leaf_every: each host stores every ``K``-th leaf in full and recomputes the others when
            challenged (:class:`node.host.HostNode`): what it keeps of a closed epoch.
        live_leaf_every: how densely each host stores an epoch that can still be challenged (a
            divisor of ``K``; None: as the free disk allows, :mod:`trainer.leaf_budget`).
        keep_epochs: each host deletes epochs older than this many once the chain closed them, and
            every node the global states no open epoch needs (None: keep all).
    """

    def __init__(self, spec: RunSpec, root: Path, roster: Roster, dataset: Dataset,
                 on_event: EventSink | None = None,
                 validator_factory: Callable[..., Participant] | None = None,
                 chain: ChainFactory | None = None, device: str = "cpu", full_leaf_every: int = 1,
                 keep_epochs: int | None = None, live_leaf_every: int | None = None) -> None:
        self.spec = spec
        self.root = Path(root)
        econ = spec.economics
        self.operator = sim_key("operator")
        self.treasury = sim_key("treasury").address()
        host_keys = [sim_key(f"host-{i}") for i in range(len(roster.hosts))]
        validator_keys = [sim_key(f"validator-{i}") for i in range(len(roster.validators))]
        self.chain_factory = chain or EmbeddedChainFactory()
        self.backend = MeteredBackend(self.chain_factory(spec, self.operator, self.treasury,
                                                         [self.operator, *host_keys, *validator_keys]))
        self.ledger = Ledger(self.backend)
        self.names: dict[str, str] = {self.treasury: "treasury", self.operator.address(): "operator"}
        self._sources: dict[str, Callable[[str], ArtifactSource]] = {}
        self.hosts: list[HostNode] = []
        self.overlaps: dict[int, tuple[int, str]] = {}
        """Pipelined runs: settled epoch -> (the current epoch, its phase) when it closed."""
        self.validators: list[Participant] = []
        # The audit starts before the first transaction of the run (the deploy is the factory's).
        self._audited = [self.operator.address(), self.treasury, self.ledger.contract_address,
                         *(k.address() for k in host_keys + validator_keys)]
        self.initial_funds = self.total_funds()
        pool = roster.reward_pool if roster.reward_pool is not None else 10 * int(econ.reward_per_epoch)
        if pool:
            self.ledger.fund_rewards(self.operator, pool)
        for i, (key, behaviour) in enumerate(zip(host_keys, roster.hosts, strict=True)):
            name = f"host-{i}" + ("" if behaviour.name == "honest" else f" ({behaviour.name})")
            endpoint = f"http://host-{i}.sim"
            node = host_node(self.ledger, key, spec, dataset, self.root / f"host-{i}",
                            self.resolver_for(key.address()), behaviour=behaviour, name=name, on_event=on_event,
                            device=device, full_leaf_every=full_leaf_every, keep_epochs=keep_epochs,
                            live_leaf_every=live_leaf_every)
            self._sources[endpoint] = _source_of(node)
            self.ledger.bond(key, "host", endpoint, roster.host_stake or 2 * int(econ.min_host_stake))
            self.hosts.append(node)
            self.names[node.address] = name
        build_validator = validator_factory or validator_node
        for i, (key, conduct) in enumerate(zip(validator_keys, roster.validators, strict=True)):
            label = getattr(conduct, "name", "honest")
            name = f"validator-{i}" + ("" if label == "honest" else f" ({label})")
            validator = build_validator(self.ledger, key, spec, dataset, self.root / f"validator-{i}",
                                          self.resolver_for(key.address()), behaviour=conduct, name=name,
                                          on_event=on_event, device=device, keep_epochs=keep_epochs)
            endpoint = f"http://validator-{i}.sim"
            # What a validator holds (Δs and checked leaves by their hashes) it serves to every reader.
            self._sources[endpoint] = _holdings_of(self.root / f"validator-{i}", spec.run_id(), key.address())
            self.ledger.bond(key, "validator", endpoint, roster.validator_stake or 2 * int(econ.min_validator_stake))
            self.validators.append(validator)
            self.names[validator.address] = name

    @property
    def nodes(self) -> list[Participant]:
        return [*self.hosts, *self.validators]

    def resolve(self, endpoint: str, requester: str = "") -> ArtifactSource:
        """A host's artifacts by its advertised endpoint, as ``requester`` is served (in-process, no HTTP)."""
        if endpoint not in self._sources:
            raise ArtifactUnavailable(f"nobody serves at {endpoint}")
        return self._sources[endpoint](requester)

    def resolver_for(self, requester: str) -> PeerResolver:
        """How ``requester`` reaches hosts: each host serves it what it serves that reader."""
        return lambda endpoint: self.resolve(endpoint, requester)

    def total_funds(self) -> int:
        """Balances of everyone in the run, the treasury and the contract, plus every fee paid so far.

        Conserved exactly: it must equal :attr:`initial_funds` after any number of epochs.
        """
        return sum(self.ledger.balance(a) for a in self._audited) + self.backend.fees_paid

    def _training_jobs(self) -> list[Future[Any]]:
        """The pipelined hosts' trainings and the validators' VDF evaluations (phase ``delay``)
        under way on their threads."""
        vdfs = [job for v in self.validators if isinstance(v, ValidatorNode) for job in v.delayed_seed.running]
        return [*(job for h in self.hosts if (job := h.training) is not None), *vdfs]

    def run_epoch(self, max_rounds: int = 10_000) -> EpochReport:
        """Drive the oldest epoch not settled yet to its end; return its report.

        In a pipelined run (``phases.pipelined``) the next epoch opens from the optimistic start
        while this one settles, and the nodes work on both; the epoch is done once it is neither
        current nor settling. :attr:`overlaps` then says what the newer epoch was doing.

        Raises:
            CommandError: the epoch did not end within ``max_rounds`` rounds (a stuck phase).
        """
        info = self.ledger.epoch(lists=False)
        epoch = info.settling if info.settling is not None else info.epoch
        for _ in range(max_rounds):
            # Jobs training before the round: one that ends after its host's tick looked at it but
            # before the check below is no longer "training" there, yet its commitment is still due.
            # Waiting on it (it is done: at once) gives its host the next round instead of a jump
            # to the train deadline, which would close the phase before the commit.
            training = self._training_jobs()
            acted = [node.tick() for node in self.nodes]
            self.ledger.end_block()  # one round of transactions, one block
            info = self.ledger.epoch(lists=False)
            if info.epoch != epoch and info.settling != epoch:
                if self.spec.phases.pipelined:
                    self.overlaps[epoch] = (info.epoch, info.phase)
                return self.ledger.report(epoch)
            if not any(acted):
                busy = training + self._training_jobs()
                if busy:
                    # A pipelined host trains on its thread: time passes for it, not in blocks.
                    wait(busy, timeout=600, return_when=FIRST_COMPLETED)
                    continue
                height = self.ledger.height()
                # A phase held by the settling epoch keeps its old deadline: wait for the next one due.
                older = ([self.ledger.epoch(info.settling, lists=False).phase_deadline]
                         if info.settling is not None else [])
                ahead = [d for d in (info.phase_deadline, *older) if d > height]
                if ahead:
                    # Nobody can act: let time pass to the next deadline; the nodes close the phase.
                    self.ledger.wait_for_height(min(ahead), timeout=600)
                else:
                    # Past the deadline and no node advanced (none is a member, say): close it.
                    with contextlib.suppress(ContractError):
                        self.ledger.advance(self.operator)
        raise CommandError(f"epoch {epoch} did not finish within {max_rounds} rounds")
