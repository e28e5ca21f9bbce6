"""``veriloco run template|deploy|show``: the operator starts a run and inspects it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import tomli_w
import typer

from chain.devnet import Devnet
from chain.ledger import Ledger, instantiate_msg
from protocol.rules.spec import RunSpec
from trainer.outer import GlobalState
from trainer.presets import PRESETS, preset
from veriloco.commands.common import Home, Json, KeyName, Network, open_key, parse_amount, read_spec_file
from veriloco.connect import ChainSettings, NetworkFile, cosmos_chain, load_network, network_path, open_ledger
from veriloco.errors import CommandError
from veriloco.home import home_dir
from veriloco.output import console, print_json, table
from veriloco.report import amount

app = typer.Typer(help="Start a run (deploy the contract with a run spec) and inspect it.", no_args_is_help=True)


@app.command("template")
def template(
    preset_name: Annotated[str, typer.Option("--preset", help=f"one of {', '.join(PRESETS)}")] = "demo",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="write here instead of stdout")] = None,
) -> None:
    """Print a complete run spec as TOML, to edit and deploy."""
    text = tomli_w.dumps(preset(preset_name).model_dump(mode="json"))
    if out:
        out.write_text(text)
        console.print(f"wrote {out}")
    else:
        print(text, end="")


@app.command("deploy")
def deploy(
    spec_file: Annotated[Path | None, typer.Argument(help="run spec (TOML, or canonical JSON)")] = None,
    preset_name: Annotated[str | None, typer.Option("--preset", help="deploy a preset instead of a file")] = None,
    key: KeyName = "operator",
    treasury: Annotated[str | None, typer.Option(help="treasury address (default: the operator)")] = None,
    fund: Annotated[str | None, typer.Option(help="fund the reward pool with this amount (e.g. 10INJ)")] = None,
    devnet: Annotated[bool, typer.Option("--devnet", help="use the local devnet of <home>/devnet")] = False,
    grpc: Annotated[str | None, typer.Option(help="gRPC URL of a node, e.g. grpc+http://127.0.0.1:9900")] = None,
    rpc: Annotated[str | None, typer.Option(help="CometBFT RPC URL of the node")] = None,
    chain_id: Annotated[str | None, typer.Option(help="chain id")] = None,
    network: Network = None,
    home: Home = None,
    json: Json = False,
) -> None:
    """Deploy the contract for a run spec on a Cosmos chain and write the network file."""
    if (spec_file is None) == (preset_name is None):
        raise CommandError("give a spec file or --preset (one of them)")
    spec = read_spec_file(spec_file) if spec_file else preset(preset_name or "")
    if devnet:
        node = Devnet.open(home_dir(home) / "devnet")
        grpc, rpc, chain_id = node.grpc_url, node.rpc_url, node.chain_id
    if not grpc or not chain_id:
        raise CommandError("where to deploy? pass --devnet, or --grpc and --chain-id")
    settings = ChainSettings(backend="cosmos", grpc=grpc, rpc=rpc, chain_id=chain_id)
    operator = open_key(key, home)
    theta0 = GlobalState.initial(spec).hash().hex()
    from chain.cosmos import CosmosBackend  # noqa: PLC0415 (cosmpy loads only for a deployment)

    chain = cosmos_chain(settings)
    try:
        msg = instantiate_msg(spec, theta0, treasury or operator.address(chain.config.prefix), admin=None)
        ledger = Ledger(CosmosBackend.deploy(chain, operator, msg))
        if fund:
            ledger.fund_rewards(operator, parse_amount(fund, spec.economics.denom))
        net = NetworkFile(chain=settings, contract=ledger.contract_address, run_id=spec.run_id().hex())
        path = net.save(network_path(network, home))
    finally:
        chain.close()
    if json:
        print_json({"contract": net.contract, "run_id": net.run_id, "initial_model_hash": theta0,
                    "network_file": str(path)})
    else:
        console.print(f"deployed run [bold]{spec.name}[/] ({net.run_id[:16]}…) at {net.contract}\n"
                      f"θ_0 {theta0[:16]}…; network file {path}")


@app.command("show")
def show(network: Network = None, home: Home = None, json: Json = False) -> None:
    """The run's spec, holdings and current epoch."""
    net = load_network(network, home)
    with open_ledger(net) as ledger:
        config, accounting, info = ledger.config(), ledger.accounting(), ledger.epoch()
        spec = RunSpec.from_canonical(config.spec_json)
        members = ledger.members()
    if json:
        print_json({"config": config, "spec": spec, "accounting": accounting, "epoch": info,
                    "members": members})
        return
    d = spec.economics.denom
    console.print(f"[bold]run[/] {spec.name}  id {config.run_id}\n[bold]contract[/] {net.contract} "
                  f"({net.chain.backend})\n[bold]model[/] {spec.model.factory} {spec.model.params}\n"
                  f"[bold]epoch[/] H={spec.train.inner_steps} c={spec.train.segment_steps} "
                  f"S={spec.train.segments}; k={spec.verification.challenges_k} r={spec.verification.validators_r} "
                  f"τ={spec.verification.tau}; rule {spec.aggregation.rule}; quantization {spec.quantization.scheme}\n"
                  f"[bold]holdings[/] bonded {amount(accounting.bonded, d)}, unbonding "
                  f"{amount(accounting.unbonding, d)}, reward pool {amount(accounting.reward_pool, d)}\n"
                  f"[bold]now[/] epoch {info.epoch}, phase {info.phase} until height {info.phase_deadline}")
    console.print(table("members", ["address", "role", "bonded", "endpoint", "slashed", "rewarded"],
                        [[m.address, m.role, amount(m.bonded, d), m.endpoint, amount(m.slashed_total, d),
                          amount(m.rewarded_total, d)] for m in members]))
