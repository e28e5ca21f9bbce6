"""``veriloco host run --nproc-per-node N``: the host as a ``torchrun`` island.

Started without a launcher, the command starts ``torchrun --standalone --nproc-per-node N`` on
itself (:func:`relaunch`) and waits for it. An island over several machines is one ``host run``
per machine with ``--nnodes``, ``--node-rank``, ``--master-addr`` and ``--master-port`` (torchrun's
static rendezvous: node 0 listens at the master address, and its first process is rank 0); the
processes of the other nodes only follow, so those machines need the run's dataset but no chain
key, network access to the chain or artifact server. Under ``torchrun`` each rank joins the island
(:func:`trainer.island.join_island`: NCCL on CUDA, gloo on the CPU); rank 0 reads the run spec from
the chain, sends it to the other ranks and runs the daemon (chain, artifact server) with an
:class:`~trainer.island.IslandBehaviour`; the other ranks touch neither the chain nor the network
(:func:`follow`): they train what rank 0 orders and leave when it stops.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from veriloco.errors import CommandError

if TYPE_CHECKING:
    from trainer.island import IslandBehaviour

_SPEC_BYTES = 1 << 20  # a run spec's canonical JSON is a few kB

STOP_WAIT_S = 300.0
"""How long rank 0 waits, once its daemon stopped, for a pipelined training thread to end (at its
next step, the ranks agreeing on the stop) before it would tell the other ranks to leave (:func:`stop`)."""


def island_world() -> int | None:
    """The island's size when this process is a rank under ``torchrun``, else ``None``."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    return int(os.environ["WORLD_SIZE"])


def island_rank() -> int:
    """This rank's index under ``torchrun``."""
    return int(os.environ.get("RANK", "0"))


