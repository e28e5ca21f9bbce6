"""Where a run lives: the network file, and opening a Ledger on it for either backend.

``veriloco run deploy`` (and ``veriloco simulate``) write a small JSON network file — the chain to
talk to and the contract's address — that every other command reads (``--network``, default
``<home>/network.json``). A ``cosmos`` network is a node reached over gRPC; an ``embedded`` network
is the saved state of an in-process chain (what ``simulate`` leaves behind), opened, used and saved
again by one process at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from decimal import Decimal
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from chain.ledger import Ledger
from protocol.coins import parse_amount
from protocol.rules.spec import RunSpec
from protocol.types import Address
from veriloco.errors import CommandError
from veriloco.home import home_dir


@dataclass
class Timeouts:
    """How long the CLI waits for a node (set from ``veriloco --timeout/--tx-timeout``).

    Attributes:
        node: seconds a request waits for the node to answer, retries included; a node that is
            down is reported after this long. Daemons wait :attr:`daemon_node` instead once they
            have started, so they ride out a node's restart.
        tx: seconds to wait for a transaction to be included in a block.
        daemon_node: what :attr:`node` is for a running daemon.
    """

    node: float = 5.0
    tx: float = 60.0
    daemon_node: float = 60.0


TIMEOUTS = Timeouts()
"""The process's timeouts; the root command sets them from its options."""


@dataclass
class TxOptions:
    """How transactions are sent and which node is asked, as Cosmos CLIs write it (set from
    ``--node/--gas/--gas-adjustment/--gas-prices/--fees``, before or after the command:
    ``veriloco.commands.tx_flags``; they apply to cosmos networks).

    Attributes:
        node: a gRPC URL that replaces the network file's node (same chain, another node).
        gas: ``auto`` (simulate, then × ``gas_adjustment`` plus the chain's offset) or a fixed limit.
        gas_adjustment: the factor on the simulated gas (None: the chain's default, 1.3 on Injective).
        gas_prices: the fee per unit of gas, a coin of the fee denom (None: the chain's minimum).
        fees: a fixed fee for every transaction, a coin of the fee denom (instead of gas × price).
        given: where each field that was set came from (``before the command``, ``$VERILOCO_GAS``, …).
    """

    node: str | None = None
    gas: str = "auto"
    gas_adjustment: float | None = None
    gas_prices: str | None = None
    fees: str | None = None
    given: dict[str, str] = field(default_factory=dict)

    def reset(self) -> None:
        """Back to the defaults (a new command line)."""
        for each in fields(self):
            setattr(self, each.name, getattr(TxOptions(), each.name))

    def gas_limit(self) -> int | None:
        """The fixed gas limit of ``--gas N``; None for ``auto``.

        Raises:
            CommandError: neither ``auto`` nor a positive whole number.
        """
        if self.gas == "auto":
            return None
        if not self.gas.isdigit() or int(self.gas) <= 0:
            raise CommandError(f"--gas {self.gas!r}: expected auto or a positive number of gas units")
        return int(self.gas)


TX = TxOptions()
"""The process's transaction options; the root command sets them from its options."""


