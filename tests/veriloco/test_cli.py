"""The CLI as a user meets it: commands on a real (embedded) run, JSON output. (Errors: test_cli_errors.py.)"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chain.embedded import EmbeddedChain
from trainer.behaviour import HostBehaviour
from trainer.presets import tiny
from veriloco.connect import ChainSettings, NetworkFile
from veriloco.keystore import Keystore
from veriloco.network import EmbeddedChainFactory, LocalNetwork, Roster, sim_key

VERILOCO = [sys.executable, "-m", "veriloco.cli"]


def cli(*args: str, home: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {"VERILOCO_HOME": str(home), "VERILOCO_PASSPHRASE": "pw", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([*VERILOCO, *args], env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory, load_dataset) -> Path:
    """Two epochs of a small run with verification off, saved as an embedded network file."""
    root = tmp_path_factory.mktemp("run")
    spec = tiny("cli").with_changes(train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8},
                                    verification={"enabled": False}, phases={"min_hosts": 2, "min_validators": 0})
    factory = EmbeddedChainFactory()
    net = LocalNetwork(spec, root, Roster(hosts=[HostBehaviour(), HostBehaviour()]),
                       load_dataset(spec.data), chain=factory)
    net.run_epoch()
    net.run_epoch()
    assert isinstance(factory.chain, EmbeddedChain)
    factory.chain.save(root / "chain.json")
    return NetworkFile(chain=ChainSettings(backend="embedded", state=str(root / "chain.json")),
                       contract=net.ledger.contract_address, run_id=spec.run_id().hex()).save(root / "network.json")


@pytest.mark.slow
def test_operator_commands_read_a_saved_run(saved_run, tmp_path) -> None:
    home = tmp_path / "home"
    Keystore.in_home(home).add("alice", sim_key("host-0"), "pw", scrypt_n=2**10)  # a key of the run's
    epochs = json.loads(cli("epoch", "list", "--json", "--network", str(saved_run), home=home).stdout)
    assert epochs["schema_version"] == 2
    assert [e["epoch"] for e in epochs["epochs"]] == [0, 1, 2]
    assert [e["agreed"] for e in epochs["epochs"][:2]] == [True, True]
    report = json.loads(cli("report", "1", "--json", "--network", str(saved_run), home=home).stdout)
    assert report["schema_version"] == 2 and report["denom"] == "inj"
    # Headers with their counts (contract 0.3.4), not the lists: the counts are the report's.
    listed = epochs["epochs"][1]
    assert "hosts" not in listed
    hosts = report["report"]["hosts"]
    assert listed["counts"] == {"hosts": len(hosts), "validators": len(report["report"]["validators"]),
                                "committed": sum(h["commitment"] is not None for h in hosts),
                                "accepted": sum(h["outcome"] == "accepted" for h in hosts)}
    assert {h["outcome"] for h in report["report"]["hosts"]} == {"accepted"} and report["report"]["next_model_hash"]
    done = cli("report", "1", "--plot", str(tmp_path / "loss.png"), "--network", str(saved_run), home=home)
    assert "accepted" in done.stdout and "validation loss of θ_2" in done.stdout
    assert f"alice {sim_key('host-0').address()[:10]}" in done.stdout  # the key's name beside its address
    assert report["names"] == {sim_key("host-0").address(): "alice"}
    assert "plot written to" in done.stderr and "plot written" not in done.stdout
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A class's standing (this run has no validators: nothing serves any class).
    status = json.loads(cli("run", "class", "--epoch", "1", "--json", "--network", str(saved_run), home=home).stdout)
    assert status["class"] == {"epoch": 1, "phase": "closed", "class": "", "validators": 0, "stake": "0", "needed": 1,
                               "served": False, "previous_validators": 0, "previous_stake": "0"}
    nobody = cli("run", "class", "ab" * 32, "--network", str(saved_run), home=home).stdout
    assert "0 validators joined" in nobody and "1 needed: NOT served" in nobody
    show = cli("run", "show", "--network", str(saved_run), home=home).stdout
    assert "tiny" not in show.splitlines()[0] and "cli" in show.splitlines()[0]
    current = json.loads(cli("epoch", "show", "--json", "--network", str(saved_run), home=home).stdout)
    assert current["epoch"]["epoch"] == 2 and current["epoch"]["phase"] == "join"
    # Never "agreed None": an epoch whose vote is still open says so in words.
    shown = cli("epoch", "show", "--network", str(saved_run), home=home).stdout
    assert "None" not in shown and "(pending)" in shown
    assert "None" not in cli("epoch", "list", "--network", str(saved_run), home=home).stdout
    # Metrics: one CSV row per epoch and per member and epoch, TensorBoard events beside them.
    out = tmp_path / "metrics"
    exported = json.loads(cli("metrics", str(out), "--tensorboard", "--json", "--network", str(saved_run),
                              home=home).stdout)
    assert exported["epochs"] == 3 and exported["rows"] == 4
    rows = list(csv.DictReader((out / "epochs.csv").open()))
    assert [r["epoch"] for r in rows] == ["0", "1", "2"] and rows[2]["val_loss_next"] == ""
    assert float(rows[1]["val_loss_next"]) == pytest.approx(
        min(h["proposal"]["val_loss_micro"] for h in report["report"]["hosts"]) / 1e6)
    assert len(list(csv.DictReader((out / "members.csv").open()))) == 4
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    # A run that does not delay its seed has none to post (one line, a non-zero exit).
    none = cli("epoch", "delayed-seed", "--key", "alice", "--network", str(saved_run), home=home, check=False)
    assert none.returncode != 0 and "does not delay its seed" in none.stderr
    # epoch advance: epoch 2's join phase is not past its deadline, so there is nothing to close (one
    # line, a non-zero exit, nothing saved).
    done = cli("epoch", "advance", "--key", "alice", "--network", str(saved_run), home=home, check=False)
    assert done.returncode != 0 and "advance: nothing is due: epoch 2 is in phase join" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_template_round_trips_through_deploy_parsing(tmp_path) -> None:
    from veriloco.commands.common import read_spec_file

    out = tmp_path / "spec.toml"
    done = cli("run", "template", "--preset", "tiny", "--out", str(out), home=tmp_path)
    assert read_spec_file(out) == tiny() and done.stdout == ""


def test_fingerprint_names_this_machines_profile_and_checks_a_pinned_one(tmp_path) -> None:
    from trainer.fingerprint import compute_fingerprint

    local = compute_fingerprint(tiny())  # at the suite's 1 thread; the command runs at torch's default
    found = json.loads(cli("run", "fingerprint", "--preset", "tiny", "--json", home=tmp_path).stdout)
    assert (found["fingerprint"], found["pinned"], found["matches"]) == (local, None, None)
    for pin, matches in ((local, True), ("ab" * 32, False)):
        out = tmp_path / f"{pin[:4]}.toml"
        cli("run", "template", "--preset", "tiny", "--set", f"verification.compute_fingerprint={pin}",
            "--out", str(out), home=tmp_path)
        found = json.loads(cli("run", "fingerprint", str(out), "--json", home=tmp_path).stdout)
        assert (found["pinned"], found["matches"]) == (pin, matches)


@pytest.mark.slow
def test_simulate_json_is_one_document_on_stdout(tmp_path) -> None:
    """Progress on stderr, exactly one JSON object on stdout: `simulate --json | jq` parses. Quiet by
    default (one summary line per epoch, no event lines); its temporary work folder is gone at the
    end, the live metrics written where --metrics said. ``--synchronous``: each epoch settles before the
    next starts, and no epoch trains while another settles."""
    done = cli("simulate", "--synchronous", "--preset", "tiny", "--epochs", "1", "--hosts", "1", "--cheaters", "1",
               "--validators", "2", "--metrics", str(tmp_path / "live"), "--json", home=tmp_path / "home")
    result = json.loads(done.stdout)
    assert result["schema_version"] == 2 and result["funds_conserved"] is True
    assert result["pipelined"] is False and result["trained_while_settling"] == {}
    assert "on the embedded chain, synchronous;" in done.stderr
    assert [r["epoch"] for r in result["reports"]] == [0] and result["val_loss_next"][0] is not None
    outcomes = {result["names"][h["address"]]: h["outcome"] for h in result["reports"][0]["hosts"]}
    assert outcomes == {"host-0": "accepted", "host-1 (noise)": "invalid"}
    assert "epoch 0:" in done.stderr and "veriloco simulate" in done.stderr
    assert not [line for line in done.stderr.splitlines() if line.startswith("  epoch ")]  # no event lines
    workdir = Path(done.stderr.split("work in ", 1)[1].split()[0])
    assert result["network_file"] is None and not workdir.exists()
    rows = list(csv.DictReader((tmp_path / "live" / "epochs.csv").open()))
    assert [r["epoch"] for r in rows] == ["0"] and float(rows[0]["val_loss_next"]) == pytest.approx(
        result["val_loss_next"][0], abs=1e-6)


@pytest.mark.slow
def test_simulate_is_pipelined_by_default_and_says_which_epoch_trained_while_each_settled(tmp_path) -> None:
    done = cli("simulate", "--preset", "tiny", "--epochs", "2", "--hosts", "1", "--cheaters", "1",
               "--validators", "2", "--json", home=tmp_path / "home")
    result = json.loads(done.stdout)
    assert result["pipelined"] is True and result["funds_conserved"] is True
    assert result["trained_while_settling"] == {"0": 1, "1": 2}
    for report in result["reports"]:
        outcomes = {result["names"][h["address"]]: h["outcome"] for h in report["hosts"]}
        assert outcomes["host-0"] == "accepted" and report["agreed"] is True
    assert "on the embedded chain, pipelined (epoch e + 1 trains while e settles)" in done.stderr
    assert "epoch 1: " in done.stderr and ("settled while epoch 2 trained from its optimistic start (epoch 2 now "
                                           "in its ") in done.stderr


def test_every_command_takes_json() -> None:
    """The convention every command follows (docs/operators.md, Scripting); only the daemons (a standby too), whose
    output is a log, and the live views (a web page, a terminal that redraws) are exempt."""
    import typer.main

    from veriloco.cli import app

    def leaves(group: Any, prefix: str) -> list[tuple[str, Any]]:  # Typer's own click, duck-typed
        found = []
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                found += leaves(command, f"{prefix}{name} ")
            else:
                found.append((f"{prefix}{name}", command))
        return found

    commands = leaves(typer.main.get_command(app), "")
    assert len(commands) > 25
    missing = [name for name, command in commands
               if name not in ("host run", "validator run", "standby run", "dashboard", "epoch watch")
               and not any("--json" in p.opts for p in command.params)]
    assert missing == []


def test_the_plot_draws_each_model_at_its_own_epoch_in_its_own_colour(saved_run) -> None:
    from typing import get_args

    from protocol.views import HostOutcome
    from veriloco.connect import load_network, open_ledger
    from veriloco.report import OUTCOME_COLOUR, best_val_loss, loss_points, mean_train_loss

    assert set(OUTCOME_COLOUR) == set(get_args(HostOutcome))
    assert len(set(OUTCOME_COLOUR.values())) == len(OUTCOME_COLOUR)  # unavailable, absent, no_reveal differ
    with open_ledger(load_network(saved_run)) as ledger:
        reports = [ledger.report(e) for e in (0, 1)]
    val, train = loss_points(reports)
    assert val == [(1, best_val_loss(reports[0])), (2, best_val_loss(reports[1]))]  # θ_{e+1} at e+1
    assert train == [(0, mean_train_loss(reports[0])), (1, mean_train_loss(reports[1]))]


@pytest.mark.slow
def test_advance_until_drives_an_idle_run_to_a_later_epoch(saved_run, tmp_path) -> None:
    """Nobody joins epoch 2: `epoch advance --until 4` closes phase after phase, producing the
    embedded chain's blocks up to each deadline, in one command."""
    home = tmp_path / "home"
    Keystore.in_home(home).add("alice", sim_key("host-0"), "pw", scrypt_n=2**10)
    shutil.copy(saved_run.parent / "chain.json", tmp_path / "chain.json")
    network = NetworkFile.model_validate_json(saved_run.read_text())
    network.chain.state = str(tmp_path / "chain.json")
    copy = network.save(tmp_path / "network.json")
    done = json.loads(cli("epoch", "advance", "--until", "4", "--key", "alice", "--json", "--network", str(copy),
                          home=home).stdout)
    assert (done["before"]["epoch"], done["after"]["epoch"]) == (2, 4) and done["after"]["phase"] == "join"
    assert len(done["pages"]) >= 1 and done["tx"]["hash"]
    again = cli("epoch", "advance", "--until", "3", "--key", "alice", "--network", str(copy), home=home)
    assert "nothing to do: the run is in epoch 4" in again.stdout
    assert (tmp_path / "chain.json").read_bytes() != (saved_run.parent / "chain.json").read_bytes()


def test_epoch_watch_draws_the_phases_and_stops_at_the_epoch_asked(saved_run, tmp_path) -> None:
    done = cli("epoch", "watch", "--until", "2", "--interval", "0.2", "--network", str(saved_run), home=tmp_path)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("run cli · epoch 2 · join")
    assert all(phase in lines[1] for phase in ("join", "train", "reveal", "verify", "propose"))
    assert "blocks to height" in done.stdout
    assert "epoch 1:" in done.stdout and "epoch 0:" in done.stdout and "θ agreed" in done.stdout
