"""The veriloco contract's staking slice, through a backend-neutral handle.

Every test here talks to the contract only through ``ContractHandle`` (``conftest.py``), so the
same tests will run on the devnet backend once it exists. Refusals are
``chain.ledger.ContractError`` with the contract's own message.
"""

from __future__ import annotations

import json

import pytest

from chain.ledger import ContractError
from protocol.keys import encode_address
from protocol.spec import RunSpec
from protocol.views import Accounting, Config, Member

DENOM = "inj"  # the denom of the test spec (conftest.make_spec)
ENDPOINT = "http://127.0.0.1:8700"
# A valid address of another chain.
COSMOS_ADDRESS = encode_address(bytes(range(20)), "cosmos")


def bond(c, who: str, amount: int, role: str = "host", endpoint: str = ENDPOINT):
    return c.execute(who, {"bond": {"role": role, "endpoint": endpoint}}, funds={DENOM: amount})


def assert_books_balance(c) -> None:
    """The contract holds exactly what its accounting says it owes."""
    assert c.balance(c.address) == c.holdings()


# -- instantiate ---------------------------------------------------------------------------------


def test_instantiate_stores_spec_and_run_id(contract) -> None:
    config = Config.model_validate(contract.query({"config": {}}))
    assert config.spec_json == contract.spec.canonical().decode()
    assert config.run_id == contract.spec.run_id().hex()
    assert config.initial_model_hash == contract.initial_model_hash
    assert config.denom == DENOM
    assert config.treasury == contract.addr("treasury")
    assert config.admin is None
    assert RunSpec.from_canonical(config.spec_json) == contract.spec
    assert Accounting.model_validate(contract.query({"accounting": {}})) == Accounting(
        bonded="0", unbonding="0", reward_pool="0")
    assert contract.balance(contract.address) == 0