class ChainSettings(BaseModel):
    """How to reach the chain."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["embedded", "cosmos"]
    grpc: str | None = None
    rpc: str | None = None
    chain_id: str | None = None
    flavour: Literal["injective", "wasmd"] = "injective"
    state: str | None = None
    allow_private_endpoints: bool | None = None
    """Whether daemons may dial members' endpoints on loopback and private networks. None: only in
    local runs (the embedded chain, the devnet's chain id); a public run sets it only if its hosts
    really live on one private network."""

    def private_endpoints_allowed(self) -> bool:
        """Loopback and private endpoints may be dialed (``protocol.rules.endpoints``)."""
        if self.allow_private_endpoints is not None:
            return self.allow_private_endpoints
        return self.backend == "embedded" or (self.chain_id or "").startswith("veriloco-devnet")


class NetworkFile(BaseModel):
    """A deployed run: the chain and the contract."""

    model_config = ConfigDict(extra="forbid")

    chain: ChainSettings
    contract: Address
    run_id: str
    names: dict[str, str] = Field(default_factory=dict, max_length=4096)
    """Labels for addresses (``simulate`` names its participants), shown where a keyring has none."""

    def save(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=1) + "\n")
        return path


def network_path(network: str | Path | None, home: str | Path | None = None) -> Path:
    return Path(network) if network else home_dir(home) / "network.json"


def load_network(network: str | Path | None, home: str | Path | None = None) -> NetworkFile:
    """Read the network file (``--network`` or ``<home>/network.json``)."""
    path = network_path(network, home)
    if not path.exists():
        raise CommandError(f"no network file at {path}: deploy a run first (veriloco run deploy) "
                            "or pass --network FILE (veriloco simulate writes one in its workdir)")
    try:
        return NetworkFile.model_validate_json(path.read_text())
    except ValidationError as exc:
        raise CommandError(f"{path} is not a network file: {exc.errors()[0]['msg']}") from None


def cosmos_chain(settings: ChainSettings):  # -> chain.cosmos.CosmosChain (cosmpy imported lazily)
    """A client for a cosmos network, with the process's :data:`TIMEOUTS` and :data:`TX` options."""
    from chain.cosmos import CosmosChain, injective, wasmd  # noqa: PLC0415 (cosmpy loads only for a cosmos network)

    grpc = TX.node or settings.grpc
    if not grpc or not settings.chain_id:
        raise CommandError("a cosmos network needs grpc and chain_id")
    config = (injective if settings.flavour == "injective" else wasmd)(settings.chain_id)
    changes: dict[str, object] = {}
    if TX.gas_adjustment is not None:
        if TX.gas_adjustment < 1:
            raise CommandError(f"--gas-adjustment {TX.gas_adjustment}: must be at least 1")
        changes["gas_multiplier"] = Decimal(str(TX.gas_adjustment))
    if TX.gas_prices is not None:  # a price per gas unit may be a fraction of a base unit: 160000000inj, 0.025stake
        number = TX.gas_prices.removesuffix(config.fee_denom)
        try:
            price = Decimal(number)
        except ArithmeticError:
            price = Decimal(-1)
        if number == TX.gas_prices or not price.is_finite() or price < 0:
            raise CommandError(f"--gas-prices {TX.gas_prices!r}: expected a price in {config.fee_denom}, "
                               f"e.g. 160000000{config.fee_denom}")
        changes["gas_price"] = price
    if TX.fees is not None:
        changes["fixed_fee"] = parse_amount(TX.fees, config.fee_denom)
    return CosmosChain(grpc, config.with_(**changes) if changes else config, rpc_url=settings.rpc,
                       tx_timeout=TIMEOUTS.tx, reconnect_timeout=TIMEOUTS.node, call_timeout=TIMEOUTS.node)


def network_from_node(node: str, contract: str, *, rpc: str | None = None, chain_id: str | None = None) -> NetworkFile:
    """The network file of the run at ``contract`` reached through the node at ``node`` (gRPC): the
    chain id comes from the node (refused if ``chain_id`` names another), the run id from the
    contract (unchecked here: ``veriloco run join`` checks it). The flavour follows the address
    prefix (``inj1…``: Injective; anything else: wasmd).

    Raises:
        CommandError: the node serves another chain than ``chain_id``.
    """
    from chain.cosmos import CosmosBackend  # noqa: PLC0415 (cosmpy loads only for a cosmos network)

    settings = ChainSettings(backend="cosmos", grpc=node, rpc=rpc, chain_id=chain_id or "unknown",
                             flavour="injective" if contract.startswith("inj1") else "wasmd")
    chain = cosmos_chain(settings)
    try:
        found = chain.node_chain_id()
        if chain_id is not None and chain_id != found:
            raise CommandError(f"the node at {node} serves chain {found!r}, not {chain_id!r}")
        run_id = Ledger(CosmosBackend(chain, contract)).config().run_id
    finally:
        chain.close()
    return NetworkFile(chain=settings.model_copy(update={"chain_id": found}), contract=contract, run_id=run_id)


def be_patient(ledger: Ledger) -> None:
    """Let a daemon's ledger wait :attr:`Timeouts.daemon_node` for its node (to ride out a restart)
    instead of the quick answer one-shot commands need. Nothing to do on the embedded chain."""
    set_timeouts = getattr(getattr(ledger.backend, "chain", None), "set_timeouts", None)
    if set_timeouts is not None:
        set_timeouts(reconnect=TIMEOUTS.daemon_node, call=max(TIMEOUTS.node, 10.0))


def be_brief(ledger: Ledger, seconds: float) -> None:
    """Let ``ledger`` give up on its node after about ``seconds`` per request and as long again of
    retries: for a server's chain reads, which answer their client quickly (a 503 it retries)
    rather than hold a worker for a daemon's minute. Nothing to do on the embedded chain."""
    set_timeouts = getattr(getattr(ledger.backend, "chain", None), "set_timeouts", None)
    if set_timeouts is not None:
        set_timeouts(reconnect=seconds, call=seconds)


@contextmanager
def open_ledger(net: NetworkFile, save: bool = False) -> Iterator[Ledger]:
    """A Ledger on the network's contract.

    Args:
        net: the network file.
        save: for an embedded network, write the chain state back afterwards (after writes), also
            when the block ends with an error: the transactions committed before it stay.
    """
    if net.chain.backend == "cosmos":
        from chain.cosmos import CosmosBackend  # noqa: PLC0415 (cosmpy loads only for a cosmos network)

        chain = cosmos_chain(net.chain)
        try:
            yield Ledger(CosmosBackend(chain, net.contract, gas_limit=TX.gas_limit()))
        finally:
            chain.close()
        return
    from chain.embedded import EmbeddedChain  # noqa: PLC0415 (wasmtime loads only for an embedded network)
    from chain.embedded.backend import EmbeddedBackend  # noqa: PLC0415 (as above)

    if not net.chain.state or not Path(net.chain.state).exists():
        raise CommandError(f"embedded chain state {net.chain.state!r} not found")
    chain = EmbeddedChain.load(net.chain.state)
    config = chain.query(net.contract, {"config": {}})
    denom = RunSpec.from_canonical(config["spec_json"]).economics.denom
    try:
        yield Ledger(EmbeddedBackend(chain, net.contract, denom))
    finally:
        # Also when the command stops part-way (an error, Ctrl-C): what it committed stays, as on a
        # real chain (`epoch advance --until` may have sent many advances). A refused transaction
        # was undone whole; a state that an interrupt caught half-way through one is not saved.
        if save and chain.settled:
            chain.save(net.chain.state)
