"""The dashboard's reads of a run: what :func:`.state.build_state` needs, from the chain.

The ledger is opened for each read, so an embedded network shows what its state file holds now
(``simulate`` saves it after every epoch) and a node that restarted is simply read again.
Reports of closed epochs never change and are kept; the others (the current epoch's, and in a
pipelined run the older one still settling) are read each time.
Reads are serialised and at most one per ``min_interval`` seconds, however many pages poll.
"""

from __future__ import annotations

import threading
import time

from chain.block_clock import BlockClock
from protocol.rules.spec import RunSpec
from protocol.views import EpochReport
from veriloco.connect import NetworkFile, open_ledger
from veriloco.dashboard.state import DashboardState, build_state


class RunSource:
    """A run's state for the dashboard, read from its chain.

    Args:
        net: the run's network file.
        names: address -> key name, shown beside addresses (with the network file's own names).
        min_interval: the shortest time between two reads of the chain (seconds).
    """

    def __init__(self, net: NetworkFile, names: dict[str, str] | None = None, min_interval: float = 1.0) -> None:
        self.net = net
        self.names = {**net.names, **(names or {})}
        self.min_interval = min_interval
        self.clock = BlockClock()
        self._closed: dict[int, EpochReport] = {}
        self._spec: RunSpec | None = None
        self._last: tuple[float, DashboardState] | None = None
        self._lock = threading.Lock()

    def state(self) -> DashboardState:
        """The run now (or as read less than ``min_interval`` ago)."""
        with self._lock:
            now = time.monotonic()
            if self._last is not None and now - self._last[0] < self.min_interval:
                return self._last[1]
            state = self._read()
            self._last = (now, state)
            return state

    def _read(self) -> DashboardState:
        with open_ledger(self.net) as ledger:
            if self._spec is None:
                self._spec = ledger.spec()
            current, height = ledger.epoch(lists=False), ledger.height()
            if self.net.chain.backend == "cosmos":  # an embedded chain's blocks come with transactions, not time
                self.clock.observe(height)
            reports = [ledger.kept_report(epoch, self._closed) for epoch in range(current.epoch + 1)]
            members, accounting = ledger.members(), ledger.accounting()
            balance = ledger.balance(ledger.contract_address)
        chain = (self.net.chain.chain_id or "cosmos") if self.net.chain.backend == "cosmos" else "embedded chain"
        return build_state(spec=self._spec, contract=self.net.contract, chain=chain, current=current, height=height,
                           seconds_per_block=self.clock.seconds_per_block(), reports=reports, members=members,
                           accounting=accounting, contract_balance=balance, names=self.names, updated=time.time())
