"""The embedded chain itself: bank, blocks, env, events, atomicity, wasmd parity, save/load.

The probe contract (conftest.probe_wat) records the env, info and message it receives and
misbehaves on request; the veriloco contract is used where real contract state matters.
"""

from __future__ import annotations

import json

import pytest

from chain.embedded import (
    ChainError,
    Coin,
    ContractError,
    EmbeddedChain,
    InsufficientFundsError,
    InvalidWasmError,
    OutOfGasError,
    VmError,
    contract_address,
)
from chain.embedded.chain import GENESIS_TIME_NS
from chain.ledger import LedgerError
from chain.wasm_artifact import load_contract_wasm
from protocol.errors import VerilocoError
from protocol.keys import encode_address

DENOM = "inj"


@pytest.fixture
def alice(account) -> str:
    return account("alice")


@pytest.fixture
def bob(account) -> str:
    return account("bob")


@pytest.fixture
def chain(alice: str, bob: str) -> EmbeddedChain:
    return EmbeddedChain(genesis_balances={alice: {DENOM: 1_000_000, "uatom": 50}, bob: {DENOM: 10}})


@pytest.fixture
def probe_contract(chain: EmbeddedChain, alice: str, probe) -> str:
    code_id = chain.store_code(alice, probe.wasm).code_id
    return chain.instantiate(alice, code_id, {}, label="probe").contract_address


# -- addresses -----------------------------------------------------------------------------------


def test_contract_addresses_follow_wasmd() -> None:
    # wasmd's keeper tests: code 1, instance 1.
    cosmos = "cosmos14hj2tavq8fpesdwxxcu44rty3hh90vhujrvcmstl4zr3txmfvw9s4hmalr"
    purple = "purple14hj2tavq8fpesdwxxcu44rty3hh90vhujrvcmstl4zr3txmfvw9smc2vxm"
    assert contract_address(1, 1, "cosmos") == cosmos
    assert contract_address(1, 1, "purple") == purple
    assert contract_address(1, 2, "inj") != contract_address(2, 1, "inj")


def test_first_contract_gets_the_first_classic_address(chain: EmbeddedChain, probe_contract: str) -> None:
    assert probe_contract == contract_address(1, 1, "inj")
    assert chain.contract_info(probe_contract).code_id == 1


# -- bank ----------------------------------------------------------------------------------------


def test_send_moves_coins_and_reports_transfer_events(chain: EmbeddedChain, alice: str, bob: str) -> None:
    result = chain.send(alice, bob, {DENOM: 400, "uatom": 5})
    assert chain.balances(alice) == {DENOM: 999_600, "uatom": 45}
    assert chain.balances(bob) == {DENOM: 410, "uatom": 5}
    transfer = result.events_of("transfer")[0].to_dict()
    assert transfer == {"recipient": bob, "sender": alice, "amount": "400inj,5uatom"}
    assert result.height == 2 and result.gas_used == 0


def test_insufficient_funds_moves_nothing(chain: EmbeddedChain, alice: str, bob: str) -> None:
    height = chain.height
    with pytest.raises(InsufficientFundsError, match=r"spendable balance 10inj .* is smaller than 11inj"):
        chain.send(bob, alice, {DENOM: 11})
    with pytest.raises(InsufficientFundsError):
        chain.send(alice, bob, {DENOM: 1, "uatom": 51})  # the first coin alone would pass
    assert chain.balances(alice) == {DENOM: 1_000_000, "uatom": 50}
    assert chain.balances(bob) == {DENOM: 10}
    assert chain.height == height


@pytest.mark.parametrize(
    ("coins", "message"),
    [
        ({DENOM: 0}, "amount is not positive"),
        ([Coin(DENOM, 1), Coin(DENOM, 2)], "duplicate denom"),
        ({DENOM: -1}, "outside"),
        ({"x": 1}, "invalid denom"),
    ],
    ids=["zero", "duplicate", "negative", "bad-denom"],
)
def test_invalid_coins_are_refused(chain: EmbeddedChain, alice: str, bob: str, coins, message) -> None:
    with pytest.raises(ChainError, match=message):
        chain.send(alice, bob, coins)


