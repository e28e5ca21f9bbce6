"""The CLI against the session's devnet: joining a run someone else deployed (``run join``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from devnet_backend import faucet_key, fund_and_instantiate
from ledger_env import INITIAL_MODEL_HASH
from typer.testing import CliRunner, Result

from chain.ledger import instantiate_msg
from protocol.injective import DENOM
from trainer.outer import GlobalState
from trainer.presets import tiny
from veriloco.cli import app
from veriloco.connect import NetworkFile, open_ledger

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
