"""``veriloco run join``: write the network file of a run someone else deployed, from the chain,
after checking what the chain says about it (``veriloco.join``)."""

from __future__ import annotations

from typing import Annotated

import typer

from veriloco.commands.common import Home, Json, Network
from veriloco.commands.tx_flags import AFTER, merge
from veriloco.connect import network_from_node, network_path, open_ledger
from veriloco.output import console, err_console, print_json


def join(
    node: Annotated[str, typer.Option("--node", help="gRPC URL of a node of the run's chain, e.g. "
                                                     "grpc+https://grpc.example.org:443")],
    contract: Annotated[str, typer.Option("--contract", help="the run's contract address")],
    run_id: Annotated[str | None, typer.Option(
        "--run-id", help="the run id the operator announced (hex): refuse a contract running another")] = None,
    rpc: Annotated[str | None, typer.Option(help="CometBFT RPC URL of the node (optional)")] = None,
    chain_id: Annotated[str | None, typer.Option(help="the chain id (default: the node's)")] = None,
    any_code: Annotated[bool, typer.Option(
        "--any-code", help="join a contract whose code is not the wasm this veriloco ships")] = False,
    network: Network = None, home: Home = None, json: Json = False,
) -> None:
    """Join a run deployed by someone else: read its spec from the contract, check it (its hash is
    the run id; θ_0 is the spec's model; the contract runs this veriloco's code), write the network
    file. Then bond and run a daemon as docs/operators.md shows."""
    from chain.wasm_artifact import load_contract_wasm  # noqa: PLC0415 (read only to check the contract's code)
    from veriloco.join import check_run, wasm_checksum  # noqa: PLC0415 (as above)

    merge({"node": node}, AFTER)  # the node asked, and the one `veriloco --node` names, must be one
    net = network_from_node(node, contract, rpc=rpc, chain_id=chain_id)
    found_id = net.chain.chain_id
    err_console.print(f"join: reading run {contract} on {found_id} via {node}…", highlight=False)
    with open_ledger(net) as ledger:
        config = ledger.config()
        checksum = ledger.backend.chain.contract_checksum(contract)  # type: ignore[attr-defined]
    err_console.print("join: building θ_0 of the run's spec to check its hash (loads torch)…", highlight=False)
    from protocol.rules.spec import RunSpec  # noqa: PLC0415 (light)
    from trainer.outer import GlobalState  # noqa: PLC0415 (torch loads only to check θ_0)

    try:
        theta0: str | None = GlobalState.initial(RunSpec.from_canonical(config.spec_json)).hash().hex()
    except ValueError:  # a spec that does not parse: check_run says so
        theta0 = None
    checked = check_run(config, theta0_hash=theta0, code_checksum=checksum,
                        our_checksum=wasm_checksum(load_contract_wasm()), expected_run_id=run_id, any_code=any_code)
    path = net.model_copy(update={"run_id": checked.run_id}).save(network_path(network, home))
    if json:
        print_json({"network_file": str(path), "contract": contract, "chain_id": found_id, "run_id": checked.run_id,
                    "spec": checked.spec, "initial_model_hash": checked.initial_model_hash,
                    "code_checksum": checked.code_checksum, "code_is_ours": checked.code_is_ours})
        return
    console.print(f"joined run [bold]{checked.spec.name}[/] ({checked.run_id}) at {contract} on {found_id}\n"
                  f"checked: the spec hashes to the run id; θ_0 {checked.initial_model_hash[:16]}… is the spec's "
                  f"model; the contract runs {'this veriloco' if checked.code_is_ours else 'OTHER'} code "
                  f"({checked.code_checksum[:16]}…)\nnetwork file {path}; next: veriloco host bond AMOUNT --key "
                  "NAME --endpoint URL (or validator bond), then host run / validator run", highlight=False)