def test_invalid_addresses_are_refused(chain: EmbeddedChain, alice: str) -> None:
    with pytest.raises(ChainError, match="invalid recipient address"):
        chain.send(alice, alice.upper(), {DENOM: 1})
    with pytest.raises(ChainError, match="invalid Bech32 prefix; expected inj, got cosmos"):
        chain.send(alice, encode_address(bytes(20), "cosmos"), {DENOM: 1})
    with pytest.raises(ChainError, match="invalid sender address"):
        chain.send("inj1xyz", alice, {DENOM: 1})


# -- codes ---------------------------------------------------------------------------------------


def test_store_code_reports_checksum_and_refuses_invalid_wasm(chain: EmbeddedChain, alice: str,
                                                              probe) -> None:
    result = chain.store_code(alice, probe.wasm)
    assert result.code_id == 1
    event = result.events_of("store_code")[0].to_dict()
    assert event["code_id"] == "1"
    assert chain.code_info(1).checksum == event["code_checksum"]
    height = chain.height
    with pytest.raises(InvalidWasmError, match="maximum must be unset"):
        chain.store_code(alice, probe.build(memory_max=True))
    with pytest.raises(InvalidWasmError):
        chain.store_code(alice, b"\x00asm\x01\x00\x00\x00garbage")
    assert chain.height == height
    assert chain.store_code(alice, probe.wasm).code_id == 2  # nothing consumed by the failures


# -- env, info, blocks ---------------------------------------------------------------------------


def test_contract_sees_env_and_info_like_wasmd(chain: EmbeddedChain, alice: str, probe_contract: str) -> None:
    result = chain.execute(alice, probe_contract, b"hello", funds={"uatom": 3, DENOM: 5})
    env = json.loads(chain.raw_storage(probe_contract, b"env"))
    assert env == {
        "block": {"height": result.height, "time": str(chain.time_ns), "chain_id": chain.chain_id},
        "transaction": {"index": 0},
        "contract": {"address": probe_contract},
    }
    info = json.loads(chain.raw_storage(probe_contract, b"info"))
    # Funds sorted by denom, amounts as strings (sdk.Coins, cosmwasm Coin).
    assert info == {"sender": alice,
                    "funds": [{"denom": DENOM, "amount": "5"}, {"denom": "uatom", "amount": "3"}]}
    assert chain.raw_storage(probe_contract, b"msg") == b"hello"
    assert chain.balances(probe_contract) == {DENOM: 5, "uatom": 3}


def test_one_block_per_transaction_and_on_demand(alice: str, bob: str, probe) -> None:
    chain = EmbeddedChain(block_time_s=0.5, genesis_balances={alice: {DENOM: 100}})
    assert (chain.height, chain.time_ns) == (1, GENESIS_TIME_NS)
    chain.send(alice, bob, {DENOM: 1})
    assert (chain.height, chain.time_ns) == (2, GENESIS_TIME_NS + 500_000_000)
    assert chain.advance_blocks(10) == 12
    assert chain.time_ns == GENESIS_TIME_NS + 11 * 500_000_000
    with pytest.raises(InsufficientFundsError):
        chain.send(bob, alice, {DENOM: 5})
    assert chain.height == 12  # a failed transaction makes no block


def test_events_follow_wasmd(chain: EmbeddedChain, alice: str, probe_contract: str) -> None:
    result = chain.execute(alice, probe_contract, b"v", funds={DENOM: 1})
    types = [e.type for e in result.events]
    assert types == ["message", "coin_spent", "coin_received", "transfer", "execute", "wasm", "wasm-probe"]
    assert result.events_of("execute")[0].to_dict() == {"_contract_address": probe_contract}
    # Attributes are trimmed; the contract's address comes first.
    assert result.events_of("wasm")[0].attributes == (("_contract_address", probe_contract), ("spaced", "v"))
    assert result.events_of("wasm-probe")[0].attributes == (("_contract_address", probe_contract), ("k", "v"))
    assert result.data == b"hi"
    # No attributes: no wasm event.
    assert "wasm" not in [e.type for e in chain.execute(alice, probe_contract, b"ok").events]


