"""Devnet fixtures for the chain tests: the same contract, on a real injectived node.

A pytest plugin. Test modules load it with ``pytest_plugins = ["devnet_backend"]``; a conftest
may instead import the fixtures (``from devnet_backend import devnet, devnet_chain,
devnet_code_id, devnet_deploy, devnet_ledger_driver``), which then take precedence for its
directory. Either way one node serves the whole session.

* ``devnet`` (session): a single-validator node on free ports in a temporary home, started once
  (about 3 s) and stopped at the end; one genesis ``faucet`` account holds plenty of every denom.
* ``devnet_chain`` (session): a :class:`chain.cosmos.CosmosChain` connected to it.
* ``devnet_code_id`` (session): the committed ``veriloco.wasm``, stored once.
* ``devnet_ledger_driver`` (per test): ``(spec, names) -> DevnetContract``, the driver factory
  ``ledger_env`` expects (``LEDGER_BACKENDS["devnet"] = LedgerBackend("devnet_ledger_driver",
  (pytest.mark.devnet,))`` in conftest runs every ``ledger_env`` test on the devnet too).
* ``devnet_deploy`` (per test): a factory ``devnet_deploy(spec, ...) -> DevnetContract``: a fresh
  contract instance of that code and a fresh set of named accounts (of both key types, as
  ``ledger_env.key_type_for`` says), each funded by the faucet
  with exactly ``balances`` (default 10^24 of ``inj`` and of ``uatom``) in one transaction. Fresh
  accounts per test keep tests independent on a chain that is shared and never reset.

:class:`DevnetContract` is a ``ledger_env`` driver (see ``ledger_env.py``) and offers what a
backend-neutral test needs: a :class:`chain.ledger.Ledger`,
named keys and addresses, raw ``execute``/``query``, balances, the fees each account paid (so
conservation holds: balances + contract + fees = constant), and block progress. On this chain
blocks come by themselves every ~0.2 s: ``advance_blocks(n)`` waits for ``n`` blocks where the
embedded chain would produce them, so a test's assertions stay the same on both.

Tests using these fixtures should be marked ``@pytest.mark.devnet``. Without the ``devnet`` extra
(``injective-core``) they are skipped with the reason.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
from ledger_env import key_type_for
from suite_env import SESSION_DEVNET, named_key

from chain.cosmos import CosmosBackend, CosmosChain
from chain.cosmos.chain import Funds, contract_address_of
from chain.devnet import Devnet, DevnetNotInstalled, DevnetPorts, GenesisAccount, injectived_binary
from chain.ledger import ContractError, Ledger, TxResult, instantiate_msg
from chain.wasm_artifact import load_contract_wasm
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.keys import PrivateKey
from protocol.rules.spec import RunSpec

OTHER_DENOM = "uatom"
INITIAL_BALANCE = GENESIS_BALANCE
DEFAULT_NAMES = ("operator", "treasury", "host1", "host2", "host3", "validator1", "validator2", "funder", "outsider")
INITIAL_MODEL_HASH = hashlib.sha256(b"theta_0").hexdigest()
FAUCET = "faucet"
FAUCET_BALANCE = 10**33


def faucet_key() -> PrivateKey:
    return named_key("devnet-faucet")


class DevnetContract:
    """A freshly deployed veriloco contract on the devnet, with fresh funded accounts.

    Attributes:
        ledger: the typed client (``chain.ledger.Ledger`` over :class:`CosmosBackend`).
        backend, chain: the transport and the connection under it.
        spec: the run spec it was deployed with.
        keys, accounts: name -> key, name -> address.
        address: the contract's address.
        code_id: the code it was instantiated from.
        fees: address -> fees paid (in ``denom``) by transactions sent through this object.
    """

    backend_name = "devnet"
    denom = DENOM
    other_denom = OTHER_DENOM
    initial_model_hash = INITIAL_MODEL_HASH

    def __init__(self, chain: CosmosChain, code_id: int, spec: RunSpec, keys: Mapping[str, PrivateKey],
                 address: str, admin: str | None = None) -> None:
        self.chain = chain
        self.code_id = code_id
        self.spec = spec
        self.keys = dict(keys)
        self.accounts = {n: k.address() for n, k in self.keys.items()}
        self.fees: dict[str, int] = dict.fromkeys(self.accounts.values(), 0)
        self.address = address
        self.admin = admin
        self.backend = CosmosBackend(chain, address)
        self.ledger = Ledger(self.backend)

    # -- accounts ---------------------------------------------------------------------------

    def key(self, name: str) -> PrivateKey:
        return self.keys[name]

    def addr(self, name: str) -> str:
        return self.accounts[name]

    def _charge(self, address: str, fee: int) -> None:
        if address in self.fees:
            self.fees[address] += fee

    @property
    def fees_paid(self) -> int:
        """Fees paid by this object's accounts so far."""
        return sum(self.fees.values())

    # -- the contract -----------------------------------------------------------------------

    def execute(self, sender: str | PrivateKey, msg: Mapping[str, Any], funds: Funds = None, *,
                gas_limit: int | None = None) -> TxResult:
        """Execute as the account named ``sender`` (or with a key); ``funds`` an amount of ``inj``
        or denom -> amount. A refusal raises ``ContractError``; fees are recorded either way."""
        key = self.keys[sender] if isinstance(sender, str) else sender
        try:
            result = self.chain.execute_contract(key, self.address, msg, funds, gas_limit=gas_limit)
        except ContractError as exc:
            self._charge(key.address(), exc.fee)
            raise
        self._charge(key.address(), result.fee)
        return result

    def query(self, msg: Mapping[str, Any]) -> Any:
        return self.chain.query_contract(self.address, msg)

    def deploy(self, msg: Mapping[str, Any]) -> str:
        """Instantiate another contract from the same code; its address."""
        operator = self.keys.get("operator") or next(iter(self.keys.values()))
        address, result = self.chain.instantiate(operator, self.code_id, msg, label="veriloco-test-other")
        self._charge(operator.address(), result.fee)
        return address

    def instantiate_code(self, wasm: bytes, msg: Mapping[str, Any], admin: str | None = None) -> Ledger:
        """Store ``wasm`` as a new code and instantiate it as the operator with ``msg`` and the chain
        admin named ``admin``; a Ledger on the new contract."""
        operator = self.keys.get("operator") or next(iter(self.keys.values()))
        code_id, stored = self.chain.store_code(operator, wasm, reuse=False)
        address, result = self.chain.instantiate(operator, code_id, msg, label="veriloco-test-code",
                                                 admin=self.keys[admin].address() if admin else None)
        self._charge(operator.address(), result.fee + (stored.fee if stored else 0))
        return Ledger(CosmosBackend(self.chain, address))

    def instantiate_msg(self, spec: RunSpec | None = None, **overrides: Any) -> dict[str, Any]:
        msg = instantiate_msg(spec or self.spec, INITIAL_MODEL_HASH, self.accounts.get("treasury", ""))
        msg.update(overrides)
        return msg

    def member(self, name_or_address: str) -> dict[str, Any] | None:
        return self.query({"member": {"address": self.accounts.get(name_or_address, name_or_address)}})

    def accounting(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.query({"accounting": {}}).items()}

    def holdings(self) -> int:
        """What the contract owes: bonded + unbonding + reward pool."""
        return sum(self.accounting().values())

    # -- bank -------------------------------------------------------------------------------

    def balance(self, address: str, denom: str = DENOM) -> int:
        return self.chain.balance(self.accounts.get(address, address), denom)

    def total_funds(self) -> int:
        """Balances of this object's accounts plus the contract's plus fees paid: constant while
        coins only move among them (the devnet's inflation is off)."""
        return sum(self.balance(a) for a in self.accounts.values()) + self.balance(self.address) + self.fees_paid

    # -- blocks -----------------------------------------------------------------------------

    def height(self) -> int:
        return self.chain.height()

    def wait_for_height(self, height: int, timeout: float = 60.0) -> int:
        return self.chain.wait_for_height(height, timeout)

    def advance_blocks(self, n: int = 1, timeout: float = 60.0) -> int:
        """Let ``n`` blocks pass (they come by themselves here); the new height.

        One block more than asked: the node simulates a transaction (for its gas) on a state
        that can lag the reported height by a block, so a message meant for "after the deadline"
        must wait until even the simulation sees the deadline passed.
        """
        return self.chain.wait_for_height(self.chain.height() + n + 1, timeout)

    wait_blocks = advance_blocks


