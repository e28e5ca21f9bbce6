"""Metrics as files: CSV (one row per epoch, one per member and epoch) and TensorBoard events.

One writer serves both uses: ``veriloco metrics OUT`` writes a finished run at once, and the
daemons and ``simulate`` append each epoch as it closes (:class:`MetricsFollower`), so
``tensorboard --logdir OUT/tensorboard`` and a spreadsheet show the loss while the run goes on.
Rows are those of :func:`veriloco.report.epoch_rows` and :func:`veriloco.report.member_rows`;
amounts are base units. A restarted writer reads back which epochs ``epochs.csv`` already holds
and appends only the others, so a daemon's restart neither repeats nor loses an epoch.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chain.ledger import Ledger
from protocol.views import EpochReport
from veriloco.report import EPOCH_COLUMNS, MEMBER_COLUMNS, epoch_rows, member_rows

log = logging.getLogger("veriloco.metrics")

EPOCHS_CSV, MEMBERS_CSV, TENSORBOARD_DIR = "epochs.csv", "members.csv", "tensorboard"
_SAID: set[Path] = set()  # files whose missing columns the log has named


class MetricsWriter:
    """Appends closed epochs' rows to ``OUT/epochs.csv``, ``OUT/members.csv`` and, with
    ``tensorboard``, to event files in ``OUT/tensorboard``.

    Args:
        out: the folder (created).
        denom: the run's base denom (a column of every row).
        names: address -> key name, for the ``name`` column and TensorBoard's per-member tags.
        tensorboard: also write TensorBoard events (tensorboardX is imported only then).
    """

    def __init__(self, out: Path, denom: str, names: dict[str, str] | None = None, tensorboard: bool = True) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.denom = denom
        self.names = dict(names or {})
        self.tensorboard = tensorboard
        self.written: set[int] = written_epochs(self.out / EPOCHS_CSV)

    @property
    def files(self) -> list[Path]:
        found = [self.out / EPOCHS_CSV, self.out / MEMBERS_CSV]
        return found + ([self.out / TENSORBOARD_DIR] if self.tensorboard else [])

    def write(self, reports: Sequence[EpochReport]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Append the rows of the reports whose epochs are not written yet; return the rows written."""
        fresh = sorted((r for r in reports if r.epoch not in self.written), key=lambda r: r.epoch)
        epochs, members = epoch_rows(fresh, self.denom), member_rows(fresh, self.denom, self.names)
        _append_csv(self.out / EPOCHS_CSV, EPOCH_COLUMNS, epochs)
        _append_csv(self.out / MEMBERS_CSV, MEMBER_COLUMNS, members)
        if self.tensorboard and fresh:
            _append_tensorboard(self.out / TENSORBOARD_DIR, epochs, members)
        self.written.update(r.epoch for r in fresh)
        return epochs, members


class MetricsFollower:
    """Writes each epoch of a running chain once it has closed (the run is past it).

    :meth:`observe` is cheap when nothing closed: it compares the current epoch with the last
    written and reads the chain (one report per closed epoch) only when an epoch has closed.
    A failure to read or write is logged and retried at the next observation; it never stops a node.
    """

    def __init__(self, writer: MetricsWriter) -> None:
        self.writer = writer

    @classmethod
    def to(cls, out: Path, denom: str, names: dict[str, str], who: str) -> MetricsFollower:
        """A follower writing to ``out`` (CSV and TensorBoard), saying so in ``who``'s log."""
        log.info("%s: metrics of each closed epoch in %s (tensorboard --logdir %s)", who, out, out / TENSORBOARD_DIR)
        return cls(MetricsWriter(out, denom, names))

    def observe(self, ledger: Ledger, current_epoch: int) -> list[int]:
        """Write every closed epoch (< ``current_epoch``) not written yet; return the epochs written."""
        due = [e for e in range(current_epoch) if e not in self.writer.written]
        if not due:
            return []
        try:
            reports = [ledger.report(e) for e in due]
            self.writer.write(reports)
        except Exception as exc:  # noqa: BLE001 (metrics are a by-product: a node carries on, the next tick retries)
            log.warning("metrics: could not write epochs %s yet: %s", due, exc)
            return []
        return due


def written_epochs(path: Path) -> set[int]:
    """The epochs an ``epochs.csv`` already holds (none when it does not exist)."""
    if not path.is_file():
        return set()
    with path.open(newline="") as f:
        return {int(row["epoch"]) for row in csv.DictReader(f) if row.get("epoch", "").isdigit()}


def _append_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    # A file an older version began keeps its own header: rows are appended in its columns (a
    # column it lacks is left out, once said in the log), so no row ever shifts under a header.
    header = _header(path)
    if header and header != columns:
        if (missing := [c for c in columns if c not in header]) and path not in _SAID:
            _SAID.add(path)
            log.warning("metrics: %s has no column %s (begun by an older version); appending without it",
                        path.name, ", ".join(missing))
        columns = header
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, restval="", extrasaction="ignore")
        if not header:
            writer.writeheader()
        writer.writerows(rows)


def _header(path: Path) -> list[str]:
    """The first row of a CSV file; empty when it does not exist or is empty."""
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return next(csv.reader(f), [])


def _append_tensorboard(folder: Path, epochs: list[dict[str, Any]], members: list[dict[str, Any]]) -> None:
    """Scalars per epoch: losses, counts, money (base units as floats). Each call adds an event file,
    named after its first epoch so two in one second do not collide (TensorBoard merges a folder's files)."""
    from tensorboardX import SummaryWriter  # noqa: PLC0415 (loads only when TensorBoard files are written)

    first = epochs[0]["epoch"] if epochs else "none"
    with SummaryWriter(str(folder), filename_suffix=f".epoch{first}") as writer:
        for row in epochs:
            e = row["epoch"]
            if row["val_loss_next"] != "":
                writer.add_scalar("loss/validation_of_next_model", row["val_loss_next"], e + 1)
            if row["train_loss_accepted"] != "":
                writer.add_scalar("loss/train_accepted_hosts", row["train_loss_accepted"], e)
            for key in ("hosts", "accepted", "validators"):
                writer.add_scalar(f"members/{key}", row[key], e)
            for key in ("slashed_total", "rewards_total"):
                writer.add_scalar(f"funds/{key}_base_units", float(row[key]), e)
        for row in members:
            who = row["name"] or row["address"]
            if row["train_loss"] != "":
                writer.add_scalar(f"train_loss/{who}", row["train_loss"], row["epoch"])
