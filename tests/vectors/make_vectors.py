"""Write the shared test vectors under tests/vectors/*.json.

The JSON files are committed. ``tests/protocol/test_vectors.py`` recomputes every entry from the
Python implementation, and the contract's Rust tests read the same files, so Python and Rust
derivations cannot drift apart silently. Regenerate only when the protocol deliberately changes:

    .venv/bin/python tests/vectors/make_vectors.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from pydantic import ValidationError

from protocol.keys import PrivateKey
from protocol.rules import vdf
from protocol.rules.beacon import beacon_commit, epoch_seed, genesis_seed
from protocol.rules.classes import electorate, of_class, served, valid_class
from protocol.rules.commitments import trap_commitment, verdict_commitment
from protocol.rules.encoding import canonical_decimal, canonical_json
from protocol.rules.endpoints import EndpointError, endpoint_syntax
from protocol.rules.hashing import Tag, tagged_hash
from protocol.rules.limits import (
    BPS_DENOMINATOR,
    MAX_DECIMAL_LEN,
    MAX_MISS_WINDOW_EPOCHS,
    MAX_SEGMENTS,
    MIN_STAKE,
    all_limits,
)
from protocol.rules.losses import loss_digest, train_loss_micro
from protocol.rules.merkle import merkle_proof, merkle_root
from protocol.rules.models import architecture_names
from protocol.rules.sampling import (
    Stream,
    batch_indices,
    challenged_segments,
    pickers,
    picks,
    seat_rank,
    stake_committee,
    stake_seats,
    uniform,
    uniform128,
)
from protocol.rules.spec import DataSpec, EconomicsSpec, ModelSpec, RunSpec, TrainSpec
from protocol.types import U128_MAX

HERE = Path(__file__).parent
def _address(label: str) -> str:
    return PrivateKey(tagged_hash("test-vector-key", label.encode())).address("inj")


HOSTS = [_address(f"host{i}") for i in range(3)]
# The last validator is also a host: it must never be assigned to validate itself.
VALIDATORS = [_address(f"validator{i}") for i in range(3)] + [HOSTS[0]]


def seed(label: str) -> bytes:
    return tagged_hash("test-vector", label.encode())


def hashing() -> dict:
    return {"cases": [
        {"tag": tag, "data_hex": data.hex(), "digest": tagged_hash(tag, data).hex()}
        for tag, data in [(Tag.RUN_SPEC, b"{}"), (Tag.MERKLE_LEAF, bytes(32)),
                          (Tag.CHECKPOINT, b"abc"), (Tag.BEACON_COMMIT, b"")]
    ]}


def streams() -> dict:
    cases = []
    for label, n, count in [("a", 10, 8), ("b", 3, 8), ("c", 2**63 + 5, 6), ("d", 1, 3)]:
        s = Stream(Tag.SAMPLE_BATCH, seed(label))
        raw = [str(s.next_u64()) for _ in range(4)]
        s = Stream(Tag.SAMPLE_BATCH, seed(label))
        cases.append({"tag": Tag.SAMPLE_BATCH, "material_hex": seed(label).hex(), "first_u64": raw,
                      "n": str(n), "uniform": [str(uniform(s, n)) for _ in range(count)]})
    return {"cases": cases}


def sampling() -> dict:
    run_id, prev = seed("run"), seed("prev")
    batches = [
        {"run_id": run_id.hex(), "prev_epoch_seed": prev.hex(), "host": host, "step": step,
         "batch_size": bs, "n_windows": n,
         "indices": batch_indices(run_id, prev, host, step, bs, n)}
        for host in HOSTS[:2] for step, bs, n in [(0, 4, 1000), (7, 8, 5_000_000), (99, 3, 17)]
    ]
    segments = []
    for i, host in enumerate(HOSTS):
        for s, k in [(8, 2), (8, 0), (1, 3), (4, 10), (64, 5)]:
            es = seed(f"epoch{i}")
            segments.append({"epoch_seed": es.hex(), "host": host, "segments": s, "k": k,
                             "challenged": challenged_segments(es, host, s, k)})
    weights = [(VALIDATORS[0], 1), (VALIDATORS[1], 3), (VALIDATORS[2], 2**96), (HOSTS[0], 10**18 + 7)]
    stakes = dict(weights)
    seats = []
    for label, m, pool in [("seats-a", 12, weights), ("seats-b", 8, weights[:2]), ("seats-c", 5, weights[3:]),
                           ("seats-d", 3, [])]:
        stream = Stream(Tag.SAMPLE_PICKERS, seed(label))
        seats.append({"tag": Tag.SAMPLE_PICKERS, "material_hex": seed(label).hex(),
                      "candidates": [[a, str(st)] for a, st in pool], "m": m,
                      "seats": stake_seats(stream, pool, m)})
    wide = [(_address(f"staker{i}"), (i % 7 + 1) * 10**6) for i in range(40)]
    committees = []
    for label, pool, cap in [("committee-a", wide, 19), ("committee-b", wide, 3), ("committee-c", weights, 19),
                             ("committee-d", wide[:1], 19), ("committee-e", [], 19)]:
        committees.append({"tag": Tag.SAMPLE_PICKERS, "material_hex": seed(label).hex(),
                           "candidates": [[a, str(st)] for a, st in pool], "cap": cap,
                           "committee": stake_committee(Tag.SAMPLE_PICKERS, seed(label), pool, cap)})
    picker_cases = []
    for host in HOSTS:
        for pool, cap in [(wide, 19), (list(stakes.items()), 19), (wide, 1)]:
            picker_cases.append({"prev_seed": seed("prev").hex(), "host": host,
                                 "validators": [[a, str(st)] for a, st in pool], "cap": cap,
                                 "pickers": pickers(seed("prev"), host, pool, cap)})
    pick_cases = []
    for i, host in enumerate(HOSTS):
        for count, k in [(8, 2), (8, 0), (1, 3), (4, 10), (64, 5)]:
            secret = seed(f"secret{i}")
            pick_cases.append({"secret": secret.hex(), "host": host, "segments": count, "k": k,
                               "picks": picks(secret, host, count, k)})
    uniform_cases = []
    for label, n in [("u128-a", 2**96 * 3 + 1), ("u128-b", 7), ("u128-c", 2**127 + 3)]:
        stream = Stream(Tag.SAMPLE_PICKERS, seed(label))
        uniform_cases.append({"tag": Tag.SAMPLE_PICKERS, "material_hex": seed(label).hex(), "n": str(n),
                              "uniform128": [str(uniform128(stream, n)) for _ in range(6)]})
    ranks = [{"prev_seed": seed("prev").hex(), "address": a, "rank": seat_rank(seed("prev"), a).hex()}
             for a in [*HOSTS, *VALIDATORS[:3]]]
    return {"batch_indices": batches, "challenged_segments": segments, "uniform128": uniform_cases,
            "stake_seats": seats, "stake_committees": committees, "pickers": picker_cases, "picks": pick_cases,
            "seat_ranks": ranks}


def classes() -> dict:
    """Compute-profile classes: whose validators pick a host of each class (``of_class`` then
    ``pickers``), whether the class is served, and which members of V decide its disputes."""
    a, b = "0a" * 32, "b1" * 32
    pool = [(_address(f"classed{i}"), (i % 5 + 1) * 10**6) for i in range(24)]
    pool_classes = [[a, b, ""][i % 3] for i in range(24)]
    cases = []
    for host, cls, min_validators, cap in [(HOSTS[0], a, 1, 19), (HOSTS[1], b, 8, 19), (HOSTS[2], b, 9, 19),
                                           (HOSTS[0], "", 4, 3), (HOSTS[1], "c2" * 32, 1, 19)]:
        mine = of_class(pool, pool_classes, cls)
        cases.append({"prev_seed": seed("prev").hex(), "host": host, "class": cls, "cap": cap,
                      "validators": [[v, str(st)] for v, st in pool], "classes": pool_classes,
                      "min_validators": min_validators, "of_class": [v for v, _ in mine],
                      "served": served(len(mine), min_validators),
                      "pickers": pickers(seed("prev"), host, mine, cap)})
    v_sets = [[a, b, a, ""], [a, a], [], [b, b, b]]
    electorates = [{"v_classes": vs, "class": cls, "electorate": electorate(vs, cls)}
                   for vs in v_sets for cls in (a, b, "")]
    validity = [{"class": c, "valid": valid_class(c)}
                for c in ["", a, "A" * 64, "0" * 63, "0" * 65, "g" * 64, " " + "0" * 63]]
    return {"pickers": cases, "electorates": electorates, "validity": validity}


def beacon() -> dict:
    run_id = seed("run")
    secrets = {addr: seed(f"secret-{addr}") for addr in HOSTS + VALIDATORS[:3]}
    commits = [{"address": a, "epoch": e, "secret": s.hex(), "commit": beacon_commit(a, e, s).hex()}
               for a, s in list(secrets.items())[:3] for e in (0, 5)]
    seeds = [
        {"run_id": run_id.hex(), "epoch": 3,
         "reveals": [{"address": a, "secret": s.hex()} for a, s in secrets.items()],
         "seed": epoch_seed(run_id, 3, secrets).hex()},
        {"run_id": run_id.hex(), "epoch": 4, "reveals": [], "seed": epoch_seed(run_id, 4, {}).hex()},
    ]
    return {"commits": commits, "epoch_seeds": seeds,
            "genesis": {"run_id": run_id.hex(), "seed": genesis_seed(run_id).hex()}}


def commitments() -> dict:
    """Verdict commitments and trap commitments."""
    verdicts = [
        {"validator": v, "epoch": e, "host": h, "segment": g, "outcome": o, "distance": d,
         "evidence": seed(f"evidence{g}").hex(), "salt": seed(f"salt{g}{o}").hex(),
         "commitment": verdict_commitment(v, e, h, g, o, d, seed(f"evidence{g}"), seed(f"salt{g}{o}")).hex()}
        for v, e, h, g, o, d in [(VALIDATORS[0], 0, HOSTS[0], 0, "pass", "0"),
                                 (VALIDATORS[1], 7, HOSTS[1], 3, "fail", "0.0123"),
                                 (VALIDATORS[2], 2**40, HOSTS[2], 1023, "unavailable", "1000000000")]
    ]
    # Verdicts on a host's last segment carrying its probe gain (positive, negative, the bounds).
    verdicts += [
        {"validator": v, "epoch": e, "host": h, "segment": g, "outcome": o, "distance": d,
         "evidence": seed(f"evidence{g}").hex(), "salt": seed(f"salt{g}{o}").hex(), "gain_micro": q,
         "commitment": verdict_commitment(v, e, h, g, o, d, seed(f"evidence{g}"), seed(f"salt{g}{o}"),
                                          q).hex()}
        for v, e, h, g, o, d, q in [(VALIDATORS[0], 3, HOSTS[0], 7, "pass", "0", 41_250),
                                    (VALIDATORS[1], 3, HOSTS[1], 7, "pass", "0", -1),
                                    (VALIDATORS[2], 9, HOSTS[2], 0, "fail", "0.5", -2_147_483_647),
                                    (VALIDATORS[0], 9, HOSTS[0], 1, "pass", "0", 0)]
    ]
    # Votes deciding a gain dispute: both gains (main windows, dispute windows).
    verdicts += [
        {"validator": v, "epoch": e, "host": h, "segment": g, "outcome": o, "distance": d,
         "evidence": seed(f"evidence{g}").hex(), "salt": seed(f"salt{g}{o}").hex(), "gain_micro": q,
         "dispute_gain_micro": x,
         "commitment": verdict_commitment(v, e, h, g, o, d, seed(f"evidence{g}"), seed(f"salt{g}{o}"),
                                          q, x).hex()}
        for v, e, h, g, o, d, q, x in [(VALIDATORS[1], 4, HOSTS[0], 7, "pass", "0", 41_250, 39_870),
                                       (VALIDATORS[2], 4, HOSTS[1], 2, "pass", "0.25", -3, -1_000_000_000_000)]
    ]
    traps = [
        {"host": h, "epoch": e, "segments": t, "salt": seed(f"trap{e}").hex(),
         "commitment": trap_commitment(h, e, t, seed(f"trap{e}")).hex()}
        for h, e, t in [(HOSTS[0], 0, []), (HOSTS[1], 5, [3]), (HOSTS[2], 9, [0, 2, 7])]
    ]
    return {"verdicts": verdicts, "traps": traps}


def merkle() -> dict:
    cases = []
    for n in (1, 2, 3, 5, 8, 9):
        leaves = [seed(f"leaf{i}") for i in range(n)]
        cases.append({"leaves": [x.hex() for x in leaves], "root": merkle_root(leaves).hex(),
                      "proofs": [merkle_proof(leaves, i).model_dump() for i in range(n)]})
    return {"cases": cases}


def losses() -> dict:
    # train_loss: the reported train loss as it must follow from the committed losses (half to
    # even at .5, clamped to [0, MAX_LOSS_MICRO]).
    train = [([3, 4, 5, 6], 2), ([1, 2], 2), ([1, 3, 2, 3], 2), ([2_500_000, 2_500_001, 2_400_000], 3),
             ([-5, -7], 2), ([2**31 - 1, 2**31 + 5], 2), ([7], 1)]
    return {"cases": [{"losses_micro": xs, "digest": loss_digest(xs)}
                      for xs in ([], [5_545_177], [3_000_000, 2_999_999, -1, 0])],
            "train_loss": [{"losses_micro": xs, "segment_steps": c, "train_loss_micro": train_loss_micro(xs, c)}
                           for xs, c in train]}


def decimals() -> dict:
    """Distances as the contract takes them: canonical, non-negative, at most MAX_DECIMAL_LEN."""
    longest = "0." + "0" * (MAX_DECIMAL_LEN - 3) + "1"
    return {
        "canonical": ["0", "1", "0.5", "12.0001", "1000000000", "0.001", "2.5", longest],
        "not_canonical": ["", "01", "1.", ".5", "1.50", "1e3", "1E-3", "+1", "0.0", "00", "1,5",
                          " 1", "1 ", "0x1", "1.0e2", "-0", "NaN", "Infinity"],
        "negative": ["-1", "-0.5"],
        "too_long": ["0." + "0" * (MAX_DECIMAL_LEN - 2) + "1", "1" + "0" * MAX_DECIMAL_LEN],
        "normalized": [{"input": text, "canonical": canonical_decimal(text)}
                       for text in ["1e-3", "2.50", "0E-7", "100", "1.000", "12.340e1", "-0"]],
    }


def amounts() -> dict:
    """Amounts (Uint128) as decimal strings: one spelling per amount."""
    return {"valid": ["0", "1", "1500", "10000000000000000000", str(U128_MAX)],
            "invalid": ["", "01", "00", "-1", "+1", "1.0", "1e3", " 1", "1 ", "0x10", "1_000",
                        str(U128_MAX + 1), "9" * 40]}


def vector_spec() -> RunSpec:
    """A complete run spec like the ``tiny`` preset, with every section written out."""
    return RunSpec(
        name="vector-run",
        model=ModelSpec(params={"n_layer": 1, "n_head": 4, "d_model": 64, "block_size": 64}),
        data=DataSpec(corpus="shakespeare", dataset_hash=tagged_hash("test-vector", b"data").hex(),
                      seq_len=64),
        train=TrainSpec(inner_steps=64, segment_steps=8, batch_size=16, lr="3e-3"),
        economics=EconomicsSpec(denom="inj", min_host_stake=str(10 * 10**18),
                                min_validator_stake=str(5 * 10**18), reward_per_epoch=str(10**18)),
    )


def spec() -> dict:
    """A real spec's canonical text, its run id, and texts both sides refuse."""
    good = vector_spec()
    text = good.canonical().decode()
    data = json.loads(text)

    def variant(**changes: dict) -> str:
        changed = json.loads(text)
        for section, fields in changes.items():
            changed[section] = {**changed[section], **fields}
        return canonical_json(changed).decode()

    return {
        "spec_json": text,
        "run_id": good.run_id().hex(),
        "segments": good.train.segments,
        "not_canonical": [
            json.dumps(data, sort_keys=True, indent=1),  # whitespace
            json.dumps(data, sort_keys=False, separators=(",", ":")).replace(  # keys out of order
                '{"aggregation"', '{"version":1,"aggregation"', 1).replace(',"version":1}', "}"),
            text.replace('"seq_len":64', '"seq_len":64.0'),  # a float
            text.replace('"name":"vector-run"', '"name":"vector\\u002drun"'),  # a needless escape
        ],
        "invalid": [
            variant(train={"inner_steps": 60, "segment_steps": 8}),  # not a multiple
            variant(train={"inner_steps": 8 * (MAX_SEGMENTS + 1), "segment_steps": 8}),  # too many segments
            variant(economics={"slash_invalid_bps": 10_001}),  # more than one whole
            variant(phases={"min_hosts": 5, "max_hosts": 4}),  # min above max
            variant(phases={"min_validators": 0}),  # verification without validators
            variant(verification={"seats_cap": 0}),  # nobody would pick challenges
            variant(verification={"trap_max_distance": "0.000001"}),  # a trap window below tau
            variant(economics={"slash_no_reveal_bps": 100}),  # withholding a reveal would pay
            variant(economics={"slash_unavailable_bps": 100}),  # withholding a segment would pay
            variant(economics={"slash_validator_silent_bps": 100}),  # withholding a verdict would pay
            variant(economics={"slash_validator_unserved_bps": 2_001}),  # unserved above wrong
            variant(model={"architecture": "subprocess:run"}),  # not an architecture the project ships
            variant(economics={"unbonding_epochs": 0}),  # stake claimable before its epoch is settled
            variant(economics={"miss_window_epochs": 0}),  # no window: every absence excused
            variant(economics={"miss_window_epochs": MAX_MISS_WINDOW_EPOCHS + 1}),  # longer than a record keeps
            variant(economics={"reward_per_epoch": str(2**96 + 1)}),  # more than the contract may hold
            variant(economics={"min_host_stake": str(MIN_STAKE - 1)}),  # sybil hosts too cheap
            variant(economics={"min_validator_stake": "1"}),  # sybil validators too cheap
            # One host alone would earn 8 units more in an epoch than the minimum it stakes.
            variant(economics={"min_host_stake": str(8 * MIN_STAKE), "reward_per_epoch": str(10 * MIN_STAKE + 10)}),
        ],
        "stake_rule": stake_rule_cases(),
    }


