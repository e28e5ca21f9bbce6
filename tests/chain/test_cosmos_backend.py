"""The cosmos backend on the devnet: deploy, the Ledger's calls, errors, sequences, fees, faults."""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

import pytest
from suite_env import named_address, named_key

from chain.cosmos import ChainConfig, CosmosBackend, CosmosChain, contract_message, injective, wasmd
from chain.cosmos.config import ETH_ACCOUNT_TYPE, embedded_base_account
from chain.cosmos.errors import CosmosTxError, classify, wrong_sequence
from chain.ledger import ContractError, Ledger, LedgerError, instantiate_msg
from chain.wasm_artifact import load_contract_wasm
from protocol.injective import MIN_GAS_PRICE
from protocol.keys import KeyType, keccak256
from protocol.rules.spec import RunSpec

pytest_plugins = ["devnet_backend"]

BOND = 5_000


def spec(**economics: Any) -> RunSpec:
    return RunSpec.model_validate({
        "name": "cosmos-backend-test",
        "model": {},
        "data": {"corpus": "test", "dataset_hash": "0" * 64, "seq_len": 16},
        "train": {"inner_steps": 4, "segment_steps": 2, "batch_size": 2, "lr": "0.001"},
        "economics": {"denom": "inj", "min_host_stake": "2000000", "min_validator_stake": "1000000",
                      "unbonding_epochs": 2, **economics},
    })


def assert_solvent(c) -> None:
    """The contract's bank balance equals what it owes."""
    assert c.balance(c.address) == c.holdings()


# -- pure: errors and config ----------------------------------------------------------------------


def test_contract_message_is_parsed_out_of_every_node_text():
    deliver = ("failed to execute message; message index: 0: unbond: cannot unbond 9inj, only 5inj is bonded: "
               "execute wasm contract failed")
    simulate = (deliver + " [!injective!labs/wasmd@v0.53.3-inj.3/x/wasm/keeper/keeper.go:457] "
                "With gas wanted: '10000000' and gas used: '100987' ")
    query = "invalid query message: unknown variant `nope`: query wasm contract failed"
    grpc = "rpc error: code = Unknown desc = " + deliver
    for text in (deliver, simulate, grpc):
        assert contract_message(text) == "unbond: cannot unbond 9inj, only 5inj is bonded"
    assert contract_message(query) == "invalid query message: unknown variant `nope`"
    # A message with colons of its own stays whole.
    assert contract_message("failed to execute message; message index: 0: join: a: b: c: execute wasm contract "
                            "failed") == "join: a: b: c"
    assert contract_message("spendable balance 5inj is smaller than 10inj: insufficient funds") is None
    assert isinstance(classify(deliver), ContractError) and classify(deliver).raw_log == deliver
    other = classify("out of gas in location: wasm; gasWanted: 5, gasUsed: 9", code=11, codespace="sdk")
    assert isinstance(other, CosmosTxError) and not isinstance(other, ContractError)
    assert "code sdk/11" in str(other)
    assert wrong_sequence("account sequence mismatch, expected 7, got 5: incorrect account sequence") == 7


def test_chain_config_gas_and_fees():
    cfg = injective("x")
    assert cfg.gas_limit(100_000) == 180_000  # 1.3 × 100k + 50k
    assert cfg.fee(180_000) == 180_000 * MIN_GAS_PRICE
    assert cfg.with_(max_gas_per_tx=150_000).gas_limit(100_000) == 150_000
    w = wasmd("wasm-1")
    assert (w.prefix, w.denom, w.fee(1000)) == ("wasm", "stake", 25)
    with pytest.raises(ValueError, match="unknown account type"):
        w.decode_account(ETH_ACCOUNT_TYPE, b"")


