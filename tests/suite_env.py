"""What tests in every directory share, importable by name: the small run spec and named test keys.

Fixtures live in ``tests/conftest.py`` (the dataset cache, thread settings, hypothesis profiles);
this module holds the plain values and functions that test modules import (``tests/`` is on
``sys.path`` because pytest imports ``tests/conftest.py`` from there)::

    from suite_env import HOST, VALIDATOR, named_key, small_spec

A directory keeps a helper module of its own only for what is local to it (``ledger_env`` for
the contract tests, ``verifier_env`` for served epochs).
"""

from __future__ import annotations

import hashlib
from functools import cache
from typing import Any

import pytest

from protocol.keys import KeyType, PrivateKey
from protocol.rules.spec import RunSpec
from trainer.presets import tiny


def small_spec(**changes) -> RunSpec:
    """The tiny preset with a short epoch (16 steps, 4 segments of 4) and batch 8.

    Keyword arguments replace sections or fields (``RunSpec.with_changes``). Its data section is
    the tiny preset's, so every spec made here shares the session's one dataset.
    """
    spec = tiny().with_changes(train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8})
    return spec.with_changes(**changes) if changes else spec


@cache  # deriving the public key costs milliseconds, and tests ask for the same names in loops
def named_key(name: str, key_type: KeyType = KeyType.SECP256K1) -> PrivateKey:
    """The key of the test participant called ``name``: the same key in every test and process.

    Never use such keys outside tests: anyone can derive them. The secret depends on the name only,
    ``key_type`` decides how the address and signatures are derived from it. The contract tests'
    funded accounts (``ledger_env``) are these keys too, with the type ``ledger_env`` gives each name.
    """
    return PrivateKey(hashlib.sha256(b"veriloco-test-account:" + name.encode()).digest(), key_type)


@cache
def named_address(name: str, key_type: KeyType = KeyType.SECP256K1) -> str:
    """The ``inj`` address of :func:`named_key` ``(name, key_type)``."""
    return named_key(name, key_type).address()


# The parties most tests need. A test that needs more calls named_key("host2") etc.
OPERATOR = named_address("operator")
HOST = named_address("host")
VICTIM = named_address("victim")        # a second host, whose work an adversary copies
ATTACKER = named_address("attacker")    # a host that cheats
VALIDATOR = named_address("validator")
MEMBER_KEY = named_key("member")        # a bonded member that reads a host's artifacts
STRANGER_KEY = named_key("stranger")    # a key that is no member


def uses_session_devnet(item: pytest.Item) -> bool:
    """Whether a test uses the session's devnet (``tests/chain/devnet_backend.py``): it asks for the
    ``devnet`` fixture (directly or through another fixture), or it runs on the devnet backend of
    ``make_ledger_env`` (which asks for its driver by name, so ``fixturenames`` does not show it)."""
    callspec = getattr(item, "callspec", None)
    return "devnet" in getattr(item, "fixturenames", ()) or (
        callspec is not None and callspec.params.get("make_ledger_env") == "devnet")


# The session devnet of this process, once ``tests/chain/devnet_backend.py`` started it; ``tests/conftest.py``
# stops it early when no later test can use it.
SESSION_DEVNET = pytest.StashKey[Any]()
