"""Joining a run someone else deployed: what the chain says about it, checked before it is trusted.

A new host or validator knows a node and the run's contract address (from the operator's
announcement). ``veriloco run join`` reads the rest from the chain and checks it:

* the run spec is the contract's ``config.spec_json``, which must be canonical JSON whose hash is
  the ``run_id`` the contract stores (and, when the announcement gave one, the run id expected);
* θ_0's hash on chain must be the hash of the model the spec builds (a contract deployed with
  another θ_0 would have every honest host train from a model nobody can rebuild);
* the contract's code must be the wasm this veriloco ships (its sha256), so the rules it
  enforces are the ones this version's nodes follow; ``--any-code`` accepts another build.

:func:`check_run` is the pure part (config in, verdict out); the command does the reads.
"""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, ConfigDict, ValidationError

from protocol.errors import VerilocoError
from protocol.rules.spec import RunSpec
from protocol.views import Config


class JoinRefused(VerilocoError, ValueError):
    """What the chain says about a run does not check out."""


class CheckedRun(BaseModel):
    """A run whose spec, θ_0 and code were checked."""

    model_config = ConfigDict(extra="forbid")

    spec: RunSpec
    run_id: str
    initial_model_hash: str
    code_checksum: str
    code_is_ours: bool


def check_run(config: Config, *, theta0_hash: str | None, code_checksum: bytes, our_checksum: bytes,
              expected_run_id: str | None = None, any_code: bool = False) -> CheckedRun:
    """Check a contract's ``config`` (and its code) against what the spec in it implies.

    Args:
        config: the contract's ``config`` answer.
        theta0_hash: the hash of θ_0 built from the spec (hex), or None not to check it.
        code_checksum: the sha256 of the contract's code on chain.
        our_checksum: the sha256 of the wasm this veriloco ships.
        expected_run_id: the run id the announcement named (hex), if any.
        any_code: accept a contract whose code is not ours.

    Raises:
        JoinRefused: a check failed (the message says which and what to do).
    """
    try:
        spec = RunSpec.from_canonical(config.spec_json)
    except (ValidationError, ValueError) as exc:
        raise JoinRefused(f"the contract's run spec does not parse as a canonical run spec: {exc}") from None
    computed = spec.run_id().hex()
    if computed != config.run_id:
        raise JoinRefused(f"the contract's spec hashes to run id {computed}, but it stores {config.run_id}")
    if expected_run_id is not None and expected_run_id.lower() != computed:
        raise JoinRefused(f"this contract runs {computed}, not the run id {expected_run_id} you expected")
    if theta0_hash is not None and theta0_hash != config.initial_model_hash:
        raise JoinRefused(f"θ_0 on chain is {config.initial_model_hash}, but the spec's model builds "
                          f"{theta0_hash}: nobody could train from it")
    ours = code_checksum == our_checksum
    if not ours and not any_code:
        raise JoinRefused(f"the contract runs code {code_checksum.hex()}, not this veriloco's "
                          f"{our_checksum.hex()} (another version?); --any-code joins anyway")
    return CheckedRun(spec=spec, run_id=computed, initial_model_hash=config.initial_model_hash,
                      code_checksum=code_checksum.hex(), code_is_ours=ours)


def wasm_checksum(wasm: bytes) -> bytes:
    """The checksum a CosmWasm chain gives code: sha256 of the wasm bytes."""
    return hashlib.sha256(wasm).digest()
