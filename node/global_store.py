"""Global states by hash: kept on disk, fetched from peers when missing, always checked against the hash.

The chain agrees on the hash of θ_e (with its outer momentum); the bytes live with the hosts. A
participant that did not compute θ_e itself — a host whose proposal lost the vote, a validator, a
host that restarted on a fresh disk — asks the run's hosts for it by hash and keeps the first answer
that decodes under the spec's layout and hashes right. A wrong answer costs the liar nothing but
the reader a retry, so peers are tried in turn: first the hosts accepted in epoch e − 1 (they
built θ_e, or trained from it when the vote kept θ_{e−1}; the chain's aggregation inputs), then
every other host, then every validator (validators hold the states they replayed from and serve
them by hash; all members, paged). A member whose endpoint is malformed or not allowed is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from chain.ledger import Ledger
from protocol.errors import VerilocoError
from protocol.rules.spec import RunSpec
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, global_path
from trainer.outer import GlobalState, decode_global, load_global
from trainer.tensorfile import TensorFileError

PeerResolver = Callable[[str], ArtifactSource]
"""Endpoint URL -> that host's :class:`ArtifactSource` (HTTP across processes, local in simulate)."""


class GlobalStateUnavailable(VerilocoError):
    """No local copy and no peer served a global state with the wanted hash."""


class GlobalStore:
    """Global states of one run under ``root``.

    Args:
        root: the participant's work root.
        spec: the run spec (layout of a global state).
        ledger: where to find the run's hosts and their endpoints.
        peers: how to reach a host's artifacts.
        own_address: skipped when asking peers.
        keep: how many states to hold in memory.
    """

    def __init__(self, root: Path, spec: RunSpec, ledger: Ledger, peers: PeerResolver,
                 own_address: str, keep: int = 3) -> None:
        self.root = Path(root)
        self.spec = spec
        self.run_id = spec.run_id()
        self._ledger = ledger
        self._peers = peers
        self._own = own_address
        self._keep = keep
        self._cache: dict[str, GlobalState] = {}

    def path(self, model_hash: str) -> Path:
        return global_path(self.root, self.run_id, model_hash)

    def put(self, state: GlobalState) -> str:
        """Store ``state``; return its hash."""
        model_hash = state.hash().hex()
        path = self.path(model_hash)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            state.save(path)
        self._remember(model_hash, state)
        return model_hash

    def has(self, model_hash: str) -> bool:
        return model_hash in self._cache or self.path(model_hash).exists()

    def get(self, model_hash: str, epoch: int | None = None) -> GlobalState:
        """The global state with ``model_hash``: from memory, disk, θ_0, or a peer — verified.

        Args:
            model_hash: the state's hash (θ_e as the chain holds it).
            epoch: the epoch that starts from it, if known: the hosts accepted in the epoch before
                are asked first.

        Raises:
            GlobalStateUnavailable: nobody has it (yet).
        """
        if model_hash in self._cache:
            return self._cache[model_hash]
        path = self.path(model_hash)
        if path.exists():
            state = load_global(path, self.spec)
            if state.hash().hex() == model_hash:
                return self._remember(model_hash, state)
            path.unlink()  # damaged on disk: fetch it again
        initial = GlobalState.initial(self.spec)
        if initial.hash().hex() == model_hash:
            self.put(initial)
            return initial
        return self._fetch(model_hash, epoch)

    def _peers_to_ask(self, epoch: int | None) -> Iterator[tuple[str, str]]:
        """(address, endpoint) of the hosts to ask, likeliest first, each once, never ourselves."""
        asked = {self._own}
        builders = self._ledger.aggregation_inputs(epoch - 1) if epoch else []
        for host in builders:
            if host.address not in asked:
                asked.add(host.address)
                yield host.address, host.endpoint
        for role in ("host", "validator"):
            for member in self._ledger.members(role=role):
                if member.address not in asked:
                    asked.add(member.address)
                    yield member.address, member.endpoint

    def _fetch(self, model_hash: str, epoch: int | None) -> GlobalState:
        reasons = []
        for address, endpoint in self._peers_to_ask(epoch):
            try:
                state = decode_global(self._peers(endpoint).global_state(model_hash), self.spec,
                                      what=f"global state from {address}")
            except (ArtifactUnavailable, TensorFileError) as exc:
                reasons.append(f"{address}: {exc}")
                continue
            if state.hash().hex() != model_hash:
                reasons.append(f"{address}: served a state with another hash")
                continue
            self.put(state)
            return state
        raise GlobalStateUnavailable(f"no host served global state {model_hash[:12]}… "
                                     f"({'; '.join(reasons) or 'no other hosts'})")

    def _remember(self, model_hash: str, state: GlobalState) -> GlobalState:
        self._cache[model_hash] = state
        while len(self._cache) > self._keep:
            self._cache.pop(next(iter(self._cache)))
        return state