class IslandNodes(BaseModel):
    """Where an island's processes run: ``nnodes`` machines, this one ``node_rank``; node 0 is
    reached at ``master_addr:master_port`` (needed when ``nnodes > 1``; one machine rendezvouses
    on its own, ``--standalone``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nnodes: int = Field(default=1, ge=1, le=4096)
    node_rank: int = Field(default=0, ge=0)
    master_addr: str | None = Field(default=None, min_length=1, max_length=253, pattern=r"^[A-Za-z0-9.:_\[\]-]+$")
    master_port: int = Field(default=29500, ge=1, le=65535)

    @model_validator(mode="after")
    def _placed(self) -> IslandNodes:
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node rank {self.node_rank} of {self.nnodes} nodes (0 … {self.nnodes - 1})")
        if self.nnodes > 1 and self.master_addr is None:
            raise ValueError(f"an island of {self.nnodes} nodes needs --master-addr (node 0's address)")
        return self

    @classmethod
    def of(cls, nnodes: int, node_rank: int, master_addr: str | None, master_port: int) -> IslandNodes:
        """The command line's values, checked.

        Raises:
            CommandError: values that do not place this machine in an island.
        """
        try:
            return cls(nnodes=nnodes, node_rank=node_rank, master_addr=master_addr, master_port=master_port)
        except ValidationError as exc:
            raise CommandError(f"island nodes: {exc.errors()[0]['msg']}") from None


def torchrun_args(nproc: int, nodes: IslandNodes, entry: list[str], argv: list[str]) -> list[str]:
    """The command that starts this machine's ``nproc`` processes of the island, each running
    ``entry`` (``--module veriloco.cli`` for ``host run``, or a script) with ``argv``."""
    if nodes.nnodes == 1 and nodes.master_addr is None:
        where = ["--standalone"]
    else:
        where = [f"--nnodes={nodes.nnodes}", f"--node-rank={nodes.node_rank}",
                 f"--master-addr={nodes.master_addr or '127.0.0.1'}", f"--master-port={nodes.master_port}"]
    return [sys.executable, "-m", "torch.distributed.run", *where, f"--nproc-per-node={nproc}", *entry, *argv]


def relaunch(nproc: int, nodes: IslandNodes | None = None, argv: list[str] | None = None) -> int:
    """Run this command again as this machine's ``nproc`` ranks of one ``torchrun`` island.

    Returns:
        torchrun's exit status.
    """
    args = torchrun_args(nproc, nodes or IslandNodes(), ["--module", "veriloco.cli"],
                         sys.argv[1:] if argv is None else argv)
    return subprocess.call(args)


def check_island(nproc: int, adversary: str | None, nnodes: int = 1) -> None:
    """Refuse what an island cannot be: another size than torchrun started, or an adversary (the
    catalogue's behaviours train in one process)."""
    world = island_world()
    if world is not None and world != nproc * nnodes:
        raise CommandError(f"--nproc-per-node {nproc} on {nnodes} nodes under a torchrun of {world} processes")
    if adversary not in (None, "honest"):
        raise CommandError("adversaries train in one process: drop --nproc-per-node or --adversary")


def lead(spec_json: bytes, device: str, threads: int | None, accumulate: int = 1) -> IslandBehaviour:
    """Rank 0: join the island, send the spec to the other ranks, and return the behaviour that
    trains the host's epochs with them (an :class:`~trainer.island.IslandBehaviour`, each rank
    accumulating ``accumulate`` micro-batches a step)."""
    import torch.distributed as dist  # noqa: PLC0415 (torch loads only for a daemon)

    from protocol.rules.spec import RunSpec  # noqa: PLC0415 (as above)
    from trainer.island import IslandBehaviour, broadcast_bytes, join_island  # noqa: PLC0415 (as above)
    from trainer.island_leaf import side_group  # noqa: PLC0415 (as above)

    group, where = join_island(device, threads)
    broadcast_bytes(spec_json, side_group(tuple(dist.get_process_group_ranks(group))), _SPEC_BYTES)
    return IslandBehaviour(RunSpec.from_canonical(spec_json), group, where, accumulate)


def stop(island: IslandBehaviour, training: Future[Any] | None, wait_s: float = STOP_WAIT_S) -> bool:
    """Rank 0, its daemon stopped (``HostNode.close`` stops a pipelined training thread at its next
    step and waits a bounded time for it): wait up to ``wait_s`` for that training to end, then tell the
    other ranks to leave. Never while it trains: the stop order travels on the group the training
    thread sends its orders on and the other ranks read it only between epochs, so sent beside the
    training's collectives it would interleave with them.

    Returns:
        whether the order was sent (False: the training still ran after ``wait_s``; the process
        leaves without it, and the other ranks' collectives fail once rank 0 is gone).
    """
    if training is not None:
        try:
            training.result(timeout=wait_s)
        except FutureTimeout:
            return False
        except Exception:  # noqa: BLE001 - an interrupted or failed epoch: the host logged it
            pass
    island.stop()
    return True


def follow(root: Path, device: str, threads: int | None) -> None:
    """A rank other than 0: join the island, receive the spec and train what rank 0 orders until it
    says stop. SIGINT and SIGTERM are left to rank 0 (it stops the island at a step boundary)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import torch.distributed as dist  # noqa: PLC0415 (torch loads only for a daemon)

    from protocol.rules.spec import RunSpec  # noqa: PLC0415 (as above)
    from trainer.data import Dataset  # noqa: PLC0415 (as above)
    from trainer.island import broadcast_bytes, follow_island, join_island  # noqa: PLC0415 (as above)
    from trainer.island_leaf import side_group  # noqa: PLC0415 (as above)

    group, where = join_island(device, threads)
    try:
        spec = RunSpec.from_canonical(broadcast_bytes(None, side_group(tuple(dist.get_process_group_ranks(group))),
                                                      _SPEC_BYTES))
        follow_island(spec, Dataset.load(spec.data), root, group, where)
    finally:
        dist.destroy_process_group()
