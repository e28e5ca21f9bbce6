"""Property: the contract never holds more than 2^MAX_HELD_BITS base units, whatever inflows come,
so nothing finalize computes can overflow (protocol.rules.limits.MAX_HELD_BITS).

Random sequences of bonds (hosts and validators), top-ups, fundings and unbonds with amounts near
the limit, on the embedded chain: an inflow is accepted exactly when what the contract holds stays
within the limit, a refused one changes nothing, and the accounting always equals the contract's
bank balance.
"""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st
from ledger_env import INITIAL_MODEL_HASH, make_spec

from chain.embedded import EmbeddedChain
from chain.embedded.backend import deploy_embedded
from chain.ledger import ContractError, Ledger
from protocol.keys import PrivateKey
from protocol.rules.limits import MAX_HELD_BITS

HELD = 2**MAX_HELD_BITS
KEYS = [PrivateKey(hashlib.sha256(f"held-{i}".encode()).digest()) for i in range(4)]
ROLES = ["host", "host", "validator", "validator"]
SPEC = make_spec()

amounts = st.one_of(st.integers(1, 10**6), st.integers(HELD // 4, HELD // 2), st.integers(HELD - 10, HELD + 10),
                    st.integers(1, 2**100))
steps = st.lists(st.tuples(st.sampled_from(["bond", "fund", "unbond"]), st.integers(0, 3), amounts),
                 min_size=1, max_size=12)


def send(ledger: Ledger, action: str, key: PrivateKey, role: str, amount: int) -> None:
    if action == "bond":
        ledger.bond(key, role, "http://127.0.0.1:8700", amount)  # type: ignore[arg-type]
    else:
        ledger.fund_rewards(key, amount)


@given(steps)
def test_inflows_are_accepted_exactly_while_the_contract_stays_within_its_limit(sequence) -> None:
    chain = EmbeddedChain(genesis_balances={k.address(): {SPEC.economics.denom: 2**101} for k in KEYS})
    ledger = deploy_embedded(chain, KEYS[0], SPEC, INITIAL_MODEL_HASH, KEYS[0].address())
    held, bonded = 0, [0, 0, 0, 0]
    for action, who, amount in sequence:
        key = KEYS[who]
        if action == "unbond":
            amount = min(amount, bonded[who])
            if amount:
                ledger.unbond(key, amount)  # within the contract: never refused for the limit
                bonded[who] -= amount
            continue
        if held + amount <= HELD:
            send(ledger, action, key, ROLES[who], amount)
            held += amount
            bonded[who] += amount if action == "bond" else 0
        else:
            try:
                send(ledger, action, key, ROLES[who], amount)
            except ContractError as exc:
                assert f"would hold more than 2^{MAX_HELD_BITS} base units" in str(exc)
            else:
                raise AssertionError(f"{action} of {amount} accepted with {held} held")
        accounting = ledger.accounting()
        total = int(accounting.bonded) + int(accounting.unbonding) + int(accounting.reward_pool)
        assert total == held == ledger.balance(ledger.contract_address) <= HELD