def stake_rule_cases() -> list[dict]:
    """Economics around the minimum-stake rule (``EconomicsSpec._sybils_are_costly``), each with
    whether Python accepts it: the contract must decide every one the same way. Boundary cases
    first, then random ones (a fixed seed) near the bounds, about half of each verdict."""
    fields = ("min_host_stake", "min_validator_stake", "reward_per_epoch", "host_reward_share_bps")
    picked: list[tuple[int, int, int, int]] = [
        (MIN_STAKE, MIN_STAKE, 0, 8_000),
        (MIN_STAKE - 1, MIN_STAKE, 0, 8_000),
        (MIN_STAKE, MIN_STAKE - 1, 0, 8_000),
        (8 * MIN_STAKE, 2 * MIN_STAKE, 10 * MIN_STAKE, 8_000),  # each exactly its part
        (8 * MIN_STAKE - 1, 2 * MIN_STAKE, 10 * MIN_STAKE, 8_000),
        (8 * MIN_STAKE, 2 * MIN_STAKE - 1, 10 * MIN_STAKE, 8_000),
        (MIN_STAKE, 3 * MIN_STAKE, 3 * MIN_STAKE, 0),  # validators take all
        (MIN_STAKE, 3 * MIN_STAKE, 3 * MIN_STAKE + 1, 0),
        (3 * MIN_STAKE, MIN_STAKE, 3 * MIN_STAKE, BPS_DENOMINATOR),  # hosts take all
        (3 * MIN_STAKE - 1, MIN_STAKE, 3 * MIN_STAKE, BPS_DENOMINATOR),
        (2**96, 2**96, 2**96, 5_000),
        # The hosts' part is floored: 3·10^6 + 1 at 1 bps is 300 to hosts, the rest to validators.
        (MIN_STAKE, 3 * MIN_STAKE - 299, 3 * MIN_STAKE + 1, 1),
        (MIN_STAKE, 3 * MIN_STAKE - 300, 3 * MIN_STAKE + 1, 1),
    ]
    rng = random.Random(15)
    for _ in range(40):
        reward = rng.choice([0, rng.randrange(10 * MIN_STAKE), rng.randrange(2**96)])
        bps = rng.choice([0, BPS_DENOMINATOR, rng.randrange(BPS_DENOMINATOR + 1)])
        hosts = reward * bps // BPS_DENOMINATOR
        parts = (max(MIN_STAKE, hosts), max(MIN_STAKE, reward - hosts))
        host, validator = (max(0, p + rng.choice([-1, 0, 0, 1, rng.randrange(-p, p + 1)])) for p in parts)
        picked.append((host, validator, reward, bps))
    cases = []
    for values in picked:
        changes: dict[str, str | int] = dict(zip(fields, values, strict=True))
        changes.update({name: str(changes[name]) for name in fields[:3]})
        try:
            EconomicsSpec.model_validate({**vector_spec().economics.model_dump(mode="json"), **changes})
            accepted = True
        except ValidationError:
            accepted = False
        cases.append({**changes, "accepted": accepted})
    return cases