def _require_extra() -> None:
    try:
        injectived_binary()
    except DevnetNotInstalled as exc:
        # CI installs the devnet extra (`make test`); there a missing node is a failure, not a skip.
        if os.environ.get("VERILOCO_REQUIRE_DEVNET"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def devnet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Devnet]:
    """A running devnet for the whole session (own free ports, temporary home), or until no later
    test of this process can use it (``tests/conftest.py`` stops it then; stopping twice is a no-op)."""
    _require_extra()
    faucet = GenesisAccount.of_key(FAUCET, faucet_key(), FAUCET_BALANCE, **{OTHER_DENOM: FAUCET_BALANCE})
    net = Devnet(tmp_path_factory.mktemp("devnet"), ports=DevnetPorts.free(), accounts=[faucet],
                 block_time=os.environ.get("VERILOCO_DEVNET_BLOCK_TIME", "200ms"))
    net.up(tied=True)  # dies with this process even if it is killed and the finally below never runs
    request.config.stash[SESSION_DEVNET] = net
    try:
        yield net
    finally:
        net.stop()


@pytest.fixture(scope="session")
def devnet_chain(devnet: Devnet) -> Iterator[CosmosChain]:
    chain = devnet.connect()
    try:
        yield chain
    finally:
        chain.close()


@pytest.fixture(scope="session")
def devnet_code_id(devnet_chain: CosmosChain) -> int:
    """The committed contract, stored once per session."""
    code_id, _ = devnet_chain.store_code(faucet_key(), load_contract_wasm())
    return code_id


