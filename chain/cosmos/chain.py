"""A Cosmos SDK chain with CosmWasm, driven over gRPC: signed transactions, wasm, bank, blocks.

:class:`CosmosChain` is chain-neutral; :class:`~chain.cosmos.config.ChainConfig` carries the
quirks. It signs with the project's own :class:`protocol.keys.PrivateKey` (``SIGN_MODE_DIRECT``;
a plain ``secp256k1`` key signs sha256 of the SignDoc, an ``eth_secp256k1`` key keccak256 of it,
each under its chain's public key type, ``ChainConfig.pubkey_type``), keeps each signer's next
sequence number so one account can have many transactions in flight (:meth:`submit` returns at
CheckTx, :meth:`wait` at inclusion), and recovers on its own from the two things a live node does to a client:

* **"account sequence mismatch"**: the expected sequence is read from the error (or the account
  re-queried) and the transaction re-signed, up to a few times;
* **the node going away**: every request retries with backoff until the node answers again
  (``reconnect_timeout``). A transaction that was in the mempool when the node stopped is gone
  after its restart; :meth:`wait` notices (the hash stays unknown while the account's sequence
  has not passed it) and broadcasts the signer's outstanding transactions again, in sequence
  order, with their original bytes. Nothing is signed twice for the same sequence, so nothing can
  be executed twice.

Gas: by default every transaction is simulated first and signed with
``ChainConfig.gas_limit(simulated)``; a refusal by the contract therefore surfaces before
broadcast, with no fee paid, like on the embedded chain. With an explicit ``gas_limit`` the
simulation is skipped (what pipelining dependent messages needs: a simulation sees only committed
state), and a refusal happens in the block, fee paid, and is raised from :meth:`wait`.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx
from cosmpy.protos.cosmos.bank.v1beta1.query_pb2 import QueryAllBalancesRequest, QueryBalanceRequest
from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
from cosmpy.protos.cosmos.base.node.v1beta1.query_pb2 import StatusRequest
from cosmpy.protos.cosmos.base.query.v1beta1.pagination_pb2 import PageRequest
from cosmpy.protos.cosmos.base.tendermint.v1beta1.query_pb2 import GetBlockByHeightRequest, GetLatestBlockRequest
from cosmpy.protos.cosmos.base.v1beta1.coin_pb2 import Coin as CoinProto
from cosmpy.protos.cosmos.consensus.v1.query_pb2 import QueryParamsRequest as ConsensusParamsRequest
from cosmpy.protos.cosmos.crypto.secp256k1.keys_pb2 import PubKey as Secp256k1PubKey
from cosmpy.protos.cosmos.tx.signing.v1beta1.signing_pb2 import SignMode
from cosmpy.protos.cosmos.tx.v1beta1.service_pb2 import (
    BroadcastMode,
    BroadcastTxRequest,
    GetTxRequest,
    SimulateRequest,
)
from cosmpy.protos.cosmos.tx.v1beta1.tx_pb2 import AuthInfo, Fee, ModeInfo, SignDoc, SignerInfo, TxBody, TxRaw
from cosmpy.protos.cosmwasm.wasm.v1.query_pb2 import (
    QueryCodesRequest,
    QueryContractInfoRequest,
    QueryRawContractStateRequest,
    QuerySmartContractStateRequest,
)
from cosmpy.protos.cosmwasm.wasm.v1.tx_pb2 import (
    MsgExecuteContract,
    MsgInstantiateContract,
    MsgMigrateContract,
    MsgStoreCode,
)
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.message import Message

from chain.cosmos.client import CosmosClient
from chain.cosmos.config import ChainConfig
from chain.cosmos.errors import (
    CODE_OUT_OF_GAS,
    CODE_TX_IN_MEMPOOL_CACHE,
    CODE_WRONG_SEQUENCE,
    CosmosTxError,
    classify,
    contract_message,
    wrong_sequence,
)
from chain.errors import LedgerError
from chain.types import Event, TxResult
from protocol.keys import PrivateKey

Funds = int | Mapping[str, int] | None

# How Injective reports a CheckTx failure through gRPC.
_CHECKTX_ERROR = re.compile(r"code=(?P<code>\d+), data=.*?, log='(?P<log>.*)', codespace='(?P<codespace>\w*)'", re.S)
# A transaction not seen in a block after this long is checked for having been dropped.
_RECHECK_AFTER_S = 1.0
_MAX_SEQUENCE_RETRIES = 6


@dataclass
class PendingTx:
    """A transaction accepted into the mempool (CheckTx passed), not yet seen in a block."""

    tx_hash: str
    signer: str
    sequence: int
    gas_limit: int
    fee: int
    tx_bytes: bytes = field(repr=False)
    submit_height: int = 1  # the chain was at least this high when it was submitted
    submitted_at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class _Outcome:
    """A transaction's result as the node reports it (tx index or block results)."""

    height: int
    code: int
    codespace: str
    log: str
    gas_used: int
    events: list[Event]


