"""cosmpy's ``LedgerClient`` over gRPC, made fit for a node that may go away and come back.

:class:`CosmosClient` differs from cosmpy's client in three ways, all small:

* accounts are read through :meth:`ChainConfig.decode_account`, so chains whose x/auth answers
  with their own account type (Injective's ``EthAccount``) work (cosmpy raises "Unexpected
  account type returned from query");
* the gRPC channel retries connecting every 50–500 ms instead of backing off up to two minutes,
  and :meth:`call` retries a request that met an unreachable node (``UNAVAILABLE``,
  ``DEADLINE_EXCEEDED``) with backoff until ``reconnect_timeout``, opening a fresh channel on the
  way; only then does it raise :class:`chain.errors.LedgerError`;
* the transaction poll interval defaults to 50 ms (cosmpy's 2 s makes every wait take 2 s).

Only gRPC is supported: cosmpy's REST transport needs patches on Injective.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import grpc
from cosmpy.aerial.client import LedgerClient
from cosmpy.aerial.config import NetworkConfig
from cosmpy.aerial.gas import SimulationGasStrategy
from cosmpy.aerial.types import Account
from cosmpy.aerial.urls import Protocol, parse_url
from cosmpy.crypto.address import Address
from cosmpy.protos.cosmos.auth.v1beta1.query_pb2 import QueryAccountRequest
from cosmpy.protos.cosmos.auth.v1beta1.query_pb2_grpc import QueryStub as AuthStub
from cosmpy.protos.cosmos.bank.v1beta1.query_pb2_grpc import QueryStub as BankStub
from cosmpy.protos.cosmos.base.node.v1beta1.query_pb2_grpc import ServiceStub as NodeStub
from cosmpy.protos.cosmos.base.tendermint.v1beta1.query_pb2_grpc import ServiceStub as TendermintStub
from cosmpy.protos.cosmos.consensus.v1.query_pb2_grpc import QueryStub as ConsensusStub
from cosmpy.protos.cosmos.distribution.v1beta1.query_pb2_grpc import QueryStub as DistributionStub
from cosmpy.protos.cosmos.params.v1beta1.query_pb2_grpc import QueryStub as ParamsStub
from cosmpy.protos.cosmos.staking.v1beta1.query_pb2_grpc import QueryStub as StakingStub
from cosmpy.protos.cosmos.tx.v1beta1.service_pb2_grpc import ServiceStub as TxStub
from cosmpy.protos.cosmwasm.wasm.v1.query_pb2_grpc import QueryStub as WasmStub

from chain.cosmos.config import ChainConfig
from chain.errors import LedgerError, NodeUnreachable

T = TypeVar("T")

RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# A request cut off by a node shutting down may also end as UNKNOWN/INTERNAL with these details.
_TRANSPORT_FAILURES = ("stream removed", "rst_stream", "socket closed", "connection reset", "goaway",
                       "broken pipe", "failed to connect", "connection refused")


def is_transport_failure(exc: grpc.RpcError) -> bool:
    """Whether a gRPC error means the node was (or went) unreachable, not that it refused."""
    code = exc.code() if hasattr(exc, "code") else None
    if code in RETRYABLE:
        return True
    if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.CANCELLED):
        return any(marker in _details(exc).lower() for marker in _TRANSPORT_FAILURES)
    return False
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]


class CosmosClient(LedgerClient):  # type: ignore[misc]  # cosmpy ships no type information
    """A cosmpy ``LedgerClient`` for one chain, over gRPC, reconnecting.

    Args:
        url: ``grpc+http://host:port`` (or ``grpc+https://``).
        chain: the chain's quirks.
        query_interval: seconds between transaction polls.
        query_timeout: cosmpy's default wait for a transaction, in seconds.
        call_timeout: deadline of one gRPC request, in seconds.
        reconnect_timeout: how long :meth:`call` keeps retrying an unreachable node.
    """

    def __init__(self, url: str, chain: ChainConfig, *, query_interval: float = 0.05, query_timeout: float = 60.0,
                 call_timeout: float = 10.0, reconnect_timeout: float = 60.0) -> None:
        # Deliberately not LedgerClient.__init__: it opens a channel without our options and
        # supports REST, which we do not. We set what its methods read.
        cfg = NetworkConfig(chain_id=chain.chain_id, url=url, fee_minimum_gas_price=float(chain.gas_price),
                            fee_denomination=chain.fee_denom, staking_denomination=chain.denom)
        cfg.validate()
        parsed = parse_url(url)
        if parsed.protocol != Protocol.GRPC:
            raise ValueError(f"CosmosClient speaks gRPC only (grpc+http://host:port), got {url!r}")
        self._network_config = cfg
        self._query_interval_secs = query_interval
        self._query_timeout_secs = query_timeout
        self._gas_strategy = SimulationGasStrategy(self)
        self.chain = chain
        self.url = url
        self.call_timeout = call_timeout
        self.reconnect_timeout = reconnect_timeout
        self.reconnects = 0  # how many times a fresh channel was opened after a failure
        self.outages = 0  # how many requests met an unreachable node (and then got through)
        self._secure = parsed.secure
        self._target = parsed.host_and_port
        self._channel: grpc.Channel | None = None
        self._connect()

    # -- the channel --------------------------------------------------------------------------

    def _connect(self) -> None:
        if self._channel is not None:
            self._channel.close()
        if self._secure:
            self._channel = grpc.secure_channel(self._target, grpc.ssl_channel_credentials(), options=_CHANNEL_OPTIONS)
        else:
            self._channel = grpc.insecure_channel(self._target, options=_CHANNEL_OPTIONS)
        ch = self._channel
        self.wasm = WasmStub(ch)
        self.auth = AuthStub(ch)
        self.txs = TxStub(ch)
        self.bank = BankStub(ch)
        self.staking = StakingStub(ch)
        self.distribution = DistributionStub(ch)
        self.params = ParamsStub(ch)
        self.consensus = ConsensusStub(ch)
        self.tendermint = TendermintStub(ch)
        self.node = NodeStub(ch)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def call(self, request: Callable[[float], T], *, timeout: float | None = None) -> T:
        """Run ``request(deadline_seconds)`` (a gRPC call on this client's stubs), retrying while the
        node is unreachable.

        Errors that mean a lost connection (:func:`is_transport_failure`) are retried; other gRPC
        errors propagate unchanged (the caller knows what they mean).

        Raises:
            NodeUnreachable: the node stayed unreachable for ``timeout`` (default ``reconnect_timeout``),
                or this client was closed.
        """
        window = self.reconnect_timeout if timeout is None else timeout
        give_up = time.monotonic() + window
        delay = 0.05
        failures = 0
        while True:
            try:
                answer = request(self.call_timeout)
            except ValueError as exc:
                # A call racing close() (a daemon stopping while its server still answers a
                # request) finds the channel closed: the node is out of reach for this client.
                if "closed channel" not in str(exc):
                    raise
                raise NodeUnreachable(f"the client of {self.url} is closed", url=self.url) from None
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                if not is_transport_failure(exc):
                    self.outages += failures > 0  # the node is back (and answered with an error)
                    raise
                failures += 1
                if time.monotonic() + delay > give_up:
                    raise NodeUnreachable(f"the node at {self.url} did not answer within {window:g} s "
                                          f"({code.name if code else 'error'}: {_details(exc)})",
                                          url=self.url) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
                if failures % 3 == 0:  # a channel stuck in backoff: start over
                    self._connect()
                    self.reconnects += 1
            else:
                self.outages += failures > 0
                return answer

    # -- accounts -----------------------------------------------------------------------------

    def query_account(self, address: Address | str) -> Account:
        """Account number and sequence, whatever account type the chain wraps them in.

        Raises:
            LookupError: the account does not exist on chain (never received funds).
        """
        req = QueryAccountRequest(address=str(address))
        try:
            resp = self.call(lambda t: self.auth.Account(req, timeout=t))
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                raise LookupError(f"account {address} not found on chain") from None
            raise
        any_ = resp.account
        try:
            base = self.chain.decode_account(any_.type_url, any_.value)
        except ValueError as exc:
            raise LedgerError(str(exc)) from None
        return Account(address=Address(str(address)), number=base.account_number, sequence=base.sequence)


def _details(exc: grpc.RpcError) -> str:
    try:
        return (exc.details() or "").splitlines()[0][:200]
    except Exception:  # noqa: BLE001 (grpc error objects vary)
        return str(exc)[:200]