def test_eth_account_is_unwrapped_to_its_base_account():
    from cosmpy.protos.cosmos.auth.v1beta1.auth_pb2 import BaseAccount

    base = BaseAccount(address="inj1xyz", account_number=7, sequence=42)
    inner = base.SerializeToString()
    # EthAccount { base_account = 1; code_hash = 2 }, serialized by hand.
    eth = bytes([0x0A, len(inner)]) + inner + bytes([0x12, 3]) + b"abc"
    decoded = injective("x").decode_account(ETH_ACCOUNT_TYPE, eth)
    assert (decoded.account_number, decoded.sequence) == (7, 42)
    assert embedded_base_account(1)(eth) == base
    assert isinstance(ChainConfig(chain_id="y"), ChainConfig)


@pytest.mark.parametrize("key_type, type_url, digest", [
    (KeyType.SECP256K1, "/cosmos.crypto.secp256k1.PubKey", lambda b: hashlib.sha256(b).digest()),
    (KeyType.ETH_SECP256K1, "/injective.crypto.v1beta1.ethsecp256k1.PubKey", keccak256),
])
def test_transactions_carry_the_key_types_public_key_and_hash(key_type, type_url, digest):
    # What the node checks (tests/chain/test_keys_devnet.py sends both kinds to injectived).
    import ecdsa
    from cosmpy.protos.cosmos.bank.v1beta1.tx_pb2 import MsgSend
    from cosmpy.protos.cosmos.crypto.secp256k1.keys_pb2 import PubKey
    from cosmpy.protos.cosmos.tx.v1beta1.tx_pb2 import AuthInfo, SignDoc, TxRaw

    key = named_key("alice", key_type)
    with CosmosChain("grpc+http://127.0.0.1:1", injective("c-1")) as chain:  # never connects
        raw = TxRaw.FromString(chain._sign(key, 7, 3, [MsgSend(from_address=key.address())], 100_000, 5, ""))
        auth = AuthInfo.FromString(raw.auth_info_bytes)
        signer = auth.signer_infos[0]
        assert signer.public_key.type_url == type_url and signer.sequence == 3
        assert PubKey.FromString(signer.public_key.value).key == key.public_key.compressed
        sign_doc = SignDoc(body_bytes=raw.body_bytes, auth_info_bytes=raw.auth_info_bytes, chain_id="c-1",
                           account_number=7).SerializeToString()
        # An independent verifier (python-ecdsa) over the key type's digest of the SignDoc.
        theirs = ecdsa.VerifyingKey.from_string(key.public_key.compressed, curve=ecdsa.SECP256k1)
        assert theirs.verify_digest(raw.signatures[0], digest(sign_doc))
    # A chain that knows only plain keys refuses an eth key before anything is sent.
    with CosmosChain("grpc+http://127.0.0.1:1", wasmd("w-1")) as chain:
        if key_type == KeyType.ETH_SECP256K1:
            with pytest.raises(LedgerError, match="takes no eth_secp256k1 keys"):
                chain._sign(key, 7, 3, [], 100_000, 5, "")
        else:
            assert chain._sign(key, 7, 3, [], 100_000, 5, "")


# -- on the devnet --------------------------------------------------------------------------------


@pytest.mark.devnet
def test_deploy_reuses_code_with_the_same_checksum(devnet_chain, devnet_code_id, devnet_deploy):
    wasm = load_contract_wasm()
    operator = devnet_deploy(spec(), names=("operator", "treasury")).key("operator")
    code_id, upload = devnet_chain.store_code(operator, wasm)
    # Reused, not uploaded again: the newest code with this checksum (the session's code, or a
    # later upload of the same bytes by another test, e.g. a migration to the committed wasm).
    assert upload is None
    assert code_id == devnet_chain.find_code(hashlib.sha256(wasm).digest()) >= devnet_code_id
    assert devnet_chain.find_code(b"\0" * 32) is None
    backend = CosmosBackend.deploy(devnet_chain, operator,
                                   instantiate_msg(spec(), "ab" * 32, operator.address()))
    ledger = Ledger(backend)
    # Injective's contract addresses are 20 bytes (wasmd's are 32).
    assert backend.contract_address.startswith("inj1") and len(backend.contract_address) == 42
    assert ledger.config().initial_model_hash == "ab" * 32
    assert ledger.spec() == spec()