def test_reserved_attribute_keys_and_replies_are_refused(chain: EmbeddedChain, alice: str,
                                                         probe_contract: str) -> None:
    with pytest.raises(ChainError, match="reserved prefix"):
        chain.execute(alice, probe_contract, b"r")
    with pytest.raises(ChainError, match="replies are not supported"):
        chain.execute(alice, probe_contract, b"s")


# -- atomicity -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("msg", "error", "match"),
    [
        (b"trap", VmError, r"wasm trap \(unreachable\)"),
        (b"abort", VmError, "Aborted: probe panicked"),
        (b"loop", OutOfGasError, "out of gas"),
        (b"error", ContractError, "^probe refused$"),
        (b"bank", InsufficientFundsError, "insufficient funds"),
    ],
    ids=["trap", "abort", "out-of-gas", "contract-error", "failing-bank-message"],
)
def test_a_failed_execute_changes_nothing(alice: str, probe, msg, error, match) -> None:
    chain = EmbeddedChain(genesis_balances={alice: {DENOM: 1_000_000}}, gas_limit=20_000_000)
    code_id = chain.store_code(alice, probe.wasm).code_id
    contract = chain.instantiate(alice, code_id, {}).contract_address
    storage, balances, height = chain.storage_items(contract), chain.bank.all_balances(), chain.height
    # The probe writes env/info/msg to storage before it fails; the attached funds moved to the
    # contract before it ran; all of it must be undone.
    with pytest.raises(error, match=match):
        chain.execute(alice, contract, msg, funds={DENOM: 500})
    assert chain.storage_items(contract) == storage
    assert chain.bank.all_balances() == balances
    assert chain.height == height


def test_contract_bank_message_pays_from_the_contract(chain: EmbeddedChain, alice: str,
                                                      probe_contract: str, probe) -> None:
    result = chain.execute(alice, probe_contract, b"bank", funds={DENOM: 1_000})
    assert chain.balance(probe_contract, DENOM) == 1_000 - probe.bank_amount
    assert chain.balance(probe.bank_recipient, DENOM) == probe.bank_amount
    last = result.events_of("transfer")[-1].to_dict()
    assert last == {"recipient": probe.bank_recipient, "sender": probe_contract,
                    "amount": f"{probe.bank_amount}{DENOM}"}


def test_contract_errors_carry_the_message_and_are_ledger_errors(chain: EmbeddedChain, alice: str,
                                                                 probe_contract: str) -> None:
    with pytest.raises(LedgerError) as err:
        chain.execute(alice, probe_contract, b"e")
    assert isinstance(err.value, ContractError) and isinstance(err.value, VerilocoError)
    assert (err.value.message, err.value.contract, err.value.entry_point) == (
        "probe refused", probe_contract, "execute")


def test_queries_are_read_only_and_answer_json(chain: EmbeddedChain, probe_contract: str) -> None:
    assert chain.query(probe_contract, {"anything": {}}) == {}
    with pytest.raises(ChainError, match="no contract at"):
        chain.query(encode_address(bytes(32), "inj"), {})


def test_failed_instantiate_creates_nothing(alice: str, make_spec, account) -> None:
    chain = EmbeddedChain(genesis_balances={alice: {DENOM: 10**12}})
    code_id = chain.store_code(alice, load_contract_wasm()).code_id
    spec = make_spec()
    msg = {"spec_json": spec.canonical().decode(), "initial_model_hash": "0" * 64,
           "denom": DENOM, "treasury": account("treasury"), "admin": None}
    with pytest.raises(ContractError, match=r"^instantiate: does not accept funds, got 5inj$"):
        chain.instantiate(alice, code_id, msg, funds={DENOM: 5})
    assert chain.balance(alice, DENOM) == 10**12
    with pytest.raises(ChainError, match="no contract"):
        chain.contract_info(contract_address(code_id, 1, "inj"))
    # The instance sequence was not consumed either.
    assert chain.instantiate(alice, code_id, msg).contract_address == contract_address(code_id, 1, "inj")