def limits() -> dict:
    return all_limits()


def endpoints() -> dict:
    """Endpoints both sides accept and refuse (``protocol.rules.endpoints``, the contract's bond);
    every valid one parses and every invalid one is refused by Python here."""
    valid = [
        'http://127.0.0.1:8101',
        'https://example.com',
        'http://host-3:8700',
        'http://a.b.c.example.org/veriloco/v1',
        'http://[::1]:8101',
        'https://[2001:db8::7]',
        'http://10.0.0.1:1',
        'http://h:65535',
        'http://x.y/a-b_c~d.e/%20',
        'http://0.0.0.0',
        'http://sub-domain.example.com:443/',
    ]
    invalid = [
        '',
        'http://',
        'https://',
        'ftp://example.com',
        'HTTP://example.com',
        'http//example.com',
        'example.com',
        'http://[::1',
        'http://::1',
        'http://[::1]x',
        'http://[fe80::1%eth0]',
        'http://[]',
        'http://user@example.com',
        'http://user:pw@example.com/',
        'http://example.com/?q=1',
        'http://example.com/#f',
        'http://example.com\\\\x',
        'http://exa mple.com',
        'http://example.com:',
        'http://example.com:0',
        'http://example.com:65536',
        'http://example.com:99999',
        'http://example.com:8a',
        'http://-bad.com',
        'http://bad-.com',
        'http://a..b',
        'http://.example.com',
        'http://example.com.',
        'http://1.2.3.400',
        'http://01.2.3.4',
        'http://1.2.3',
        'http://1.2.3.4.5',
        'http://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com',
        'http://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.example',
        'http://exämple.com',
        'http://example.com/é',
        'http://example.com/a"b',
        'http://example.com/<x>',
        'http://under_score.com',
    ]
    for endpoint in valid:
        endpoint_syntax(endpoint)
    for endpoint in invalid:
        try:
            endpoint_syntax(endpoint)
        except EndpointError:
            continue
        raise AssertionError(f"{endpoint!r} should be invalid")
    return {"valid": valid, "invalid": invalid}


