"""The hostile-network suite (issue 15): real HTTP servers and clients on the embedded chain, with
attackers between the nodes. For each attack: the cheater is slashed (or its attack is absorbed),
no honest party is slashed, every node keeps ticking (an exception would fail the test), memory
stays bounded (tracemalloc over every thread) and funds are conserved.

Measured figures are printed (``-s``) and tabulated in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import tracemalloc

import pytest
from hostile import SLOW_BODY_HEAD, RawServer, SlowBodies, answer, drip, gzip_bomb, half_open, zeros
from http_network import HttpNetwork, key

from node.daemon import MembershipCache, http_peers
from node.global_store import GlobalStore
from node.http import ServerLimits
from node.server import ServerThread, create_app
from protocol.auth import HEADER_ADDRESS, sign_request
from trainer.artifacts import ArtifactUnavailable
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.presets import tiny

pytestmark = pytest.mark.slow

MiB = 1 << 20


def hostile_spec(hosts: int):
    return tiny("hostile-net").with_changes(
        train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8},
        verification={"challenges_k": 1, "validators_r": 1},
        phases={"min_hosts": hosts, "min_validators": 2, "verify_blocks": 40, "reveal_blocks": 10,
                "join_blocks": 10, "train_blocks": 60, "propose_blocks": 20},
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return Dataset.load(hostile_spec(1).data, tmp_path_factory.mktemp("cache"))


def nested() -> bytes:
    return b"[" * 30_000 + b"]" * 30_000


ATTACKS = {
    "slow drip": drip(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000, 0.05),
    "gzip bomb": answer("200 OK", {"Content-Encoding": "gzip"}, gzip_bomb(256 * MiB)),
    "double gzip": answer("200 OK", {"Content-Encoding": "gzip"}, gzip_bomb(512 * MiB, layers=2)),
    "huge 404 body": answer("404 Not Found", {"Content-Length": str(400 * MiB)}, zeros(400 * MiB)),
    "nested JSON": answer("200 OK", {"Content-Length": str(len(nested()))}, nested()),
}


def test_cheaters_serving_hostile_answers_are_slashed_and_cost_the_readers_nothing(tmp_path, dataset) -> None:
    # Five hosts train honestly but register an attacker's server as their endpoint; two honest
    # hosts serve their own work. Validators must judge each attacker without exhausting memory,
    # without crashing, and without being slashed themselves.
    servers = {name: RawServer(handler).__enter__() for name, handler in ATTACKS.items()}
    names = list(servers)
    spec = hostile_spec(2 + len(names))
    net = HttpNetwork(spec, tmp_path, dataset, [HostBehaviour() for _ in range(2 + len(names))],
                      endpoints={2 + i: servers[n].url for i, n in enumerate(names)})
    try:
        tracemalloc.start()
        report = net.run_epoch()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        by_address = {h.address: h for h in report.hosts}
        for i in (0, 1):
            assert by_address[net.host(i).node.address].outcome == "accepted"
            assert by_address[net.host(i).node.address].slashed == "0"
        for i, name in enumerate(names):
            cheater = by_address[net.host(2 + i).node.address]
            assert cheater.outcome != "accepted" and int(cheater.slashed) > 0, (name, cheater.outcome)
        assert all(v.slashed == "0" for v in report.validators), [(v.outcome, v.voted) for v in report.validators]
        assert report.agreed and report.next_model_hash
        assert net.total_funds() == net.initial_funds
        print(f"\nhostile answers: readers' peak Python memory over the epoch {peak / MiB:.1f} MiB; "
              f"outcomes {[(n, by_address[net.host(2 + i).node.address].outcome) for i, n in enumerate(names)]}")
        assert peak < 64 * MiB  # the bombs cost 513 MiB and 800 MiB each
    finally:
        net.close()
        for server in servers.values():
            server.__exit__(None, None, None)


def _deltas_refused(app, refuse):
    """An ASGI wrapper: both Δ routes (by epoch and by hash) answer 404 to a reader when
    ``refuse(reader)`` says so."""

    async def wrapped(scope, receive, send):
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path.endswith("/delta") or path.startswith("/v1/deltas/"):
            reader = dict(scope["headers"]).get(HEADER_ADDRESS.encode(), b"").decode()
            if refuse(reader):
                body = json.dumps({"detail": "not for you"}).encode()
                await send({"type": "http.response.start", "status": 404,
                            "headers": [(b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return wrapped


def test_honest_hosts_survive_a_flood_a_restart_and_a_peer_withholding_its_delta(tmp_path, dataset) -> None:
    validators = {key(f"validator-{i}").address() for i in range(2)}
    spec = hostile_spec(3)
    net = HttpNetwork(spec, tmp_path, dataset, [HostBehaviour() for _ in range(3)],
                      wrap={2: lambda app: _deltas_refused(app, lambda reader: reader not in validators)})
    flooded, restarted = net.host(0), net.host(1)  # host 2 withholds its Δ from peers
    theta = net.ledger.epoch().model_hash
    state: dict[str, object] = {"rounds_down": 0}

    def attack(n: HttpNetwork) -> None:
        phase = n.ledger.epoch().phase
        if phase in ("reveal", "verify") and "flood" not in state:
            # ~1,100 half-open connections (the count) against an honest host's server,
            # and the other honest host killed right after its commit.
            state["flood"] = half_open(flooded.server.port, 1100)  # type: ignore[union-attr]
            restarted.server.stop()  # type: ignore[union-attr]
            state["port"] = restarted.server.port  # type: ignore[union-attr]
        elif "port" in state and "restarted" not in state:
            state["rounds_down"] = int(state["rounds_down"]) + 1  # type: ignore[call-overload]
            # Back before its picker gives up (the driver's idle rounds each skip a third of the
            # window left; after three, the picker had reported it `unavailable`, true when said,
            # and the final vote of two equal stakes, pass against unavailable, decided nothing:
            # the host ended `excluded`). An outage past the give-up height is the game's to judge.
            if state["rounds_down"] >= 1:
                app = create_app(restarted.node.source, spec.run_id().hex(), restarted.node.address,
                                 authorize=MembershipCache(n.ledger))
                restarted.server = ServerThread(app, port=int(state["port"]),  # type: ignore[call-overload]
                                                limits=ServerLimits(max_connections=128)).start()
                state["restarted"] = True

    try:
        tracemalloc.start()
        report = net.run_epoch(between=attack)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert "restarted" in state and "flood" in state
        assert {h.outcome for h in report.hosts} == {"accepted"}
        assert all(h.slashed == "0" for h in report.hosts) and all(v.slashed == "0" for v in report.validators)
        # Every accepted Δ was aggregated, the withheld one from the validator that checked it.
        assert report.agreed and report.next_model_hash and report.next_model_hash != theta
        proposals = {h.proposal.model_hash for h in report.hosts if h.proposal}
        assert proposals == {report.next_model_hash}
        assert net.total_funds() == net.initial_funds
        # Validators serve what they hold by hash: the state they replayed from, and the Δ they checked.
        reader = http_peers(key("host-0"), spec, net.ledger.prefix, allow_private=True)
        validator_endpoints = [m.endpoint for m in net.members[3:]]
        assert any(_serves(reader(e), "global_state", theta) for e in validator_endpoints)
        withheld = next(h for h in report.hosts if h.address == net.host(2).node.address)
        assert withheld.commitment is not None
        assert any(_serves(reader(e), "delta_by_hash", withheld.commitment.delta_hash) for e in validator_endpoints)
        print(f"\nflood + restart + withheld Δ: peak Python memory {peak / MiB:.1f} MiB "
              f"(server and readers); evicted connections served meanwhile")
        assert peak < 64 * MiB
    finally:
        for s in state.get("flood", []):  # type: ignore[union-attr]
            s.close()
        net.close()


def _members_head(signer, spec) -> bytes:
    """A slow-body head carrying a member's real signature headers (over no body): it passes every
    check a server can make before the body, the worst case for the server."""
    signed = sign_request(signer, "GET", "/v1/epochs/0/delta", spec.run_id().hex())
    return SLOW_BODY_HEAD + "".join(f"{k}: {v}\r\n" for k, v in signed.items()).encode()


def test_slow_body_floods_on_a_host_and_on_the_holders_slash_nobody(tmp_path, dataset) -> None:
    # Issue 29: 160 connections sending a complete head, then a body byte every 3 s, aimed at an
    # honest host during verify got it judged unavailable and slashed 50 %; the same flood on a
    # validator's holder server during propose (the only holder of a Δ its host withholds from
    # peers) got that Δ excluded and the honest validator slashed `wrong`. Here: 160 at host 0
    # (cap 128) from reveal on, and 300 at each validator's holder server (cap 256) from propose
    # on, each reconnected as fast as the server closes it.
    validators = {key(f"validator-{i}").address() for i in range(2)}
    spec = hostile_spec(3)
    net = HttpNetwork(spec, tmp_path, dataset, [HostBehaviour() for _ in range(3)],
                      wrap={2: lambda app: _deltas_refused(app, lambda reader: reader not in validators)})
    head = _members_head(key("host-1"), spec)
    floods: dict[str, list[SlowBodies]] = {}
    theta = net.ledger.epoch().model_hash

    def attack(n: HttpNetwork) -> None:
        phase = n.ledger.epoch().phase
        if phase in ("reveal", "verify") and "host" not in floods:
            floods["host"] = [SlowBodies(net.host(0).server.port, 160, head, reconnect=True, max_s=900)]  # type: ignore[union-attr]
        if phase == "propose" and "holders" not in floods:
            floods["holders"] = [SlowBodies(m.server.port, 300, head, reconnect=True, max_s=900)  # type: ignore[union-attr]
                                 for m in net.members[3:]]

    try:
        tracemalloc.start()
        report = net.run_epoch(between=attack)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert set(floods) == {"host", "holders"}
        held = sum(f.alive for fs in floods.values() for f in fs)
        assert {h.outcome for h in report.hosts} == {"accepted"}
        assert all(h.slashed == "0" for h in report.hosts) and all(v.slashed == "0" for v in report.validators)
        # Host 2's Δ came from a flooded holder: nothing was excluded, θ moved, funds are whole.
        assert all(h.proposal is not None and h.proposal.excluded == [] for h in report.hosts)
        assert report.agreed and report.next_model_hash and report.next_model_hash != theta
        assert net.total_funds() == net.initial_funds
        for node in net.nodes:  # the daemons keep ticking
            node.tick()
        opened = sum(f.opened for fs in floods.values() for f in fs)
        print(f"\nslow bodies: 160 at a host, 300 at each holder ({opened} connections opened, {held} held at "
              f"the end); nobody slashed; peak Python memory {peak / MiB:.1f} MiB")
        assert peak < 64 * MiB
    finally:
        for fs in floods.values():
            for f in fs:
                f.close()
        net.close()


def test_a_delta_nobody_serves_is_excluded_and_its_withholder_and_passer_pay(tmp_path, dataset) -> None:
    # Host 3 serves its Δ to the validators while they check it, then to nobody once accepted; the
    # validator that passed its last segment (and so holds the Δ) withholds it too. The three
    # honest hosts (3/4 of the accepted stake) wait until the exclusion height, aggregate without
    # it and say so; the contract slashes host 3 as unavailable and the passer as wrong.
    validators = {key(f"validator-{i}").address() for i in range(2)}
    state: dict[str, object] = {"accepted": False, "withholders": set()}

    def host_refuses(reader: str) -> bool:
        return bool(state["accepted"]) or reader not in validators

    def validator_wrap(address: str):
        return lambda app: _deltas_refused(app, lambda _reader: address in state["withholders"])  # type: ignore[operator]

    spec = hostile_spec(4)
    net = HttpNetwork(spec, tmp_path, dataset, [HostBehaviour() for _ in range(4)],
                      wrap={3: lambda app: _deltas_refused(app, host_refuses),
                            **{4 + i: validator_wrap(key(f"validator-{i}").address()) for i in range(2)}})
    withholder = net.host(3).node.address
    last = spec.train.segments - 1
    theta = net.ledger.epoch().model_hash

    def attack(n: HttpNetwork) -> None:
        info = n.ledger.epoch()
        if info.phase in ("verdict_reveal", "dispute", "dispute_reveal", "propose"):
            for c in n.ledger.report(info.epoch).challenges:
                if c.host == withholder and c.segment == last:
                    state["withholders"] = {v.validator for v in c.votes if v.outcome == "pass"}
        if info.phase == "propose":
            state["accepted"] = True

    try:
        tracemalloc.start()
        report = net.run_epoch(between=attack)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        by_address = {h.address: h for h in report.hosts}
        passers = state["withholders"]
        assert passers and passers <= validators  # type: ignore[operator]
        # Training advanced: the honest hosts' model, without the withheld Δ, is θ_{e+1}.
        assert report.agreed and report.next_model_hash and report.next_model_hash != theta
        honest = [by_address[net.host(i).node.address] for i in range(3)]
        for h in honest:
            assert h.outcome == "accepted" and h.slashed == "0" and int(h.reward) > 0
            assert h.proposal is not None and h.proposal.excluded == [withholder]
            assert h.proposal.model_hash == report.next_model_hash
        # The withholder pays, and keeps no reward; so does the validator that passed and withheld.
        cheat = by_address[withholder]
        assert cheat.outcome == "unavailable" and int(cheat.slashed) > 0 and cheat.reward == "0"
        for v in report.validators:
            if v.address in passers:  # type: ignore[operator]
                assert v.outcome == "wrong" and int(v.slashed) > 0 and v.reward == "0"
            else:
                assert v.slashed == "0"
        assert net.total_funds() == net.initial_funds
        # The daemons keep going: the next epoch trains from the agreed model.
        assert net.ledger.epoch().model_hash == report.next_model_hash
        for node in net.nodes:
            node.tick()
        print(f"\nΔ served by nobody: excluded by 3/4 of the accepted stake, withholder "
              f"{cheat.slashed} and passer(s) slashed; peak Python memory {peak / MiB:.1f} MiB")
        assert peak < 64 * MiB
    finally:
        net.close()


def _serves(source, method: str, digest: str) -> bool:
    try:
        getattr(source, method)(digest)
    except ArtifactUnavailable:
        return False
    return True


def test_150_sybil_members_hide_no_honest_host(tmp_path, dataset) -> None:
    sybils = [key(f"sybil-{i}") for i in range(150)]
    reader = key("late-reader")
    spec = hostile_spec(2)
    net = HttpNetwork(spec, tmp_path, dataset, [HostBehaviour(), HostBehaviour()], extra_keys=[*sybils, reader])
    with RawServer(answer("404 Not Found", {"Content-Length": "0"}, b"")) as nothing:
        try:
            for k in sybils:  # one base unit each, every sybil serving nothing
                net.ledger.bond(k, "host", nothing.url, 1)
            report = net.run_epoch()
            assert report.agreed and {h.outcome for h in report.hosts} == {"accepted"}
            hosts = net.ledger.members(role="host")
            assert len(hosts) == 152
            assert {net.host(i).node.address for i in (0, 1)} <= {m.address for m in hosts}
            # A participant with an empty disk finds θ by asking every host (all pages), sybils first
            # where their addresses sort first: each costs one refused request, none hides the holders.
            # A member with its role's minimum stake: servers answer it (a one-unit sybil they refuse).
            net.ledger.bond(reader, "validator", "http://late.example", int(spec.economics.min_validator_stake))
            store = GlobalStore(tmp_path / "late", spec, net.ledger,
                                http_peers(reader, spec, net.ledger.prefix, allow_private=True, retry_budget_s=0.5),
                                reader.address())
            assert store.get(report.next_model_hash).hash().hex() == report.next_model_hash
            assert net.total_funds() == net.initial_funds
        finally:
            net.close()
