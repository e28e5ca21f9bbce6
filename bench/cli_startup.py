"""How long the CLI's commands that do not train take, start to exit, as a user runs them.

Each command runs as its own process (``python -m veriloco.cli …``), ``--repeat`` times, and the
median and the fastest wall time are reported, beside the interpreter's own start (``python -c
pass``) and ``import torch`` (what every command paid before torch was imported lazily). The
read commands run against a contract deployed on an embedded chain saved to disk, and — with the
``devnet`` extra installed — against a real injectived devnet the bench starts. ``--baseline DIR``
runs the same commands from another checkout (e.g. the commit before), interleaved with this one,
so the two are compared under the same load. Run:

    .venv/bin/python bench/cli_startup.py [--repeat 5] [--baseline /path/to/other/checkout] [--no-devnet]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from protocol.keys import PrivateKey  # noqa: E402 (as above)
from trainer.presets import tiny  # noqa: E402 (as above)
from veriloco.connect import ChainSettings, NetworkFile  # noqa: E402 (as above)

# Each checkout deploys its own run and writes its own keyring: the spec and the keyring format may
# differ between the trees compared, so one tree's state is not readable by the other's code.
SETUP = """
import hashlib, sys
from pathlib import Path
from chain.embedded import EmbeddedChain
from chain.embedded.backend import deploy_embedded
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.keys import KeyType, PrivateKey
from trainer.presets import tiny
from veriloco.connect import ChainSettings, NetworkFile
from veriloco.keystore import Keystore

work = Path(sys.argv[1])
store = Keystore.in_home(work / "home")
store.add("alice", PrivateKey(hashlib.sha256(b"bench-alice").digest(), KeyType.ETH_SECP256K1), "pw", scrypt_n=2**10)
store.add("bob", PrivateKey(hashlib.sha256(b"bench-bob").digest()), "pw", scrypt_n=2**10)
operator = PrivateKey(hashlib.sha256(b"bench-operator").digest())
chain = EmbeddedChain(genesis_balances={operator.address(): {DENOM: GENESIS_BALANCE}})
ledger = deploy_embedded(chain, operator, tiny("bench"), hashlib.sha256(b"theta_0").hexdigest(),
                         treasury=operator.address())
chain.save(work / "chain.json")
NetworkFile(chain=ChainSettings(backend="embedded", state=str(work / "chain.json")),
            contract=ledger.contract_address, run_id="00" * 32).save(work / "embedded.json")
"""


def embedded_network(tree: Path, work: Path) -> Path:
    """A tiny run deployed on an embedded chain by ``tree``'s own code, with its keyring in
    ``work/home``; returns the network file."""
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", SETUP, str(work)], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                   check=True, timeout=300)
    return work / "embedded.json"


def devnet_network(work: Path):  # -> (network file, Devnet) or None
    """The same run on a devnet the bench starts (None without the devnet extra)."""
    try:
        import injective_core  # noqa: F401, PLC0415 (only whether it is installed)
    except ImportError:
        return None
    from chain.cosmos import CosmosBackend  # noqa: PLC0415 (cosmpy loads only for the devnet part)
    from chain.devnet import Devnet, DevnetPorts, GenesisAccount  # noqa: PLC0415 (as above)
    from chain.ledger import instantiate_msg  # noqa: PLC0415 (as above)

    operator = PrivateKey(hashlib.sha256(b"bench-operator").digest())
    net = Devnet(work / "devnet", ports=DevnetPorts.free(), accounts=[GenesisAccount.of_key("operator", operator)])
    net.up(tied=True)  # a killed benchmark takes its node with it
    with net.connect() as chain:
        backend = CosmosBackend.deploy(chain, operator, instantiate_msg(tiny("bench"), "00" * 32, operator.address()))
    settings = ChainSettings(backend="cosmos", grpc=net.grpc_url, rpc=net.rpc_url, chain_id=net.chain_id)
    path = NetworkFile(chain=settings, contract=backend.contract_address, run_id="00" * 32).save(work / "devnet.json")
    return path, net


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    # `python -m` puts the working directory first on sys.path: it must be the tree measured.
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another checkout to run the same commands from")
    parser.add_argument("--no-devnet", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="veriloco-cli-bench-"))
    trees = {"this checkout": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    networks = {tree: embedded_network(path, work / tree.replace(" ", "-")) for tree, path in trees.items()}
    devnet = None if args.no_devnet else devnet_network(work)
    py = sys.executable
    commands: list[tuple[str, list[str]]] = [
        ("python -c pass (the interpreter)", [py, "-c", "pass"]),
        ("python -c 'import torch'", [py, "-c", "import torch"]),
        ("veriloco --version", ["--version"]),
        ("veriloco --help", ["--help"]),
        ("veriloco keys list", ["keys", "list"]),
        ("veriloco run template --preset tiny", ["run", "template", "--preset", "tiny"]),
        ("veriloco epoch list (embedded chain)", ["epoch", "list", "--network", "EMBEDDED"]),
        ("veriloco report 0 (embedded chain)", ["report", "0", "--network", "EMBEDDED"]),
    ]
    if devnet is not None:  # deployed by this checkout only: the baseline's column shows —
        commands += [("veriloco epoch list (devnet)", ["epoch", "list", "--network", str(devnet[0])]),
                     ("veriloco report 0 (devnet)", ["report", "0", "--network", str(devnet[0])])]
    try:
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.repeat):
            for label, argv in commands:
                for tree, path in trees.items():
                    own = argv[0] != py and (devnet is None or str(devnet[0]) not in argv)
                    if tree != "this checkout" and not own:
                        continue
                    env = {**os.environ, "PYTHONPATH": str(path), "OMP_WAIT_POLICY": "PASSIVE",
                           "VERILOCO_HOME": str(networks[tree].parent / "home")}
                    args_ = [str(networks[tree]) if a == "EMBEDDED" else a for a in argv]
                    full = args_ if argv[0] == py else [py, "-m", "veriloco.cli", *args_]
                    times.setdefault((label, tree), []).append(timed(full, env, path))
    finally:
        if devnet is not None:
            devnet[1].stop()
    header = " | ".join(f"{tree}: median (fastest)" for tree in trees)
    print(f"| command | {header} |")
    print("| --- |" + " --- |" * len(trees))
    for label, _ in commands:
        cells = []
        for tree in trees:
            runs = times.get((label, tree))
            cells.append("—" if runs is None else f"{statistics.median(runs):.2f} s ({min(runs):.2f} s)")
        print(f"| {label} | {' | '.join(cells)} |")
    print(f"\n{args.repeat} runs each, interleaved; load average at the end: "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