@pytest.mark.devnet
def test_staking_and_every_query_through_the_ledger(devnet_deploy):
    c = devnet_deploy(spec(unbonding_epochs=1))
    ledger = c.ledger
    held = sum(ledger.balance(a) for a in c.accounts.values()) + ledger.balance(c.address)
    host, validator, funder = c.key("host1"), c.key("validator1"), c.key("funder")
    results = []

    r = ledger.bond(host, "host", "http://host1:8000", BOND)
    results.append(r)
    assert r.gas_used > 0 and r.fee > 0 and r.height > 0 and len(r.tx_hash) == 64
    assert r.attribute("action") == "bond" and r.attribute("bonded") == str(BOND)
    assert r.attribute("amount", "wasm-stake") == str(BOND)
    results.append(ledger.bond(validator, "validator", "http://validator1:8000", 700))
    assert_solvent(c)

    config = ledger.config()
    assert config.denom == "inj" and config.treasury == c.addr("treasury") and config.admin is None
    assert config.run_id == spec(unbonding_epochs=1).run_id().hex()
    member = ledger.member(host.address())
    assert member is not None and member.role == "host" and int(member.bonded) == BOND
    assert member.endpoint == "http://host1:8000"
    assert ledger.member(c.addr("outsider")) is None
    assert {m.address for m in ledger.members()} == {host.address(), validator.address()}
    assert [m.address for m in ledger.members(role="validator")] == [validator.address()]
    first = ledger.members(limit=1)
    assert len(first) == 1 and ledger.members(start_after=first[0].address)[0].address != first[0].address

    results.append(ledger.unbond(host, 2_000))
    acc = ledger.accounting()
    assert (int(acc.bonded), int(acc.unbonding), int(acc.reward_pool)) == (BOND - 2_000 + 700, 2_000, 0)
    assert_solvent(c)
    # Released at epoch 1 at the earliest (MIN_UNBONDING_EPOCHS); refused while simulating, so no
    # transaction reaches a block and nothing is paid.
    with pytest.raises(ContractError, match="nothing to claim at epoch 0; the next release is at epoch 1") as no:
        ledger.claim(host)
    assert no.value.fee == 0
    results.append(ledger.fund_rewards(funder, 123))
    assert int(ledger.accounting().reward_pool) == 123
    assert_solvent(c)
    assert ledger.height() >= results[0].height and ledger.denom == "inj"
    # Conservation: the accounts and the contract hold what they held, less the fees paid.
    after = sum(ledger.balance(a) for a in c.accounts.values()) + ledger.balance(c.address)
    assert after + sum(r.fee for r in results) == held
    # The fee is exactly gas limit × 1.6e8 inj (the chain's minimum gas price).
    assert all(r.fee % MIN_GAS_PRICE == 0 and r.fee // MIN_GAS_PRICE > r.gas_used for r in results)


@pytest.mark.devnet
def test_fees_are_accounted_exactly(devnet_deploy):
    c = devnet_deploy(spec())
    total = c.total_funds()
    c.execute("host1", {"bond": {"role": "host", "endpoint": "http://h"}}, BOND)
    c.execute("host2", {"bond": {"role": "host", "endpoint": "http://h2"}}, BOND + 1)
    c.execute("funder", {"fund_rewards": {}}, 77)
    c.execute("host1", {"unbond": {"amount": "10"}})
    # A refusal inside a block (explicit gas: no simulation first) costs its fee too.
    with pytest.raises(ContractError, match="cannot unbond") as refused:
        c.execute("host2", {"unbond": {"amount": str(10**9)}}, gas_limit=400_000)
    assert refused.value.fee == 400_000 * MIN_GAS_PRICE
    # A refusal found by simulation costs nothing.
    with pytest.raises(ContractError, match="nothing to claim"):
        c.execute("host1", {"claim": {}})
    assert c.total_funds() == total
    assert_solvent(c)
    assert c.fees_paid > 0


@pytest.mark.devnet
def test_contract_errors_reach_the_caller_verbatim(devnet_deploy):
    c = devnet_deploy(spec(), names=("operator", "treasury", "host1"))
    ledger = c.ledger
    host = c.key("host1")
    with pytest.raises(ContractError) as err:
        ledger.unbond(host, 5)
    assert str(err.value) == f"unbond: {host.address()} is not a member"
    with pytest.raises(ContractError) as err:
        c.execute("host1", {"bond": {"role": "host", "endpoint": "http://h"}}, {"uatom": 5})
    assert str(err.value) == "bond: funds must be exactly one coin of denom inj with a nonzero amount, got 5uatom"
    with pytest.raises(ContractError, match=r"^claim: "):
        ledger.claim(host)
    with pytest.raises(ContractError, match="unknown variant `nope`"):
        c.query({"nope": {}})
    # Not the contract: the bank refuses, and that is a LedgerError but not a ContractError.
    with pytest.raises(LedgerError) as err:
        ledger.bond(host, "host", "http://h", 10**30)
    assert not isinstance(err.value, ContractError) and "insufficient funds" in str(err.value)
    with pytest.raises(ContractError, match=r"^instantiate: "):
        c.deploy(c.instantiate_msg(denom="uatom"))
    assert ledger.member(host.address()) is None and c.accounting() == {"bonded": 0, "unbonding": 0,
                                                                          "reward_pool": 0}


@pytest.mark.devnet
def test_one_account_pipelines_many_transactions(devnet_deploy):
    c = devnet_deploy(spec(), names=("operator", "treasury", "funder", "host1"))
    backend: CosmosBackend = c.backend
    funder, host = c.key("funder"), c.key("host1")
    pending = [backend.submit(funder, {"fund_rewards": {}}, 100 + i) for i in range(12)]
    assert [p.sequence for p in pending] == list(range(pending[0].sequence, pending[0].sequence + 12))
    # Dependent messages need an explicit gas limit: a simulation sees only committed state.
    bond = backend.submit(host, {"bond": {"role": "host", "endpoint": "http://h"}}, BOND, gas_limit=400_000)
    unbond = backend.submit(host, {"unbond": {"amount": "1000"}}, gas_limit=400_000)
    results = [backend.wait(p) for p in pending]
    # Several transactions share a block (submitted one at a time, waiting for each, they would take
    # a block each). How many blocks they span depends on the machine's load, so the bound is loose.
    assert len({r.height for r in results}) <= len(results) // 2
    assert backend.wait(bond).height <= backend.wait(unbond).height
    assert int(c.ledger.accounting().reward_pool) == sum(100 + i for i in range(12))
    assert int(c.ledger.member(host.address()).bonded) == BOND - 1000
    assert_solvent(c)


@pytest.mark.devnet
def test_sequence_mismatch_is_recovered(devnet, devnet_deploy):
    c = devnet_deploy(spec(), names=("operator", "treasury", "funder"))
    funder = c.key("funder")
    c.execute("funder", {"fund_rewards": {}}, 1)  # the backend now caches funder's sequence
    # Another client uses the same account behind this one's back.
    with devnet.connect() as other:
        other.execute_contract(funder, c.address, {"fund_rewards": {}}, 2)
        other.execute_contract(funder, c.address, {"fund_rewards": {}}, 3)
    c.execute("funder", {"fund_rewards": {}}, 4)  # stale sequence -> mismatch -> re-sync -> success
    # The same with an explicit gas limit (the mismatch then comes from CheckTx, not the simulation).
    with devnet.connect() as other:
        other.execute_contract(funder, c.address, {"fund_rewards": {}}, 5)
    c.execute("funder", {"fund_rewards": {}}, 6, gas_limit=300_000)
    assert c.accounting()["reward_pool"] == 21


@pytest.mark.devnet
def test_unreachable_node_is_a_ledger_error(devnet):
    chain = CosmosChain("grpc+http://127.0.0.1:1", injective(devnet.chain_id), reconnect_timeout=0.5)
    with pytest.raises(LedgerError, match=r"did not answer within 0\.5 s"):
        chain.height()
    with pytest.raises(LedgerError):
        chain.balance(named_address("alice"))
    chain.close()


@pytest.mark.devnet
def test_a_transaction_the_tx_index_lost_is_found_in_its_block(devnet_deploy, monkeypatch):
    """A node stopped between committing a block and indexing it never indexes its transactions
    (seen on this devnet); the result then comes from the block and CometBFT's block_results."""
    import chain.cosmos.chain as chain_module

    c = devnet_deploy(spec(), names=("operator", "treasury", "funder"))
    monkeypatch.setattr(chain_module, "_RECHECK_AFTER_S", 0.3)
    real_get_tx = c.chain._get_tx
    monkeypatch.setattr(c.chain, "_get_tx", lambda tx_hash: None)
    pending = c.backend.submit(c.key("funder"), {"fund_rewards": {}}, 42)
    misses = c.chain.index_misses
    result = c.backend.wait(pending)
    assert c.chain.index_misses == misses + 1
    assert result.attribute("action") == "fund_rewards" and result.gas_used > 0
    monkeypatch.setattr(c.chain, "_get_tx", real_get_tx)
    indexed = c.backend.wait(pending)  # the same transaction, through the tx index
    assert (indexed.height, indexed.gas_used, indexed.fee) == (result.height, result.gas_used, result.fee)
    assert indexed.events == result.events
    # In-block failures are read from block_results too.
    monkeypatch.setattr(c.chain, "_get_tx", lambda tx_hash: None)
    failing = c.backend.submit(c.key("funder"), {"unbond": {"amount": "1"}}, gas_limit=300_000)
    with pytest.raises(ContractError, match="is not a member"):
        c.backend.wait(failing)


@pytest.mark.devnet
def test_restart_in_the_middle_of_a_sequence_loses_nothing(devnet, devnet_deploy):
    """The node stops and restarts (same home) while one account sends contract transactions, some
    of them in flight: the client reconnects, re-broadcasts what the node dropped, and every
    transaction lands exactly once."""
    c = devnet_deploy(spec(), names=("operator", "treasury", "funder", "host1"))
    ledger = c.ledger
    funder, host = c.key("funder"), c.key("host1")
    ledger.bond(host, "host", "http://h", BOND)
    total = c.total_funds()

    def bounce() -> None:
        time.sleep(0.6)
        devnet.stop()
        time.sleep(1.0)
        devnet.start()

    bouncer = threading.Thread(target=bounce)
    bouncer.start()
    results = []
    for i in range(12):  # sequential sends across the outage (~0.2 s each while the node is up)
        results.append(c.execute("funder", {"fund_rewards": {}}, 10 + i))
    bouncer.join()
    assert devnet.status().running
    assert c.chain.client.outages >= 1, "the outage went unnoticed: the test did not test it"
    # Pipelined transactions in the mempool when the node goes down are re-broadcast. Right after
    # a block the next proposal is ~200 ms away, so they are still in the mempool when it stops.
    c.ledger.wait_for_height(c.ledger.height() + 1)
    rebroadcasts = c.chain.rebroadcasts
    pending = [c.backend.submit(funder, {"fund_rewards": {}}, 1, gas_limit=250_000) for _ in range(5)]
    devnet.stop()
    devnet.start()
    results += [c.backend.wait(p) for p in pending]
    for p in pending:
        c.fees[funder.address()] += p.fee
    assert all(r.fee > 0 for r in results)
    assert c.chain.rebroadcasts >= rebroadcasts + 1
    assert c.accounting()["reward_pool"] == sum(10 + i for i in range(12)) + 5
    assert int(ledger.member(host.address()).bonded) == BOND
    assert c.total_funds() == total
    assert_solvent(c)
    # The account's sequence equals the transactions it sent: nothing twice, nothing lost.
    _, sequence = c.chain.account(funder.address())
    assert sequence == 12 + 5


@pytest.mark.devnet
def test_restart_during_the_train_phase_then_the_epoch_completes(devnet, devnet_deploy):
    """The node restarts while hosts are committing in the train phase; the epoch then runs to
    its end (reveal, verify, propose) and the books balance."""
    from ledger_env import DEFAULT_NAMES, LedgerEnv, digest, make_spec

    env = LedgerEnv(devnet_deploy(make_spec(), DEFAULT_NAMES))
    hosts, validators = ["host1", "host2", "host3"], ["validator1", "validator2"]
    env.bond_all(hosts + validators)
    env.fund_rewards(10_000)
    total = env.total_funds()
    e = env.play_epoch(hosts, validators, stop_after="join")
    assert env.epoch(e).phase == "train"

    env.commit(hosts[0], e)
    # Stop the node before the next commits (not after a delay: on a loaded machine a timed stop
    # may land after them) and bring it back while the client is retrying.
    devnet.stop()

    def restart() -> None:
        time.sleep(1.0)
        devnet.start()

    restarter = threading.Thread(target=restart)
    restarter.start()
    outages = env.driver.chain.client.outages
    for name in hosts[1:]:  # the first of these meets the stopped node
        env.commit(name, e)
    restarter.join()
    assert env.driver.chain.client.outages > outages
    assert env.epoch(e).phase == "reveal"  # every host committed: train closed early
    assert sorted(env.epoch(e).committed) == sorted(env.addr(h) for h in hosts)

    for name in hosts + validators:
        env.reveal(name, e)
    assert env.epoch(e).phase == "verify"
    for name in validators:  # commit every verdict, then open every one
        for challenge in env.challenges(name, e):
            env.commit_verdict(name, challenge.host, challenge.segment, "pass", epoch=e)
    assert env.epoch(e).phase == "objection"
    for name in validators:  # seated validators say they are done (no objection)
        if env.ledger.participant(env.addr(name), e).ready_due:
            env.ready(name, e)
    for name in hosts:
        env.open_traps(name, e)
    assert env.epoch(e).phase == "verdict_reveal"
    for name in validators:
        for challenge in env.challenges(name, e):
            env.reveal_verdict(name, challenge.host, challenge.segment, epoch=e)
    assert env.epoch(e).phase == "propose"
    for address in env.epoch(e).accepted:
        env.propose(env.name_of(address), digest(f"theta:{e + 1}"), e)
    done = env.epoch(e)
    assert done.agreed and done.next_model_hash == digest(f"theta:{e + 1}")
    assert env.current() == e + 1 and env.epoch().phase == "join"
    assert sorted(done.accepted) == sorted(env.addr(h) for h in hosts)
    assert env.total_funds() == total
    env.assert_books()


@pytest.mark.devnet
def test_a_simulated_tx_that_runs_out_of_gas_in_its_block_is_sent_again(devnet_deploy, monkeypatch):
    """Another participant's message can land first and make ours close a phase, which costs
    more than its simulation saw; the backend re-simulates and resends once, and both fees count."""
    c = devnet_deploy(spec(), names=("operator", "treasury", "funder"))
    total = c.total_funds()
    simulated: list[int] = []
    real = ChainConfig.gas_limit

    def stingy_first(self: ChainConfig, gas: int) -> int:
        simulated.append(gas)
        return gas if len(simulated) == 1 else real(self, gas)  # the bare simulation under-reports

    monkeypatch.setattr(ChainConfig, "gas_limit", stingy_first)
    retries = c.chain.out_of_gas_retries
    result = c.execute("funder", {"fund_rewards": {}}, 5)
    assert c.chain.out_of_gas_retries == retries + 1 and len(simulated) == 2
    assert result.fee == (simulated[0] + real(c.chain.config, simulated[1])) * MIN_GAS_PRICE
    assert c.accounting()["reward_pool"] == 5
    assert c.total_funds() == total


def test_a_call_after_close_is_a_ledger_error_not_a_value_error():
    # A daemon stopping closes its client while its server may still answer a request (a member
    # lookup): that call must be a LedgerError, which the lookup answers as "not a member", not
    # grpc's ValueError, which went up through the server as a traceback (CI, test_stop_restart).
    chain = CosmosChain("grpc+http://127.0.0.1:1", injective("injective-777"), reconnect_timeout=0.5)
    chain.close()
    with pytest.raises(LedgerError, match="closed"):
        chain.height()
