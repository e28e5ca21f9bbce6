"""``veriloco run template|fingerprint|class|deploy|show|migrate``: the operator starts a run, inspects it,
and (the chain admin of a run deployed with one) upgrades its contract."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any

import tomli_w
import typer
from pydantic import ValidationError

from chain.ledger import Ledger, instantiate_msg
from chain.wasm_artifact import load_contract_wasm
from protocol.coins import display, parse_amount
from protocol.rules.spec import RunSpec
from trainer.presets import PRESETS, preset
from veriloco.commands import tx_flags
from veriloco.commands.common import (
    AMOUNT_HELP,
    Device,
    Home,
    Json,
    KeyName,
    Network,
    check_device,
    key_names,
    open_key,
    read_spec_file,
)
from veriloco.connect import TX, ChainSettings, NetworkFile, cosmos_chain, load_network, network_path, open_ledger
from veriloco.errors import CommandError
from veriloco.home import home_dir
from veriloco.output import console, err_console, print_json, table, tx_json, tx_line

app = typer.Typer(help="Start a run (deploy the contract with a run spec) and inspect it.", no_args_is_help=True)


def with_settings(spec: RunSpec, settings: list[str]) -> RunSpec:
    """``spec`` with ``SECTION.FIELD=VALUE`` settings applied; a value is read as TOML (``2``,
    ``true``, ``"text"``), or else taken as a string; a fraction stays the string it was written as
    (``train.lr=3e-3``), as run specs hold no floats.

    Raises:
        CommandError: a setting that is not ``SECTION.FIELD=VALUE``, or a spec the change makes invalid.
    """
    changes: dict[str, dict[str, Any]] = {}
    for setting in settings:
        path, sep, raw = setting.partition("=")
        section, dot, name = path.strip().partition(".")
        if not sep or not dot or not section or not name:
            raise CommandError(f"--set {setting!r}: expected SECTION.FIELD=VALUE, e.g. phases.min_hosts=2")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        if isinstance(value, float):
            value = raw.strip()
        changes.setdefault(section, {})[name] = value
    try:
        return spec.with_changes(**changes)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise CommandError(f"--set: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


@app.command("template")
def template(
    preset_name: Annotated[str, typer.Option("--preset", help=f"one of {', '.join(PRESETS)}")] = "demo",
    settings: Annotated[list[str] | None, typer.Option(
        "--set", help="change a field: SECTION.FIELD=VALUE, e.g. phases.min_hosts=2 (repeatable)")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="write here instead of stdout")] = None,
    json: Json = False,
) -> None:
    """Print a complete run spec as TOML, to edit and deploy (with --json: the spec and its run id)."""
    try:
        spec = preset(preset_name)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    spec = with_settings(spec, settings or [])
    text = tomli_w.dumps(spec.model_dump(mode="json"))
    if json:
        if out:
            out.write_text(text)
        print_json({"spec": spec, "run_id": spec.run_id().hex(), **({"file": str(out)} if out else {})})
        return
    if out:
        out.write_text(text)
        err_console.print(f"wrote {out}", highlight=False)
    else:
        print(text, end="")


def _spec_from(spec_file: Path | None, preset_name: str | None) -> RunSpec:
    if (spec_file is None) == (preset_name is None):
        raise CommandError("give a spec file or --preset (one of them)")
    try:
        return read_spec_file(spec_file) if spec_file else preset(preset_name or "")
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def _local_fingerprint(spec: RunSpec, device: str) -> str:
    check_device(device)
    from trainer.determinism import configure  # noqa: PLC0415 (torch loads only to compute it)
    from trainer.fingerprint import compute_fingerprint  # noqa: PLC0415 (as above)

    configure(device=device)
    return compute_fingerprint(spec, device)


@app.command("fingerprint")
def fingerprint(
    spec_file: Annotated[Path | None, typer.Argument(help="run spec (TOML, or canonical JSON)")] = None,
    preset_name: Annotated[str | None, typer.Option("--preset", help="a preset instead of a file")] = None,
    device: Device = "cpu",
    json: Json = False,
) -> None:
    """This machine's compute fingerprint for a run spec: two steps of the run's model, which
    machines of one compute profile compute bit for bit. Pin it in a run with `deploy --pin-compute`
    or `--set verification.compute_fingerprint=HEX`; nodes of another profile then refuse to start."""
    spec = _spec_from(spec_file, preset_name)
    local = _local_fingerprint(spec, device)
    import torch  # noqa: PLC0415 (loaded by the fingerprint already)

    pinned = spec.verification.compute_fingerprint
    kernels = torch.backends.cpu.get_cpu_capability()
    if json:
        print_json({"fingerprint": local, "device": device, "torch": torch.__version__, "cpu_kernels": kernels,
                    "pinned": pinned or None, "matches": pinned == local if pinned else None})
        return
    console.print(f"{local}  ({spec.name} on {device}, torch {torch.__version__}, {kernels} CPU kernels)",
                  highlight=False)
    if pinned:
        console.print("matches the spec's pinned profile" if pinned == local else
                      f"differs from the spec's pinned profile {pinned}: nodes on this machine would refuse "
                      "to start", highlight=False)


@app.command("deploy")
@tx_flags.sends
def deploy(
    spec_file: Annotated[Path | None, typer.Argument(help="run spec (TOML, or canonical JSON)")] = None,
    preset_name: Annotated[str | None, typer.Option("--preset", help="deploy a preset instead of a file")] = None,
    key: KeyName = "operator",
    treasury: Annotated[str | None, typer.Option(help="treasury address (default: the operator)")] = None,
    fund: Annotated[str | None, typer.Option(help=f"fund the reward pool with this amount: {AMOUNT_HELP}")] = None,
    devnet: Annotated[bool, typer.Option("--devnet", help="use the local devnet of <home>/devnet")] = False,
    grpc: Annotated[str | None, typer.Option(help="gRPC URL of a node, e.g. grpc+http://127.0.0.1:9900")] = None,
    rpc: Annotated[str | None, typer.Option(help="CometBFT RPC URL of the node")] = None,
    chain_id: Annotated[str | None, typer.Option(help="chain id")] = None,
    pin_compute: Annotated[bool, typer.Option(
        "--pin-compute", help="pin this machine's compute profile (verification.compute_fingerprint, on "
                              "--device): nodes that compute differently refuse to join")] = False,
    device: Device = "cpu",
    network: Network = None,
    home: Home = None,
    json: Json = False,
) -> None:
    """Deploy the contract for a run spec on a Cosmos chain and write the network file.

    Progress goes to stderr; the result (with --json: the contract, the run id, θ_0's hash and
    every transaction) to stdout.
    """
    spec = _spec_from(spec_file, preset_name)
    if pin_compute:
        err_console.print(f"deploy: computing this machine's compute fingerprint on {device}…", highlight=False)
        spec = spec.with_changes(verification={"compute_fingerprint": _local_fingerprint(spec, device)})
    funding = parse_amount(fund, spec.economics.denom) if fund else 0
    if devnet:
        from chain.devnet import Devnet  # noqa: PLC0415 (the launcher loads only for --devnet)

        node = Devnet.open(home_dir(home) / "devnet")
        grpc, rpc, chain_id = node.grpc_url, node.rpc_url, node.chain_id
    if not grpc or not chain_id:
        raise CommandError("where to deploy? pass --devnet, or --grpc and --chain-id")
    settings = ChainSettings(backend="cosmos", grpc=grpc, rpc=rpc, chain_id=chain_id)
    operator = open_key(key, home)

    def step(text: str) -> None:
        err_console.print(f"deploy: {text}…", highlight=False)

    step(f"computing θ_0 of {spec.name} (loads torch)")
    from chain.cosmos import CosmosBackend  # noqa: PLC0415 (cosmpy loads only for a deployment)
    from trainer.outer import GlobalState  # noqa: PLC0415 (torch loads only to compute θ_0)

    theta0 = GlobalState.initial(spec).hash().hex()
    chain = cosmos_chain(settings)
    try:
        step(f"connecting to {grpc} ({chain_id})")
        chain.height()
        msg = instantiate_msg(spec, theta0, treasury or operator.address(chain.config.prefix), admin=None)
        backend = CosmosBackend.deploy(chain, operator, msg, progress=step, gas_limit=TX.gas_limit())
        txs = dict(backend.deploy_txs)
        ledger = Ledger(backend)
        if funding:
            step(f"funding the reward pool with {display(funding, spec.economics.denom)}")
            txs["fund_rewards"] = ledger.fund_rewards(operator, funding)
        net = NetworkFile(chain=settings, contract=ledger.contract_address, run_id=spec.run_id().hex())
        path = net.save(network_path(network, home))
    finally:
        chain.close()
    if json:
        print_json({"contract": net.contract, "run_id": net.run_id, "initial_model_hash": theta0,
                    "network_file": str(path), "txs": {k: tx_json(v) for k, v in txs.items()}})
    else:
        console.print(f"deployed run [bold]{spec.name}[/] ({net.run_id[:16]}…) at {net.contract}\n"
                      f"θ_0 {theta0[:16]}…; network file {path}\n"
                      + "\n".join(f"{k}: {tx_line(v)}" for k, v in txs.items()), highlight=False)


@app.command("class")
@tx_flags.reads
def compute_class(
    fingerprint: Annotated[str, typer.Argument(help="the class: a compute fingerprint (`veriloco run fingerprint`)"
                                                    ", or \"\" for nodes that declare none")] = "",
    epoch: Annotated[int | None, typer.Option(help="epoch (default: the current one)")] = None,
    network: Network = None, home: Home = None, json: Json = False,
) -> None:
    """A compute-profile class's standing: its validators that joined the epoch so far and their stake,
    whether that serves it (a host of a class that is not served when reveal closes is left unchecked
    and excluded, not slashed), and its validators in the previous epoch. Read it before a host joins."""
    net = load_network(network, home)
    with open_ledger(net) as ledger:
        status, denom = ledger.compute_class(fingerprint, epoch), ledger.denom
    if json:
        print_json({"class": status.model_dump(mode="json", by_alias=True), "denom": denom})
        return
    console.print(f"class {fingerprint or '(none declared)'} in epoch {status.epoch} ({status.phase}): "
                  f"{status.validators} validators joined with {display(status.stake, denom)}; "
                  f"{status.needed} needed: {'served' if status.served else 'NOT served'}; previous epoch "
                  f"{status.previous_validators} validators with {display(status.previous_stake, denom)}",
                  highlight=False)


@app.command("show")
@tx_flags.reads
def show(network: Network = None, home: Home = None, json: Json = False) -> None:
    """The run's spec, holdings and current epoch."""
    net = load_network(network, home)
    with open_ledger(net) as ledger:
        config, accounting, info = ledger.config(), ledger.accounting(), ledger.epoch(lists=False)
        spec = RunSpec.from_canonical(config.spec_json)
        members = ledger.members()
    names = key_names(home)
    if json:
        print_json({"config": config, "spec": spec, "accounting": accounting, "epoch": info,
                    "members": members, "names": {m.address: names[m.address] for m in members if m.address in names}})
        return
    d = spec.economics.denom
    console.print(f"[bold]run[/] {spec.name}  id {config.run_id}\n[bold]contract[/] {net.contract} "
                  f"({net.chain.backend})\n[bold]model[/] {spec.model.architecture} {spec.model.params}\n"
                  f"[bold]epoch[/] H={spec.train.inner_steps} c={spec.train.segment_steps} "
                  f"S={spec.train.segments}; k={spec.verification.challenges_k} "
                  f"seats_cap={spec.verification.seats_cap} "
                  f"τ={spec.verification.tau}; rule {spec.aggregation.rule}; quantization {spec.quantization.scheme}\n"
                  f"[bold]compute profile[/] {spec.verification.compute_fingerprint or 'not pinned'}\n"
                  f"[bold]holdings[/] bonded {display(accounting.bonded, d)}, unbonding "
                  f"{display(accounting.unbonding, d)}, reward pool {display(accounting.reward_pool, d)}\n"
                  f"[bold]now[/] epoch {info.epoch}, phase {info.phase} until height {info.phase_deadline}",
                  highlight=False)
    console.print(table("members", ["key", "address", "role", "bonded", "endpoint", "slashed", "rewarded"],
                        [[names.get(m.address, ""), m.address, m.role, display(m.bonded, d), m.endpoint,
                          display(m.slashed_total, d), display(m.rewarded_total, d)] for m in members]))


