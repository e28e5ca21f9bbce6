"""The Ledger: the one API through which everything above ``chain/`` talks to the contract.

It speaks the protocol's pydantic models (``protocol.messages`` in, ``protocol.views`` out) and
hides wasm, JSON, gas and transactions. The mapping from typed calls to the contract's JSON is
written once, here; a backend only moves bytes (:class:`ContractBackend`): ``chain.embedded``
runs the same ``.wasm`` in-process under wasmtime, ``chain.cosmos`` talks to a real node through
cosmpy. Code that holds a ``Ledger`` cannot tell which one it has, and the two cannot disagree
about what a message means.

Every write takes the signer's :class:`~protocol.keys.PrivateKey`: one ledger serves many
participants (``simulate`` runs a whole network in one process), and a key is only used to sign.
Writes raise :class:`ContractError` with the contract's own message when the contract refuses.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from chain.errors import ContractError as ContractError  # re-exported: the Ledger's API
from chain.errors import LedgerError as LedgerError
from chain.types import Event as Event
from chain.types import TxResult as TxResult
from protocol.keys import PrivateKey, is_address
from protocol.messages import (
    BeaconJoin,
    BeaconReveal,
    Commitment,
    DelayedSeedOutput,
    ModelProposal,
    Ready,
    Role,
    SitOut,
    StartProposal,
    TrapOpening,
    VerdictCommit,
    VerdictOpening,
)
from protocol.rules.limits import (
    AGGREGATION_PAGE,
    CHALLENGES_PAGE,
    EPOCHS_PAGE,
    MAX_PARTICIPANTS,
    MAX_SEGMENTS,
    MEMBERS_PAGE,
    REPORT_PAGE,
)
from protocol.rules.spec import RunSpec
from protocol.views import (
    Accounting,
    AggregationInput,
    Challenge,
    ComputeClassStatus,
    Config,
    EpochInfo,
    EpochReport,
    Member,
    ParticipantStatus,
    ReportPage,
    Standby,
    assemble_report,
)

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R")

MAX_STANDBY_VALUE = 128
"""Bytes at most of a member's stored standby (:meth:`Ledger.standby`): a JSON string holding a
bech32 address, which is at most 90 characters."""


def is_unknown_query(exc: ContractError, name: str) -> bool:
    """Whether the contract refused a query because it does not know ``name`` (a contract built
    before that query existed): serde's refusal of the query message, the same text on both
    backends (``invalid query message: unknown variant `name`, expected one of …``)."""
    return str(exc).startswith(f"invalid query message: unknown variant `{name}`")


def is_unknown_field(exc: ContractError, name: str) -> bool:
    """Whether the contract refused a query because it does not know its field ``name`` (a
    contract built before that field existed): serde's refusal of the query message, the same
    text on both backends (``invalid query message: unknown field `name`, expected …``)."""
    return str(exc).startswith(f"invalid query message: unknown field `{name}`")


class ContractBackend(ABC):
    """How a Ledger reaches its contract: signed executes, smart queries, blocks and balances."""

    @property
    @abstractmethod
    def denom(self) -> str:
        """The staking and reward denomination."""

    @property
    @abstractmethod
    def contract_address(self) -> str:
        """The address of the deployed contract."""

    @abstractmethod
    def execute(self, key: PrivateKey, msg: dict[str, Any], funds: int = 0) -> TxResult:
        """Sign and execute ``msg`` on the contract with ``funds`` of :attr:`denom` attached.

        Raises:
            ContractError: the contract refused (its message is the error's text).
            LedgerError: the transaction could not be carried out.
        """

    @abstractmethod
    def query(self, msg: dict[str, Any]) -> Any:
        """A smart query; returns the decoded JSON answer."""

    @abstractmethod
    def height(self) -> int:
        """The latest block height."""

    @abstractmethod
    def balance(self, address: str) -> int:
        """The bank balance of ``address`` in :attr:`denom`."""

    @abstractmethod
    def wait_for_height(self, height: int, timeout: float = 60.0) -> int:
        """Return once the chain has reached ``height`` (an embedded chain produces the blocks)."""

    @abstractmethod
    def raw(self, key: bytes) -> bytes | None:
        """The contract's stored value under ``key`` (wasmd's raw query), or None."""

    def end_block(self) -> None:  # noqa: B027 (deliberately a no-op by default: real chains close blocks by themselves)
        """Close the block that transactions are landing in now (a real chain closes its blocks by
        itself; an embedded chain that packs many transactions in a block needs to be told)."""


def instantiate_msg(spec: RunSpec, initial_model_hash: str, treasury: str,
                    admin: str | None = None, settle_page: int | None = None) -> dict[str, Any]:
    """The contract's instantiate message for a run.

    Args:
        settle_page: the most records (participants, or reveals) one transaction processes of a
            close that runs page by page (closing ``reveal``, finalize); None: the contract's
            default (``docs/contract.md``, "Limits").
    """
    msg: dict[str, Any] = {"spec_json": spec.canonical().decode(), "initial_model_hash": initial_model_hash,
                           "denom": spec.economics.denom, "treasury": treasury, "admin": admin}
    if settle_page is not None:
        if settle_page < 1:
            raise ValueError(f"settle_page must be at least 1, got {settle_page}")
        msg["settle_page"] = settle_page
    return msg


class Ledger:
    """A veriloco contract on some chain, with typed reads and signed writes.

    Args:
        backend: the transport to the deployed contract.
    """

    def __init__(self, backend: ContractBackend) -> None:
        self.backend = backend

    # -- the chain -----------------------------------------------------------------------------

    @property
    def denom(self) -> str:
        return self.backend.denom

    @property
    def contract_address(self) -> str:
        return self.backend.contract_address

    @property
    def prefix(self) -> str:
        """The chain's bech32 prefix (that of the contract's address)."""
        return self.backend.contract_address.rsplit("1", 1)[0]

    def height(self) -> int:
        return self.backend.height()

    def balance(self, address: str) -> int:
        return self.backend.balance(address)

    def wait_for_height(self, height: int, timeout: float = 60.0) -> int:
        return self.backend.wait_for_height(height, timeout)

    def migrate(self, key: PrivateKey, code: int | bytes, msg: dict[str, Any] | None = None) -> TxResult:
        """Upgrade the contract to ``code`` (a stored code id, or wasm bytes to store first) as
        ``key``, which must be the chain's admin of the contract; ``msg`` is the migrate message
        (default ``{}``). The contract keeps its address, state and funds (``docs/chain.md``,
        "Upgrades").

        Raises:
            LedgerError: the chain refused (``key`` is not the admin, the run has none: it is
                immutable; an unknown code), or the backend cannot migrate.
            ContractError: the new code refused (another contract's state, a downgrade).
        """
        # Backends that can (embedded, cosmos) have store_code and migrate; the ABC stays minimal.
        store, migrate = getattr(self.backend, "store_code", None), getattr(self.backend, "migrate", None)
        if store is None or migrate is None:
            raise LedgerError(f"{type(self.backend).__name__} cannot migrate a contract")
        code_id = code if isinstance(code, int) else store(key, code)
        result: TxResult = migrate(key, code_id, msg or {})
        return result

    # -- members -------------------------------------------------------------------------------

    def bond(self, key: PrivateKey, role: Role, endpoint: str, amount: int) -> TxResult:
        """Stake ``amount`` as ``role``, advertising the artifact server at ``endpoint``."""
        return self.backend.execute(key, {"bond": {"role": role, "endpoint": endpoint}}, funds=amount)

    def unbond(self, key: PrivateKey, amount: int) -> TxResult:
        """Start unbonding ``amount`` (it stays slashable until claimed)."""
        return self.backend.execute(key, {"unbond": {"amount": str(amount)}})

    def claim(self, key: PrivateKey) -> TxResult:
        """Withdraw matured unbonding entries."""
        return self.backend.execute(key, {"claim": {}})

    def fund_rewards(self, key: PrivateKey, amount: int) -> TxResult:
        """Add ``amount`` to the reward pool."""
        return self.backend.execute(key, {"fund_rewards": {}}, funds=amount)

    # -- the epoch -----------------------------------------------------------------------------

    def join(self, key: PrivateKey, msg: BeaconJoin) -> TxResult:
        return self.backend.execute(key, {"join": self._to_json(msg)})

    def commit(self, key: PrivateKey, msg: Commitment, trap_commit: str) -> TxResult:
        """Post the epoch's work ``msg`` with the trap commitment (``TrapOpening.commitment``)."""
        work = {k: v for k, v in self._to_json(msg).items() if k != "trap_commit"}
        return self.backend.execute(key, {"commit": {**work, "trap_commit": trap_commit}})

    def sit_out(self, key: PrivateKey, msg: SitOut) -> TxResult:
        """Sit the epoch out (``train``): a host that will finish no segment, instead of committing."""
        return self.backend.execute(key, {"sit_out": self._to_json(msg)})

    def reveal(self, key: PrivateKey, msg: BeaconReveal, participant: str | None = None) -> TxResult:
        """Reveal a beacon secret: the signer's own, or, from the standby ``participant`` named
        (:meth:`set_standby`), that participant's. Without ``participant`` the message has no such
        key: exactly the older format."""
        body = self._to_json(msg)
        if participant is not None:
            body["participant"] = participant
        return self.backend.execute(key, {"reveal": body})

    def set_standby(self, key: PrivateKey, standby: str | None) -> TxResult:
        """Name (or, with None, clear) the member's standby revealer: an address without stake that
        may send ``reveal`` for it and nothing else (docs/contract.md, "A standby revealer")."""
        return self.backend.execute(key, {"set_standby": {"standby": standby}})

    def commit_verdict(self, key: PrivateKey, msg: VerdictCommit) -> TxResult:
        """Commit to a verdict (``verify`` and ``dispute`` phases)."""
        return self.backend.execute(key, {"commit_verdict": self._to_json(msg)})

    def ready(self, key: PrivateKey, msg: Ready) -> TxResult:
        """A validator's ``ready`` with its objections (``objection`` phase)."""
        return self.backend.execute(key, {"ready": self._to_json(msg)})

    def reveal_verdict(self, key: PrivateKey, msg: VerdictOpening) -> TxResult:
        """Open a committed verdict (``verdict_reveal``: a ``pass`` on an undisputed challenge;
        ``dispute_reveal``). Without a probe gain the message has no ``gain_micro`` key: exactly
        the older format; likewise ``dispute_gain_micro`` (only on a vote deciding a gain dispute)."""
        body = self._to_json(msg)
        for field in ("gain_micro", "dispute_gain_micro"):
            if body.get(field) is None:
                body.pop(field, None)
        return self.backend.execute(key, {"reveal_verdict": body})

    def reveal_traps(self, key: PrivateKey, msg: TrapOpening) -> TxResult:
        """Open the trap commitment (``objection``)."""
        return self.backend.execute(key, {"reveal_traps": self._to_json(msg)})

    def propose_model(self, key: PrivateKey, msg: ModelProposal) -> TxResult:
        return self.backend.execute(key, {"propose_model": self._to_json(msg)})

    def propose_start(self, key: PrivateKey, msg: StartProposal) -> TxResult:
        """Pipelined runs: propose the optimistic start of the next epoch (``StartProposal``)."""
        return self.backend.execute(key, {"propose_start": self._to_json(msg)})

    def delayed_seed(self, key: PrivateKey, output: DelayedSeedOutput) -> TxResult:
        """Phase ``delay`` (anyone): post the VDF output over the epoch seed with its proof
        (``protocol.rules.vdf``); the contract checks it and draws the challenges from it."""
        return self.backend.execute(key, {"delayed_seed": self._to_json(output)})

    def advance(self, key: PrivateKey) -> TxResult:
        """Close every phase whose deadline has passed, or run the next page of a close that
        takes several transactions (anyone may call it)."""
        return self.backend.execute(key, {"advance": {}})

    def settle(self, key: PrivateKey, max_pages: int = 10_000) -> list[TxResult]:
        """Send ``advance`` until no close runs page by page (``EpochInfo.closing`` is None);
        returns the transactions sent (none when no close was running).

        Raises:
            LedgerError: still closing after ``max_pages`` transactions.
        """
        sent: list[TxResult] = []
        while self.closing():
            if len(sent) >= max_pages:
                raise LedgerError(f"the close is still running after {max_pages} advances: {self.epoch(lists=False)}")
            sent.append(self.advance(key))
        return sent

    # -- reads ---------------------------------------------------------------------------------

    def closing(self) -> bool:
        """Whether a close runs page by page in the current epoch or, in a pipelined run, in the
        older epoch still settling (``EpochInfo.settling``)."""
        info = self.epoch(lists=False)
        if info.closing is not None:
            return True
        return info.settling is not None and self.epoch(info.settling, lists=False).closing is not None

    def config(self) -> Config:
        return self._read(Config, {"config": {}})

    def accounting(self) -> Accounting:
        return self._read(Accounting, {"accounting": {}})

    def member(self, address: str) -> Member | None:
        answer = self.backend.query({"member": {"address": address}})
        return None if answer is None else self._validate(Member, answer)

    def standby(self, member: str) -> str | None:
        """The standby revealer ``member`` named (:meth:`set_standby`), or None: the contract's
        ``standby {member}`` query, checked to be an address of this chain.

        A contract from before 0.3.1 does not know that query (it refuses it as an unknown variant
        of its query message): then the value is read from the contract's public storage (``sy/`` +
        address, the address as a JSON string) with the chain's raw query, validated the same way
        (docs/contract.md, "Upgrades").

        Raises:
            ContractError: the contract refused the query (``member`` is not an address).
            LedgerError: the answer or the stored value is not an address of this chain (nor, in
                storage, more than :data:`MAX_STANDBY_VALUE` bytes, which none is).
        """
        try:
            answer = self._read(Standby, {"standby": {"member": member}})
        except ContractError as exc:
            if not is_unknown_query(exc, "standby"):
                raise
            return self._stored_standby(member)
        problem = f"the standby named by {member} is not an address of this chain"
        if answer.member != member:
            raise LedgerError(f"the contract answered the standby of {answer.member}, not of {member}")
        if answer.standby is not None and not is_address(answer.standby, self.prefix):
            raise LedgerError(f"{problem}: {answer.standby[:100]!r}")
        return answer.standby

    def _stored_standby(self, member: str) -> str | None:
        """:meth:`standby` on a contract without the query: the raw read of ``sy/<member>``."""
        value = self.backend.raw(b"sy/" + member.encode())
        if value is None:
            return None
        problem = f"the standby stored for {member} is not an address of this chain"
        if len(value) > MAX_STANDBY_VALUE:
            raise LedgerError(f"{problem}: {len(value)} bytes, more than {MAX_STANDBY_VALUE}")
        try:
            named = json.loads(value)
        except ValueError:
            raise LedgerError(f"{problem}: not JSON") from None
        if not isinstance(named, str):
            raise LedgerError(f"{problem}: a JSON {type(named).__name__}, not a string")
        if not is_address(named, self.prefix):
            raise LedgerError(f"{problem}: {named[:100]!r}")
        return named

    def members(self, role: Role | None = None, start_after: str | None = None,
                limit: int | None = None) -> list[Member]:
        """Members in address order after ``start_after`` (of ``role`` if given): up to ``limit``,
        or all of them (paging through the contract's pages of at most ``MEMBERS_PAGE``)."""
        return self._paged("members", Member, {"role": role}, start_after, limit, MEMBERS_PAGE,
                           lambda m: m.address)

    def epoch(self, epoch: int | None = None, lists: bool = True, counts: bool = False) -> EpochInfo:
        """One epoch (the current one when ``epoch`` is None).

        With ``lists=False`` the contract answers the header only: ``hosts``, ``validators``,
        ``committed`` and ``accepted`` are left empty, and the query's gas does not grow with the
        participants (the full answer nears wasmd's query gas limit at 2,048 of them). A contract
        from before 0.3.2 refuses the ``lists`` field; then the full answer is read instead.
        ``counts=True`` also asks for the lists' lengths (``counts``, one more point read); a
        contract from before 0.3.4 refuses that field, and then ``counts`` is None.
        """
        def read(msg: dict[str, Any]) -> EpochInfo:
            return self._read(EpochInfo, {"epoch": {"epoch": epoch, **msg}})

        return self._asking(read, lists, counts)

    def epochs(self, start_after: int | None = None, limit: int | None = None,
               lists: bool = True, counts: bool = False) -> list[EpochInfo]:
        """Epochs in order after ``start_after``: up to ``limit``, or all of them (paging through the
        contract's pages of at most ``EPOCHS_PAGE``). ``lists=False``: headers only, and
        ``counts=True``: with the lists' lengths, as for :meth:`epoch`."""
        def read(msg: dict[str, Any]) -> list[EpochInfo]:
            return self._paged("epochs", EpochInfo, msg, start_after, limit, EPOCHS_PAGE, lambda e: e.epoch)

        return self._asking(read, lists, counts)

    def epoch_paged(self, epoch: int | None = None, attempts: int = 3) -> EpochInfo:
        """:meth:`epoch` with its four lists, read without a query that grows with the participants:
        the header (``lists=False``), then the lists from the epoch's paged :meth:`report` (hosts
        and validators in address order, the hosts with a commitment, the hosts ``accepted``).
        What ``epoch {epoch}`` answers, which at 2,048 participants nears a node's query gas limit
        (and ``epochs`` with lists is past it). More queries than the full answer: one per report
        page (``REPORT_PAGE`` units, about 32 participants each).

        When the epoch moved between the header and the report (another phase, round, seed or
        model) both are read again, at most ``attempts`` times in all.

        Raises:
            ValueError: ``attempts`` below 1.
            LedgerError: malformed answers, or the epoch moved during every attempt.
        """
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        for _ in range(attempts):
            info = self.epoch(epoch, lists=False)
            report = self.report(info.epoch)
            seen = (report.phase, report.round, report.seed, report.next_model_hash, report.agreed)
            if seen != (info.phase, info.round, info.seed, info.next_model_hash, info.agreed):
                continue  # a transaction landed between the two: read both again
            return info.model_copy(update={
                "hosts": [h.address for h in report.hosts],
                "validators": [v.address for v in report.validators],
                "committed": [h.address for h in report.hosts if h.commitment is not None],
                "accepted": [h.address for h in report.hosts if h.outcome == "accepted"],
            })
        raise LedgerError(f"epoch {epoch if epoch is not None else '(current)'} changed while it was read, "
                          f"in each of {attempts} tries")

    def _asking(self, read: Callable[[dict[str, Any]], R], lists: bool, counts: bool) -> R:
        """``read`` with ``lists: false`` unless ``lists`` and ``counts: true`` if ``counts``; a
        contract that refuses one of these fields as unknown (``counts`` before 0.3.4, ``lists``
        before 0.3.2) is asked again without it, so its answer has no counts, or the lists."""
        msg: dict[str, Any] = {**({} if lists else {"lists": False}), **({"counts": True} if counts else {})}
        while True:
            try:
                return read(msg)
            except ContractError as exc:
                unknown = [name for name in msg if is_unknown_field(exc, name)]
                if not unknown:
                    raise
                msg = {k: v for k, v in msg.items() if k not in unknown}

    def participant(self, address: str, epoch: int | None = None) -> ParticipantStatus:
        """``address``'s part in ``epoch`` (the current one when None) and the epoch's phase."""
        return self._read(ParticipantStatus, {"participant": {"address": address, "epoch": epoch}})

    def compute_class(self, cls: str, epoch: int | None = None) -> ComputeClassStatus:
        """Compute-profile class ``cls`` in ``epoch`` (the current one when None): its validators that
        joined so far, whether they serve it, and its validators in the previous epoch's V."""
        return self._read(ComputeClassStatus, {"compute_class": {"class": cls, "epoch": epoch}})

    def aggregation_inputs(self, epoch: int) -> list[AggregationInput]:
        """Every accepted host of ``epoch`` in address order, with its endpoint and committed Δ
        hash (empty until the epoch is finalized); pages of at most ``AGGREGATION_PAGE``."""
        return self._paged("aggregation_inputs", AggregationInput, {"epoch": epoch}, None, None,
                           AGGREGATION_PAGE, lambda h: h.address, field="hosts")

    def challenges(self, epoch: int, validator: str) -> list[Challenge]:
        """The challenges ``validator`` must replay in ``epoch``, read in pages of at most
        ``CHALLENGES_PAGE`` challenged hosts (at 1,024 hosts one query would run out of gas)."""
        out: list[Challenge] = []
        start: str | None = None
        while True:
            answer = self.backend.query({"challenges": {"epoch": epoch, "validator": validator,
                                                        "start_after": start, "limit": CHALLENGES_PAGE}})
            out += [self._validate(Challenge, c) for c in self._field(answer, "challenges")]
            after = answer.get("next")
            if after is None:
                return out
            if not isinstance(after, str) or (start is not None and after <= start):
                raise LedgerError(f"malformed answer from the contract: a challenges page ends at {after!r}")
            start = after

    def report(self, epoch: int, page: int = REPORT_PAGE, attempts: int = 3) -> EpochReport:
        """Everything about ``epoch``, read in pages of ``page`` units (at most ``REPORT_PAGE``: one
        query cannot hold a large disputed epoch) and assembled (:func:`assemble_report`).

        The pages are read one after another, so a transaction may land between two of them; when
        the epoch's header moved meanwhile (another phase, round or payout total) the report is
        read again from its first page, at most ``attempts`` times in all.

        Raises:
            ValueError: ``page`` or ``attempts`` out of range.
            LedgerError: malformed pages, or the epoch moved during every attempt.
        """
        if not 1 <= page <= REPORT_PAGE:
            raise ValueError(f"a report page is between 1 and {REPORT_PAGE} units, got {page}")
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        for _ in range(attempts):
            pages = self._report_pages(epoch, page)
            try:
                return assemble_report(pages)
            except ValueError as exc:
                if any(p.header() != pages[0].header() for p in pages):
                    continue  # the epoch moved between two pages: read it again
                raise LedgerError(f"malformed report from the contract: {exc}") from None
        raise LedgerError(f"epoch {epoch} changed while its report was read, in each of {attempts} tries")

    def kept_report(self, epoch: int, closed: dict[int, EpochReport]) -> EpochReport:
        """:meth:`report` of ``epoch``, from ``closed`` when it is there, and kept there once the
        epoch is closed: a closed epoch's report never changes (at 2,048 participants it is some 65
        queries), but an older epoch is not always closed (a pipelined run's previous epoch still
        settles while the next trains), so the others are read each time. For live views that
        read the run again and again."""
        report = closed.get(epoch) or self.report(epoch)
        if report.phase == "closed":
            closed[epoch] = report
        return report

    def _report_pages(self, epoch: int, page: int) -> list[ReportPage]:
        """Every page of the report of ``epoch``, from the first to the one without ``next``.

        A page that stops inside a host too large for one page (contract 0.3.3 onwards) answers
        ``next_segment`` too, and the next page is asked from there (``start_segment``); an older
        contract never answers it, so it is never sent the field."""
        pages: list[ReportPage] = []
        start: str | None = None
        segment: int | None = None
        listed = 0
        while True:
            msg: dict[str, Any] = {"epoch": epoch, "start_after": start, "limit": page}
            if segment is not None:
                msg["start_segment"] = segment
            answer = self._read(ReportPage, {"report": msg})
            pages.append(answer)
            # Bounded whatever the node answers: the contract puts at least one participant or
            # challenge on every page, an epoch holds at most MAX_PARTICIPANTS of each role, and
            # the cursor only moves on (below; inside a host, to a later segment, at most
            # MAX_SEGMENTS), so a node whose cursor only creeps on cannot keep the reader paging.
            listed += len(answer.hosts) + len(answer.validators)
            if listed > 2 * MAX_PARTICIPANTS:
                raise LedgerError(f"malformed answer from the contract: a report of more than "
                                  f"{2 * MAX_PARTICIPANTS} participants")
            if answer.next is None:
                if answer.next_segment is not None:
                    raise LedgerError("malformed answer from the contract: a last report page with a next segment")
                return pages
            if not answer.hosts and not answer.validators and not answer.challenges:
                raise LedgerError("malformed answer from the contract: a report page that goes on lists nobody")
            if answer.next_segment is not None and (
                    answer.next != (answer.hosts[-1].address if answer.hosts else start)
                    or not answer.challenges or answer.next_segment >= MAX_SEGMENTS):
                raise LedgerError(f"malformed answer from the contract: a report page stops inside "
                                  f"{answer.next!r} at segment {answer.next_segment}")
            # The cursor moves on: to a later participant, or inside a host to a later segment, or
            # from inside a host to past it.
            if start is not None and _report_cursor(answer.next, answer.next_segment) <= _report_cursor(start, segment):
                raise LedgerError(f"malformed answer from the contract: a report page ends at {answer.next!r}")
            start, segment = answer.next, answer.next_segment

    def spec(self) -> RunSpec:
        """The run spec the contract was deployed with."""
        return RunSpec.from_canonical(self.config().spec_json)

    def end_block(self) -> None:
        """Close the block transactions land in now (see :meth:`ContractBackend.end_block`)."""
        self.backend.end_block()

    # -- plumbing ------------------------------------------------------------------------------

    @staticmethod
    def _to_json(model: BaseModel) -> dict[str, Any]:
        return model.model_dump(mode="json")

    def _read(self, model: type[M], msg: dict[str, Any]) -> M:
        return self._validate(model, self.backend.query(msg))

    @staticmethod
    def _validate(model: type[M], answer: Any) -> M:
        # A response that does not fit the model is a backend or contract bug, not user error.
        try:
            return model.model_validate(answer)
        except ValidationError as exc:
            raise LedgerError(f"malformed {model.__name__} from the contract: {exc.errors()[0]['msg']}") from None

    def _paged(self, query: str, model: type[M], args: dict[str, Any], start_after: Any,
               limit: int | None, page_max: int, key: Callable[[M], Any],
               field: str | None = None) -> list[M]:
        """Items of a paged query after ``start_after``: up to ``limit``, or all of them.

        Args:
            query: the query's name; its answer holds the list under ``field`` (default: ``query``).
            model: the item's view.
            args: the query's other arguments.
            start_after: where to start (exclusive), in the query's key.
            limit: how many items at most; None for all.
            page_max: the contract's largest page.
            key: an item's key, for the next page's ``start_after``.
        """
        out: list[M] = []
        while limit is None or len(out) < limit:
            page = min(page_max, limit - len(out)) if limit is not None else page_max
            answer = self.backend.query({query: {**args, "start_after": start_after, "limit": page}})
            batch = [self._validate(model, item) for item in self._field(answer, field or query)]
            out.extend(batch)
            if len(batch) < page:
                break
            start_after = key(batch[-1])
        return out

    @staticmethod
    def _field(answer: Any, name: str) -> list[Any]:
        if not isinstance(answer, dict) or not isinstance(answer.get(name), list):
            raise LedgerError(f"malformed answer from the contract: expected a list under {name!r}")
        items: list[Any] = answer[name]
        return items


def _report_cursor(address: str, segment: int | None) -> tuple[str, int, int]:
    """Where a ``report`` page ends, in reading order: inside host ``address`` before its challenge
    of ``segment``, or (``None``) past ``address``."""
    return (address, 0, segment) if segment is not None else (address, 1, 0)