def architectures() -> dict:
    """The model architectures a spec may name (``protocol.rules.models``): the contract holds the same."""
    return {"names": architecture_names()}


def vdf_cases() -> dict:
    """The delayed seed: input elements, (y, π) that verify, neighbours that do not, and primality."""
    cases = []
    for label, squarings in [("vdf-a", 1), ("vdf-b", 64), ("vdf-c", 1000)]:
        x = vdf.input_element(seed(label))
        y = vdf.evaluate(x, squarings)
        proof = vdf.prove(x, y, squarings)
        other = vdf.normalize(y + 1)
        cases.append({"seed": seed(label).hex(), "squarings": squarings, "x": vdf.encode(x), "y": vdf.encode(y),
                      "proof": vdf.encode(proof), "ell": str(vdf.challenge_prime(x, y, squarings)),
                      "delayed_seed": vdf.delayed_seed(y).hex(),
                      "refused": [{"why": "another y", "squarings": squarings, "y": vdf.encode(other),
                                   "proof": vdf.encode(proof)},
                                  {"why": "another delay", "squarings": squarings + 1, "y": vdf.encode(y),
                                   "proof": vdf.encode(proof)},
                                  {"why": "y as N - y", "squarings": squarings, "y": vdf.encode(vdf.MODULUS - y),
                                   "proof": vdf.encode(proof)},
                                  {"why": "the proof as N - proof", "squarings": squarings, "y": vdf.encode(y),
                                   "proof": vdf.encode(vdf.MODULUS - proof)}]})
    numbers = [2, 71, 73, 561, 7919, 3215031751, 341550071728321, 2**61 - 1, 2**127 - 1, 2**128 + 1,
               170141183460469231731687303715884105757, 3825123056546413051]
    primes = [{"n": str(n), "prime": vdf.is_probable_prime(n)} for n in numbers]
    return {"modulus": str(vdf.MODULUS), "cases": cases, "primes": primes}


VECTORS = {"hashing": hashing, "stream": streams, "sampling": sampling, "classes": classes, "beacon": beacon,
           "commitments": commitments, "merkle": merkle, "losses": losses, "decimals": decimals, "amounts": amounts,
           "spec": spec, "limits": limits, "architectures": architectures, "endpoints": endpoints,
           "vdf": vdf_cases}
"""Every vector file by name (``<name>.json``); both test suites must read each of them."""


def main() -> None:
    for name, build in VECTORS.items():
        path = HERE / f"{name}.json"
        path.write_text(json.dumps(build(), indent=1, sort_keys=True) + "\n")
        print("wrote", path)


if __name__ == "__main__":
    main()
