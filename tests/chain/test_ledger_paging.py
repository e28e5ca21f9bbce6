"""The Ledger pages through the contract's capped answers: every epoch, member and aggregation
input comes back, in order."""

import pytest
from ledger_env import EmbeddedDriver, LedgerEnv, make_spec
from test_contract_epoch import HOSTS, VALIDATORS, ready

import chain.ledger
from chain.ledger import EPOCHS_PAGE, MEMBERS_PAGE, ContractError, LedgerError
from protocol.views import EpochCounts


def test_epochs_beyond_one_contract_page(embedded_env) -> None:
    # Embedded only: 31 epochs of transactions take seconds here and minutes on a real node.
    env = embedded_env
    ready(env)
    for _ in range(EPOCHS_PAGE + 1):
        env.play_epoch(HOSTS, VALIDATORS)
    epochs = env.ledger.epochs()
    assert [e.epoch for e in epochs] == list(range(EPOCHS_PAGE + 2))
    assert [e.epoch for e in env.ledger.epochs(start_after=5, limit=EPOCHS_PAGE + 1)] == list(range(6, EPOCHS_PAGE + 2))
    assert len(env.ledger.epochs(limit=7)) == 7


def test_members_beyond_one_contract_page() -> None:
    # Embedded only: more members than the contract's largest page, all listed, in address order.
    names = [f"host{i:03d}" for i in range(MEMBERS_PAGE + 5)] + ["validator1", "operator", "treasury"]
    env = LedgerEnv(EmbeddedDriver(make_spec(), names))
    for name in names[:-2]:
        env.bond(name, 1_000)
    members = env.ledger.members()
    assert [m.address for m in members] == sorted(env.addr(n) for n in names[:-2])
    hosts = env.ledger.members(role="host")
    assert len(hosts) == MEMBERS_PAGE + 5 and all(m.role == "host" for m in hosts)
    assert len(env.ledger.members(limit=MEMBERS_PAGE + 1)) == MEMBERS_PAGE + 1


def test_aggregation_inputs_are_read_page_by_page(embedded_env, monkeypatch) -> None:
    env = embedded_env
    hosts = ["host1", "host2", "host3", "host4"]
    ready(env, hosts)
    env.play_epoch(hosts, VALIDATORS, stop_after="verify")
    whole = env.ledger.aggregation_inputs(0)
    assert [i.address for i in whole] == sorted(env.addr(h) for h in hosts)
    # Pages of one: the Ledger follows start_after to the end, each host once.
    queries: list[dict] = []
    query = env.ledger.backend.query
    monkeypatch.setattr(chain.ledger, "AGGREGATION_PAGE", 1)
    monkeypatch.setattr(env.ledger.backend, "query", lambda msg: queries.append(msg) or query(msg))
    assert env.ledger.aggregation_inputs(0) == whole
    assert len(queries) == len(hosts) + 1
    assert queries[1]["aggregation_inputs"]["start_after"] == whole[0].address


def test_an_epoch_read_paged_equals_its_full_answer(embedded_env, monkeypatch) -> None:
    """``Ledger.epoch_paged``: the header without lists and the lists from the paged report give
    exactly what ``epoch`` answers with its lists, in every phase (one host never commits, so the
    committed and accepted hosts are not all of them), and a report that shows another state of
    the epoch than its header is read again."""
    env = embedded_env
    hosts = ["host1", "host2", "host3", "host4"]
    ready(env, hosts)
    commit = hosts[1:]
    e = env.play_epoch(hosts, VALIDATORS, commit=commit, stop_after="train")
    assert env.ledger.epoch_paged(e) == env.ledger.epoch(e) and env.ledger.epoch_paged() == env.ledger.epoch()
    env.play_epoch(hosts, VALIDATORS, commit=commit, stop_after="verify")
    assert env.ledger.epoch_paged(e) == env.ledger.epoch(e)
    env.play_epoch(hosts, VALIDATORS, commit=commit)
    full = env.ledger.epoch(e)
    assert (len(full.hosts), len(full.committed)) == (len(hosts), len(commit)) and full.accepted
    assert env.ledger.epoch_paged(e) == full
    # The report shows another phase once, then the epoch as its header does: read twice.
    report = env.ledger.report
    moved = [report(e).model_copy(update={"phase": "verify"})]
    monkeypatch.setattr(env.ledger, "report", lambda epoch: moved.pop() if moved else report(epoch))
    assert env.ledger.epoch_paged(e) == full and not moved
    monkeypatch.setattr(env.ledger, "report", lambda epoch: report(epoch).model_copy(update={"phase": "verify"}))
    with pytest.raises(LedgerError, match="changed while it was read, in each of 2 tries"):
        env.ledger.epoch_paged(e, attempts=2)


def test_epoch_counts_are_the_lists_lengths_and_absent_from_a_contract_that_refuses_them(
        embedded_env, monkeypatch) -> None:
    # Contract 0.3.4 answers `counts` on request; before it, the field is refused as unknown (this
    # form, both backends: tests/chain/test_contract_queries.py) and the ledger asks without it.
    env = embedded_env
    ready(env)
    env.play_epoch(HOSTS, VALIDATORS)
    full = env.ledger.epochs()
    headers = env.ledger.epochs(lists=False, counts=True)
    assert [e.counts for e in headers] == [EpochCounts.of(e) for e in full]
    assert headers[0].counts is not None and headers[0].counts.accepted == len(HOSTS)
    assert env.ledger.epoch(0, counts=True).counts == headers[0].counts  # with the lists too
    assert EpochCounts.of(env.ledger.epoch_paged(0)) == headers[0].counts
    asked: list[dict] = []
    original = type(env.ledger.backend).query

    def older(backend, msg):  # a contract from before 0.3.4
        asked.append(msg)
        if any("counts" in args for args in msg.values()):
            raise ContractError("invalid query message: unknown field `counts`, expected one of `epoch`, `lists`",
                                contract="c", entry_point="query")
        return original(backend, msg)

    monkeypatch.setattr(type(env.ledger.backend), "query", older)
    assert env.ledger.epoch(0, lists=False, counts=True) == headers[0].model_copy(update={"counts": None})
    assert asked == [{"epoch": {"epoch": 0, "lists": False, "counts": True}}, {"epoch": {"epoch": 0, "lists": False}}]