def _spec_text(spec: RunSpec) -> str:
    return spec.canonical().decode()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: json.dumps(json.loads(s), sort_keys=True), "not canonical"),  # spaces
        (lambda s: json.dumps(dict(reversed(json.loads(s).items())), separators=(",", ":")),
         "not canonical"),
        (lambda s: s.replace('"seq_len":16', '"seq_len":16.0'), "floats are not canonical"),
        (lambda s: s.replace('"seq_len":16', '"seq_len":9223372036854775808'), "signed 64-bit"),
        (lambda s: s.replace('"name":"chain-test"', '"name":"caf\\u00e9"'), "not canonical"),
        (lambda s: s[:-1], "not valid JSON"),
    ],
    ids=["whitespace", "key-order", "float", "big-int", "escaped-unicode", "truncated"],
)
def test_instantiate_rejects_non_canonical_spec(contract, mutate, message: str) -> None:
    text = mutate(_spec_text(contract.spec))
    assert text != _spec_text(contract.spec)
    with pytest.raises(ContractError, match=message) as err:
        contract.deploy(contract.instantiate_msg(spec_json=text))
    assert str(err.value).startswith("instantiate: spec_json")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"denom": "uatom"}, "denom \"uatom\" differs from the spec's economics.denom \"inj\""),
        ({"initial_model_hash": "AB" * 32}, "initial_model_hash must be 64 lowercase hex"),
        ({"initial_model_hash": "ab"}, "initial_model_hash must be 64 lowercase hex"),
        ({"treasury": COSMOS_ADDRESS}, "instantiate: treasury: invalid address .* prefix 'cosmos'"),
        ({"admin": "inj1notanaddress"}, "instantiate: admin: invalid address"),
        ({"extra": 1}, "unknown field `extra`"),
    ],
    ids=["denom", "hash-case", "hash-length", "treasury-prefix", "admin", "unknown-field"],
)
def test_instantiate_rejects_bad_fields(contract, overrides, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        contract.deploy(contract.instantiate_msg(**overrides))


def test_instantiate_rejects_spec_of_wrong_shape(contract) -> None:
    spec = json.loads(_spec_text(contract.spec))
    del spec["economics"]["min_host_stake"]
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    with pytest.raises(ContractError, match="missing field `min_host_stake`"):
        contract.deploy(contract.instantiate_msg(spec_json=text))
    spec = json.loads(_spec_text(contract.spec))
    spec["economics"]["slash_invalid_bps"] = 10_001
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    with pytest.raises(ContractError, match="slash_invalid_bps is 10001, more than 10000"):
        contract.deploy(contract.instantiate_msg(spec_json=text))
    spec = json.loads(_spec_text(contract.spec))
    spec["version"] = 2
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    with pytest.raises(ContractError, match="spec version 2 is not supported"):
        contract.deploy(contract.instantiate_msg(spec_json=text))


def test_a_second_contract_gets_its_own_run_id(contract, make_spec) -> None:
    spec = make_spec(min_host_stake="7")
    other = contract.deploy(contract.instantiate_msg(spec))
    assert other != contract.address
    assert contract.query({"config": {}})["run_id"] == contract.spec.run_id().hex()


# -- bond ----------------------------------------------------------------------------------------


def test_bond_creates_member_and_moves_funds(contract) -> None:
    before = contract.balance(contract.addr("host1"))
    result = bond(contract, "host1", 5_000)
    assert contract.balance(contract.addr("host1")) == before - 5_000
    assert contract.balance(contract.address) == 5_000
    member = Member.model_validate(contract.member("host1"))
    assert member == Member(address=contract.addr("host1"), role="host", endpoint=ENDPOINT,
                            bonded="5000", unbonding=[])
    assert result.attribute("action") == "bond"
    assert result.attribute("member") == contract.addr("host1")
    assert result.attribute("amount") == "5000"
    assert result.attribute("bonded", "wasm-stake") == "5000"
    assert contract.accounting() == {"bonded": 5_000, "unbonding": 0, "reward_pool": 0}


def test_bond_again_adds_stake_and_updates_endpoint(contract) -> None:
    bond(contract, "validator1", 700, role="validator")
    bond(contract, "validator1", 300, role="validator", endpoint="https://v1.example:443/api")
    member = contract.member("validator1")
    assert member["bonded"] == "1000"
    assert member["endpoint"] == "https://v1.example:443/api"
    assert_books_balance(contract)


@pytest.mark.parametrize(
    "funds",
    [None, {"uatom": 5_000}, {DENOM: 5_000, "uatom": 1}],
    ids=["no-funds", "wrong-denom", "two-coins"],
)
def test_bond_requires_exactly_one_coin_of_the_denom(contract, funds) -> None:
    with pytest.raises(ContractError) as err:
        contract.execute("host1", {"bond": {"role": "host", "endpoint": ENDPOINT}}, funds=funds)
    assert str(err.value).startswith(
        "bond: funds must be exactly one coin of denom inj with a nonzero amount, got ")
    assert contract.member("host1") is None
    assert contract.balance(contract.address) == 0


def test_bond_role_is_fixed(contract) -> None:
    bond(contract, "host1", 1_000)
    with pytest.raises(ContractError, match="bonded as host; a member's role cannot change to validator"):
        bond(contract, "host1", 1_000, role="validator")
    assert contract.member("host1")["role"] == "host"
    assert contract.member("host1")["bonded"] == "1000"


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        ("ftp://host:21", "must be an http:// or https:// URL"),
        ("http://", "must be an http:// or https:// URL"),
        ("http://host name", "printable ASCII without spaces"),
        ("http://" + "a" * 250, "longer than 256"),
    ],
    ids=["scheme", "empty-host", "space", "too-long"],
)
def test_bond_validates_endpoint(contract, endpoint: str, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        bond(contract, "host1", 1_000, endpoint=endpoint)


def test_bond_accepts_endpoint_of_max_length(contract) -> None:
    endpoint = "http://" + "a" * (256 - len("http://"))
    bond(contract, "host1", 1_000, endpoint=endpoint)
    assert contract.member("host1")["endpoint"] == endpoint


def test_unknown_message_and_fields_are_refused(contract) -> None:
    with pytest.raises(ContractError, match="invalid execute message: unknown variant `stake`"):
        contract.execute("host1", {"stake": {}})
    with pytest.raises(ContractError, match="invalid execute message: unknown field `amount`"):
        contract.execute("host1", {"bond": {"role": "host", "endpoint": ENDPOINT, "amount": "5"}},
                         funds={DENOM: 5})
    with pytest.raises(ContractError, match="unknown variant `miner`"):
        contract.execute("host1", {"bond": {"role": "miner", "endpoint": ENDPOINT}}, funds={DENOM: 5})


# -- unbond and claim ----------------------------------------------------------------------------


def test_unbond_moves_stake_to_an_entry_released_later(contract) -> None:
    bond(contract, "host1", 5_000)
    result = contract.execute("host1", {"unbond": {"amount": "2000"}})
    assert result.attribute("release_epoch") == "2"  # current epoch 0 + unbonding_epochs 2
    contract.execute("host1", {"unbond": {"amount": "500"}})  # same release epoch: merged
    member = contract.member("host1")
    assert member["bonded"] == "2500"
    assert member["unbonding"] == [{"amount": "2500", "release_epoch": 2}]
    assert contract.accounting() == {"bonded": 2_500, "unbonding": 2_500, "reward_pool": 0}
    assert_books_balance(contract)


@pytest.mark.parametrize(
    ("who", "msg", "funds", "message"),
    [
        ("host1", {"unbond": {"amount": "5001"}}, None,
         "unbond: cannot unbond 5001inj, only 5000inj is bonded"),
        ("host1", {"unbond": {"amount": "0"}}, None, "unbond: amount must be nonzero"),
        ("host1", {"unbond": {"amount": "-5"}}, None, "is not an amount"),
        ("host1", {"unbond": {"amount": "0100"}}, None, "is not an amount"),
        ("host1", {"unbond": {"amount": 100}}, None, "invalid type: integer `100`"),
        ("host2", {"unbond": {"amount": "1"}}, None, "is not a member"),
        ("host1", {"unbond": {"amount": "1"}}, {DENOM: 1}, "unbond: does not accept funds, got 1inj"),
    ],
    ids=["more-than-bonded", "zero", "negative", "leading-zero", "number", "non-member", "funds"],
)
def test_unbond_refusals(contract, who, msg, funds, message) -> None:
    bond(contract, "host1", 5_000)
    with pytest.raises(ContractError, match=message):
        contract.execute(who, msg, funds=funds)
    assert contract.member("host1")["bonded"] == "5000"


def test_claim_before_maturity_is_refused_and_pays_nothing(contract) -> None:
    bond(contract, "host1", 5_000)
    contract.execute("host1", {"unbond": {"amount": "1000"}})
    balance = contract.balance(contract.addr("host1"))
    with pytest.raises(ContractError,
                       match="claim: nothing to claim at epoch 0; the next release is at epoch 2"):
        contract.execute("host1", {"claim": {}})
    assert contract.balance(contract.addr("host1")) == balance
    assert contract.member("host1")["unbonding"] == [{"amount": "1000", "release_epoch": 2}]


def test_claim_without_unbonding_is_refused(contract) -> None:
    bond(contract, "host1", 5_000)
    with pytest.raises(ContractError, match="has no unbonding stake"):
        contract.execute("host1", {"claim": {}})
    with pytest.raises(ContractError, match="is not a member"):
        contract.execute("host2", {"claim": {}})


def test_claim_after_maturity_pays_with_a_bank_transfer(deploy_contract, make_spec) -> None:
    # With unbonding_epochs = 0 an entry is released at the current epoch, i.e. at once. (The
    # epoch counter cannot advance before the epoch logic exists.)
    c = deploy_contract(make_spec(unbonding_epochs=0))
    host = c.addr("host1")
    start = c.balance(host)
    bond(c, "host1", 5_000)
    c.execute("host1", {"unbond": {"amount": "3000"}})
    result = c.execute("host1", {"claim": {}})
    assert c.balance(host) == start - 5_000 + 3_000
    assert c.balance(c.address) == 2_000
    transfers = [e.to_dict() for e in result.events if e.type == "transfer"]
    assert {"recipient": host, "sender": c.address, "amount": "3000inj"} in transfers
    assert result.attribute("action") == "claim"
    assert c.member("host1")["unbonding"] == []
    assert c.accounting() == {"bonded": 2_000, "unbonding": 0, "reward_pool": 0}
    with pytest.raises(ContractError, match="nothing to claim"):
        c.execute("host1", {"claim": {}})


# -- rewards -------------------------------------------------------------------------------------


def test_fund_rewards_adds_to_the_pool(contract) -> None:
    result = contract.execute("funder", {"fund_rewards": {}}, funds={DENOM: 12_345})
    assert result.attribute("reward_pool") == "12345"
    contract.execute("outsider", {"fund_rewards": {}}, funds={DENOM: 5})
    assert contract.accounting()["reward_pool"] == 12_350
    assert_books_balance(contract)


# -- queries -------------------------------------------------------------------------------------


def test_members_are_listed_in_address_order_with_paging(contract) -> None:
    names = ["host1", "host2", "host3", "validator1", "validator2"]
    for name in names:
        bond(contract, name, 1_000, role="validator" if name.startswith("validator") else "host")
    everyone = contract.query({"members": {}})["members"]
    addresses = [m["address"] for m in everyone]
    assert addresses == sorted(contract.addr(n) for n in names)
    for m in everyone:
        Member.model_validate(m)

    page1 = contract.query({"members": {"limit": 2}})["members"]
    page2 = contract.query({"members": {"limit": 2, "start_after": page1[-1]["address"]}})["members"]
    page3 = contract.query({"members": {"limit": 2, "start_after": page2[-1]["address"]}})["members"]
    assert [m["address"] for m in page1 + page2 + page3] == addresses

    hosts = contract.query({"members": {"role": "host"}})["members"]
    assert [m["address"] for m in hosts] == sorted(contract.addr(n) for n in names[:3])
    validators = contract.query({"members": {"role": "validator", "limit": 1}})["members"]
    assert len(validators) == 1 and validators[0]["role"] == "validator"
    assert contract.query({"members": {"limit": 0}})["members"] == []


def test_member_query(contract) -> None:
    assert contract.member("host1") is None
    with pytest.raises(ContractError, match="member: invalid address"):
        contract.query({"member": {"address": "inj1invalid"}})
    with pytest.raises(ContractError, match="invalid query message: unknown variant `epochz`"):
        contract.query({"epochz": {}})


# -- atomicity and conservation ------------------------------------------------------------------


def test_rejected_execute_changes_nothing(contract) -> None:
    bond(contract, "host1", 5_000)
    contract.execute("funder", {"fund_rewards": {}}, funds={DENOM: 100})
    balances = {a: contract.balance(a) for a in [*contract.accounts.values(), contract.address]}
    members = contract.query({"members": {}})
    accounting = contract.accounting()
    # The funds attached to a refused message go back with the rest of the transaction.
    with pytest.raises(ContractError):
        bond(contract, "host1", 2_000, role="validator")
    with pytest.raises(ContractError):
        contract.execute("host1", {"unbond": {"amount": "999999"}})
    assert {a: contract.balance(a) for a in balances} == balances
    assert contract.query({"members": {}}) == members
    assert contract.accounting() == accounting


def test_funds_are_conserved_and_accounted(deploy_contract, make_spec) -> None:
    c = deploy_contract(make_spec(unbonding_epochs=0))
    total = c.total_funds()
    steps = [
        lambda: bond(c, "host1", 4_000),
        lambda: bond(c, "host2", 2_500),
        lambda: bond(c, "validator1", 900, role="validator"),
        lambda: c.execute("funder", {"fund_rewards": {}}, funds={DENOM: 10_000}),
        lambda: c.execute("host1", {"unbond": {"amount": "1500"}}),
        lambda: c.execute("host1", {"claim": {}}),
        lambda: bond(c, "host1", 1),
        lambda: c.execute("validator1", {"unbond": {"amount": "900"}}),
        lambda: c.execute("validator1", {"claim": {}}),
    ]
    for step in steps:
        step()
        assert c.total_funds() == total
        assert_books_balance(c)
    assert c.accounting() == {"bonded": 4_000 - 1_500 + 1 + 2_500, "unbonding": 0, "reward_pool": 10_000}
