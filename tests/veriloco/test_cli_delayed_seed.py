"""``veriloco epoch delayed-seed``: an operator posts the delayed seed an epoch waits for (when no
validator's node did), and is told plainly when there is nothing to post."""

from __future__ import annotations

import json
from pathlib import Path

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
