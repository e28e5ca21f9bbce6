"""Transactional state: every mutation is journaled so a failed transaction can be undone.

The chain keeps all its state (balances, codes, contracts, contract storage, sequences) in
:class:`JournaledDict` instances sharing one :class:`Journal`. Inside ``journal.transaction()``
each write records the previous value; if the block raises, the writes are undone in reverse
order. This costs O(writes) per transaction, not O(state), which matters when a simulation runs
thousands of transactions against a growing contract store.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar, overload

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MISSING: Any = object()


class Journal:
    """Undo log for the writes of the transaction in progress (at most one at a time)."""

    def __init__(self) -> None:
        self._entries: list[tuple[JournaledDict[Any, Any], Any, Any]] | None = None
        # Bumped by every write and every undo: equal versions mean the same state (the chain's
        # query cache keys on it).
        self.version = 0
        self.undone = False  # whether the last transaction that failed had all its writes restored

    @property
    def active(self) -> bool:
        """True while a transaction is open."""
        return self._entries is not None

    def record(self, owner: JournaledDict[Any, Any], key: Any, old: Any) -> None:
        """Remember that ``owner[key]`` was ``old`` (``_MISSING`` if absent) before a write."""
        self.version += 1
        if self._entries is not None:
            self._entries.append((owner, key, old))

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Run a block atomically: on any exception, undo its writes and re-raise."""
        if self._entries is not None:
            raise RuntimeError("transactions do not nest")
        self._entries = []
        self.undone = False
        try:
            yield
        except BaseException:
            for owner, key, old in reversed(self._entries):
                owner._restore(key, old)
            self.version += 1
            self.undone = True  # every write restored (a second interrupt above leaves it False)
            raise
        finally:
            self._entries = None


class JournaledDict(Generic[K, V]):
    """A dict whose writes go through a :class:`Journal`, with keys kept sortable for scans.

    Args:
        journal: the chain's journal.
        data: initial contents (not journaled).
    """

    def __init__(self, journal: Journal, data: dict[K, V] | None = None) -> None:
        self._journal = journal
        self._data: dict[K, V] = dict(data or {})
        self._sorted: list[K] | None = None  # rebuilt lazily after an insert or delete

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __len__(self) -> int:
        return len(self._data)

    @overload
    def get(self, key: K) -> V | None: ...

    @overload
    def get(self, key: K, default: V) -> V: ...

    def get(self, key: K, default: V | None = None) -> V | None:
        return self._data.get(key, default)

    def items(self) -> Iterator[tuple[K, V]]:
        return iter(self._data.items())

    def __setitem__(self, key: K, value: V) -> None:
        old = self._data.get(key, _MISSING)
        self._journal.record(self, key, old)
        if old is _MISSING:
            self._sorted = None
        self._data[key] = value

    def __delitem__(self, key: K) -> None:
        old = self._data[key]
        self._journal.record(self, key, old)
        del self._data[key]
        self._sorted = None

    def pop(self, key: K) -> V | None:
        """Remove ``key`` if present and return its value."""
        if key not in self._data:
            return None
        value = self._data[key]
        del self[key]
        return value

    def _restore(self, key: K, old: Any) -> None:
        # Called by the journal on rollback; bypasses journaling.
        if old is _MISSING:
            self._data.pop(key, None)
        else:
            self._data[key] = old
        self._sorted = None

    def sorted_keys(self) -> list[K]:
        """All keys in ascending order (cached until the key set changes)."""
        if self._sorted is None:
            self._sorted = sorted(self._data)  # type: ignore[type-var]
        return self._sorted

    def key_range(self, start: Any = None, end: Any = None) -> list[K]:
        """Keys ``k`` with ``start <= k < end`` in ascending order (None: unbounded)."""
        keys = self.sorted_keys()
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if end is None else bisect.bisect_left(keys, end)
        return keys[lo:hi] if lo < hi else []

    def snapshot(self) -> dict[K, V]:
        """A plain copy of the contents (for saving)."""
        return dict(self._data)


class ContractStore:
    """One contract's key-value storage (bytes to bytes), as the ``db_*`` imports see it.

    Args:
        data: the contract's journaled storage.
    """

    def __init__(self, data: JournaledDict[bytes, bytes]) -> None:
        self._data = data

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def set(self, key: bytes, value: bytes) -> None:
        self._data[key] = value

    def remove(self, key: bytes) -> None:
        self._data.pop(key)

    def scan(self, start: bytes | None, end: bytes | None, descending: bool) -> list[tuple[bytes, bytes]]:
        """Entries with ``start <= key < end``, materialized now (later writes do not show)."""
        keys = self._data.key_range(start, end)
        if descending:
            keys = keys[::-1]
        return [(k, self._data[k]) for k in keys]
