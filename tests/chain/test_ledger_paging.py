"""The Ledger pages through the contract's capped answers: every epoch, member and aggregation
input comes back, in order."""

import pytest
from ledger_env import EmbeddedDriver, LedgerEnv, make_spec
from test_contract_epoch import HOSTS, VALIDATORS, ready

import chain.ledger
from chain.ledger import EPOCHS_PAGE, MEMBERS_PAGE, LedgerError


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
