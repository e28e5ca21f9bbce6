"""A backend-neutral environment for contract tests: a deployed contract behind a Ledger, named
funded keys, block progress, and the participants' moves of an epoch.

Tests get a :class:`LedgerEnv` from the ``ledger_env`` / ``make_ledger_env`` fixtures
(``conftest.py``) and never learn which chain they run on. A backend is a *driver*: an object
with the attributes below, made by a factory ``(spec, names) -> driver``. :class:`EmbeddedDriver`
is the one for the in-process chain; ``tests/chain/devnet_backend.py``'s ``DevnetContract`` (a
real injectived node) has the same shape.

Driver interface (duck-typed)::

    backend_name: str                      # "embedded", "devnet", ...
    ledger: chain.ledger.Ledger            # over the deployed contract
    keys: dict[str, PrivateKey]            # every name asked for, funded
    spec: RunSpec                          # what the contract was deployed with
    execute(name, msg, funds) -> TxResult  # raw execute; funds: int of the denom, or {denom: n}
    deploy(msg) -> str                     # instantiate another contract of the same code
    instantiate_code(wasm, msg, admin) -> Ledger  # store other code, instantiate it (admin: a name)
    admin: str | None                      # the chain admin's address (factory kwarg admin=<name>)
    advance_blocks(n) -> int               # let n blocks pass (produce them, or wait for them)
    fees_paid: int                         # (optional) fees paid through execute/deploy

Waiting adapts to the backend (an embedded chain produces blocks at once, a real chain's come
every ~0.2 s); assertions never do. Fees: every transaction sent through ``env.ledger`` is
recorded (:class:`chain.metered.MeteredBackend`), so ``total_funds()`` (balances + contract +
fees) is constant on a fee-charging chain too.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pytest
from suite_env import named_key

from chain.embedded import EmbeddedBackend, EmbeddedChain, deploy_embedded
from chain.ledger import ContractError, Ledger, TxResult
from chain.metered import MeteredBackend
from node.delayed_seed import delayed_seed_output
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.keys import KeyType, PrivateKey
from protocol.messages import (
    BeaconJoin,
    BeaconReveal,
    Commitment,
    DelayedSeedOutput,
    ModelProposal,
    Objection,
    Ready,
    TrapOpening,
    VerdictCommit,
    VerdictOpening,
)
from protocol.rules.beacon import beacon_commit
from protocol.rules.spec import RunSpec
from protocol.views import (
    REVOTE_ROUND,
    VERDICT_COMMIT_PHASES,
    VERDICT_REVEAL_PHASES,
    Challenge,
    ComputeClassStatus,
    EpochInfo,
    EpochReport,
)

OTHER_DENOM = "uatom"
INITIAL_BALANCE = GENESIS_BALANCE
INITIAL_MODEL_HASH = hashlib.sha256(b"theta_0").hexdigest()
ENDPOINT = "http://127.0.0.1:8700"
# Every env has these; tests pick the hosts and validators they need.
DEFAULT_NAMES = ("operator", "treasury", "funder", "outsider", "host1", "host2", "host3", "host4",
                 "validator1", "validator2", "validator3", "validator4", "validator5")
# The spec's minimum stakes are 2·10^6 (hosts) and 10^6 (validators): at least the spec rule's
# floor (protocol.rules.limits.MIN_STAKE) and each role's part of any reward the tests pay.
HOST_STAKE = 10_000_000
VALIDATOR_STAKE = 4_000_000
# Signers of both key types in every env, on every backend: these names get Injective's
# eth_secp256k1 keys (keccak addresses, keccak-signed transactions on the devnet), the others
# plain secp256k1 ones, so the whole contract suite runs with both kinds side by side.
ETH_KEY_NAMES = frozenset({"operator", "funder", "host2", "host4", "validator2"})


def key_type_for(name: str) -> KeyType:
    """The key type the test account ``name`` has (see :data:`ETH_KEY_NAMES`)."""
    return KeyType.ETH_SECP256K1 if name in ETH_KEY_NAMES else KeyType.SECP256K1


def account_key(name: str) -> PrivateKey:
    """The test account ``name``: the suite's named key (``suite_env.named_key``) of the type
    :func:`key_type_for` gives it."""
    return named_key(name, key_type_for(name))


def make_spec(*, verification: Mapping[str, Any] | None = None, phases: Mapping[str, Any] | None = None,
              train: Mapping[str, Any] | None = None, **economics: Any) -> RunSpec:
    """The test run spec: S = 2 segments, k = 1 (so both segments are challenged), r = 2,
    phases long enough for a dozen transactions each (tests close them early or wait them out).
    Keyword arguments override fields of the economics section; the sections merge."""
    base = {
        "name": "chain-test",
        "model": {},
        "data": {"corpus": "test", "dataset_hash": "0" * 64, "seq_len": 16},
        "train": {"inner_steps": 4, "segment_steps": 2, "batch_size": 2, "lr": "0.001", **(train or {})},
        "verification": {"enabled": True, "challenges_k": 1, "validators_r": 2, **(verification or {})},
        "economics": {"denom": DENOM, "min_host_stake": "2000000", "min_validator_stake": "1000000",
                      "unbonding_epochs": 2,
                      # Not the defaults: distinct rates show which one was applied (each one that
                      # withholds something is at least the rate of being caught, as the rules say).
                      "slash_unavailable_bps": 6_000, "slash_no_reveal_bps": 7_000,
                      "slash_validator_silent_bps": 2_500, **economics},
        "phases": {"join_blocks": 30, "train_blocks": 30, "reveal_blocks": 30, "verify_blocks": 40,
                   "verdict_reveal_blocks": 30, "propose_blocks": 30, "min_hosts": 1, "min_validators": 1,
                   **(phases or {})},
    }
    return RunSpec.model_validate(base)


EMBEDDED_ONLY = pytest.mark.parametrize("make_ledger_env", ["embedded"], indirect=True)
"""Runs a ``ledger_env`` / ``make_ledger_env`` test on the embedded chain only.

