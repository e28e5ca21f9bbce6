"""Limits that the contract enforces and every Python boundary model checks the same way.

One definition each; ``tests/vectors/limits.json`` is generated from this module (every
upper-case integer below) and carries them to the Rust test suite, which fails unless each
equals the contract's constant of the same name (``contracts/veriloco/src/limits.rs``) and the
contract has one for each.
"""

from __future__ import annotations

MAX_SEGMENTS = 1024
"""Most segments one epoch of a host may have (so at most ``MAX_SEGMENTS + 1`` checkpoint leaves)."""

MAX_PARTICIPANTS = 1024
"""Most hosts, and most validators, a run's phases may require or admit (``min_hosts`` ...
``max_validators``): bounds the work of closing a phase."""

BPS_DENOMINATOR = 10_000
"""Basis points: a fraction ``x`` of this denominator."""

MAX_BLOCKS = 10_000_000
"""Longest phase window, in blocks."""

EPOCHS_PAGE = 30
"""Largest page of the contract's ``epochs`` query."""

EPOCHS_PAGE_DEFAULT = 10
"""Page of the contract's ``epochs`` query when the caller gives no limit."""

MEMBERS_PAGE = 100
"""Largest page of the contract's ``members`` query."""

MEMBERS_PAGE_DEFAULT = 30
"""Page of the contract's ``members`` query when the caller gives no limit."""

AGGREGATION_PAGE = 100
"""Largest page of the contract's ``aggregation_inputs`` query."""

AGGREGATION_PAGE_DEFAULT = 30
"""Page of the contract's ``aggregation_inputs`` query when the caller gives no limit."""

CHALLENGES_PAGE = 128
"""Most challenged hosts one page of the contract's ``challenges`` query scans (a validator's
challenges at 1,024 hosts do not fit one query's gas on a real node)."""

CHALLENGES_PAGE_DEFAULT = 64
"""Challenged hosts one page of ``challenges`` scans when the caller gives no limit."""

REPORT_PAGE = 32
"""Largest page of the contract's ``report`` query, in units: a host costs one plus one per 16 votes
its challenges hold, a validator one (a whole report of a disputed epoch of 1,024 hosts does not fit
one query on a real node)."""

REPORT_PAGE_DEFAULT = 32
"""Units one page of ``report`` holds when the caller gives no limit."""

MAX_ENDPOINT_LEN = 256
"""Longest endpoint a member may advertise, in bytes."""

MAX_ADDRESS_LEN = 256
"""Longest address, in bytes (the CosmWasm VM's limit on a human address)."""

MIN_UNBONDING_EPOCHS = 1
"""Fewest epochs a spec may set for ``unbonding_epochs``. Every epoch's challenges and disputes are
settled by its finalize, before the next epoch opens; stake unbonded in epoch ``e`` is released at
``e + unbonding_epochs``, so with at least 1 it is claimable only once every epoch it could have
taken part in is settled (0 let a cheater unbond and claim during verify, escaping every slash)."""

MAX_MISS_WINDOW_EPOCHS = 64
"""Longest ``economics.miss_window_epochs``: the contract keeps a host's misses (epochs it joined and
trained nothing in) of this many epochs before its last one in one 64-bit word of its member record,
so the record stays O(1) whatever its history."""

MIN_STAKE = 10**6
"""Smallest ``min_host_stake`` and ``min_validator_stake`` a spec may set, in base units: a
one-basis-point slash of a minimum stake is then at least 100 base units, so flooring it loses
under 1 % and never rounds it to nothing (10^4 would be the bare minimum for a nonzero slash),
and every sybil identity locks at least this much. The spec also requires each minimum to be at
least what one member of its role can earn from an epoch's reward
(``protocol.rules.spec.EconomicsSpec.reward_parts``)."""

MAX_HELD_BITS = 96
"""The contract holds at most ``2**MAX_HELD_BITS`` base units in all (bonds, unbonding entries and
the reward pool): a bond or a funding that would pass it is refused, and so are spec amounts above
it, so that every sum and product of finalize (amounts by basis points, by up to ``2**32``
participants) fits in 128 bits and finalize can never be refused for an overflow."""

MAX_DECIMAL_LEN = 40
"""Longest canonical decimal string the contract takes (a verdict's distance), in characters."""

MAX_LOSS_MICRO = 2**31 - 1
"""Largest loss a commitment or a model proposal may carry, in micro-nats (about 2147 nats: far
above any real language model's loss; a model beyond it is broken). The contract refuses larger
values, so no reader of a report ever meets one."""
MAX_GAIN_MICRO = 10**12
"""Largest magnitude of a probe gain a verdict may carry, in micro-nats (``trainer.probe.GAIN_MICRO_BOUND``:
the probe clamps to it, and a probed model whose loss is not a number scores ``−MAX_GAIN_MICRO``)."""
MAX_SEATS_CAP = 64
"""Largest ``verification.seats_cap``: the most seats a committee of pickers draws (19 already make an
all-Byzantine committee less likely than 10^-9 at a third of the stake)."""

MAX_JOIN_EXTENSIONS = 1000
"""Most join extensions a run may allow (``phases.max_join_extensions``)."""

MAX_OBJECTIONS_PER_READY = 64
"""Most objections one ``ready`` carries. A validator with more sends several; a ``ready`` with
fewer than this many is its sender's last (one with exactly this many says more follow, so a
validator whose objections are a multiple of it ends with an empty ``ready``)."""


def all_limits() -> dict[str, int]:
    """Every limit of this module by name (what ``tests/vectors/limits.json`` holds)."""
    return {name: value for name, value in globals().items()
            if name.isupper() and isinstance(value, int) and not isinstance(value, bool)}