@app.command("migrate")
@tx_flags.sends
def migrate(
    wasm: Annotated[Path | None, typer.Option(
        "--wasm", help="the new contract code (default: the committed contracts/artifacts/veriloco.wasm)")] = None,
    code_id: Annotated[int | None, typer.Option("--code-id", help="a code already stored, instead of --wasm")] = None,
    key: KeyName = "operator",
    network: Network = None,
    home: Home = None,
    json: Json = False,
) -> None:
    """Upgrade the run's contract to new code; its address, stakes, balances and spec stay
    (docs/chain.md, Upgrades). Only the contract's chain admin may; a run deployed without one,
    as `run deploy` does, is immutable and the chain refuses."""
    if wasm is not None and code_id is not None:
        raise CommandError("give --wasm or --code-id, not both")
    net = load_network(network, home)
    admin = open_key(key, home)
    code: int | bytes = code_id if code_id is not None else (wasm.read_bytes() if wasm else load_contract_wasm())
    with open_ledger(net, save=True) as ledger:
        result = ledger.migrate(admin, code)
    new_code, versions = result.attribute("code_id", "migrate"), (result.attribute("from_version"),
                                                                  result.attribute("to_version"))
    if json:
        print_json({"contract": net.contract, "code_id": int(new_code) if new_code else None,
                    "from_version": versions[0], "to_version": versions[1], "tx": tx_json(result)})
        return
    console.print(f"migrated {net.contract} to code {new_code} (version {versions[0]} → {versions[1]}); "
                  f"{tx_line(result)}", highlight=False)
