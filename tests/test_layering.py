"""The import layering of docs/architecture.md, enforced.

    protocol  ->  chain, trainer  ->  verifier  ->  node  ->  veriloco (CLI)

Each package may import only itself and the packages below it, and the compute packages
(``trainer``, ``verifier``) import no chain client and no HTTP library, so they can be run and
tested without either. The rules the contract mirrors (``protocol.rules``) import no torch.
Every import statement counts, including those inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

ALLOWED: dict[str, set[str]] = {
    "protocol": {"protocol"},
    "chain": {"protocol", "chain"},
    "trainer": {"protocol", "trainer"},
    "verifier": {"protocol", "trainer", "verifier"},
    "node": {"protocol", "chain", "trainer", "verifier", "node"},
    "veriloco": {"protocol", "chain", "trainer", "verifier", "node", "veriloco"},
}
PROJECT = set(ALLOWED)

# Third-party modules that mean network, chain or process I/O.
NETWORK = {"httpx", "fastapi", "starlette", "uvicorn", "requests", "urllib3", "grpc", "cosmpy", "wasmtime",
           "injective_core", "socket", "subprocess"}
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "protocol": NETWORK,
    "chain": set(),
    "trainer": NETWORK - {"socket"},  # islands pick a free TCP port for torch.distributed's rendezvous
    "verifier": NETWORK,
}
NO_TORCH = {"protocol.rules"}


def imports_of(path: Path) -> set[str]:
    """Every absolute module name imported anywhere in ``path``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def test_every_package_is_covered() -> None:
    found = {p.parent.name for p in REPO.glob("*/__init__.py")}
    assert found >= PROJECT, f"packages missing: {PROJECT - found}"
    assert not (found - PROJECT - {"tests", "bench", "contracts", "docs"}), \
        f"a new top-level package needs a place in the layering: {found - PROJECT}"


@pytest.mark.parametrize("package", sorted(PROJECT))
def test_package_imports_only_the_layers_below(package: str) -> None:
    bad = []
    for path in modules(package):
        for name in imports_of(path):
            top = name.split(".")[0]
            if top in PROJECT and top not in ALLOWED[package]:
                bad.append(f"{path.relative_to(REPO)} imports {name}")
            if top in FORBIDDEN_THIRD_PARTY.get(package, set()):
                bad.append(f"{path.relative_to(REPO)} imports {name} (no network or chain I/O in {package})")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", sorted(NO_TORCH))
def test_mirrored_rules_do_not_use_torch(package: str) -> None:
    directory = REPO.joinpath(*package.split("."))
    bad = [f"{p.relative_to(REPO)} imports {n}" for p in sorted(directory.rglob("*.py"))
           for n in imports_of(p) if n.split(".")[0] in {"torch", "numpy"}]
    assert not bad, "\n".join(bad)


def test_the_checker_sees_function_level_imports(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from chain.ledger import Ledger\n    import httpx\n")
    assert imports_of(source) == {"chain.ledger", "httpx"}
