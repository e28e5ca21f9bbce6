"""The veriloco contract: instantiation, stake (bond, unbond, claim), the reward pool, the member
queries, atomicity and conservation.

Every test talks to the contract through ``ledger_env`` (``conftest.py``): typed Ledger calls,
raw JSON through ``env.raw`` only for malformed messages, so the same tests run on every backend.
Refusals are ``chain.ledger.ContractError`` with the contract's own message.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ledger_env import INITIAL_MODEL_HASH, LedgerEnv, make_spec
from pydantic import ValidationError

from chain.ledger import ContractError
from protocol.keys import encode_address
from protocol.rules.limits import BPS_DENOMINATOR, MIN_STAKE
from protocol.rules.spec import EconomicsSpec, RunSpec
from protocol.views import Accounting, Member

DENOM = "inj"  # the denom of the test spec (ledger_env.make_spec)
ENDPOINT = "http://127.0.0.1:8700"
# A valid address of another chain.
COSMOS_ADDRESS = encode_address(bytes(range(20)), "cosmos")


def bond(env: LedgerEnv, who: str, amount: int, role: str = "host", endpoint: str = ENDPOINT):
    return env.bond(who, amount, role=role, endpoint=endpoint)


def member(env: LedgerEnv, who: str) -> dict | None:
    m = env.ledger.member(env.addr(who))
    return None if m is None else m.model_dump(mode="json")


# -- instantiate ---------------------------------------------------------------------------------


def test_instantiate_stores_spec_and_run_id(ledger_env) -> None:
    env = ledger_env
    config = env.ledger.config()
    assert config.spec_json == env.spec.canonical().decode()
    assert config.run_id == env.spec.run_id().hex()
    assert config.initial_model_hash == INITIAL_MODEL_HASH
    assert config.denom == DENOM
    assert config.treasury == env.addr("treasury")
    assert config.admin is None
    assert env.ledger.spec() == env.spec
    assert env.ledger.accounting() == Accounting(bonded="0", unbonding="0", reward_pool="0")
    assert env.balance(env.address) == 0


def test_a_muon_spec_deploys_with_the_run_id_python_computes(make_ledger_env) -> None:
    # train.inner_optimizer is a field the contract does not read: it is stored and hashed as sent.
    spec = make_spec()
    spec = spec.with_changes(train={"inner_optimizer": "muon"})
    env = make_ledger_env(spec)
    config = env.ledger.config()
    assert '"inner_optimizer":"muon"' in config.spec_json
    assert config.run_id == spec.run_id().hex() and env.ledger.spec() == spec


def test_a_spec_with_a_trap_probability_deploys_with_the_run_id_python_computes(make_ledger_env) -> None:
    # verification.trap_probability is read by hosts only; the contract stores and hashes it as sent.
    spec = make_spec().with_changes(verification={"trap_probability": "0.05"})
    env = make_ledger_env(spec)
    config = env.ledger.config()
    assert '"trap_probability":"0.05"' in config.spec_json
    assert config.run_id == spec.run_id().hex() and env.ledger.spec() == spec


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
def test_instantiate_rejects_non_canonical_spec(ledger_env, mutate, message: str) -> None:
    text = mutate(_spec_text(ledger_env.spec))
    assert text != _spec_text(ledger_env.spec)
    with pytest.raises(ContractError, match=message) as err:
        ledger_env.deploy(ledger_env.instantiate_msg(spec_json=text))
    assert str(err.value).startswith("instantiate: spec_json")


@pytest.mark.parametrize("architecture", ["subprocess:run", "trainer.model:build_gpt", "GPT", ""])
def test_instantiate_refuses_an_architecture_the_project_does_not_ship(ledger_env, architecture: str) -> None:
    # The spec names its model from a closed registry (protocol.rules.models); the contract holds
    # the same list (tests/vectors/architectures.json), so a run naming code is never deployed.
    text = _spec_text(ledger_env.spec).replace('"architecture":"gpt"', f'"architecture":{json.dumps(architecture)}')
    assert text != _spec_text(ledger_env.spec)
    with pytest.raises(ContractError, match=r"model\.architecture .* is not one of"):
        ledger_env.deploy(ledger_env.instantiate_msg(spec_json=text))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"denom": "uatom"}, "denom \"uatom\" differs from the spec's economics.denom \"inj\""),
        ({"initial_model_hash": "AB" * 32}, "initial_model_hash must be 64 lowercase hex"),
        ({"initial_model_hash": "ab"}, "initial_model_hash must be 64 lowercase hex"),
        ({"treasury": COSMOS_ADDRESS},
         "instantiate: treasury: invalid address .*: invalid Bech32 prefix; expected inj, got cosmos$"),
        ({"admin": "inj1notanaddress"}, "instantiate: admin: invalid address"),
        ({"extra": 1}, "unknown field `extra`"),
    ],
    ids=["denom", "hash-case", "hash-length", "treasury-prefix", "admin", "unknown-field"],
)
def test_instantiate_rejects_bad_fields(ledger_env, overrides, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        ledger_env.deploy(ledger_env.instantiate_msg(**overrides))


def _edited(spec: RunSpec, edit) -> str:
    data = json.loads(_spec_text(spec))
    edit(data)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["economics"].pop("min_host_stake"), "missing field `min_host_stake`"),
        (lambda d: d["economics"].update(slash_invalid_bps=10_001), "slash_invalid_bps is 10001, more than 10000"),
        (lambda d: d.update(version=2), "spec version 2 is not supported"),
        (lambda d: d.pop("phases"), "missing field `phases`"),
        (lambda d: d["phases"].update(join_blocks=0), "phases.join_blocks is 0, outside 1..=10000000"),
        (lambda d: d["phases"].update(min_hosts=0), "phases.min_hosts must be at least 1"),
        (lambda d: d["phases"].update(min_validators=9, max_validators=3), "must not exceed"),
        (lambda d: d["phases"].update(max_hosts=5000), "at most 1024"),
        (lambda d: d["train"].update(inner_steps=5), "must be a multiple of train.segment_steps"),
        (lambda d: d["train"].update(inner_steps=4096, segment_steps=2), "at most 1024 segments"),
        # The pickers' draw needs at least one seat; validators_r is no longer read (seats come
        # from the pickers, docs/contract.md).
        (lambda d: d["verification"].update(seats_cap=0), "verification.seats_cap must be between 1 and"),
        (lambda d: d["verification"].update(trap_max_distance="0.000001"),
         "verification.trap_max_distance must be at least tau"),
        (lambda d: d["phases"].update(min_validators=0), "verification needs phases.min_validators >= 1"),
    ],
    ids=["missing-field", "bps", "version", "no-phases", "zero-blocks", "min-hosts", "min-over-max",
         "max-hosts", "segments", "too-many-segments", "seats-cap-zero", "trap-window", "no-validators"],
)
def test_instantiate_rejects_specs_the_epoch_logic_cannot_run(ledger_env, edit, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        ledger_env.deploy(ledger_env.instantiate_msg(spec_json=_edited(ledger_env.spec, edit)))


def test_a_second_contract_gets_its_own_run_id(ledger_env) -> None:
    spec = make_spec(min_host_stake="7000000")
    other = ledger_env.deploy(ledger_env.instantiate_msg(spec))
    assert other != ledger_env.address
    assert ledger_env.ledger.config().run_id == ledger_env.spec.run_id().hex()


def test_instantiate_opens_epoch_zero_in_join(ledger_env) -> None:
    info = ledger_env.epoch()
    assert (info.epoch, info.phase, info.model_hash) == (0, "join", INITIAL_MODEL_HASH)
    assert info.phase_deadline == info.started_at + ledger_env.spec.phases.join_blocks
    from protocol.rules.beacon import genesis_seed

    assert info.prev_seed == genesis_seed(ledger_env.spec.run_id()).hex()
    assert (info.seed, info.next_model_hash, info.agreed) == (None, None, None)


# -- bond ----------------------------------------------------------------------------------------


def test_bond_creates_member_and_moves_funds(ledger_env) -> None:
    env = ledger_env
    before = env.balance("host1") + env.fees_paid
    result = bond(env, "host1", 5_000)
    assert env.balance("host1") + env.fees_paid == before - 5_000
    assert env.balance(env.address) == 5_000
    assert env.member("host1") == Member(address=env.addr("host1"), role="host", endpoint=ENDPOINT,
                                         bonded="5000", unbonding=[])
    assert result.attribute("action") == "bond"
    assert result.attribute("member") == env.addr("host1")
    assert result.attribute("amount") == "5000"
    assert result.attribute("bonded", "wasm-stake") == "5000"
    assert env.accounting() == {"bonded": 5_000, "unbonding": 0, "reward_pool": 0}


def test_bond_again_adds_stake_and_updates_endpoint(ledger_env) -> None:
    bond(ledger_env, "validator1", 700, role="validator")
    bond(ledger_env, "validator1", 300, role="validator", endpoint="https://v1.example:443/api")
    m = member(ledger_env, "validator1")
    assert m["bonded"] == "1000"
    assert m["endpoint"] == "https://v1.example:443/api"
    ledger_env.assert_books()


@pytest.mark.parametrize(
    "funds",
    [None, {"uatom": 5_000}, {DENOM: 5_000, "uatom": 1}],
    ids=["no-funds", "wrong-denom", "two-coins"],
)
def test_bond_requires_exactly_one_coin_of_the_denom(ledger_env, funds) -> None:
    msg = {"bond": {"role": "host", "endpoint": ENDPOINT}}
    with pytest.raises(ContractError) as err:
        if funds is None:
            ledger_env.raw("host1", msg)
        else:
            ledger_env.execute_coins("host1", msg, funds)
    assert str(err.value).startswith(
        "bond: funds must be exactly one coin of denom inj with a nonzero amount, got ")
    assert member(ledger_env, "host1") is None
    assert ledger_env.balance(ledger_env.address) == 0


def test_bond_role_is_fixed(ledger_env) -> None:
    bond(ledger_env, "host1", 1_000)
    with pytest.raises(ContractError, match="bonded as host; a member's role cannot change to validator"):
        bond(ledger_env, "host1", 1_000, role="validator")
    assert member(ledger_env, "host1")["role"] == "host"
    assert member(ledger_env, "host1")["bonded"] == "1000"


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        ("ftp://host:21", "must be an http:// or https:// URL"),
        ("http://", "has no valid host"),
        ("http://host name", "printable ASCII without spaces"),
        ("http://" + "a" * 250, "longer than 256"),
        ("http://[::1", "has no valid host"),  # the endpoint that once made daemons exit
        ("http://op@127.0.0.1:8700", "no user info"),
        ("http://127.0.0.1:0", "the port must be 1-65535"),
        ("http://" + "a" * 64 + ".example", "has no valid host"),
    ],
    ids=["scheme", "empty-host", "space", "too-long", "open-bracket", "user-info", "port-0", "long-label"],
)
def test_bond_validates_endpoint(ledger_env, endpoint: str, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        bond(ledger_env, "host1", 1_000, endpoint=endpoint)


def test_bond_accepts_endpoint_of_max_length(ledger_env) -> None:
    endpoint = "http://h.example/" + "a" * (256 - len("http://h.example/"))
    bond(ledger_env, "host1", 1_000, endpoint=endpoint)
    assert member(ledger_env, "host1")["endpoint"] == endpoint


def test_unknown_message_and_fields_are_refused(ledger_env) -> None:
    with pytest.raises(ContractError, match="invalid execute message: unknown variant `stake`"):
        ledger_env.raw("host1", {"stake": {}})
    with pytest.raises(ContractError, match="invalid execute message: unknown field `amount`"):
        ledger_env.raw("host1", {"bond": {"role": "host", "endpoint": ENDPOINT, "amount": "5"}}, funds=5)
    with pytest.raises(ContractError, match="unknown variant `miner`"):
        ledger_env.raw("host1", {"bond": {"role": "miner", "endpoint": ENDPOINT}}, funds=5)


# -- unbond and claim ----------------------------------------------------------------------------


def test_unbond_moves_stake_to_an_entry_released_later(ledger_env) -> None:
    bond(ledger_env, "host1", 5_000)
    result = ledger_env.unbond("host1", 2_000)
    assert result.attribute("release_epoch") == "2"  # current epoch 0 + unbonding_epochs 2
    ledger_env.unbond("host1", 500)  # same release epoch: merged
    m = member(ledger_env, "host1")
    assert m["bonded"] == "2500"
    assert m["unbonding"] == [{"amount": "2500", "release_epoch": 2}]
    assert ledger_env.accounting() == {"bonded": 2_500, "unbonding": 2_500, "reward_pool": 0}
    ledger_env.assert_books()


@pytest.mark.parametrize(
    ("who", "msg", "funds", "message"),
    [
        ("host1", {"unbond": {"amount": "5001"}}, 0, "unbond: cannot unbond 5001inj, only 5000inj is bonded"),
        ("host1", {"unbond": {"amount": "0"}}, 0, "unbond: amount must be nonzero"),
        ("host1", {"unbond": {"amount": "-5"}}, 0, "is not an amount"),
        ("host1", {"unbond": {"amount": "0100"}}, 0, "is not an amount"),
        ("host1", {"unbond": {"amount": 100}}, 0, "invalid type: integer `100`"),
        ("host2", {"unbond": {"amount": "1"}}, 0, "is not a member"),
        ("host1", {"unbond": {"amount": "1"}}, 1, "unbond: does not accept funds, got 1inj"),
    ],
    ids=["more-than-bonded", "zero", "negative", "leading-zero", "number", "non-member", "funds"],
)
def test_unbond_refusals(ledger_env, who, msg, funds, message) -> None:
    bond(ledger_env, "host1", 5_000)
    with pytest.raises(ContractError, match=message):
        ledger_env.raw(who, msg, funds=funds)
    assert member(ledger_env, "host1")["bonded"] == "5000"


def test_claim_before_maturity_is_refused_and_pays_nothing(ledger_env) -> None:
    bond(ledger_env, "host1", 5_000)
    ledger_env.unbond("host1", 1_000)
    total = ledger_env.total_funds()
    with pytest.raises(ContractError, match="claim: nothing to claim at epoch 0; the next release is at epoch 2"):
        ledger_env.claim("host1")
    assert ledger_env.total_funds() == total
    assert member(ledger_env, "host1")["unbonding"] == [{"amount": "1000", "release_epoch": 2}]
    ledger_env.assert_books()


def test_claim_without_unbonding_is_refused(ledger_env) -> None:
    bond(ledger_env, "host1", 5_000)
    with pytest.raises(ContractError, match="has no unbonding stake"):
        ledger_env.claim("host1")
    with pytest.raises(ContractError, match="is not a member"):
        ledger_env.claim("host2")


def test_no_spec_lets_stake_be_claimed_in_the_epoch_it_was_unbonded(make_ledger_env) -> None:
    # unbonding_epochs = 0 let a cheater unbond and claim during verify, escaping every slash: the
    # minimum (MIN_UNBONDING_EPOCHS = 1) releases it only once the epoch is settled (the payout
    # itself: tests/chain/test_contract_settlement.py).
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        make_spec(unbonding_epochs=0)
    env = make_ledger_env(make_spec(unbonding_epochs=1))
    bond(env, "host1", 5_000)
    env.unbond("host1", 3_000)
    with pytest.raises(ContractError, match="nothing to claim at epoch 0; the next release is at epoch 1"):
        env.claim("host1")
    assert env.accounting() == {"bonded": 2_000, "unbonding": 3_000, "reward_pool": 0}


def test_instantiate_refuses_unbonding_zero_and_amounts_past_the_held_limit(ledger_env) -> None:
    text = _spec_text(ledger_env.spec)
    for old, new, message in [
        ('"unbonding_epochs":2', '"unbonding_epochs":0', "unbonding_epochs is 0, less than 1"),
        ('"min_host_stake":"2000000"', f'"min_host_stake":"{2**96 + 1}"', "min_host_stake is more than 2\\^96"),
    ]:
        assert old in text
        with pytest.raises(ContractError, match=message):
            ledger_env.deploy(ledger_env.instantiate_msg(spec_json=text.replace(old, new)))


@pytest.mark.parametrize(
    ("economics", "message"),
    [
        ({"min_host_stake": str(MIN_STAKE - 1)},
         "^instantiate: .*economics.min_host_stake is 999999, less than 1000000 base units: sybils would be cheap"),
        ({"min_validator_stake": "0"}, "economics.min_validator_stake is 0, less than 1000000 base units"),
        # 80 % of 3·10^6 + 1 is 2,400,000 to the hosts; 600,001 to the validators.
        ({"reward_per_epoch": "3000001", "min_host_stake": "2399999"},
         "economics.min_host_stake is 2399999, less than the hosts' part of reward_per_epoch \\(2400000\\): "
         "one host could earn more in an epoch than it stakes"),
        ({"reward_per_epoch": "3000001", "min_host_stake": "2400000", "host_reward_share_bps": 0},
         "economics.min_validator_stake is 1000000, less than the validators' part of reward_per_epoch "
         "\\(3000001\\)"),
    ],
    ids=["host-floor", "validator-floor", "host-part", "validator-part"],
)
def test_instantiate_refuses_minimum_stakes_that_make_sybils_cheap(ledger_env, economics, message: str) -> None:
    text = _edited(ledger_env.spec, lambda d: d["economics"].update(economics))
    with pytest.raises(ValidationError):  # the Python spec refuses it too
        RunSpec.from_canonical(text)
    with pytest.raises(ContractError, match=message):
        ledger_env.deploy(ledger_env.instantiate_msg(spec_json=text))


def _stake_rule_holds(econ: dict) -> bool:
    """The rule of docs/network.md, written out here independently of both implementations."""
    reward, bps = int(econ["reward_per_epoch"]), econ["host_reward_share_bps"]
    hosts = reward * bps // BPS_DENOMINATOR
    return (int(econ["min_host_stake"]) >= max(MIN_STAKE, hosts)
            and int(econ["min_validator_stake"]) >= max(MIN_STAKE, reward - hosts))


near = st.one_of(st.integers(0, 3 * MIN_STAKE), st.integers(0, 2**90))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # each example deploys anew
@given(host=near, validator=near, reward=near, bps=st.integers(0, BPS_DENOMINATOR),
       offset=st.sampled_from([-1, 0, 1, None]))
def test_random_economics_are_accepted_iff_the_stake_rule_holds_in_python_and_the_contract(
        embedded_env, host: int, validator: int, reward: int, bps: int, offset: int | None) -> None:
    if offset is not None:  # a stake at a bound, or one unit either side of it
        host = max(0, max(MIN_STAKE, reward * bps // BPS_DENOMINATOR) + offset)
    econ = {"min_host_stake": str(host), "min_validator_stake": str(validator), "reward_per_epoch": str(reward),
            "host_reward_share_bps": bps}
    holds = _stake_rule_holds(econ)
    try:
        EconomicsSpec.model_validate({**embedded_env.spec.economics.model_dump(mode="json"), **econ})
        python = True
    except ValidationError:
        python = False
    assert python == holds
    text = _edited(embedded_env.spec, lambda d: d["economics"].update(econ))
    try:
        embedded_env.deploy(embedded_env.instantiate_msg(spec_json=text))
        contract = True
    except ContractError as e:
        assert "min_host_stake" in str(e) or "min_validator_stake" in str(e), e
        contract = False
    assert contract == holds


# -- rewards -------------------------------------------------------------------------------------


def test_fund_rewards_adds_to_the_pool(ledger_env) -> None:
    result = ledger_env.fund_rewards(12_345)
    assert result.attribute("reward_pool") == "12345"
    ledger_env.fund_rewards(5, name="outsider")
    assert ledger_env.accounting()["reward_pool"] == 12_350
    ledger_env.assert_books()


# -- queries -------------------------------------------------------------------------------------


def test_members_are_listed_in_address_order_with_paging(ledger_env) -> None:
    env = ledger_env
    names = ["host1", "host2", "host3", "validator1", "validator2"]
    for name in names:
        env.bond(name, 1_000)
    everyone = env.ledger.members()
    addresses = [m.address for m in everyone]
    assert addresses == sorted(env.addr(n) for n in names)

    page1 = env.ledger.members(limit=2)
    page2 = env.ledger.members(limit=2, start_after=page1[-1].address)
    page3 = env.ledger.members(limit=2, start_after=page2[-1].address)
    assert [m.address for m in page1 + page2 + page3] == addresses

    hosts = env.ledger.members(role="host")
    assert [m.address for m in hosts] == sorted(env.addr(n) for n in names[:3])
    validators = env.ledger.members(role="validator", limit=1)
    assert len(validators) == 1 and validators[0].role == "validator"
    assert env.ledger.members(limit=0) == []


def test_member_query(ledger_env) -> None:
    assert ledger_env.member("host1") is None
    with pytest.raises(ContractError, match="member: invalid address"):
        ledger_env.ledger.member("inj1invalid")
    with pytest.raises(ContractError, match="invalid query message: unknown variant `epochz`"):
        ledger_env.ledger.backend.query({"epochz": {}})
    # Oversized input is an answer, never a trap (the VM limits keys to 64 KiB).
    with pytest.raises(ContractError, match="members: start_after is longer than an address"):
        ledger_env.ledger.members(start_after="x" * 70_000)
    with pytest.raises(ContractError, match="challenges: validator: address is 70000 bytes"):
        ledger_env.ledger.challenges(0, "x" * 70_000)


# -- atomicity and conservation ------------------------------------------------------------------


def test_rejected_execute_changes_nothing(ledger_env) -> None:
    env = ledger_env
    bond(env, "host1", 5_000)
    env.fund_rewards(100)
    total = env.total_funds()
    contract_balance = env.balance(env.address)
    members = env.ledger.members()
    accounting = env.accounting()
    # The funds attached to a refused message go back with the rest of the transaction.
    with pytest.raises(ContractError):
        bond(env, "host1", 2_000, role="validator")
    with pytest.raises(ContractError):
        env.unbond("host1", 999_999)
    assert env.total_funds() == total
    assert env.balance(env.address) == contract_balance
    assert env.ledger.members() == members
    assert env.accounting() == accounting


def test_funds_are_conserved_and_accounted(make_ledger_env) -> None:
    env = make_ledger_env(make_spec(unbonding_epochs=1))
    total = env.total_funds()
    steps = [
        lambda: bond(env, "host1", 4_000),
        lambda: bond(env, "host2", 2_500),
        lambda: bond(env, "validator1", 900, role="validator"),
        lambda: env.fund_rewards(10_000),
        lambda: env.unbond("host1", 1_500),
        lambda: bond(env, "host1", 1),
        lambda: env.unbond("validator1", 900),
    ]
    for step in steps:
        step()
        assert env.total_funds() == total
        env.assert_books()
    assert env.accounting() == {"bonded": 4_000 - 1_500 + 1 + 2_500, "unbonding": 1_500 + 900, "reward_pool": 10_000}


def test_bonds_and_fundings_past_what_the_contract_may_hold_are_refused() -> None:
    # Refused at the inflow (bond, fund_rewards) rather than overflowing later inside finalize,
    # which would refuse every later message and lock every fund (protocol.rules.limits.MAX_HELD_BITS).
    from chain.embedded import EmbeddedChain
    from chain.embedded.backend import deploy_embedded
    from protocol.keys import PrivateKey

    whale, other = PrivateKey(b"\x21" * 32), PrivateKey(b"\x22" * 32)
    spec = make_spec()
    chain = EmbeddedChain(genesis_balances={k.address(): {spec.economics.denom: 2**100} for k in (whale, other)})
    ledger = deploy_embedded(chain, whale, spec, INITIAL_MODEL_HASH, whale.address())
    ledger.bond(whale, "host", ENDPOINT, 2**96 - 10)
    ledger.fund_rewards(other, 10)  # exactly the limit
    for refused in (lambda: ledger.bond(other, "validator", ENDPOINT, 1), lambda: ledger.fund_rewards(other, 1)):
        with pytest.raises(ContractError, match=r"would hold more than 2\^96 base units"):
            refused()
    accounting = ledger.accounting()
    assert int(accounting.bonded) + int(accounting.reward_pool) == 2**96
    ledger.unbond(whale, 5)  # moving stake within the contract is not an inflow
    assert int(ledger.accounting().unbonding) == 5
