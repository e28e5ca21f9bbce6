"""The embedded chain: accounts and bank, codes and contracts, blocks, transactions, events.

It runs the same ``.wasm`` a real wasmd chain runs, with wasmd's semantics where a contract or a
client can observe them:

* blocks of at most ``block_txs`` transactions: a successful transaction lands in the open block
  (with ``env.transaction.index`` its position in it) or, when none is open or it is full, opens
  a new one (height + 1, time + ``block_time``); :meth:`EmbeddedChain.seal_block` closes the open
  block, so the next transaction opens a new one, and :meth:`EmbeddedChain.advance_blocks`
  produces empty blocks. With ``block_txs=1`` (the default) every transaction is its own block;
  a real node includes many transactions in a block, which ``simulate`` mirrors by packing each
  round of its nodes' transactions into one block;
* funds attached to ``instantiate``/``execute`` move from the sender to the contract before the
  contract runs; the contract's ``BankMsg``s run after it returns, from the contract's balance;
* a transaction is atomic: if the contract refuses, traps, runs out of gas, or one of its messages
  fails, nothing changes (storage, balances, sequences, height);
* events as wasmd emits them: ``message``, bank ``coin_spent``/``coin_received``/``transfer``,
  ``instantiate``/``execute`` with ``_contract_address``, ``wasm`` (the contract's attributes,
  first ``_contract_address``), ``wasm-<type>`` for custom events;
* contract addresses from wasmd's classic derivation (code id, instance id), bech32 with the
  chain's prefix (``inj`` by default, like the devnet);
* ``migrate`` only by the admin given at instantiation (none: never), the new code's ``migrate``
  export run on the contract's storage, an event ``migrate`` with the new ``code_id``.

What differs from a real chain: no signatures or account sequences (any valid address can send),
no fees, gas is wasmtime fuel (not comparable with chain gas), submessage replies and
contract-to-contract calls are not supported (a contract that dispatches them fails the
transaction with a clear error), and a failed transaction does not produce a block.

Threads: every public method runs under the chain's one re-entrant lock (:attr:`EmbeddedChain.lock`),
so each call is atomic and calls from several threads take turns, as a node's RPC serves them. The
wasmtime VM under it is not thread-safe (a code's host functions find the running instance on one
stack, and wasmtime-py releases the GIL inside wasm), and a query must not see a transaction half
done. ``veriloco simulate`` relies on it: its nodes' ticks, fetch threads and θ-warm threads are
threads of one process. A caller that needs several calls to see one state holds :attr:`lock`
around them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from functools import wraps
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from chain.embedded.addresses import AddressCodec, AddressError, contract_address
from chain.embedded.bank import Bank
from chain.embedded.errors import ChainError
from chain.embedded.state import ContractStore, Journal, JournaledDict
from chain.embedded.types import Coin, CoinsLike, normalize_coins
from chain.embedded.vm import (
    DEFAULT_GAS_LIMIT,
    CallContext,
    WasmCode,
    parse_contract_result,
)
from chain.types import Event, TxResult
from protocol.injective import PREFIX

DEFAULT_CHAIN_ID = "veriloco-embedded-1"
DEFAULT_PREFIX = PREFIX
# 2025-01-01T00:00:00Z: a fixed genesis time keeps every run of a simulation identical.
GENESIS_TIME_NS = 1_735_689_600 * 10**9
STATE_FORMAT = "veriloco-embedded-chain/1"

MsgLike = Mapping[str, Any] | bytes | str

P = ParamSpec("P")
R = TypeVar("R")


def _atomic(method: Callable[Concatenate[EmbeddedChain, P], R]) -> Callable[Concatenate[EmbeddedChain, P], R]:
    """Run ``method`` under the chain's lock (re-entrant: a locked method may call another)."""

    @wraps(method)
    def locked(chain: EmbeddedChain, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with chain.lock:
            return method(chain, *args, **kwargs)

    return locked


@dataclass
class _Outcome:
    """What the body of a transaction produced."""

    events: list[Event]
    gas_used: int = 0
    data: bytes | None = None
    contract_address: str | None = None
    code_id: int | None = None


@dataclass(frozen=True)
class CodeInfo:
    """A stored code. ``checksum`` is the hex sha256 of the wasm, as wasmd reports it."""

    code_id: int
    checksum: str
    creator: str


@dataclass(frozen=True)
class ContractInfo:
    """An instantiated contract."""

    address: str
    code_id: int
    creator: str
    admin: str | None
    label: str
    created_height: int


def _msg_bytes(msg: MsgLike) -> bytes:
    if isinstance(msg, bytes):
        return msg
    if isinstance(msg, str):
        return msg.encode()
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode()


class EmbeddedChain:
    """An in-process CosmWasm chain.

    Args:
        chain_id: reported to contracts in ``env.block.chain_id``.
        prefix: bech32 prefix of every address.
        block_time_s: how far the clock moves per block.
        genesis_time_ns: the time of the genesis block (nanoseconds since the Unix epoch).
        gas_limit: fuel per transaction (and per query).
        genesis_balances: ``{address: {denom: amount}}`` credited at genesis.
        block_txs: the most transactions one block includes (1: every transaction is a block).
        cache_queries: answer a query again from a cache while neither the state nor the block
            changed (a query is a pure function of both); False runs the contract every time.
    """

    def __init__(
        self,
        *,
        chain_id: str = DEFAULT_CHAIN_ID,
        prefix: str = DEFAULT_PREFIX,
        block_time_s: float = 1.0,
        genesis_time_ns: int = GENESIS_TIME_NS,
        gas_limit: int = DEFAULT_GAS_LIMIT,
        genesis_balances: Mapping[str, CoinsLike] | None = None,
        block_txs: int = 1,
        cache_queries: bool = True,
    ) -> None:
        if block_time_s <= 0:
            raise ValueError("block_time_s must be positive")
        if block_txs < 1:
            raise ValueError("block_txs must be at least 1")
        # Every public method holds it (module docstring, "Threads"); re-entrant, so a caller may
        # hold it around several calls.
        self.lock = threading.RLock()
        self.block_txs = block_txs
        self._open = 0  # transactions in the latest block while it is open (0: sealed)
        self._settled = True  # no transaction half-way (`settled`)
        self.chain_id = chain_id
        self.prefix = prefix
        self.api = AddressCodec(prefix)
        self.block_time_ns = round(block_time_s * 1e9)
        self.gas_limit = gas_limit
        self._height = 1
        self._time_ns = genesis_time_ns
        self._journal = Journal()
        self.bank = Bank(self._journal)
        self._codes: JournaledDict[int, CodeInfo] = JournaledDict(self._journal)
        self._contracts: JournaledDict[str, ContractInfo] = JournaledDict(self._journal)
        self._stores: JournaledDict[str, JournaledDict[bytes, bytes]] = JournaledDict(self._journal)
        self._sequences: JournaledDict[str, int] = JournaledDict(
            self._journal, {"code_id": 0, "instance_id": 0}
        )
        self._wasm: dict[str, WasmCode] = {}  # by checksum; compiled code is immutable
        self.debug_log: deque[str] = deque(maxlen=1000)
        self._tx_index = 0
        # Smart-query answers by (contract, height, time, gas limit, message), valid while the journal's
        # version stays: a query is a pure function of the state and the block.
        self._query_cache: dict[tuple[str, int, int, int, bytes], bytes] = {}
        self._query_cache_version = -1
        self.cache_queries = cache_queries  # False: every query runs the contract (to time queries)
        for address, coins in (genesis_balances or {}).items():
            self.fund(address, coins)

    # -- blocks ----------------------------------------------------------------------------------

    @property
    def height(self) -> int:
        """Height of the latest block."""
        with self.lock:  # not while a transaction is landing in a new one
            return self._height

    @property
    def time_ns(self) -> int:
        """Time of the latest block, nanoseconds since the Unix epoch."""
        with self.lock:
            return self._time_ns

    @_atomic
    def advance_blocks(self, n: int = 1) -> int:
        """Seal the open block and produce ``n`` empty blocks; returns the new height."""
        if n < 0:
            raise ValueError("cannot go back in time")
        self._open = 0
        self._height += n
        self._time_ns += n * self.block_time_ns
        return self._height

    @_atomic
    def seal_block(self) -> None:
        """Close the open block: the next transaction opens a new one."""
        self._open = 0

    # -- bank ------------------------------------------------------------------------------------

    @_atomic
    def balance(self, address: str, denom: str) -> int:
        """Balance of ``address`` in ``denom``."""
        return self.bank.balance(address, denom)

    @_atomic
    def balances(self, address: str) -> dict[str, int]:
        """All nonzero balances of ``address``."""
        return self.bank.balances(address)

    @_atomic
    def total_supply(self, denom: str) -> int:
        """Sum of every balance in ``denom`` (contracts included)."""
        return self.bank.supply(denom)

    @_atomic
    def fund(self, address: str, coins: CoinsLike) -> None:
        """Create coins in ``address`` (genesis-style; not a transaction, no block)."""
        self._check_address(address, "address")
        self.bank.mint(address, normalize_coins(coins))

    @_atomic
    def send(self, sender: str, recipient: str, coins: CoinsLike) -> TxResult:
        """A bank send transaction.

        Raises:
            InsufficientFundsError: the sender lacks the coins.
            ChainError: an invalid address or invalid coins.
        """
        funds = normalize_coins(coins)
        self._check_address(sender, "sender")
        self._check_address(recipient, "recipient")

        def body(height: int, time_ns: int) -> _Outcome:
            events = [self._message_event("/cosmos.bank.v1beta1.MsgSend", sender, "bank")]
            return _Outcome(events + self.bank.send(sender, recipient, funds))

        details = {"to": recipient, "amount": [c.to_json() for c in funds]}
        return self._transaction("send", sender, details, body)

    # -- wasm ------------------------------------------------------------------------------------

    @_atomic
    def store_code(self, sender: str, wasm: bytes) -> TxResult:
        """Upload a wasm code (checked like wasmd checks an upload); ``result.code_id`` names it.

        Raises:
            InvalidWasmError: the module fails CosmWasm's static validation.
        """
        self._check_address(sender, "sender")
        code = self._load_code(wasm)

        def body(height: int, time_ns: int) -> _Outcome:
            code_id = self._next_sequence("code_id")
            checksum = code.checksum.hex()
            self._codes[code_id] = CodeInfo(code_id, checksum, sender)
            events = [
                self._message_event("/cosmwasm.wasm.v1.MsgStoreCode", sender, "wasm"),
                Event("store_code", (("code_checksum", checksum), ("code_id", str(code_id)))),
            ]
            return _Outcome(events, code_id=code_id)

        return self._transaction("store_code", sender, {"checksum": code.checksum.hex()}, body)

    @_atomic
    def instantiate(
        self,
        sender: str,
        code_id: int,
        msg: MsgLike,
        *,
        funds: CoinsLike | None = None,
        label: str = "",
        admin: str | None = None,
    ) -> TxResult:
        """Create a contract from ``code_id`` and run its ``instantiate``.

        Returns:
            The transaction; ``result.contract_address`` is the new contract.

        Raises:
            ContractError: the contract refused (nothing is created).
            VmError, InsufficientFundsError, ChainError: see :mod:`chain.embedded.errors`.
        """
        self._check_address(sender, "sender")
        if admin is not None:
            self._check_address(admin, "admin")
        info = self._codes.get(code_id)
        if info is None:
            raise ChainError(f"no code with id {code_id}")
        coins = normalize_coins(funds)
        raw = _msg_bytes(msg)

        def body(height: int, time_ns: int) -> _Outcome:
            address = contract_address(code_id, self._next_sequence("instance_id"), self.prefix)
            if address in self._contracts:  # pragma: no cover - sequences make this impossible
                raise ChainError(f"contract address {address} already exists")
            self._contracts[address] = ContractInfo(address, code_id, sender, admin, label, height)
            self._stores[address] = JournaledDict(self._journal)
            events = [self._message_event("/cosmwasm.wasm.v1.MsgInstantiateContract", sender, "wasm")]
            events += self.bank.send(sender, address, coins)
            response, gas = self._call(
                "instantiate", address, height, time_ns, [self._info_json(sender, coins), raw]
            )
            events.append(Event("instantiate", (("_contract_address", address), ("code_id", str(code_id)))))
            more, data = self._handle_response(address, response)
            return _Outcome(events + more, gas, data, contract_address=address)

        return self._transaction(
            "instantiate", sender, {"code_id": code_id, "msg": raw.decode(errors="replace"),
                                    "funds": [c.to_json() for c in coins], "label": label}, body
        )

    @_atomic
    def execute(self, sender: str, contract: str, msg: MsgLike, *,
                funds: CoinsLike | None = None) -> TxResult:
        """Run the contract's ``execute`` with ``msg``, attaching ``funds``.

        Raises:
            ContractError: the contract refused (nothing changes, funds stay with the sender).
            VmError, InsufficientFundsError, ChainError: see :mod:`chain.embedded.errors`.
        """
        self._check_address(sender, "sender")
        self._contract(contract)
        coins = normalize_coins(funds)
        raw = _msg_bytes(msg)

        def body(height: int, time_ns: int) -> _Outcome:
            events = [self._message_event("/cosmwasm.wasm.v1.MsgExecuteContract", sender, "wasm")]
            events += self.bank.send(sender, contract, coins)
            response, gas = self._call(
                "execute", contract, height, time_ns, [self._info_json(sender, coins), raw]
            )
            events.append(Event("execute", (("_contract_address", contract),)))
            more, data = self._handle_response(contract, response)
            return _Outcome(events + more, gas, data)

        return self._transaction(
            "execute", sender, {"contract": contract, "msg": raw.decode(errors="replace"),
                                "funds": [c.to_json() for c in coins]}, body
        )

    @_atomic
    def migrate(self, sender: str, contract: str, code_id: int, msg: MsgLike) -> TxResult:
        """wasmd's ``MsgMigrateContract``: switch ``contract`` to ``code_id`` and run that code's
        ``migrate`` on the contract's storage (no funds, no MessageInfo).

        Only the contract's admin may migrate; a contract instantiated without one never can.

        Raises:
            ChainError: the sender is not the admin, or there is no admin (``can not migrate:
                unauthorized``, wasmd's text), or no such code or contract.
            ContractError: the new code's ``migrate`` refused (nothing changes: the contract keeps
                its code).
            VmError: see :mod:`chain.embedded.errors`.
        """
        self._check_address(sender, "sender")
        info = self._contract(contract)
        if info.admin is None or info.admin != sender:
            raise ChainError("can not migrate: unauthorized")
        if code_id not in self._codes:
            raise ChainError(f"unknown code: no code with id {code_id}")
        raw = _msg_bytes(msg)

        def body(height: int, time_ns: int) -> _Outcome:
            self._contracts[contract] = replace(info, code_id=code_id)
            events = [self._message_event("/cosmwasm.wasm.v1.MsgMigrateContract", sender, "wasm")]
            response, gas = self._call("migrate", contract, height, time_ns, [raw])
            events.append(Event("migrate", (("code_id", str(code_id)), ("_contract_address", contract))))
            more, data = self._handle_response(contract, response)
            return _Outcome(events + more, gas, data)

        return self._transaction(
            "migrate", sender, {"contract": contract, "code_id": code_id, "msg": raw.decode(errors="replace")}, body
        )

    @_atomic
    def query(self, contract: str, msg: MsgLike) -> Any:
        """A smart query; returns the contract's answer parsed from JSON.

        Raises:
            ContractError: the contract refused the query.
        """
        raw = self.query_raw(contract, msg)
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ChainError(f"query answer is not JSON: {exc}") from None

    @_atomic
    def query_raw(self, contract: str, msg: MsgLike) -> bytes:
        """A smart query; returns the contract's answer bytes (the base64-decoded ``ok``)."""
        self._contract(contract)
        raw = _msg_bytes(msg)
        if self._query_cache_version != self._journal.version:
            self._query_cache.clear()
            self._query_cache_version = self._journal.version
        key = (contract, self._height, self._time_ns, self.gas_limit, raw)
        cached = self._query_cache.get(key) if self.cache_queries else None
        if cached is not None:
            return cached
        context = CallContext(storage=ContractStore(self._stores[contract]), api=self.api, readonly=True)
        env = self._env_json(contract, self._height, self._time_ns, transaction=False)
        result, _ = self._wasm_for(contract).call_entry(
            "query", [env, raw], context, gas_limit=self.gas_limit
        )
        self.debug_log.extend(context.debug_log)
        ok = parse_contract_result(result, contract=contract, entry_point="query")
        if not isinstance(ok, str):
            raise ChainError(f"query returned {ok!r}, expected base64 binary")
        answer = base64.b64decode(ok, validate=True)
        self._query_cache[key] = answer
        return answer

    @_atomic
    def raw_storage(self, contract: str, key: bytes) -> bytes | None:
        """The value under ``key`` in the contract's storage (wasmd's raw query)."""
        self._contract(contract)
        return self._stores[contract].get(key)

    @_atomic
    def storage_items(self, contract: str) -> dict[bytes, bytes]:
        """A copy of the contract's whole storage."""
        self._contract(contract)
        return self._stores[contract].snapshot()

    @_atomic
    def contract_info(self, contract: str) -> ContractInfo:
        """What the chain knows about a contract."""
        return self._contract(contract)

    @_atomic
    def code_info(self, code_id: int) -> CodeInfo:
        """What the chain knows about a code."""
        info = self._codes.get(code_id)
        if info is None:
            raise ChainError(f"no code with id {code_id}")
        return info

    # -- persistence -----------------------------------------------------------------------------

    @property
    def settled(self) -> bool:
        """Whether no transaction is half-way: each one so far either stays whole (its writes and
        its block) or was undone whole. Only an interrupt (Ctrl-C) inside one can make it false;
        a state that is not settled must not be saved."""
        return self._settled

    @_atomic
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the whole state to a JSON file (atomically: a crash leaves the old file)."""
        state = {
            "format": STATE_FORMAT,
            "chain_id": self.chain_id,
            "prefix": self.prefix,
            "block_time_ns": self.block_time_ns,
            "gas_limit": self.gas_limit,
            "height": self._height,
            "time_ns": self._time_ns,
            "block_txs": self.block_txs,
            "open_txs": self._open,
            "sequences": self._sequences.snapshot(),
            "balances": [
                {"address": a, "denom": d, "amount": str(v)}
                for (a, d), v in sorted(self.bank.all_balances().items())
            ],
            "codes": [
                {**asdict(info), "wasm": base64.b64encode(self._wasm[info.checksum].wasm).decode()}
                for _, info in sorted(self._codes.items())
            ],
            "contracts": [
                {
                    **asdict(info),
                    "storage": [
                        [k.hex(), base64.b64encode(v).decode()]
                        for k, v in sorted(self._stores[address].items())
                    ],
                }
                for address, info in sorted(self._contracts.items())
            ],
        }
        target = Path(path)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(state, f, separators=(",", ":"))
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> EmbeddedChain:
        """Read a state written by :meth:`save` and continue from it."""
        state = json.loads(Path(path).read_text())
        if state.get("format") != STATE_FORMAT:
            raise ChainError(f"{path} is not an embedded chain state ({STATE_FORMAT})")
        chain = cls(
            chain_id=state["chain_id"],
            prefix=state["prefix"],
            block_time_s=state["block_time_ns"] / 1e9,
            gas_limit=state["gas_limit"],
        )
        chain.block_time_ns = state["block_time_ns"]  # exact, whatever the float round trip did
        chain._height = state["height"]
        chain._time_ns = state["time_ns"]
        chain.block_txs = int(state.get("block_txs", 1))
        chain._open = int(state.get("open_txs", 0))
        journal = chain._journal
        chain._sequences = JournaledDict(journal, state["sequences"])
        chain.bank = Bank(journal, {(b["address"], b["denom"]): int(b["amount"]) for b in state["balances"]})
        codes: dict[int, CodeInfo] = {}
        for code in state["codes"]:
            wasm_code = chain._load_code(base64.b64decode(code.pop("wasm")))
            info = CodeInfo(**code)
            if wasm_code.checksum.hex() != info.checksum:
                raise ChainError(f"code {info.code_id}: wasm does not match its checksum")
            codes[info.code_id] = info
        contracts: dict[str, ContractInfo] = {}
        stores: dict[str, JournaledDict[bytes, bytes]] = {}
        for contract in state["contracts"]:
            storage = {bytes.fromhex(k): base64.b64decode(v) for k, v in contract.pop("storage")}
            contract_info = ContractInfo(**contract)
            contracts[contract_info.address] = contract_info
            stores[contract_info.address] = JournaledDict(journal, storage)
        chain._codes = JournaledDict(journal, codes)
        chain._contracts = JournaledDict(journal, contracts)
        chain._stores = JournaledDict(journal, stores)
        return chain

    # -- internals -------------------------------------------------------------------------------

    def _check_address(self, address: str, what: str) -> None:
        try:
            self.api.validate(address)
        except AddressError as exc:
            raise ChainError(f"invalid {what} address {address!r}: {exc}") from None

    def _contract(self, address: str) -> ContractInfo:
        info = self._contracts.get(address)
        if info is None:
            raise ChainError(f"no contract at {address}")
        return info

    def _load_code(self, wasm: bytes) -> WasmCode:
        checksum = hashlib.sha256(wasm).hexdigest()
        code = self._wasm.get(checksum)
        if code is None:
            code = self._wasm[checksum] = WasmCode(wasm)
        return code

    def _wasm_for(self, contract: str) -> WasmCode:
        return self._wasm[self._codes[self._contracts[contract].code_id].checksum]

    def _next_sequence(self, name: str) -> int:
        value = self._sequences[name] + 1
        self._sequences[name] = value
        return value

    @staticmethod
    def _message_event(action: str, sender: str, module: str) -> Event:
        return Event("message", (("action", action), ("sender", sender), ("module", module)))

    def _env_json(self, contract: str, height: int, time_ns: int, *, transaction: bool) -> bytes:
        env = {
            "block": {"height": height, "time": str(time_ns), "chain_id": self.chain_id},
            "transaction": {"index": self._tx_index} if transaction else None,
            "contract": {"address": contract},
        }
        return json.dumps(env, separators=(",", ":")).encode()

    @staticmethod
    def _info_json(sender: str, coins: tuple[Coin, ...]) -> bytes:
        info = {"sender": sender, "funds": [c.to_json() for c in coins]}
        return json.dumps(info, separators=(",", ":")).encode()

    def _call(self, entry_point: str, contract: str, height: int, time_ns: int,
              args: list[bytes]) -> tuple[dict[str, Any], int]:
        context = CallContext(storage=ContractStore(self._stores[contract]), api=self.api)
        env = self._env_json(contract, height, time_ns, transaction=True)
        try:
            result, gas = self._wasm_for(contract).call_entry(
                entry_point, [env, *args], context, gas_limit=self.gas_limit
            )
        finally:
            self.debug_log.extend(context.debug_log)
        response = parse_contract_result(result, contract=contract, entry_point=entry_point)
        if not isinstance(response, dict):
            raise ChainError(f"{entry_point} returned {response!r}, not a Response")
        return response, gas

    def _handle_response(self, contract: str, response: dict[str, Any]) -> tuple[list[Event], bytes | None]:
        """wasmd's handleContractResponse: emit the contract's events, then run its messages."""
        events: list[Event] = []
        attributes = response.get("attributes") or []
        if attributes:
            events.append(Event("wasm", (("_contract_address", contract), *_attributes(attributes))))
        for custom in response.get("events") or []:
            kind = str(custom.get("type", "")).strip()
            if len(kind) <= 2:
                raise ChainError(f"invalid event: Event type too short: {kind!r}")
            events.append(Event(f"wasm-{kind}", (("_contract_address", contract),
                                                 *_attributes(custom.get("attributes") or []))))
        for sub in response.get("messages") or []:
            events += self._dispatch(contract, sub)
        data = response.get("data")
        return events, (base64.b64decode(data) if data is not None else None)

    def _dispatch(self, contract: str, sub: dict[str, Any]) -> list[Event]:
        reply_on = sub.get("reply_on")
        if reply_on not in ("always", "error", "success", "never"):
            raise ChainError(f"invalid submessage: replyOn value {reply_on!r}")
        if reply_on != "never":
            raise ChainError("submessage replies are not supported by the embedded chain")
        msg = sub.get("msg") or {}
        bank = msg.get("bank") if isinstance(msg, dict) else None
        if isinstance(bank, dict) and "send" in bank:
            send = bank["send"]
            recipient = send["to_address"]
            self._check_address(recipient, "bank send recipient")
            coins = normalize_coins([Coin(c["denom"], int(c["amount"])) for c in send["amount"]])
            return self.bank.send(contract, recipient, coins)
        if isinstance(bank, dict) and "burn" in bank:
            coins = normalize_coins([Coin(c["denom"], int(c["amount"])) for c in bank["burn"]["amount"]])
            return self.bank.burn(contract, coins)
        kind = next(iter(msg), "?") if isinstance(msg, dict) else "?"
        raise ChainError(f"the embedded chain does not support {kind!r} messages from contracts")

    def _transaction(
        self,
        kind: str,
        sender: str,
        details: dict[str, Any],
        body: Callable[[int, int], _Outcome],
    ) -> TxResult:
        """Run ``body`` atomically in the open block or a new one; it stays only if it succeeds."""
        new_block = self._open == 0 or self._open >= self.block_txs
        if new_block:
            height, time_ns, index = self._height + 1, self._time_ns + self.block_time_ns, 0
        else:
            height, time_ns, index = self._height, self._time_ns, self._open
        self._tx_index = index
        self._settled = False  # until this transaction is whole (kept and counted) or undone
        try:
            with self._journal.transaction():
                out = body(height, time_ns)
        except BaseException:
            self._settled = self._journal.undone  # undone whole, unless a second interrupt cut the undo
            raise
        self._height, self._time_ns = height, time_ns
        self._open = index + 1
        self._settled = True
        # A stable name for the transaction: hash of what it was, where it landed.
        description = {"chain_id": self.chain_id, "height": height, "index": index, "type": kind,
                       "sender": sender, **details}
        tx_hash = hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest().upper()
        return TxResult(height=height, tx_hash=tx_hash, gas_used=out.gas_used, events=tuple(out.events),
                        data=out.data, contract_address=out.contract_address, code_id=out.code_id)


def _attributes(raw: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Contract attributes as wasmd accepts them: trimmed, non-empty keys, no ``_`` prefix."""
    out = []
    for attr in raw:
        key = str(attr.get("key", "")).strip()
        value = str(attr.get("value", "")).strip()
        if not key:
            raise ChainError(f"invalid event: Empty attribute key. Value: {value}")
        if key.startswith("_"):
            raise ChainError(f"invalid event: Attribute key starts with reserved prefix _: {key!r}")
        out.append((key, value))
    return out
