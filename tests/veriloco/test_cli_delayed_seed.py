"""``veriloco epoch delayed-seed``: an operator posts the delayed seed an epoch waits for (when no
validator's node did), and is told plainly when there is nothing to post."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import cli

from chain.embedded import EmbeddedChain
from trainer.behaviour import HostBehaviour
from trainer.presets import tiny
from veriloco.behaviours import validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.connect import ChainSettings, NetworkFile
from veriloco.keystore import Keystore
from veriloco.network import EmbeddedChainFactory, LocalNetwork, Roster, sim_key


def saved_in_delay(root: Path, load_dataset) -> tuple[Path, str]:
    """A run whose epoch 0 waits in phase delay (its validators never got to post), saved."""
    spec = simulation_spec(tiny("cli-delay").with_changes(
        train={"inner_steps": 16, "segment_steps": 2, "batch_size": 4},
        verification={"delay_squarings": 2_000}), validators=1)
    factory = EmbeddedChainFactory()
    net = LocalNetwork(spec, root, Roster(hosts=[HostBehaviour()], validators=[validator_behaviour("honest")]),
                       load_dataset(spec.data), chain=factory)
    for _ in range(300):
        if net.ledger.epoch(0, lists=False).phase == "delay":
            break
        for node in net.nodes:
            node.tick()
        net.ledger.end_block()
    assert net.ledger.epoch(0, lists=False).phase == "delay"
    assert isinstance(factory.chain, EmbeddedChain)
    factory.chain.save(root / "chain.json")
    saved = NetworkFile(chain=ChainSettings(backend="embedded", state=str(root / "chain.json")),
                        contract=net.ledger.contract_address, run_id=spec.run_id().hex()).save(root / "network.json")
    return saved, net.validators[0].address


def test_an_operator_posts_the_delayed_seed_an_epoch_waits_for(tmp_path, load_dataset) -> None:
    network, validator = saved_in_delay(tmp_path / "run", load_dataset)
    home = tmp_path / "home"
    Keystore.in_home(home).add("alice", sim_key("host-0"), "pw", scrypt_n=2**10)
    shown = json.loads(cli("epoch", "show", "--json", "--network", str(network), home=home).stdout)
    assert shown["epoch"]["phase"] == "delay" and shown["epoch"].get("delayed_seed") is None
    # `advance --until` cannot close it, and says what does (rather than waiting for ever).
    stuck = cli("epoch", "advance", "--until", "1", "--key", "alice", "--network", str(network), home=home,
                check=False)
    assert stuck.returncode != 0 and "veriloco epoch delayed-seed" in stuck.stderr, stuck.stderr
    posted = json.loads(cli("epoch", "delayed-seed", "--key", "alice", "--json", "--network", str(network),
                            home=home).stdout)
    after = posted["epoch"]
    assert after["epoch"] == 0 and after["phase"] == "verify" and len(after["delayed_seed"]) == 64
    # The epoch no longer waits: a second post is refused in one line, nothing is sent.
    again = cli("epoch", "delayed-seed", "--key", "alice", "--network", str(network), home=home, check=False)
    assert again.returncode != 0 and "not waiting in delay: nothing to post" in again.stderr
    # The validator's challenges were assigned from that seed: it has its seats now.
    challenges = json.loads(cli("epoch", "show", "--json", "--network", str(network), home=home).stdout)
    assert challenges["epoch"]["phase"] == "verify" and validator in challenges["epoch"]["validators"]


def saved_settling_in_delay(root: Path, load_dataset) -> Path:
    """A pipelined run whose epoch 0 waits in phase delay while epoch 1 trains: its validator's
    node evaluates nothing (as if every evaluator were down), so nobody posts the output."""
    spec = simulation_spec(tiny("cli-delay-settling").with_changes(
        train={"inner_steps": 16, "segment_steps": 2, "batch_size": 4},
        verification={"delay_squarings": 2_000}, phases={"pipelined": True}), validators=1)
    factory = EmbeddedChainFactory()
    net = LocalNetwork(spec, root, Roster(hosts=[HostBehaviour()], validators=[validator_behaviour("honest")]),
                       load_dataset(spec.data), chain=factory)
    net.validators[0].delayed_seed.squarings = 0  # this node never evaluates the delay
    for _ in range(300):
        current = net.ledger.epoch(lists=False)
        if current.epoch == 1 and current.phase not in ("join", "closed"):
            break
        acted = [node.tick() for node in net.nodes]
        if (job := net.hosts[0].training) is not None:
            job.result(timeout=120)
        if not any(acted):  # let a block pass: the embedded chain makes one per round of transactions
            net.ledger.wait_for_height(net.ledger.height() + 1, timeout=10)
        net.ledger.end_block()
    current = net.ledger.epoch(lists=False)
    assert (current.epoch, current.settling) == (1, 0) and current.phase != "join", current
    assert net.ledger.epoch(0, lists=False).phase == "delay"
    assert isinstance(factory.chain, EmbeddedChain)
    factory.chain.save(root / "chain.json")
    return NetworkFile(chain=ChainSettings(backend="embedded", state=str(root / "chain.json")),
                       contract=net.ledger.contract_address, run_id=spec.run_id().hex()).save(root / "network.json")


@pytest.mark.slow
def test_advance_until_names_the_settling_epoch_that_waits_then_waits_out_the_held_phases(
        tmp_path, load_dataset) -> None:
    """`advance --until` in a pipelined run whose older epoch waits in delay: it names that epoch and
    the command that posts its seed (not the contract's bare "held"); once posted, it drives both
    epochs through their deadlines, waiting where the newer one's phase is held by the older."""
    network = saved_settling_in_delay(tmp_path / "run", load_dataset)
    home = tmp_path / "home"
    Keystore.in_home(home).add("alice", sim_key("host-0"), "pw", scrypt_n=2**10)
    stuck = cli("epoch", "advance", "--until", "2", "--key", "alice", "--network", str(network), home=home,
                check=False)
    assert stuck.returncode != 0, stuck.stdout
    assert "epoch 0 waits for its delayed seed" in stuck.stderr
    assert "veriloco epoch delayed-seed 0" in stuck.stderr and "held" not in stuck.stderr, stuck.stderr
    cli("epoch", "delayed-seed", "0", "--key", "alice", "--network", str(network), home=home)
    # Epoch 0 settles through its deadlines while epoch 1 trains, then epoch 1 waits in delay too.
    second = cli("epoch", "advance", "--until", "2", "--key", "alice", "--network", str(network), home=home,
                 check=False)
    assert second.returncode != 0 and "(epoch 0 verify settling)" in second.stderr, second.stderr
    assert "epoch 1 waits for its delayed seed" in second.stderr, second.stderr
    cli("epoch", "delayed-seed", "1", "--key", "alice", "--network", str(network), home=home)
    done = json.loads(cli("epoch", "advance", "--until", "2", "--key", "alice", "--json", "--network",
                          str(network), home=home).stdout)
    assert done["after"]["epoch"] == 2, done["after"]