def test_the_contract_takes_a_new_quantization_field_unchanged(alice: str, make_spec, account) -> None:
    # A compression schedule (issue 32's optional DiLoCoX item) would live under `quantization`,
    # which the contract does not parse: a new field there needs no contract change. The run id is
    # the hash of the canonical text as sent.
    chain = EmbeddedChain(genesis_balances={alice: {DENOM: 10**12}})
    code_id = chain.store_code(alice, load_contract_wasm()).code_id
    data = json.loads(make_spec().canonical())
    data["quantization"]["schedule"] = [{"block_size": 2048, "from_epoch": 10}]
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    msg = {"spec_json": text, "initial_model_hash": "0" * 64, "denom": DENOM,
           "treasury": account("treasury"), "admin": None}
    contract = chain.instantiate(alice, code_id, msg).contract_address
    config = chain.query(contract, {"config": {}})
    assert config["spec_json"] == text and '"schedule":[{"block_size":2048,"from_epoch":10}]' in text
    assert config["run_id"] != make_spec().run_id().hex()  # the new field is part of the run's identity

# -- determinism and persistence -----------------------------------------------------------------


def _scenario(chain: EmbeddedChain, contract: str, accounts: dict[str, str]) -> list:
    outcomes = []
    for name in ("host1", "host2"):
        r = chain.execute(accounts[name], contract, {"bond": {"role": "host", "endpoint": "http://x"}},
                          funds={DENOM: 2_000})
        outcomes.append((r.height, r.tx_hash, r.gas_used, r.events))
    r = chain.execute(accounts["host1"], contract, {"unbond": {"amount": "500"}})
    outcomes.append((r.height, r.tx_hash, r.gas_used, r.events))
    return outcomes


def _accounts(env) -> dict[str, str]:
    return {name: env.addr(name) for name in env.keys}


def test_same_transactions_same_results(embedded_env) -> None:
    twin = type(embedded_env.driver)(embedded_env.spec, tuple(embedded_env.keys))
    assert _scenario(embedded_env.driver.chain, embedded_env.address, _accounts(embedded_env)) == _scenario(
        twin.chain, twin.address, {name: k.address() for name, k in twin.keys.items()})


def test_save_and_load_round_trip(embedded_env, tmp_path) -> None:
    chain, contract = embedded_env.driver.chain, embedded_env.address
    accounts = _accounts(embedded_env)
    _scenario(chain, contract, accounts)
    chain.advance_blocks(3)
    path = tmp_path / "chain.json"
    chain.save(path)
    loaded = EmbeddedChain.load(path)
    assert (loaded.height, loaded.time_ns, loaded.chain_id, loaded.prefix) == (
        chain.height, chain.time_ns, chain.chain_id, chain.prefix)
    assert loaded.bank.all_balances() == chain.bank.all_balances()
    assert loaded.storage_items(contract) == chain.storage_items(contract)
    assert loaded.contract_info(contract) == chain.contract_info(contract)
    for query in ({"config": {}}, {"members": {}}, {"accounting": {}}, {"epoch": {}}, {"report": {"epoch": 0}}):
        assert loaded.query(contract, query) == chain.query(contract, query)
    # Both continue identically.
    msg, sender = {"bond": {"role": "host", "endpoint": "http://y"}}, accounts["host3"]
    a = chain.execute(sender, contract, msg, funds={DENOM: 7})
    b = loaded.execute(sender, contract, msg, funds={DENOM: 7})
    assert (a.height, a.tx_hash, a.gas_used, a.events) == (b.height, b.tx_hash, b.gas_used, b.events)
    # Codes survive too: a new contract can be instantiated from the loaded state.
    again = loaded.instantiate(sender, 1, embedded_env.instantiate_msg())
    assert again.contract_address == contract_address(1, 2, "inj")


