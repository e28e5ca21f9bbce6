"""Where the contract's committed ``.wasm`` is, and loading it with its checksum verified.

``contracts/build.sh`` writes ``contracts/artifacts/veriloco.wasm`` and its sha256; both are
committed, and ``contracts/build.sh --check`` proves the bytes come from the sources.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

ENV_VAR = "VERILOCO_WASM"
_REPO_ARTIFACT = Path(__file__).resolve().parent.parent / "contracts" / "artifacts" / "veriloco.wasm"
_PACKAGED_ARTIFACT = Path(__file__).resolve().parent / "wasm" / "veriloco.wasm"


def contract_wasm_path() -> Path:
    """The contract wasm to use: ``$VERILOCO_WASM`` if set, else the repository's committed
    artifact, else a copy packaged under ``chain/wasm/``.

    Raises:
        FileNotFoundError: none of them exists.
    """
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override)
    for candidate in (_REPO_ARTIFACT, _PACKAGED_ARTIFACT):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"veriloco.wasm not found (looked at {_REPO_ARTIFACT} and {_PACKAGED_ARTIFACT}); "
        f"run contracts/build.sh or set {ENV_VAR}"
    )


def load_contract_wasm(path: Path | None = None) -> bytes:
    """The wasm bytes, checked against the ``.sha256`` file beside them when there is one.

    Raises:
        ValueError: the bytes do not match the recorded checksum.
    """
    path = path or contract_wasm_path()
    wasm = path.read_bytes()
    recorded = path.with_name(path.name + ".sha256")
    if recorded.is_file():
        expected = recorded.read_text().split()[0]
        actual = hashlib.sha256(wasm).hexdigest()
        if actual != expected:
            raise ValueError(f"{path}: sha256 {actual} does not match {recorded.name} ({expected})")
    return wasm
