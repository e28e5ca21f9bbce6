"""The CLI against the session's devnet: joining a run someone else deployed (``run join``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from devnet_backend import faucet_key, fund_and_instantiate
from ledger_env import INITIAL_MODEL_HASH
from typer.testing import CliRunner, Result

from chain.ledger import instantiate_msg
from protocol.injective import DENOM, ONE_INJ
from protocol.keys import PrivateKey
from trainer.outer import GlobalState
from trainer.presets import tiny
from veriloco.cli import app
from veriloco.connect import ChainSettings, NetworkFile, open_ledger
from veriloco.keystore import Keystore

pytest_plugins = ["devnet_backend"]
pytestmark = pytest.mark.devnet


def invoke(*args: str, home: Path) -> Result:
    return CliRunner(env={"VERILOCO_HOME": str(home), "VERILOCO_DEBUG": None}).invoke(app, list(args))


def test_join_reads_and_checks_the_run_and_writes_the_network_file(devnet, devnet_chain, devnet_code_id,
                                                                   tmp_path) -> None:
    spec = tiny("joinable")
    theta0 = GlobalState.initial(spec).hash().hex()
    contract = fund_and_instantiate(devnet_chain, devnet_code_id, [faucet_key().address()], {DENOM: 1},
                                    instantiate_msg(spec, theta0, faucet_key().address()))
    home = tmp_path / "home"
    done = invoke("run", "join", "--node", devnet.grpc_url, "--contract", contract, "--run-id", spec.run_id().hex(),
                  "--json", home=home)
    assert done.exit_code == 0, done.output
    answer = json.loads(done.stdout)
    assert (answer["run_id"], answer["chain_id"], answer["code_is_ours"]) == (spec.run_id().hex(), devnet.chain_id,
                                                                               True)
    network = NetworkFile.model_validate_json((home / "network.json").read_text())
    assert (network.contract, network.chain.grpc, network.chain.chain_id) == (contract, devnet.grpc_url,
                                                                              devnet.chain_id)
    with open_ledger(network) as ledger:  # the written file reaches the run: what every other command does
        assert ledger.spec() == spec and ledger.epoch().epoch == 0
    shown = invoke("run", "show", home=home)
    assert shown.exit_code == 0 and "joinable" in shown.stdout

    # Unhappy paths: another run id than announced, a θ_0 the spec does not build, another chain id.
    other = invoke("run", "join", "--node", devnet.grpc_url, "--contract", contract, "--run-id", "ab" * 32,
                   "--network", str(tmp_path / "other.json"), home=home)
    assert other.exit_code == 1 and "not the run id" in other.stderr and not (tmp_path / "other.json").exists()
    forged = fund_and_instantiate(devnet_chain, devnet_code_id, [faucet_key().address()], {DENOM: 1},
                                  instantiate_msg(spec, INITIAL_MODEL_HASH, faucet_key().address()))
    refused = invoke("run", "join", "--node", devnet.grpc_url, "--contract", forged, "--network",
                     str(tmp_path / "forged.json"), home=home)
    assert refused.exit_code == 1 and "nobody could train from it" in refused.stderr
    wrong_chain = invoke("run", "join", "--node", devnet.grpc_url, "--contract", contract, "--chain-id", "other-1",
                         "--network", str(tmp_path / "x.json"), home=home)
    assert wrong_chain.exit_code == 1 and "not 'other-1'" in wrong_chain.stderr


def test_cosmos_transaction_flags_set_the_gas_the_fee_and_the_node(devnet, devnet_chain, devnet_code_id,
                                                                   tmp_path) -> None:
    """`veriloco --gas N --fees COIN …` signs with that gas limit and pays exactly that fee; --gas auto
    with --gas-adjustment pays more than the default for the same message; --node replaces the
    network file's node (a dead one is one line). The same flags after the command (where Cosmos
    CLIs take them) do the same, `run deploy`'s instantiation included."""
    spec = tiny("flags")
    host = PrivateKey(hashlib.sha256(b"cli-devnet-flags-host").digest())
    contract = fund_and_instantiate(devnet_chain, devnet_code_id, [host.address()], {DENOM: 100 * ONE_INJ},
                                    instantiate_msg(spec, INITIAL_MODEL_HASH, faucet_key().address()))
    home = tmp_path / "home"
    Keystore.in_home(home).add("host", host, "pw", scrypt_n=2**10)
    NetworkFile(chain=ChainSettings(backend="cosmos", grpc=devnet.grpc_url, chain_id=devnet.chain_id),
                contract=contract, run_id=spec.run_id().hex()).save(home / "network.json")
    runner = CliRunner(env={"VERILOCO_HOME": str(home), "VERILOCO_PASSPHRASE": "pw", "VERILOCO_DEBUG": None})

    def bond(*flags: str, after: tuple[str, ...] = ()) -> dict:
        done = runner.invoke(app, [*flags, "host", "bond", "10INJ", "--key", "host", "--endpoint",
                                   "http://127.0.0.1:8101", "--below-minimum", "--json", *after])
        assert done.exit_code == 0, done.output
        return json.loads(done.stdout)["tx"]

    fixed = bond("--gas", "900000", "--fees", "0.001INJ")
    assert fixed["fee"] == str(ONE_INJ // 1000)
    default, adjusted = bond(), bond("--gas-adjustment", "2.5")
    assert int(adjusted["fee"]) > int(default["fee"]) > 0
    dead = runner.invoke(app, ["--node", "grpc+http://127.0.0.1:9", "--timeout", "1", "run", "show"])
    assert dead.exit_code == 1 and "127.0.0.1:9" in dead.stderr and len(dead.stderr.strip().splitlines()) == 1

    assert bond(after=("--gas", "900000", "--fees", "0.001INJ"))["fee"] == str(ONE_INJ // 1000)
    priced = bond(after=("--gas", "900000", "--gas-prices", "200000000inj"))  # fee = limit × price: the limit was N
    assert priced["fee"] == str(900000 * 200000000)
    assert int(bond(after=("--gas-adjustment", "2.5"))["fee"]) > int(default["fee"])
    dead = runner.invoke(app, ["--timeout", "1", "run", "show", "--node", "grpc+http://127.0.0.1:9"])
    assert dead.exit_code == 1 and "127.0.0.1:9" in dead.stderr

    Keystore.in_home(home).add("operator", faucet_key(), "pw", scrypt_n=2**10)
    (tmp_path / "spec.json").write_bytes(spec.canonical())  # its code is stored already: instantiate only
    deployed = runner.invoke(app, ["run", "deploy", str(tmp_path / "spec.json"), "--grpc", devnet.grpc_url,
                                   "--chain-id", devnet.chain_id, "--network", str(tmp_path / "deployed.json"),
                                   "--json", "--gas", "5000000", "--gas-prices", "160000000inj"])
    assert deployed.exit_code == 0, deployed.output
    assert json.loads(deployed.stdout)["txs"]["instantiate"]["fee"] == str(5000000 * 160000000)