def fund_and_instantiate(chain: CosmosChain, code_id: int, addresses: Sequence[str], balances: Mapping[str, int],
                         msg: Mapping[str, Any], admin: str | None = None) -> str:
    """The faucet funds ``addresses`` with ``balances`` and instantiates ``code_id`` with ``msg``
    (and the chain admin ``admin``): two transactions pipelined into one block. Returns the
    contract's address."""
    faucet = faucet_key()
    sends = [MsgSend(from_address=faucet.address(), to_address=a, amount=chain.coins(balances)) for a in addresses]
    funding = chain.submit(faucet, sends)
    instantiate = chain.submit(faucet, [chain.instantiate_message(faucet, code_id, msg, label="veriloco-test",
                                                                  admin=admin)])
    chain.wait(funding)
    return contract_address_of(chain.wait(instantiate))


@pytest.fixture
def devnet_deploy(request: pytest.FixtureRequest, devnet_chain: CosmosChain, devnet_code_id: int):
    """A factory: ``devnet_deploy(spec, names=DEFAULT_NAMES, balances=None, admin=None,
    **instantiate_overrides)``.

    Each call makes fresh keys for ``names`` (derived from the test's id and the call's number),
    funds them with ``balances`` (default ``{inj: 10^24, uatom: 10^24}``) and instantiates the
    contract with ``instantiate_msg(spec, INITIAL_MODEL_HASH, treasury)`` plus the overrides, with
    the account named ``admin`` as the chain's admin and the message's (None: no admin).
    The faucet pays for both (one block), so the named accounts start with exactly ``balances``.
    """
    calls = [0]

    def deploy(spec: RunSpec, names: Sequence[str] = DEFAULT_NAMES, balances: Mapping[str, int] | None = None,
               admin: str | None = None, **overrides: Any) -> DevnetContract:
        calls[0] += 1
        salt = f"{request.node.nodeid}#{calls[0]}"
        keys = {n: named_key(f"devnet:{salt}:{n}", key_type_for(n)) for n in names}  # fresh accounts per test
        treasury = keys["treasury"].address() if "treasury" in keys else faucet_key().address()
        admin_address = keys[admin].address() if admin is not None else None
        msg = instantiate_msg(spec, INITIAL_MODEL_HASH, treasury, admin_address)
        msg.update(overrides)
        address = fund_and_instantiate(devnet_chain, devnet_code_id, [k.address() for k in keys.values()],
                                       balances or {DENOM: INITIAL_BALANCE, OTHER_DENOM: INITIAL_BALANCE}, msg,
                                       admin=admin_address)
        return DevnetContract(devnet_chain, devnet_code_id, spec, keys, address, admin_address)

    return deploy


@pytest.fixture
def devnet_ledger_driver(devnet_deploy):
    """The devnet's driver factory for ``ledger_env`` (``LEDGER_BACKENDS["devnet"]`` in conftest)."""
    return lambda spec, names, **instantiate: devnet_deploy(spec, names, **instantiate)


