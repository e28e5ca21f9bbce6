"""Pipelined epochs (``phases.pipelined``; docs/contract.md, "Pipelined epochs") run by the daemons:
separate `veriloco host run` / `validator run` processes on a real injectived devnet, over real HTTP.

Two honest hosts, one cheater whose sign-flipped Δ passes the hosts' bounds (so it enters each
optimistic start and the settled model must differ), two validators, two epochs. Each epoch after
the first opens from the optimistic start its predecessor's committed hosts agreed on, and its
hosts begin training it before they propose the predecessor's settled model; the cheater is
slashed, the honest hosts are paid, and every epoch agrees on its settled model.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import tomli_w
from test_devnet_network import VERILOCO, cli, cli_each, free_port, wait_all
from test_devnet_network import network as _devnet  # noqa: F401 (the `network` fixture: a devnet, its keys funded)

from trainer.presets import tiny

pytestmark = [pytest.mark.slow, pytest.mark.devnet]

HONEST = ["h0", "h1"]
CHEATER = "cheat"
VALIDATORS = ["v0", "v1"]
EPOCHS = 2


def test_pipelined_daemons_train_e_plus_1_while_e_settles_over_http(_devnet) -> None:  # noqa: F811 (the fixture)
    env, tmp = _devnet  # its keys include h0, h1, cheat, v0 and v1
    # Windows long enough for five processes on two shared cores; they close early once everyone acted.
    spec = tiny("pipelined-e2e").with_changes(
        phases={"pipelined": True, "join_blocks": 300, "train_blocks": 3000, "reveal_blocks": 300,
                "verify_blocks": 3000, "verdict_reveal_blocks": 3000, "propose_blocks": 3000,
                "min_hosts": 3, "min_validators": len(VALIDATORS)})
    spec_file: Path = tmp / "spec.toml"
    spec_file.write_text(tomli_w.dumps(spec.model_dump(mode="json")))
    cli(env, "run", "deploy", str(spec_file), "--devnet", "--key", "operator", "--fund", "10INJ")
    hosts = [*HONEST, CHEATER]
    ports = {name: free_port() for name in [*hosts, *VALIDATORS]}
    cli_each(env, *[[role, "bond", stake, "--key", name, "--endpoint", f"http://127.0.0.1:{ports[name]}"]
                    for role, names, stake in (("host", hosts, "20INJ"), ("validator", VALIDATORS, "10INJ"))
                    for name in names])
    logs = tmp / "logs"
    logs.mkdir()
    common = ["--epochs", str(EPOCHS), "--threads", "1", "--poll", "0.2"]
    procs = []
    for name in hosts:
        args = ["host", "run", "--key", name, "--listen", f"127.0.0.1:{ports[name]}", *common,
                *(["--adversary", "sign_flip"] if name == CHEATER else [])]
        procs.append((name, subprocess.Popen([*VERILOCO, *args], env=env, stdout=open(logs / f"{name}.log", "w"),  # noqa: SIM115 (the child writes it)
                                             stderr=subprocess.STDOUT)))
    for name in VALIDATORS:
        procs.append((name, subprocess.Popen([*VERILOCO, "validator", "run", "--key", name, *common], env=env,
                                             stdout=open(logs / f"{name}.log", "w"),  # noqa: SIM115 (as above)
                                             stderr=subprocess.STDOUT)))
    try:
        wait_all(procs, logs)
    finally:
        for _, proc in procs:
            proc.kill()

    shown = cli_each(env, *[["keys", "show", name, "--json"] for name in hosts],
                     *[["report", str(e), "--json"] for e in range(EPOCHS)],
                     *[["epoch", "show", str(e), "--json"] for e in range(EPOCHS + 1)])
    addresses = {name: json.loads(out)["address"] for name, out in zip(hosts, shown, strict=False)}
    reports = [json.loads(out)["report"] for out in shown[len(hosts):len(hosts) + EPOCHS]]
    epochs = [json.loads(out)["epoch"] for out in shown[len(hosts) + EPOCHS:]]
    for e in range(EPOCHS):
        report = reports[e]
        outcomes = {h["address"]: h for h in report["hosts"]}
        assert report["agreed"] is True, (e, report.get("unchanged_reason"))
        assert outcomes[addresses[CHEATER]]["outcome"] == "invalid" and int(outcomes[addresses[CHEATER]]["slashed"]) > 0
        for name in HONEST:
            assert outcomes[addresses[name]]["outcome"] == "accepted" and int(outcomes[addresses[name]]["reward"]) > 0
        info, after = epochs[e], epochs[e + 1]
        # e + 1 opened from the optimistic start e's committed hosts agreed on, and records e's settled
        # model; the sign-flipped Δ entered the optimistic start, so the two differ.
        assert info["start_model_hash"] and after["model_hash"] == info["start_model_hash"]
        assert after["settled_start"] == report["next_model_hash"] != info["start_model_hash"]
    for name in HONEST:  # by the host's own log: it trained e + 1 before it proposed e's settled model
        log = (logs / f"{name}.log").read_text()
        for e in range(EPOCHS - 1):
            trained = log.index(f"{name} epoch {e + 1} training: step")
            proposed = re.search(rf"{name} epoch {e} proposed (?!start)", log)
            assert proposed is not None and trained < proposed.start(), (name, e)