For a scenario whose devnet run adds nothing the module's other devnet runs do not check: the
contract is the same wasm on both backends, so what the devnet adds is wasmd itself (its host
functions, gas, fees, bank sends, both key types, blocks that come by themselves) and each
message kind travelling as JSON. A module keeps on the devnet the scenarios that send every
message kind it tests, its heaviest closes and its exact bank payouts; a scenario that only
recombines those messages (another vote, another absentee) is decided by the same contract code
and costs 5 to 18 s of real blocks on the devnet, so it runs embedded only. Its module says which
devnet test covers its messages."""


Vote = str | tuple[str, str]
"""What a validator's ``vote`` callback returns: an outcome (``pass``/``fail``/``unavailable``), or
(outcome, distance) for one not reached by the honest replay (another distance, so another group)."""


def digest(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


GAIN_MICRO = 25_000
"""The probe gain (micro-nats) an honest validator's verdict on a host's last segment carries here."""
DISPUTE_GAIN_MICRO = 24_310
"""The gain on the host's dispute windows (another draw) honest votes deciding a gain dispute carry
beside :data:`GAIN_MICRO`."""


class EmbeddedDriver:
    """The driver for the embedded chain: a fresh chain per env, the committed wasm, every named
    key funded at genesis with ``INITIAL_BALANCE`` of ``inj`` and of ``uatom``."""

    backend_name = "embedded"
    fees_paid = 0

    def __init__(self, spec: RunSpec, names: Sequence[str] = DEFAULT_NAMES,
                 balances: Mapping[str, int] | None = None, wasm: bytes | None = None,
                 settle_page: int | None = None, admin: str | None = None) -> None:
        self.spec = spec
        self.keys = {name: account_key(name) for name in names}
        funds = dict(balances or {DENOM: INITIAL_BALANCE, OTHER_DENOM: INITIAL_BALANCE})
        self.chain = EmbeddedChain(genesis_balances={k.address(): funds for k in self.keys.values()})
        operator = self.keys.get("operator") or next(iter(self.keys.values()))
        treasury = self.keys["treasury"].address() if "treasury" in self.keys else operator.address()
        self.admin = self.keys[admin].address() if admin is not None else None
        self.ledger = deploy_embedded(self.chain, operator, spec, INITIAL_MODEL_HASH, treasury, self.admin,
                                      wasm=wasm, settle_page=settle_page)
        self.address = self.ledger.contract_address
        self.code_id = self.chain.contract_info(self.address).code_id
        self._operator = operator

    def execute(self, sender: str | PrivateKey, msg: Mapping[str, Any],
                funds: int | Mapping[str, int] | None = None) -> TxResult:
        key = self.keys[sender] if isinstance(sender, str) else sender
        coins = {DENOM: funds} if isinstance(funds, int) and funds else (funds or None)
        return self.chain.execute(key.address(), self.address, msg, funds=coins)

    def deploy(self, msg: Mapping[str, Any]) -> str:
        result = self.chain.instantiate(self._operator.address(), self.code_id, msg, label="other")
        assert result.contract_address is not None
        return result.contract_address

    def advance_blocks(self, n: int = 1) -> int:
        return self.chain.advance_blocks(n)

    def instantiate_code(self, wasm: bytes, msg: Mapping[str, Any], admin: str | None = None) -> Ledger:
        """Store ``wasm`` and instantiate it as the operator with ``msg`` and the chain admin named
        ``admin``; a Ledger on the new contract."""
        operator = self._operator.address()
        code_id = self.chain.store_code(operator, wasm).code_id
        assert code_id is not None
        address = self.chain.instantiate(operator, code_id, msg, label="other",
                                         admin=self.keys[admin].address() if admin else None).contract_address
        assert address is not None
        return Ledger(EmbeddedBackend(self.chain, address, DENOM))


class LedgerEnv:
    """A deployed contract, its Ledger, named funded keys, and helpers for an epoch's moves.

    Attributes:
        driver: the backend-specific object (see the module docstring).
        backend_name: ``embedded``, ``devnet``, ...
        ledger: a Ledger whose transactions are fee-recorded.
        spec: the run spec the contract was deployed with.
    """

    def __init__(self, driver: Any) -> None:
        self.driver = driver
        self.backend_name: str = driver.backend_name
        self.spec: RunSpec = driver.spec
        self.keys: dict[str, PrivateKey] = dict(driver.keys)
        # Addresses once: deriving one (an eth key's keccak of its point) is a good part of a
        # property test's time when done on every lookup.
        self._addresses = {name: key.address() for name, key in self.keys.items()}
        self._names = {address: name for name, address in self._addresses.items()}
        self.recorder = MeteredBackend(driver.ledger.backend)
        self.ledger = Ledger(self.recorder)
        self.denom = self.ledger.denom
        self.address = self.ledger.contract_address
        # The trap set each host commits to (an auditor's; the empty set by default).
        self.traps: dict[str, list[int]] = {}
        # The probe (spec's verification.probe_windows > 0): the gain each validator's verdict on a
        # host's last segment carries (GAIN_MICRO unless named here), and the segments each host
        # committed per epoch (which segment is its last).
        self.gains: dict[str, int] = {}
        # A gain dispute's votes (final votes and the seats' re-votes) carry two gains: the main
        # windows' (GAIN_MICRO unless named in revote_gains) and the dispute windows'
        # (DISPUTE_GAIN_MICRO unless named in dispute_gains; None: a vote without one).
        self.revote_gains: dict[str, int] = {}
        self.dispute_gains: dict[str, int | None] = {}
        self.committed_segments: dict[tuple[str, int], int] = {}
        # Verdict openings committed: (validator, host address, segment, epoch) -> opening.
        self.openings: dict[tuple[str, str, int, int], VerdictOpening] = {}
        self.revotes: dict[tuple[str, str, int, int], VerdictOpening] = {}
        self.revote: Callable[[str, Challenge], Vote | None] | None = None
        """An objecting seat's re-vote in ``dispute`` (``Challenge.round`` = ``REVOTE_ROUND``): after
        a round-0 ``fail`` always that ``fail`` again (the contract keeps it); else this callback's
        vote, or by default its round-0 verdict again (what a seat that learnt nothing new says)."""
        # Every advance `settle` sent to run a paged close (their gas is what a page costs).
        self.pages: list[TxResult] = []
        # The compute-profile class each name declares when it joins ("" unless set).
        self.classes: dict[str, str] = {}

    # -- names ---------------------------------------------------------------------------------

    def key(self, name: str) -> PrivateKey:
        return self.keys[name]

    def addr(self, name: str) -> str:
        return self._addresses[name]

    def name_of(self, address: str) -> str:
        return self._names[address]

    def names(self, prefix: str) -> list[str]:
        return [n for n in self.keys if n.startswith(prefix)]

    @staticmethod
    def role_of(name: str) -> str:
        return "validator" if name.startswith("validator") else "host"

    # -- blocks --------------------------------------------------------------------------------

    def height(self) -> int:
        return self.ledger.height()

    def mine(self, blocks: int = 1) -> int:
        """Let ``blocks`` blocks pass (the embedded chain makes them; a real chain waits)."""
        return self.driver.advance_blocks(blocks)

    def wait_until(self, height: int) -> int:
        """Return once the chain is at ``height`` or beyond."""
        if self.height() < height:
            self.mine(height - self.height())
        return self.height()

    def wait_past_deadline(self, epoch: int | None = None) -> int:
        """Wait until the current phase's deadline has been reached, so that the next
        transaction closes it (the next block is past it)."""
        return self.wait_until(self.ledger.epoch(epoch).phase_deadline)

    def close_phase(self, by: str = "operator") -> TxResult:
        """Wait out the current phase and close it with ``advance`` (then run a close that takes
        several transactions to its end; returns the first advance)."""
        self.wait_past_deadline()
        result = self.advance(by)
        self.settle(by)
        return result

    def settle(self, by: str = "operator") -> list[TxResult]:
        """Run a close in progress page by page to its end (``Ledger.settle``), checking after
        every page that the contract holds exactly what its books say: funds are conserved at
        every page boundary. Returns the advances sent."""
        sent: list[TxResult] = []
        while self.ledger.closing():
            assert len(sent) < 10_000, f"the close does not end: {self.epoch()}"
            sent.append(self.advance(by))
            self.assert_books()
            self.pages.append(sent[-1])
        return sent

    # -- writes --------------------------------------------------------------------------------

    def bond(self, name: str, amount: int | None = None, role: str | None = None,
             endpoint: str = ENDPOINT) -> TxResult:
        role = role or self.role_of(name)
        if amount is None:
            amount = HOST_STAKE if role == "host" else VALIDATOR_STAKE
        return self.ledger.bond(self.key(name), role, endpoint, amount)  # type: ignore[arg-type]

    def unbond(self, name: str, amount: int) -> TxResult:
        return self.ledger.unbond(self.key(name), amount)

    def claim(self, name: str) -> TxResult:
        return self.ledger.claim(self.key(name))

    def fund_rewards(self, amount: int, name: str = "funder") -> TxResult:
        return self.ledger.fund_rewards(self.key(name), amount)

    def secret(self, name: str, epoch: int) -> bytes:
        return hashlib.sha256(f"secret:{name}:{epoch}".encode()).digest()

    def current(self) -> int:
        return self.ledger.epoch().epoch

    def join(self, name: str, epoch: int | None = None, beacon: str | None = None) -> TxResult:
        epoch = self.current() if epoch is None else epoch
        if beacon is None:
            beacon = beacon_commit(self.addr(name), epoch, self.secret(name, epoch)).hex()
        return self.ledger.join(self.key(name), BeaconJoin(epoch=epoch, beacon_commit=beacon,
                                                           compute_class=self.classes.get(name, "")))

    def commitment(self, name: str, epoch: int, **fields: Any) -> Commitment:
        values = {"epoch": epoch, "checkpoint_root": digest(f"root:{name}:{epoch}"),
                  "delta_hash": digest(f"delta:{name}:{epoch}"), "loss_digest": digest(f"loss:{name}:{epoch}"),
                  "segments": self.spec.train.segments, "train_loss_micro": 2_500_000, **fields}
        return Commitment(**values)

    def trap_opening(self, name: str, epoch: int) -> TrapOpening:
        """``name``'s trap set of ``epoch`` (``self.traps``, empty by default) with its salt."""
        salt = hashlib.sha256(f"trap-salt:{name}:{epoch}".encode()).hexdigest()
        return TrapOpening(epoch=epoch, segments=self.traps.get(name, []), salt=salt)

    def commit(self, name: str, epoch: int | None = None, trap_commit: str | None = None, **fields: Any) -> TxResult:
        epoch = self.current() if epoch is None else epoch
        if trap_commit is None:
            trap_commit = self.trap_opening(name, epoch).commitment(self.addr(name))
        commitment = self.commitment(name, epoch, **fields)
        self.committed_segments[self.addr(name), epoch] = commitment.segments
        return self.ledger.commit(self.key(name), commitment, trap_commit)

    def open_traps(self, name: str, epoch: int | None = None, segments: list[int] | None = None) -> TxResult:
        """Open ``name``'s trap commitment (``segments`` to open another set than the committed one)."""
        epoch = self.current() if epoch is None else epoch
        opening = self.trap_opening(name, epoch)
        if segments is not None:
            opening = opening.model_copy(update={"segments": segments})
        return self.ledger.reveal_traps(self.key(name), opening)

    def reveal(self, name: str, epoch: int | None = None, secret: bytes | None = None) -> TxResult:
        epoch = self.current() if epoch is None else epoch
        secret = self.secret(name, epoch) if secret is None else secret
        return self.ledger.reveal(self.key(name), BeaconReveal(epoch=epoch, secret=secret.hex()))

    def opening(self, name: str, host: str, segment: int, outcome: str = "pass", *,
                distance: str = "0.001", epoch: int | None = None, dispute: bool = False) -> VerdictOpening:
        """``name``'s verdict on (``host``, ``segment``) with a deterministic salt; ``host`` is a
        name or an address. The evidence depends only on what was found (honest replays are
        bitwise equal, so their evidence is too); on the host's last segment with the probe on it
        carries ``name``'s probe gain (:attr:`gains`, :data:`GAIN_MICRO` by default; ``dispute``: a
        gain dispute's deciding vote, :attr:`revote_gains` and :attr:`dispute_gains`, by default
        :data:`GAIN_MICRO` and :data:`DISPUTE_GAIN_MICRO`)."""
        epoch = self.current() if epoch is None else epoch
        host_address = self.addr(host) if host in self.keys else host
        salt = hashlib.sha256(f"verdict-salt:{name}:{host_address}:{segment}:{epoch}:{outcome}:{dispute}".encode()
                              ).hexdigest()
        last = self.committed_segments.get((host_address, epoch), self.spec.train.segments) - 1
        probed = self.spec.verification.probe_windows > 0 and outcome != "unavailable" and segment == last
        gain = self.revote_gains.get(name, GAIN_MICRO) if dispute else self.gains.get(name, GAIN_MICRO)
        dispute_gain = self.dispute_gains.get(name, DISPUTE_GAIN_MICRO) if dispute else None
        # Validated like any message from outside: the tests' outcomes and distances are plain strings.
        return VerdictOpening.model_validate({
            "epoch": epoch, "host": host_address, "segment": segment, "outcome": outcome, "distance": distance,
            "evidence": digest(f"evidence:{host_address}:{segment}:{outcome}:{distance}"), "salt": salt,
            "gain_micro": gain if probed else None, "dispute_gain_micro": dispute_gain if probed else None})

    def commit_verdict(self, name: str, host: str, segment: int, outcome: str = "pass", *,
                       distance: str = "0.001", epoch: int | None = None, revote: bool = False,
                       dispute: bool = False) -> TxResult:
        """Commit to a verdict (kept for :meth:`reveal_verdict`); ``host`` is a name or an address;
        ``revote``: a round-0 seat's re-vote in ``dispute`` (kept apart); ``dispute``: a vote of a
        gain dispute (its gain the dispute windows')."""
        opening = self.opening(name, host, segment, outcome, distance=distance, epoch=epoch, dispute=dispute)
        (self.revotes if revote else self.openings)[name, opening.host, segment, opening.epoch] = opening
        msg = VerdictCommit(epoch=opening.epoch, host=opening.host, segment=segment,
                            commitment=opening.commitment(self.addr(name)))
        return self.ledger.commit_verdict(self.key(name), msg)

    def reveal_verdict(self, name: str, host: str, segment: int, *, epoch: int | None = None,
                       revote: bool = False) -> TxResult:
        """Open the verdict ``name`` committed on (``host``, ``segment``) (its re-vote with ``revote``)."""
        epoch = self.current() if epoch is None else epoch
        host_address = self.addr(host) if host in self.keys else host
        kept = (self.revotes if revote else self.openings)[name, host_address, segment, epoch]
        return self.ledger.reveal_verdict(self.key(name), kept)

    def propose(self, name: str, model_hash: str, epoch: int | None = None,
                val_loss_micro: int = 2_000_000, excluded: Sequence[str] = ()) -> TxResult:
        """``name`` proposes ``model_hash``, excluding the hosts named in ``excluded``."""
        epoch = self.current() if epoch is None else epoch
        msg = ModelProposal(epoch=epoch, model_hash=model_hash, val_loss_micro=val_loss_micro,
                            excluded=sorted(self.addr(n) for n in excluded))
        return self.ledger.propose_model(self.key(name), msg)

    def advance(self, name: str = "operator") -> TxResult:
        return self.ledger.advance(self.key(name))

    def raw(self, name: str, msg: dict[str, Any], funds: int = 0) -> TxResult:
        """A raw JSON execute through the Ledger's backend (for malformed messages)."""
        return self.ledger.backend.execute(self.key(name), msg, funds)

    def execute_coins(self, name: str, msg: Mapping[str, Any], funds: Mapping[str, int]) -> TxResult:
        """A raw execute with coins of any denom (e.g. to test refusals of foreign coins)."""
        return self.driver.execute(name, msg, dict(funds))

    def deploy(self, msg: Mapping[str, Any]) -> str:
        """Instantiate another contract of the same code (raises ContractError if refused)."""
        return self.driver.deploy(msg)

    def instantiate_msg(self, spec: RunSpec | None = None, **overrides: Any) -> dict[str, Any]:
        from chain.ledger import instantiate_msg

        msg = instantiate_msg(spec or self.spec, INITIAL_MODEL_HASH, self.addr("treasury"))
        msg.update(overrides)
        return msg

    # -- reads ---------------------------------------------------------------------------------

    def epoch(self, epoch: int | None = None) -> EpochInfo:
        return self.ledger.epoch(epoch)

    def compute_class(self, name: str, epoch: int | None = None) -> ComputeClassStatus:
        """The standing of the class ``name`` declares (``self.classes``) in ``epoch``."""
        return self.ledger.compute_class(self.classes.get(name, ""), epoch)

    def report(self, epoch: int | None = None) -> EpochReport:
        return self.ledger.report(self.current() if epoch is None else epoch)

    def challenges(self, name: str, epoch: int | None = None) -> list[Challenge]:
        return self.ledger.challenges(self.current() if epoch is None else epoch, self.addr(name))

    def member(self, name: str) -> Any:
        return self.ledger.member(self.addr(name))

    def balance(self, name_or_address: str) -> int:
        address = self.addr(name_or_address) if name_or_address in self.keys else name_or_address
        return self.ledger.balance(address)

    def net_balance(self, name: str) -> int:
        """``name``'s balance plus the fees it paid through this env's Ledger: what it would hold
        on a chain without fees (so payouts can be asserted exactly on every backend)."""
        return self.balance(name) + self.recorder.fees_by.get(self.addr(name), 0)

    def accounting(self) -> dict[str, int]:
        a = self.ledger.accounting()
        return {"bonded": int(a.bonded), "unbonding": int(a.unbonding), "reward_pool": int(a.reward_pool)}

    def holdings(self) -> int:
        return sum(self.accounting().values())

    @property
    def fees_paid(self) -> int:
        return self.recorder.fees_paid + int(getattr(self.driver, "fees_paid", 0) or 0)

    def total_funds(self) -> int:
        """Balances of every named key plus the contract plus fees paid: constant while coins
        only move among them."""
        return sum(self.balance(a) for a in self.keys) + self.balance(self.address) + self.fees_paid

    def assert_books(self) -> None:
        """The contract holds exactly what its accounting says it owes."""
        assert self.balance(self.address) == self.holdings(), (self.balance(self.address), self.accounting())

    # -- an epoch, played ------------------------------------------------------------------------

    def bond_all(self, names: Iterable[str]) -> None:
        for name in names:
            self.bond(name)

    def play_epoch(
        self,
        hosts: Sequence[str],
        validators: Sequence[str],
        *,
        commit: Iterable[str] | None = None,
        reveal: Iterable[str] | None = None,
        vote: Callable[[str, Challenge], Vote | None] | None = None,
        open_verdict: Callable[[str, Challenge], bool] | None = None,
        open_traps: Iterable[str] | None = None,
        propose: Callable[[str], str | None] | None = None,
        stop_after: str | None = None,
    ) -> int:
        """Play the current epoch with these participants (already bonded) from whatever phase it
        is in, waiting out any phase that does not close early. Returns the epoch number.

        Args:
            commit / reveal: who commits / reveals (default: every host / everyone).
            vote: ``vote(validator, challenge)`` -> ``pass``/``fail``/``unavailable``, or None to
                stay silent (default: pass); asked for round-0 seats and the final vote
                (``challenge.round`` tells which). Seats object to what they did not pass.
            open_verdict: ``open_verdict(validator, challenge)`` -> whether to open a committed
                verdict (default: always).
            open_traps: the hosts that open their trap commitment (default: every host).
            propose: ``propose(host)`` -> a model hash, or None to stay silent (default: every
                accepted host proposes the same hash).
            stop_after: a phase name; return once the epoch has left it (``join``, ``train``,
                ``reveal``; ``verify`` returns once every verdict round is over).
        """
        e = self.current()
        # Each step acts only if the epoch is in its phase, so a partly played epoch resumes.
        if self.epoch(e).phase == "join":
            for name in [*hosts, *validators]:
                self.join(name, e)
            self._leave("join", e)
        if stop_after == "join":
            return e
        if self.epoch(e).phase == "train":
            for name in hosts if commit is None else commit:
                self.commit(name, e)
            self._leave("train", e)
        if stop_after == "train":
            return e
        if self.epoch(e).phase == "reveal":
            for name in [*hosts, *validators] if reveal is None else reveal:
                self.reveal(name, e)
            self._leave("reveal", e)
        if self.epoch(e).phase == "delay":  # verification.delay_squarings > 0
            self.post_delayed_seed(e)
            self._leave("delay", e)
        if stop_after == "reveal":
            return e
        openers = list(hosts if open_traps is None else open_traps)
        for _ in range(6):
            info = self.epoch(e)
            if info.phase in VERDICT_COMMIT_PHASES:
                self.commit_round(validators, vote, e)
            elif info.phase == "objection":
                self.objection_round(validators, openers, e)
            elif info.phase in VERDICT_REVEAL_PHASES:
                self.reveal_round(validators, open_verdict, openers, e)
            else:
                break
            self._leave(info.phase, e)
        if stop_after == "verify":
            return e
        if self.epoch(e).phase == "propose":
            next_hash = digest(f"theta:{e + 1}")
            proposed = {h.address for h in self.report(e).hosts if h.proposal is not None}
            for address in self.epoch(e).accepted:
                name = self.name_of(address)
                model = next_hash if propose is None else propose(name)
                if model is not None and address not in proposed and self.epoch(e).phase == "propose":
                    self.propose(name, model, e)
            self._leave("propose", e)
        return e

    def delayed_seed_output(self, epoch: int) -> DelayedSeedOutput:
        """The VDF output over ``epoch``'s seed and its proof, as a validator computes it."""
        info = self.epoch(epoch)
        assert info.seed is not None, info
        return delayed_seed_output(epoch, bytes.fromhex(info.seed), self.spec.verification.delay_squarings)

    def post_delayed_seed(self, epoch: int, name: str = "operator") -> TxResult:
        """Phase ``delay``: ``name`` (anyone) posts the VDF output over the epoch seed."""
        return self.ledger.delayed_seed(self.key(name), self.delayed_seed_output(epoch))

    def round_challenges(self, name: str, epoch: int) -> list[Challenge]:
        """``name``'s challenges the current phase waits for it on (``Challenge.due``)."""
        return [c for c in self.challenges(name, epoch) if c.due]

    def commit_round(self, validators: Sequence[str], vote: Callable[[str, Challenge], Vote | None] | None,
                     epoch: int) -> TxResult | None:
        """Every validator commits to its verdicts due now (``vote`` decides); returns the last
        transaction. The phase is checked once per validator (a query costs about as much as a
        transaction on the embedded chain)."""
        last = None
        for name in validators:
            if self.epoch(epoch).phase not in VERDICT_COMMIT_PHASES:
                return last
            for challenge in self.round_challenges(name, epoch):
                if challenge.committed:
                    continue
                revote = challenge.round == REVOTE_ROUND
                decided = self._revote(name, challenge, epoch) if revote else (
                    "pass" if vote is None else vote(name, challenge))
                if decided is None:
                    continue
                dispute = challenge.gain_dispute and challenge.round != 0
                # A vote is an outcome, or (outcome, distance) for one reached another way than
                # the honest replay (its distance, so its evidence, differ from the honest group's).
                if isinstance(decided, tuple):
                    outcome, distance = decided
                    last = self.commit_verdict(name, challenge.host, challenge.segment, outcome,
                                               distance=distance, epoch=epoch, revote=revote, dispute=dispute)
                else:
                    last = self.commit_verdict(name, challenge.host, challenge.segment, decided, epoch=epoch,
                                               revote=revote, dispute=dispute)
        return last

    def _revote(self, name: str, challenge: Challenge, epoch: int) -> Vote | None:
        """``name``'s re-vote on ``challenge`` (:attr:`revote`)."""
        first = self.openings.get((name, challenge.host, challenge.segment, epoch))
        if first is None:
            return None
        if first.outcome == "fail" or self.revote is None:
            return first.outcome, str(first.distance)
        return self.revote(name, challenge)

    def ready(self, name: str, epoch: int | None = None, objections: Sequence[tuple[str, int]] | None = None
              ) -> TxResult:
        """``name``'s ``ready``: by default its committed round-0 seats whose kept verdict is not
        ``pass`` (``objections`` as (host name or address, segment) to send others), in as many
        messages as ``Ready.pages`` makes; the last one's result."""
        epoch = self.current() if epoch is None else epoch
        if objections is None:
            pairs = []
            for c in self.challenges(name, epoch):
                kept = self.openings.get((name, c.host, c.segment, epoch))
                if c.round == 0 and c.committed and (kept is None or kept.outcome != "pass"):
                    pairs.append((c.host, c.segment))
        else:
            pairs = [(self.addr(h) if h in self.keys else h, g) for h, g in objections]
        pages = Ready.pages(epoch, [Objection(host=h, segment=g) for h, g in pairs])
        for msg in pages[:-1]:  # more than MAX_OBJECTIONS_PER_READY: full pages first
            self.ledger.ready(self.key(name), msg)
        return self.ledger.ready(self.key(name), pages[-1])

    def objection_round(self, validators: Sequence[str], openers: Sequence[str], epoch: int,
                        ready: Callable[[str], bool] | None = None) -> TxResult | None:
        """Every seated validator sends its ``ready`` (unless ``ready(name)`` says not), the hosts
        in ``openers`` open their trap commitments. Returns the last transaction."""
        last = None
        for name in validators:
            status = self.ledger.participant(self.addr(name), epoch)
            if status.phase != "objection":
                return last
            if status.ready_due and (ready is None or ready(name)):
                last = self.ready(name, epoch)
        for name in openers:
            status = self.ledger.participant(self.addr(name), epoch)
            if status.phase != "objection":
                return last
            if status.challenged and not status.traps_opened:
                last = self.open_traps(name, epoch)
        return last

    def reveal_round(self, validators: Sequence[str], open_verdict: Callable[[str, Challenge], bool] | None,
                     openers: Sequence[str], epoch: int) -> TxResult | None:
        """Every validator opens its verdicts due now (in ``verdict_reveal`` only its ``pass``
        verdicts: the others were objected to). Returns the last transaction."""
        last = None
        for name in validators:
            phase = self.epoch(epoch).phase
            if phase not in VERDICT_REVEAL_PHASES:
                return last
            for challenge in self.round_challenges(name, epoch):
                if not challenge.committed or challenge.revealed:
                    continue
                revote = challenge.round == REVOTE_ROUND
                kept = (self.revotes if revote else self.openings).get((name, challenge.host, challenge.segment,
                                                                        epoch))
                if kept is None or (phase == "verdict_reveal" and kept.outcome != "pass"):
                    continue
                if open_verdict is None or open_verdict(name, challenge):
                    last = self.reveal_verdict(name, challenge.host, challenge.segment, epoch=epoch, revote=revote)
        return last

    def play_rounds(self, hosts: Sequence[str], validators: Sequence[str], *,
                    vote: Callable[[str, Challenge], Vote | None] | None = None) -> TxResult | None:
        """Play every verdict round of the current epoch; returns the transaction that closed the
        last one (the one that finalized the epoch)."""
        e = self.current()
        last = None
        while (phase_now := self.epoch(e).phase) in (*VERDICT_COMMIT_PHASES, "objection", *VERDICT_REVEAL_PHASES):
            if phase_now in VERDICT_COMMIT_PHASES:
                last = self.commit_round(validators, vote, e)
            elif phase_now == "objection":
                last = self.objection_round(validators, hosts, e)
            else:
                last = self.reveal_round(validators, None, hosts, e)
            if self.epoch(e).phase == phase_now:
                last = self.close_phase()
        return last

    def _leave(self, phase: str, epoch: int) -> None:
        """Return once ``epoch`` is past ``phase``; wait out the deadline if it did not close
        early (the join phase may need its deadline when not every eligible member joined). A
        phase is closed by the transaction after its deadline and the next one counts its window
        from there, so waiting out one phase never closes the next."""
        for _ in range(3):
            self.settle()
            info = self.epoch(epoch)
            if info.phase != phase:
                return
            self.wait_past_deadline(epoch)
            with contextlib.suppress(ContractError):
                self.advance()
            self.settle()
        raise AssertionError(f"epoch {epoch} is stuck in phase {phase}: {self.epoch(epoch)}")
