"""Throughput of the embedded chain running the committed veriloco contract.

    .venv/bin/python bench/embedded_chain.py [--n 2000]

Measures, on one core: ``bond`` executes per second (each one a full transaction: a new block,
funds moved, a fresh wasm instance, contract storage read and written, events), smart queries
per second, the fuel ("gas") one bond uses, and the wasm size. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import time

from chain.embedded import EmbeddedChain
from chain.wasm_artifact import contract_wasm_path, load_contract_wasm
from protocol.keys import PrivateKey
from protocol.spec import RunSpec

DENOM = "inj"


def _key(name: str) -> PrivateKey:
    return PrivateKey(hashlib.sha256(b"bench:" + name.encode()).digest())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="transactions (and queries) to time")
    parser.add_argument("--members", type=int, default=50, help="distinct bonding accounts")
    args = parser.parse_args()

    members = [_key(f"m{i}").address() for i in range(args.members)]
    operator = _key("operator").address()
    chain = EmbeddedChain(genesis_balances={a: {DENOM: 10**24} for a in [operator, *members]})

    t0 = time.perf_counter()
    code_id = chain.store_code(operator, load_contract_wasm()).code_id
    store_s = time.perf_counter() - t0

    spec = RunSpec.model_validate({
        "name": "bench", "model": {},
        "data": {"corpus": "bench", "dataset_hash": "0" * 64, "seq_len": 16},
        "train": {"inner_steps": 4, "segment_steps": 2, "batch_size": 2, "lr": "0.001"},
        "economics": {"denom": DENOM, "min_host_stake": "1000", "min_validator_stake": "500"},
    })
    contract = chain.instantiate(operator, code_id, {
        "spec_json": spec.canonical().decode(), "initial_model_hash": "0" * 64, "denom": DENOM,
        "treasury": operator, "admin": None,
    }).contract_address

    msg = {"bond": {"role": "host", "endpoint": "http://127.0.0.1:8700"}}
    gas = []
    t0 = time.perf_counter()
    for i in range(args.n):
        gas.append(chain.execute(members[i % len(members)], contract, msg, funds={DENOM: 1000}).gas_used)
    execute_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    for i in range(args.n):
        chain.query(contract, {"member": {"address": members[i % len(members)]}})
    query_s = time.perf_counter() - t0

    print(json.dumps({
        "wasm_bytes": contract_wasm_path().stat().st_size,
        "store_code_s": round(store_s, 3),
        "bond_executes_per_s": round(args.n / execute_s, 1),
        "member_queries_per_s": round(args.n / query_s, 1),
        "bond_gas_median_fuel": sorted(gas)[len(gas) // 2],
        "n": args.n,
        "members": args.members,
        "python": platform.python_version(),
        "machine": platform.processor() or platform.machine(),
    }, indent=2))


if __name__ == "__main__":
    main()