@dataclass
class _Signer:
    lock: threading.RLock = field(default_factory=threading.RLock)
    account_number: int | None = None
    next_sequence: int | None = None
    outstanding: dict[int, PendingTx] = field(default_factory=dict)


def _any(msg: Message) -> AnyProto:
    return AnyProto(type_url="/" + msg.DESCRIPTOR.full_name, value=msg.SerializeToString())


def _details(exc: grpc.RpcError) -> str:
    try:
        return exc.details() or str(exc)
    except Exception:  # noqa: BLE001 (grpc error objects vary; the text is all we need)
        return str(exc)


class CosmosChain:
    """A connection to one CosmWasm chain.

    Args:
        url: the node's gRPC endpoint, ``grpc+http://127.0.0.1:9900``.
        config: the chain's quirks (:func:`chain.cosmos.config.injective` for the devnet).
        rpc_url: the node's CometBFT RPC (``http://127.0.0.1:26657``), used only to read the result
            of a transaction the node's tx index lost (see :meth:`wait`).
        tx_timeout: how long :meth:`wait` waits for a block with the transaction.
        query_interval: the poll interval for transactions and heights.
        reconnect_timeout: how long an unreachable node is retried before :class:`LedgerError`.
    """

    def __init__(self, url: str, config: ChainConfig, *, rpc_url: str | None = None, tx_timeout: float = 60.0,
                 query_interval: float = 0.05, reconnect_timeout: float = 60.0, call_timeout: float = 10.0) -> None:
        self.config = config
        self.rpc_url = rpc_url.rstrip("/") if rpc_url else None
        self.client = CosmosClient(url, config, query_interval=query_interval, query_timeout=tx_timeout,
                                   call_timeout=call_timeout, reconnect_timeout=reconnect_timeout)
        self.tx_timeout = tx_timeout
        self.query_interval = query_interval
        self._signers: dict[str, _Signer] = {}
        self._signers_lock = threading.Lock()
        self._known_height = 1  # the highest height seen; a lower bound for new transactions' blocks
        self.rebroadcasts = 0  # transactions the node had lost and took again
        self.index_misses = 0  # transactions found in blocks but not in the node's tx index
        self.out_of_gas_retries = 0  # simulated transactions that ran out of gas in the block and were re-sent

    @property
    def url(self) -> str:
        return self.client.url

    def set_timeouts(self, *, reconnect: float | None = None, call: float | None = None) -> None:
        """Change how long an unreachable node is retried (``reconnect``) and one request's deadline
        (``call``), e.g. patient for a daemon after a quick first contact."""
        if reconnect is not None:
            self.client.reconnect_timeout = reconnect
        if call is not None:
            self.client.call_timeout = call

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> CosmosChain:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reads --------------------------------------------------------------------------------

    def _call(self, request: Any) -> Any:
        return self.client.call(request)

    def height(self) -> int:
        """The latest committed block height."""
        try:
            height = int(self._call(lambda t: self.client.node.Status(StatusRequest(), timeout=t)).height)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise LedgerError(f"height: {_details(exc)}") from None
            resp = self._call(lambda t: self.client.tendermint.GetLatestBlock(GetLatestBlockRequest(), timeout=t))
            height = int(resp.block.header.height)
        self._known_height = max(self._known_height, height)
        return height

    def wait_for_height(self, height: int, timeout: float = 60.0) -> int:
        """Return the height once the chain has reached ``height`` (blocks come by themselves)."""
        deadline = time.monotonic() + timeout
        while True:
            current = self.height()
            if current >= height:
                return current
            if time.monotonic() > deadline:
                raise LedgerError(f"the chain is at height {current}, not {height}, after {timeout:.0f} s")
            time.sleep(self.query_interval)

    def balance(self, address: str, denom: str | None = None) -> int:
        denom = denom or self.config.denom
        resp = self._call(lambda t: self.client.bank.Balance(QueryBalanceRequest(address=address, denom=denom),
                                                             timeout=t))
        return int(resp.balance.amount or 0)

    def balances(self, address: str) -> dict[str, int]:
        resp = self._call(lambda t: self.client.bank.AllBalances(QueryAllBalancesRequest(address=address), timeout=t))
        return {c.denom: int(c.amount) for c in resp.balances}

    def account(self, address: str) -> tuple[int, int]:
        """(account number, sequence) of an existing account.

        Raises:
            LedgerError: the account does not exist on chain.
        """
        try:
            acc = self.client.query_account(address)
        except LookupError as exc:
            raise LedgerError(f"{exc}; an account must receive funds before it can sign") from None
        return int(acc.number), int(acc.sequence)

    def block_max_gas(self) -> int:
        """The consensus block gas limit (-1 = unlimited)."""
        resp = self._call(lambda t: self.client.consensus.Params(ConsensusParamsRequest(), timeout=t))
        return int(resp.params.block.max_gas)

    def query_contract(self, contract: str, msg: Mapping[str, Any]) -> Any:
        """A smart query; the decoded JSON answer.

        Raises:
            ContractError: the contract refused the query.
        """
        req = QuerySmartContractStateRequest(address=contract, query_data=json.dumps(msg).encode())
        try:
            resp = self._call(lambda t: self.client.wasm.SmartContractState(req, timeout=t))
        except grpc.RpcError as exc:
            text = _details(exc)
            raise classify(text) if contract_message(text) else LedgerError(f"query: {text}") from None
        return json.loads(resp.data)

    def raw_query(self, contract: str, key: bytes) -> bytes | None:
        """The contract's stored value under ``key`` (wasmd's raw state query), or None."""
        req = QueryRawContractStateRequest(address=contract, query_data=key)
        try:
            resp = self._call(lambda t: self.client.wasm.RawContractState(req, timeout=t))
        except grpc.RpcError as exc:
            raise LedgerError(f"raw query: {_details(exc)}") from None
        return bytes(resp.data) or None

    # -- transactions -------------------------------------------------------------------------

    def _signer(self, address: str) -> _Signer:
        with self._signers_lock:
            return self._signers.setdefault(address, _Signer())

    def _sync(self, address: str, signer: _Signer, expected: int | None = None) -> None:
        number, sequence = self.account(address)
        signer.account_number = number
        signer.next_sequence = max(sequence, expected or 0)

    def _sign(self, key: PrivateKey, account_number: int, sequence: int, msgs: Sequence[Message],
              gas_limit: int, fee: int, memo: str) -> bytes:
        body = TxBody(messages=[_any(m) for m in msgs], memo=memo).SerializeToString()
        try:
            type_url = self.config.pubkey_type(key.key_type)
        except ValueError as exc:
            raise LedgerError(str(exc)) from None
        # Injective's ethsecp256k1.PubKey has the same wire form as the SDK's secp256k1.PubKey
        # (field 1: the 33-byte compressed point); only the type URL differs.
        pubkey = AnyProto(type_url=type_url,
                          value=Secp256k1PubKey(key=key.public_key.compressed).SerializeToString())
        auth_info = AuthInfo(
            signer_infos=[SignerInfo(public_key=pubkey, sequence=sequence,
                                     mode_info=ModeInfo(single=ModeInfo.Single(mode=SignMode.SIGN_MODE_DIRECT)))],
            fee=Fee(amount=[CoinProto(denom=self.config.fee_denom, amount=str(fee))] if fee else [],
                    gas_limit=gas_limit),
        ).SerializeToString()
        sign_doc = SignDoc(body_bytes=body, auth_info_bytes=auth_info, chain_id=self.config.chain_id,
                           account_number=account_number).SerializeToString()
        tx = TxRaw(body_bytes=body, auth_info_bytes=auth_info, signatures=[key.sign(sign_doc)])
        raw: bytes = tx.SerializeToString()
        return raw

    def simulate(self, key: PrivateKey, msgs: Sequence[Message], *, sequence: int | None = None, memo: str = "") -> int:
        """Gas used by ``msgs`` signed by ``key``, simulated on the node's latest state.

        Raises:
            ContractError: the contract refused.
            CosmosTxError: the chain refused (insufficient funds, sequence, ...).
        """
        address = key.address(self.config.prefix)
        signer = self._signer(address)
        with signer.lock:
            if signer.next_sequence is None or signer.account_number is None:
                self._sync(address, signer)
            assert signer.account_number is not None and signer.next_sequence is not None
            seq = signer.next_sequence if sequence is None else sequence
            tx = self._sign(key, signer.account_number, seq, msgs, 0, 0, memo)
        try:
            resp = self._call(lambda t: self.client.txs.Simulate(SimulateRequest(tx_bytes=tx), timeout=t))
        except grpc.RpcError as exc:
            raise classify(_details(exc)) from None
        return int(resp.gas_info.gas_used)

    def submit(self, key: PrivateKey, msgs: Sequence[Message], *, gas_limit: int | None = None,
               memo: str = "") -> PendingTx:
        """Sign and broadcast ``msgs`` with the signer's next sequence; return once CheckTx accepted it.

        Raises:
            ContractError: the simulation ran the contract and it refused (nothing was broadcast).
            CosmosTxError: the chain refused the transaction at simulation or CheckTx.
            LedgerError: the node was unreachable for longer than ``reconnect_timeout``.
        """
        address = key.address(self.config.prefix)
        signer = self._signer(address)
        if self._known_height <= 1:
            self.height()
        with signer.lock:
            for _ in range(_MAX_SEQUENCE_RETRIES):
                if signer.next_sequence is None or signer.account_number is None:
                    self._sync(address, signer)
                assert signer.account_number is not None and signer.next_sequence is not None
                seq = signer.next_sequence
                limit = gas_limit
                if limit is None:
                    try:
                        limit = self.config.gas_limit(self.simulate(key, msgs, sequence=seq, memo=memo))
                    except CosmosTxError as exc:
                        expected = wrong_sequence(str(exc))
                        if expected is None and "sequence mismatch" not in str(exc):
                            raise
                        self._sync(address, signer, expected)
                        continue
                fee = self.config.fee(limit)
                tx_bytes = self._sign(key, signer.account_number, seq, msgs, limit, fee, memo)
                tx_hash = hashlib.sha256(tx_bytes).hexdigest().upper()
                outages = self.client.outages
                code, codespace, log = self._broadcast(tx_bytes)
                accepted = code == 0 or (codespace == "sdk" and code == CODE_TX_IN_MEMPOOL_CACHE)
                if not accepted and code == CODE_WRONG_SEQUENCE and self.client.outages != outages:
                    # The node may have taken the first attempt before the connection broke: then
                    # this sequence is ours. wait() finds out (and re-broadcasts if it was lost).
                    accepted = wrong_sequence(log) == seq + 1
                if accepted:
                    pending = PendingTx(tx_hash, address, seq, limit, fee, tx_bytes, self._known_height)
                    signer.next_sequence = seq + 1
                    signer.outstanding[seq] = pending
                    return pending
                if codespace == "sdk" and code == CODE_WRONG_SEQUENCE:
                    self._sync(address, signer, wrong_sequence(log))
                    continue
                raise classify(log, code=code, codespace=codespace)
            raise CosmosTxError(f"gave up after {_MAX_SEQUENCE_RETRIES} account sequence mismatches for {address}",
                                code=CODE_WRONG_SEQUENCE, codespace="sdk")

    def _broadcast(self, tx_bytes: bytes) -> tuple[int, str, str]:
        """Broadcast (sync: returns after CheckTx); (code, codespace, log), code 0 = accepted.

        Some nodes (Injective) answer a CheckTx failure with a gRPC error instead of a response
        code; both are read into the same triple.
        """
        req = BroadcastTxRequest(tx_bytes=tx_bytes, mode=BroadcastMode.BROADCAST_MODE_SYNC)
        try:
            resp = self._call(lambda t: self.client.txs.BroadcastTx(req, timeout=t)).tx_response
        except grpc.RpcError as exc:
            text = _details(exc)
            match = _CHECKTX_ERROR.search(text)
            if match is None:
                raise classify(text) from None
            return int(match.group("code")), match.group("codespace"), match.group("log")
        return int(resp.code), resp.codespace, resp.raw_log

    def wait(self, pending: PendingTx, timeout: float | None = None) -> TxResult:
        """Wait until ``pending`` is in a block; its result.

        Raises:
            ContractError: the contract refused in the block (the fee was paid; ``exc.fee`` says how much).
            CosmosTxError: the transaction failed in the block for another reason.
            LedgerError: it did not appear within ``timeout``, or it was dropped and its sequence
                used by another transaction.
        """
        timeout = self.tx_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        signer = self._signer(pending.signer)
        next_check = time.monotonic() + _RECHECK_AFTER_S
        outages = self.client.outages
        while True:
            outcome = self._get_tx(pending.tx_hash)
            now = time.monotonic()
            if outcome is None and (now >= next_check or self.client.outages != outages):
                outages = self.client.outages
                next_check = now + _RECHECK_AFTER_S
                if self._recover(pending, signer):
                    # The sequence is used, yet the tx index does not know the hash: a node stopped
                    # between committing a block and indexing it never indexes it. Look in the blocks.
                    outcome = self._get_tx(pending.tx_hash) or self._find_in_blocks(pending)
                    if outcome is None:
                        with signer.lock:
                            signer.outstanding.pop(pending.sequence, None)
                        raise LedgerError(f"transaction {pending.tx_hash} was dropped and sequence "
                                          f"{pending.sequence} of {pending.signer} used by another transaction")
            if outcome is not None:
                with signer.lock:
                    signer.outstanding.pop(pending.sequence, None)
                return self._result(pending, outcome)
            if now > deadline:
                raise LedgerError(f"transaction {pending.tx_hash} not in a block after {timeout:.0f} s")
            time.sleep(self.query_interval)

    def _recover(self, pending: PendingTx, signer: _Signer) -> bool:
        """Re-broadcast the signer's outstanding transactions the node has lost (a restart empties
        its mempool). True if ``pending``'s sequence is already used on chain."""
        _, chain_sequence = self.account(pending.signer)
        if chain_sequence > pending.sequence:
            return True
        with signer.lock:
            for seq in sorted(signer.outstanding):
                if seq < chain_sequence:
                    continue
                code, _, _ = self._broadcast(signer.outstanding[seq].tx_bytes)
                self.rebroadcasts += code == 0
                # 0: re-admitted; 19: still in the mempool; 32: meanwhile included. All fine.
                if code not in (0, CODE_TX_IN_MEMPOOL_CACHE, CODE_WRONG_SEQUENCE):
                    break
        return False

    def _get_tx(self, tx_hash: str) -> _Outcome | None:
        try:
            resp = self._call(lambda t: self.client.txs.GetTx(GetTxRequest(hash=tx_hash), timeout=t)).tx_response
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND or "not found" in _details(exc):
                return None
            raise LedgerError(f"tx {tx_hash}: {_details(exc)}") from None
        self._known_height = max(self._known_height, int(resp.height))
        return _Outcome(int(resp.height), int(resp.code), resp.codespace, resp.raw_log, int(resp.gas_used),
                        [Event(e.type, tuple((a.key, a.value) for a in e.attributes)) for e in resp.events])

    def _find_in_blocks(self, pending: PendingTx) -> _Outcome | None:
        """``pending``'s outcome from the blocks themselves (when the tx index lost it).

        Scans blocks since the transaction was submitted for its bytes; the result comes from
        CometBFT's ``block_results`` (the SDK's gRPC has no such query), so it needs ``rpc_url``.
        """
        top = self.height()
        for height in range(max(1, pending.submit_height), top + 1):
            block = self._call(lambda t, h=height: self.client.tendermint.GetBlockByHeight(
                GetBlockByHeightRequest(height=h), timeout=t))
            for index, raw in enumerate(block.block.data.txs):
                if hashlib.sha256(raw).hexdigest().upper() != pending.tx_hash:
                    continue
                if self.rpc_url is None:
                    raise LedgerError(f"transaction {pending.tx_hash} is in block {height} but the node's tx index "
                                      "lost it; give CosmosChain an rpc_url to read its result")
                self.index_misses += 1
                return self._block_result(height, index)
        return None

    def _block_result(self, height: int, index: int) -> _Outcome:
        try:
            r = httpx.get(f"{self.rpc_url}/block_results", params={"height": height}, timeout=10.0)
            r.raise_for_status()
            tx = r.json()["result"]["txs_results"][index]
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise LedgerError(f"block_results of height {height}: {exc}") from None
        events = [Event(e["type"], tuple((a["key"], a.get("value") or "") for a in e.get("attributes") or []))
                  for e in tx.get("events") or []]
        return _Outcome(height, int(tx.get("code") or 0), tx.get("codespace") or "", tx.get("log") or "",
                        int(tx.get("gas_used") or 0), events)

    def _result(self, pending: PendingTx, outcome: _Outcome) -> TxResult:
        fee = pending.fee if self.config.fee_denom == self.config.denom else 0
        if outcome.code != 0:
            raise classify(outcome.log, code=outcome.code, codespace=outcome.codespace, tx_hash=pending.tx_hash,
                           fee=fee, gas_used=outcome.gas_used)
        return TxResult(height=outcome.height, tx_hash=pending.tx_hash, gas_used=outcome.gas_used, fee=fee,
                        events=tuple(outcome.events))

    def broadcast(self, key: PrivateKey, msgs: Sequence[Message], *, gas_limit: int | None = None,
                  memo: str = "") -> TxResult:
        """:meth:`submit` then :meth:`wait`.

        With simulated gas, a transaction that runs out of gas in its block is simulated and sent
        once more. That happens when others' transactions land first and change what it does:
        the message that completes a phase also closes it (the contract's early close), which a
        simulation on the previous block's state cannot foresee. The result's ``fee`` then covers
        both attempts.
        """
        try:
            return self.wait(self.submit(key, msgs, gas_limit=gas_limit, memo=memo))
        except CosmosTxError as exc:
            if gas_limit is not None or (exc.codespace, exc.code) != ("sdk", CODE_OUT_OF_GAS) or not exc.tx_hash:
                raise
            lost = exc.fee
        self.out_of_gas_retries += 1
        try:
            result = self.wait(self.submit(key, msgs, memo=memo))
        except LedgerError as exc:
            exc.fee += lost
            raise
        return dataclasses.replace(result, fee=result.fee + lost)

    # -- messages -----------------------------------------------------------------------------

    def coins(self, funds: Funds) -> list[CoinProto]:
        if funds is None:
            return []
        items = {self.config.denom: funds} if isinstance(funds, int) else dict(funds)
        return [CoinProto(denom=d, amount=str(a)) for d, a in sorted(items.items()) if a]

    def execute_msg(self, key: PrivateKey, contract: str, msg: Mapping[str, Any],
                    funds: Funds = None) -> MsgExecuteContract:
        return MsgExecuteContract(sender=key.address(self.config.prefix), contract=contract,
                                  msg=json.dumps(msg, separators=(",", ":")).encode(), funds=self.coins(funds))

    def execute_contract(self, key: PrivateKey, contract: str, msg: Mapping[str, Any], funds: Funds = None, *,
                         gas_limit: int | None = None) -> TxResult:
        """Execute ``msg`` on ``contract`` with ``funds`` (an amount of the config's denom, or denom -> amount)."""
        return self.broadcast(key, [self.execute_msg(key, contract, msg, funds)], gas_limit=gas_limit)

    def submit_execute(self, key: PrivateKey, contract: str, msg: Mapping[str, Any], funds: Funds = None, *,
                       gas_limit: int | None = None) -> PendingTx:
        """:meth:`execute_contract` without waiting for the block (pipelining)."""
        return self.submit(key, [self.execute_msg(key, contract, msg, funds)], gas_limit=gas_limit)

    def send(self, key: PrivateKey, to: str, funds: Funds, *, gas_limit: int | None = None) -> TxResult:
        msg = MsgSend(from_address=key.address(self.config.prefix), to_address=to, amount=self.coins(funds))
        return self.broadcast(key, [msg], gas_limit=gas_limit)

    # -- wasm ---------------------------------------------------------------------------------

    def node_chain_id(self) -> str:
        """The chain id the node's latest block carries (what a joining member signs for)."""
        resp = self._call(lambda t: self.client.tendermint.GetLatestBlock(GetLatestBlockRequest(), timeout=t))
        return str(resp.block.header.chain_id)

    def contract_checksum(self, contract: str) -> bytes:
        """The sha256 of the wasm code ``contract`` runs (its code's checksum on chain).

        Raises:
            LedgerError: no such contract, or its code is not listed.
        """
        try:
            info = self._call(lambda t: self.client.wasm.ContractInfo(QueryContractInfoRequest(address=contract),
                                                                      timeout=t))
        except grpc.RpcError as exc:
            raise LedgerError(f"contract {contract}: {_details(exc)}") from None
        code_id = int(info.contract_info.code_id)
        for code in self._code_infos(reverse=False):
            if int(code.code_id) == code_id:
                return bytes(code.data_hash)
        raise LedgerError(f"code {code_id} of contract {contract} is not listed by the node")

    def find_code(self, checksum: bytes) -> int | None:
        """The newest code id whose checksum (sha256 of the wasm) is ``checksum``, if any."""
        for info in self._code_infos(reverse=True):
            if bytes(info.data_hash) == checksum:
                return int(info.code_id)
        return None

    def _code_infos(self, *, reverse: bool) -> Iterator[Any]:
        """Every code the node lists, a page of 100 at a time (newest first when ``reverse``)."""
        key = b""
        while True:
            req = QueryCodesRequest(pagination=PageRequest(key=key, limit=100, reverse=reverse))
            resp = self._call(lambda t, req=req: self.client.wasm.Codes(req, timeout=t))
            yield from resp.code_infos
            key = bytes(resp.pagination.next_key)
            if not key:
                return

    def store_code(self, key: PrivateKey, wasm: bytes, *, reuse: bool = True,
                   gas_limit: int | None = None) -> tuple[int, TxResult | None]:
        """Upload ``wasm`` (gzip-compressed on the wire), or reuse a code with the same checksum.
        ``gas_limit``: sign with this limit instead of simulating.

        Returns:
            (code id, the upload's TxResult or None when an existing code was reused).
        """
        if reuse:
            existing = self.find_code(hashlib.sha256(wasm).digest())
            if existing is not None:
                return existing, None
        msg = MsgStoreCode(sender=key.address(self.config.prefix), wasm_byte_code=gzip.compress(wasm, mtime=0))
        result = self.broadcast(key, [msg], gas_limit=gas_limit)
        code_id = result.attribute("code_id", "store_code")
        if code_id is None:
            raise LedgerError(f"store_code {result.tx_hash}: no code_id in the events")
        return int(code_id), result

    def instantiate_message(self, key: PrivateKey, code_id: int, msg: Mapping[str, Any], *, label: str = "veriloco",
                            admin: str | None = None, funds: Funds = None) -> MsgInstantiateContract:
        return MsgInstantiateContract(sender=key.address(self.config.prefix), admin=admin or "", code_id=code_id,
                                      label=label, msg=json.dumps(msg, separators=(",", ":")).encode(),
                                      funds=self.coins(funds))

    def instantiate(self, key: PrivateKey, code_id: int, msg: Mapping[str, Any], *, label: str = "veriloco",
                    admin: str | None = None, funds: Funds = None,
                    gas_limit: int | None = None) -> tuple[str, TxResult]:
        """Instantiate ``code_id``; (the contract's address, the TxResult)."""
        result = self.broadcast(key, [self.instantiate_message(key, code_id, msg, label=label, admin=admin,
                                                               funds=funds)], gas_limit=gas_limit)
        return contract_address_of(result), result

    def migrate(self, key: PrivateKey, contract: str, code_id: int, msg: Mapping[str, Any], *,
                gas_limit: int | None = None) -> TxResult:
        """``MsgMigrateContract``: switch ``contract`` to ``code_id`` and run its ``migrate`` with ``msg``.

        Raises:
            CosmosTxError: the chain refused: ``key`` is not the contract's admin, or it has none
                (``can not migrate: unauthorized``), or the code does not exist.
            ContractError: the new code's ``migrate`` refused.
        """
        message = MsgMigrateContract(sender=key.address(self.config.prefix), contract=contract, code_id=code_id,
                                     msg=json.dumps(msg, separators=(",", ":")).encode())
        return self.broadcast(key, [message], gas_limit=gas_limit)


def contract_address_of(result: TxResult) -> str:
    """The address of the contract an instantiate transaction created."""
    address = result.attribute("_contract_address", "instantiate")
    if address is None:
        raise LedgerError(f"instantiate {result.tx_hash}: no contract address in the events")
    return address


__all__ = ["CosmosChain", "Funds", "PendingTx", "contract_address_of"]
