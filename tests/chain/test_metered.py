"""MeteredBackend charges each signer the fees of its transactions, refused ones included."""

import pytest
from suite_env import named_key

from chain.ledger import ContractBackend, ContractError, TxResult
from chain.metered import MeteredBackend

ALICE, BOB = named_key("alice"), named_key("bob")


class FeeChargingChain(ContractBackend):
    """A transport that charges 7 per transaction and refuses messages named "bad" (in a block,
    as a real chain does, so the fee is paid)."""

    denom, contract_address = "inj", "inj1contract"

    def execute(self, key, msg, funds=0):
        if "bad" in msg:
            raise ContractError("refused", fee=7)
        return TxResult(tx_hash="00", height=1, gas_used=1, fee=7)

    def query(self, msg):
        return {}

    def height(self):
        return 1

    def balance(self, address):
        return 0

    def wait_for_height(self, height, timeout=60.0):
        return height

    def raw(self, key):
        return None


def test_fees_of_accepted_and_refused_transactions_are_charged_to_their_signer() -> None:
    metered = MeteredBackend(FeeChargingChain())
    metered.execute(ALICE, {"good": {}})
    with pytest.raises(ContractError):
        metered.execute(BOB, {"bad": {}})
    metered.execute(BOB, {"good": {}})
    assert metered.fees_paid == 21
    assert metered.fees_by == {ALICE.address(): 7, BOB.address(): 14}
