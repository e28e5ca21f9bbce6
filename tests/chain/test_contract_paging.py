"""Closes that run page by page (``docs/contract.md``, "Limits"): closing ``reveal`` (the seed,
then outcomes and challenges) and finalize (outcomes, slashes, rewards) process at most
``settle_page`` records per transaction. On each backend, the same epoch settled with pages of two
records and in one transaction ends the same to the last unit (report, members, books, what every
account received), the contract's books balance after every page, and while a close runs its
phase reads as due, refuses its own messages and names the stage. A validator's challenges read
page by page equal them read at once.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import bech32
import pytest
from ledger_env import DEFAULT_NAMES, VALIDATOR_STAKE, LedgerEnv, make_spec

from chain.ledger import ContractBackend, ContractError, Ledger, LedgerError
from protocol.rules.limits import REPORT_PAGE
from protocol.views import Challenge

HOSTS = ("host1", "host2", "host3", "host4")
# Windows wide enough for a dozen sequential transactions per phase on a loaded devnet.
SPEC = make_spec(reward_per_epoch="1000",
                 phases={"join_blocks": 150, "train_blocks": 60, "reveal_blocks": 80, "verify_blocks": 80,
                         "verdict_reveal_blocks": 80, "propose_blocks": 60})
VALIDATORS = ("validator1", "validator2", "validator3", "validator4", "validator5")


def play_mixed_epoch(env: LedgerEnv) -> int:
    """One epoch with most outcomes: host1 trained nothing (its segments fail), host2 never
    commits (absent; its first miss, so excused), host3 sets a trap on segment 1 (a valid one: it
    stays accepted), host4 is honest; validator1 passes everything without replaying (wrong),
    validator2 stays silent, validator5 never reveals (no_reveal), validator3 and validator4 are
    honest. validator3 holds
    more than 2/3 of the validators' stake, so it picks for every host on every backend (the
    others together never hold the 1/3 that ends the draw) and the final vote follows it."""
    env.bond_all([*HOSTS, *VALIDATORS])
    env.bond("validator3", 9 * VALIDATOR_STAKE)
    env.fund_rewards(10_000)
    env.traps = {"host3": [1]}

    def vote(validator: str, challenge: Challenge) -> str | None:
        host = env.name_of(challenge.host)
        bad = host == "host1" or (host == "host3" and challenge.segment in env.traps["host3"])
        return {"validator1": "pass", "validator2": None}.get(validator, "fail" if bad else "pass")

    return env.play_epoch(HOSTS, VALIDATORS, commit=["host1", "host3", "host4"],
                          reveal=[n for n in (*HOSTS, *VALIDATORS) if n != "validator5"], vote=vote)


def settled(env: LedgerEnv, epoch: int) -> dict[str, Any]:
    """What the epoch settled, by name, without heights (a paged close takes more blocks)."""
    report = env.report(epoch).model_dump(exclude={"phase_deadline", "started_at"})

    def named(text: Any) -> Any:
        if isinstance(text, str) and text in addresses:
            return addresses[text]
        if isinstance(text, list):
            return [named(t) for t in text]
        if isinstance(text, dict):
            return {k: named(v) for k, v in text.items()}
        return text

    addresses = {env.addr(n): n for n in env.keys}
    members = {n: env.member(n).model_dump(exclude={"address"}) for n in (*HOSTS, *VALIDATORS)}
    # Seeds, committees and outcomes depend on addresses, which differ between contracts on a
    # devnet (fresh keys per deployment): compare by name, and compare what does not depend on
    # the draw exactly.
    return {"report": named(report), "members": members, "books": env.accounting(),
            "received": {n: env.net_balance(n) for n in ("treasury", *HOSTS, *VALIDATORS)},
            "next": env.epoch(epoch + 1).model_hash}


def test_a_paged_settlement_ends_exactly_like_the_one_shot_settlement(make_ledger_env) -> None:
    one_shot = make_ledger_env(SPEC)
    paged = make_ledger_env(SPEC, settle_page=2)

    def play(env: LedgerEnv) -> dict[str, Any]:
        return settled(env, play_mixed_epoch(env))

    if one_shot.backend_name == "embedded":
        results = [play(one_shot), play(paged)]
    else:
        # Two contracts with their own accounts: on a chain whose blocks come by themselves they are
        # played side by side, their transactions in the same blocks, instead of one after the other.
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(play, (one_shot, paged)))
    assert one_shot.pages == [], "9 participants fit the default page: nothing left for advance"
    # Closing reveal: 8 reveals + 9 participants; closing objection, verdict_reveal and
    # dispute_reveal: 3 challenged hosts each; finalize: 3 × 9 participants; 2 a page, the first
    # page of each close in the transaction that starts it.
    assert (8 + 9 + 2 * 3 + 3 * 9) // 2 - 5 <= len(paged.pages) <= (8 + 9 + 3 * 3 + 3 * 9) // 2
    a, b = results
    if one_shot.backend_name == "embedded":
        # Same keys on both embedded chains: the same seed, the same draws, the same everything.
        assert a == b
    else:
        # Fresh keys per devnet contract: seeds and pickers differ, so the validators' seats
        # do (and with them their catcher shares); the hosts' outcomes, slashes and rewards
        # (k = 1 of S = 2: both segments are challenged, validator3 picks for every host) do not.
        def hosts(r: dict[str, Any]) -> dict[str, tuple]:
            return {h["address"]: (h["outcome"], h["slashed"], h["reward"]) for h in r["report"]["hosts"]}

        assert hosts(a) == hosts(b)
    assert int(b["report"]["rewards_total"]) > 0 and int(b["report"]["slashed_total"]) > 0
    outcomes = {h["address"]: h["outcome"] for h in b["report"]["hosts"]}
    # No `audit` any more: a valid trap (decided fail within [tau, trap_max_distance]) keeps its
    # host accepted, and its challenge went to the final vote like any objected one.
    assert outcomes == {"host1": "invalid", "host2": "absent_excused", "host3": "accepted", "host4": "accepted"}
    (trap,) = [c for c in b["report"]["challenges"] if (c["host"], c["segment"]) == ("host3", 1)]
    assert (trap["trap"], trap["outcome"], trap["rounds"]) == (True, "fail", 1)
    voters = {v["address"]: v["outcome"] for v in b["report"]["validators"]}
    assert voters["validator1"] == "wrong" and voters["validator2"] == "silent"
    assert voters["validator5"] == "no_reveal"
    for env in (one_shot, paged):
        env.assert_books()
    check_report_pages(paged, int(b["report"]["epoch"]))


def check_report_pages(env: LedgerEnv, epoch: int) -> None:
    """The report read a participant a page equals it read in the default pages (the same hosts,
    validators with their counts summed over the pages, challenges), and bad paging is refused."""
    raw: list[dict[str, Any]] = []
    cursor: dict[str, Any] = {"start_after": None}
    while True:
        raw.append(env.ledger.backend.query({"report": {"epoch": epoch, **cursor, "limit": 1}}))
        cursor = {"start_after": raw[-1].get("next")}
        if raw[-1].get("next_segment") is not None:
            cursor["start_segment"] = raw[-1]["next_segment"]  # inside a host (contract 0.3.3)
        if cursor["start_after"] is None:
            break
    # 9 participants a page each; a challenged host bounds more than one unit, so its challenges
    # after the first go on pages of their own.
    inside = sum(1 for p in raw if p.get("next_segment") is not None)
    assert inside > 0 and len(raw) == len(HOSTS) + len(VALIDATORS) + inside
    assert sum(len(p["challenges"]) for p in raw) > 0 and all("counts" in p for p in raw)
    whole = env.report(epoch)
    assert env.ledger.report(epoch, page=1) == whole
    assert sum(v.assigned for v in whole.validators) == sum(len(c.votes) for c in whole.challenges)
    for page in (0, REPORT_PAGE + 1):
        with pytest.raises(ContractError, match=f"report: limit must be between 1 and {REPORT_PAGE}, got {page}"):
            env.ledger.backend.query({"report": {"epoch": epoch, "limit": page}})
        with pytest.raises(ValueError, match=f"a report page is between 1 and {REPORT_PAGE} units, got {page}"):
            env.ledger.report(epoch, page=page)


def test_while_a_close_runs_its_phase_is_due_refuses_its_messages_and_names_its_stage(make_ledger_env) -> None:
    env = make_ledger_env(SPEC, settle_page=1)
    env.bond_all([*HOSTS[:2], *VALIDATORS[:3]])
    e = env.play_epoch(HOSTS[:2], VALIDATORS[:3], reveal=[*HOSTS[:2], *VALIDATORS[:2]], stop_after="train")
    for name in (*HOSTS[:2], *VALIDATORS[:2]):
        env.reveal(name, e)
    env.wait_past_deadline()
    first = env.advance()
    info = env.epoch()
    # One reveal hashed into the seed: no seed yet, the phase is still reveal and due.
    assert (info.phase, info.closing, info.seed) == ("reveal", "seed", None)
    assert info.phase_deadline <= env.height() and info.phase_deadline <= first.height
    with pytest.raises(ContractError, match=r"reveal: epoch \d+ is closing phase reveal page by page; send advance"):
        env.reveal("validator3", e)
    env.assert_books()
    pages = env.settle()
    # 4 reveals and 5 participants, one a transaction, the first in the advance above.
    assert len(pages) == 4 + 5 - 1
    info = env.epoch()
    assert (info.phase, info.closing) == ("verify", None) and info.seed is not None
    assert {v.address: v.outcome for v in env.report(e).validators}[env.addr("validator3")] == "no_reveal"
    with pytest.raises(ContractError, match="nothing is due"):
        env.advance()


def test_settle_page_must_be_positive(embedded_env: LedgerEnv) -> None:
    with pytest.raises(ContractError, match="settle_page must be at least 1"):
        embedded_env.deploy(embedded_env.instantiate_msg(settle_page=0))
    with pytest.raises(ValueError, match="settle_page must be at least 1"):
        from chain.ledger import instantiate_msg

        instantiate_msg(embedded_env.spec, "0" * 64, embedded_env.addr("treasury"), settle_page=0)


def test_a_validators_challenges_read_in_pages_equal_them_read_at_once(make_ledger_env) -> None:
    # At 1,024 hosts one `challenges` query ran out of a node's query gas (docs/benchmarks.md,
    # "Paged settlement"); pages scan at most `limit` challenged hosts and say where the next starts.
    env = make_ledger_env(SPEC)
    env.bond_all([*HOSTS, *VALIDATORS])
    e = env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    assert env.epoch(e).phase == "verify"
    ledger = env.ledger
    for validator in VALIDATORS:
        whole = ledger.challenges(e, env.addr(validator))
        for limit in (1, 2, 3):
            pages, start, cursors = [], None, []
            while True:
                answer = ledger.backend.query({"challenges": {"epoch": e, "validator": env.addr(validator),
                                                              "start_after": start, "limit": limit}})
                pages += [Challenge.model_validate(c) for c in answer["challenges"]]
                if answer.get("next") is None:
                    break
                start = answer["next"]
                cursors.append(start)
            assert pages == whole and cursors == sorted(set(cursors)), (validator, limit)
            assert len(cursors) == (len({c.host for c in env.report(e).challenges}) - 1) // limit
    seats = sum(len([v for v in c.votes if v.round == 0]) for c in env.report(e).challenges)
    assert sum(len(ledger.challenges(e, env.addr(v))) for v in VALIDATORS) == seats > 0
    too_long = {"epoch": e, "validator": env.addr("validator1"), "start_after": "x" * 300}
    with pytest.raises(ContractError, match="start_after is longer than an address"):
        ledger.backend.query({"challenges": too_long})


class StuckCursorNode(ContractBackend):
    """A node (or an RPC proxy in front of one) that answers every ``challenges`` page, and every
    ``report`` page after the first, with a cursor that does not move on: a validator or an
    operator that follows it would read forever."""

    def __init__(self, backend: ContractBackend) -> None:
        self.inner = backend

    denom = property(lambda self: self.inner.denom)
    contract_address = property(lambda self: self.inner.contract_address)

    def execute(self, key, msg, funds=0):
        return self.inner.execute(key, msg, funds)

    def query(self, msg):
        answer = self.inner.query(msg)
        if "challenges" in msg:
            answer = {**answer, "next": msg["challenges"]["start_after"] or "inj1"}
        if "report" in msg and msg["report"].get("start_after"):
            answer = {**answer, "next": msg["report"]["start_after"]}
        return answer

    def height(self):
        return self.inner.height()

    def balance(self, address):
        return self.inner.balance(address)

    def wait_for_height(self, height, timeout=60.0):
        return self.inner.wait_for_height(height, timeout)

    def raw(self, key):
        return self.inner.raw(key)


class LandsBetweenPagesNode(StuckCursorNode):
    """A real node on which a transaction (``land``) lands right after the first ``report`` page that
    has more to follow, once: the pages read before and after it show two states of the epoch."""

    def __init__(self, backend: ContractBackend, land: Callable[[], object]) -> None:
        super().__init__(backend)
        self.land: Callable[[], object] | None = land

    def query(self, msg):
        answer = self.inner.query(msg)
        if "report" in msg and answer.get("next") and self.land is not None:
            land, self.land = self.land, None
            land()
        return answer


def test_a_challenges_or_report_cursor_that_does_not_advance_is_refused(embedded_ledger_driver) -> None:
    # A lying or broken node must not keep a validator's daemon paging forever: the second page's
    # cursor equals the first's, and the read stops with a clear error.
    env = LedgerEnv(embedded_ledger_driver(SPEC, DEFAULT_NAMES))
    env.bond_all([*HOSTS, *VALIDATORS])
    e = env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    assert env.ledger.challenges(e, env.addr("validator1"))  # the honest node's answer reads fine
    with pytest.raises(LedgerError, match="a challenges page ends at 'inj1'"):
        Ledger(StuckCursorNode(env.ledger.backend)).challenges(e, env.addr("validator1"))
    # The same for the report's pages (a participant a page here; a challenged host, bounding more
    # than one unit, is split over pages from 0.3.3, so the stuck cursor names a host the page did
    # not stop inside).
    with pytest.raises(LedgerError, match=r"a report page (ends at|stops inside) 'inj1"):
        Ledger(StuckCursorNode(env.ledger.backend)).report(e, page=1)
    # A transaction that moves the epoch on between two pages (its phase closes at its deadline):
    # the report is read again from its first page and shows one state, the new one; with one try
    # the read says so instead of mixing two states.
    assert env.report(e).phase == "verify"

    def close_phase() -> None:
        env.wait_past_deadline()
        env.advance()

    moved = Ledger(LandsBetweenPagesNode(env.ledger.backend, close_phase)).report(e, page=1)
    assert moved.phase == env.epoch(e).phase != "verify"
    assert moved == env.report(e)
    with pytest.raises(LedgerError, match=f"epoch {e} changed while its report was read, in each of 1 tries"):
        Ledger(LandsBetweenPagesNode(env.ledger.backend, close_phase)).report(e, page=1, attempts=1)
    assert env.epoch(e).phase != moved.phase


class StuckInsideHostNode(StuckCursorNode):
    """A node that answers every ``report`` page resumed inside a host (``start_segment``) as
    stopping again where it began (or, with ``last``, as the last page while still naming a
    segment): a reader that follows it would read the same challenges forever, or stop inside."""

    def __init__(self, backend: ContractBackend, last: bool = False) -> None:
        super().__init__(backend)
        self.last = last

    def query(self, msg):
        answer = self.inner.query(msg)
        if "report" in msg and answer.get("next_segment") is not None and self.last:
            return {k: v for k, v in answer.items() if k != "next"}
        if "report" in msg and msg["report"].get("start_segment") is not None:
            answer = {**answer, "next": msg["report"]["start_after"],
                      "next_segment": msg["report"]["start_segment"]}
        return answer


def test_a_report_cursor_inside_a_host_must_move_on(embedded_ledger_driver) -> None:
    # Pages of one unit split every challenged host (contract 0.3.3): a node that keeps the cursor
    # at the same challenge, or ends the report inside a host, is refused, not followed.
    env = LedgerEnv(embedded_ledger_driver(SPEC, DEFAULT_NAMES))
    env.bond_all([*HOSTS, *VALIDATORS])
    e = env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    assert env.ledger.report(e, page=1) == env.report(e)
    with pytest.raises(LedgerError, match="a report page ends at 'inj1"):
        Ledger(StuckInsideHostNode(env.ledger.backend)).report(e, page=1)
    with pytest.raises(LedgerError, match="a last report page with a next segment"):
        Ledger(StuckInsideHostNode(env.ledger.backend, last=True)).report(e, page=1)


class CreepingCursorNode(StuckCursorNode):
    """A node that answers every ``report`` page with nobody on it and a cursor one character past
    the one asked after: it always moves on, so only a bound on the pages stops a reader. It gives
    up itself after ``most`` report queries (a reader without the bound would read forever)."""

    def __init__(self, backend: ContractBackend, most: int = 5000) -> None:
        super().__init__(backend)
        self.asked, self.most = 0, most

    def query(self, msg):
        answer = self.inner.query(msg)
        if "report" in msg:
            self.asked += 1
            if self.asked > self.most:
                raise AssertionError(f"the reader asked for {self.asked} report pages")
            answer = {**answer, "hosts": [], "validators": [], "challenges": [], "counts": [],
                      "next": _address_after(msg["report"]["start_after"])}
        return answer


def _address_after(address: str | None) -> str:
    """A valid bech32 address that sorts just after ``address`` (its 32 data characters read as
    one number in the charset's ASCII order, plus one; 20 bytes are 32 characters, no padding)."""
    digits = sorted(bech32.CHARSET)
    hrp, words = bech32.bech32_decode(address) if address is not None else ("inj", [0] * 32)
    assert hrp is not None and words is not None
    places = [digits.index(bech32.CHARSET[w]) for w in words]
    for i in reversed(range(len(places))):
        places[i] = (places[i] + 1) % 32
        if places[i]:
            break
    return bech32.bech32_encode(hrp, [bech32.CHARSET.index(digits[p]) for p in places])


def test_a_report_cursor_that_creeps_on_over_empty_pages_is_refused(embedded_ledger_driver) -> None:
    # Every cursor is past the one before, yet no page lists anyone: the read stops at the first
    # such page instead of paging (and holding pages) without end.
    env = LedgerEnv(embedded_ledger_driver(SPEC, DEFAULT_NAMES))
    env.bond_all([*HOSTS, *VALIDATORS])
    e = env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    node = CreepingCursorNode(env.ledger.backend)
    with pytest.raises(LedgerError, match="a report page that goes on lists nobody"):
        Ledger(node).report(e, page=1)
    assert node.asked == 1