def test_load_refuses_other_files(tmp_path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"format": "something else"}')
    with pytest.raises(ChainError, match="not an embedded chain state"):
        EmbeddedChain.load(path)


def test_total_supply_is_constant(embedded_env) -> None:
    chain = embedded_env.driver.chain
    supply = chain.total_supply(DENOM)
    _scenario(chain, embedded_env.address, _accounts(embedded_env))
    with pytest.raises(ContractError):
        chain.execute(embedded_env.addr("host1"), embedded_env.address, {"unbond": {"amount": "99999"}})
    assert chain.total_supply(DENOM) == supply


def test_a_repeated_query_answers_the_state_and_block_of_now(embedded_env) -> None:
    """Query answers are cached while neither the state nor the block changed: after a bond, a
    refused transaction and an unbond in one block, and after new blocks, every answer equals an
    uncached twin's."""
    chain, contract = embedded_env.driver.chain, embedded_env.address
    twin = type(embedded_env.driver)(embedded_env.spec, tuple(embedded_env.keys))
    twin.chain.cache_queries = False
    chain.block_txs = twin.chain.block_txs = 1000  # the transactions below share one block
    accounts = _accounts(embedded_env)
    queries = [{"member": {"address": accounts["host1"]}}, {"accounting": {}}, {"epoch": {}}]

    def answers(on: EmbeddedChain, at: str) -> list:
        return [on.query(at, q) for q in queries] * 2  # asked twice: the second from the cache

    def both(do) -> None:
        do(chain, contract, accounts)
        do(twin.chain, twin.address, {name: k.address() for name, k in twin.keys.items()})
        assert answers(chain, contract) == answers(twin.chain, twin.address)

    before, height = answers(chain, contract), chain.height
    both(lambda c, at, a: c.execute(a["host1"], at, {"bond": {"role": "host", "endpoint": "http://x"}},
                                    funds={DENOM: 2_000}))
    assert answers(chain, contract) != before

    def refused(c: EmbeddedChain, at: str, a: dict[str, str]) -> None:
        with pytest.raises(ContractError):
            c.execute(a["host1"], at, {"unbond": {"amount": "999999999999"}})

    both(refused)
    both(lambda c, at, a: c.execute(a["host1"], at, {"unbond": {"amount": "500"}}))
    assert chain.height == twin.chain.height == height
    both(lambda c, at, a: c.advance_blocks(500))


def test_an_interrupt_inside_a_transaction_undoes_it_whole_and_says_whether_it_could(
        chain: EmbeddedChain, alice: str, bob: str, monkeypatch) -> None:
    """Ctrl-C in the middle of a send: the send is undone whole and the chain is `settled` (a CLI
    may save it). A second Ctrl-C that cuts the undo short leaves it unsettled: nothing saves it."""
    height, send = chain.height, chain.bank.send

    def interrupted(*args, **kwargs):
        send(*args, **kwargs)  # the coins moved ...
        raise KeyboardInterrupt  # ... and the operator pressed Ctrl-C before the transaction ended

    monkeypatch.setattr(chain.bank, "send", interrupted)
    with pytest.raises(KeyboardInterrupt):
        chain.send(alice, bob, {DENOM: 400})
    assert chain.balances(alice)[DENOM] == 1_000_000 and chain.balances(bob) == {DENOM: 10}
    assert chain.height == height and chain.settled

    def cut(self, key, old):
        raise KeyboardInterrupt  # the second Ctrl-C, during the undo

    monkeypatch.setattr(type(chain.bank._balances), "_restore", cut)
    with pytest.raises(KeyboardInterrupt):
        chain.send(alice, bob, {DENOM: 400})
    assert not chain.settled
    monkeypatch.undo()
    chain.send(alice, bob, {DENOM: 1})  # a whole transaction later: settled again
    assert chain.settled
