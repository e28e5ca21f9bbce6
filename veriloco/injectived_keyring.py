"""A key out of an ``injectived`` keyring (``veriloco keys import-injectived``).

The keyring's own program reads it: ``injectived keys show NAME --output json`` for the address
and key type, then ``injectived keys export NAME --unarmored-hex --unsafe`` for the private key,
with the keyring's passphrase on stdin (the ``file`` backend asks for it; ``test`` does not).
The key is accepted only if it derives the very address injectived showed. The hex never
reaches a log or the terminal: it goes from the child's stdout into the sealed keyring.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from protocol.errors import VerilocoError
from protocol.keys import KeyType, PrivateKey

Backend = Literal["file", "test", "os"]
PUBKEY_TYPES: dict[str, KeyType] = {
    "/injective.crypto.v1beta1.ethsecp256k1.PubKey": KeyType.ETH_SECP256K1,
    "/cosmos.crypto.secp256k1.PubKey": KeyType.SECP256K1,
}
_HEX_KEY = re.compile(r"\b([0-9a-fA-F]{64})\b")


class KeyringError(VerilocoError, ValueError):
    """injectived could not give the key, or gave one that does not match."""


def key_type_of(pubkey_json: str) -> KeyType:
    """The key type named by ``keys show``'s ``pubkey`` field (a JSON string with ``@type``).

    Raises:
        KeyringError: a key type veriloco cannot sign with (a multisig, a ledger…).
    """
    try:
        type_url = json.loads(pubkey_json)["@type"]
    except (ValueError, KeyError, TypeError):
        raise KeyringError(f"unreadable public key {pubkey_json[:80]!r}") from None
    if type_url not in PUBKEY_TYPES:
        raise KeyringError(f"a key of type {type_url} cannot be imported (only {', '.join(PUBKEY_TYPES)})")
    return PUBKEY_TYPES[type_url]


def key_from_export(shown: dict[str, object], exported: str) -> PrivateKey:
    """The private key of injectived's ``keys export --unarmored-hex`` output, checked against the
    ``keys show`` answer ``shown`` (its address and key type).

    Raises:
        KeyringError: no hex key in the output, or it derives another address.
    """
    key_type = key_type_of(str(shown.get("pubkey", "")))
    found = _HEX_KEY.findall(exported)
    if len(found) != 1:
        raise KeyringError("injectived printed no private key (wrong passphrase?)")
    key = PrivateKey.from_hex(found[0], key_type)
    address = str(shown.get("address", ""))
    prefix = address.rsplit("1", 1)[0] or "inj"
    if key.address(prefix) != address:
        raise KeyringError(f"the exported key derives {key.address(prefix)}, not {address} as injectived shows")
    return key


Runner = Callable[[list[str], str], subprocess.CompletedProcess[str]]


def read_injectived_key(binary: Path, name: str, keyring_dir: Path, backend: Backend, passphrase: str,
                        run: Runner) -> PrivateKey:
    """Key ``name`` of the injectived keyring in ``keyring_dir``.

    Args:
        binary: the injectived executable.
        run: runs ``argv`` with a text on stdin (the caller sets the environment and timeout).

    Raises:
        KeyringError: injectived refused (no such key, wrong passphrase) or the key does not match.
    """
    common = ["--keyring-backend", backend, "--keyring-dir", str(keyring_dir)]
    unlock = f"{passphrase}\n" if backend == "file" else ""
    show = run([str(binary), "keys", "show", name, "--output", "json", *common], unlock)
    if show.returncode != 0:
        raise KeyringError(f"injectived keys show {name}: {_last_line(show.stderr)}")
    try:
        shown = json.loads(show.stdout[show.stdout.index("{"):])
    except ValueError:
        raise KeyringError(f"injectived keys show {name} printed no JSON") from None
    exported = run([str(binary), "keys", "export", name, "--unarmored-hex", "--unsafe", *common], "y\n" + unlock)
    if exported.returncode != 0:
        raise KeyringError(f"injectived keys export {name}: {_last_line(exported.stderr)}")
    return key_from_export(shown, exported.stdout)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "failed"
