"""The Ledger pages through the contract's capped answers: every epoch comes back, in order."""

from test_contract_epoch import HOSTS, VALIDATORS, ready

from chain.ledger import EPOCHS_PAGE


def test_epochs_beyond_one_contract_page(embedded_env) -> None:
    # Embedded only: 31 epochs of transactions take seconds here and minutes on a real node.
    env = embedded_env
    ready(env)
    for _ in range(EPOCHS_PAGE + 1):
        env.play_epoch(HOSTS, VALIDATORS)
    epochs = env.ledger.epochs()
    assert [e.epoch for e in epochs] == list(range(EPOCHS_PAGE + 2))
    assert [e.epoch for e in env.ledger.epochs(start_after=5, limit=EPOCHS_PAGE + 1)] == list(range(6, EPOCHS_PAGE + 2))
    assert len(env.ledger.epochs(limit=7)) == 7
