"""``veriloco host run --nproc-per-node N``: the host as a ``torchrun`` island.

Started without a launcher, the command starts ``torchrun --standalone --nproc-per-node N`` on
itself (:func:`relaunch`) and waits for it. Under ``torchrun`` each rank joins the island
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
from pathlib import Path
from typing import TYPE_CHECKING

from veriloco.errors import CommandError

if TYPE_CHECKING:
    from trainer.island import IslandBehaviour

_SPEC_BYTES = 1 << 20  # a run spec's canonical JSON is a few kB


def island_world() -> int | None:
    """The island's size when this process is a rank under ``torchrun``, else ``None``."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    return int(os.environ["WORLD_SIZE"])


def island_rank() -> int:
    """This rank's index under ``torchrun``."""
    return int(os.environ.get("RANK", "0"))


def relaunch(nproc: int, argv: list[str] | None = None) -> int:
    """Run this command again as ``nproc`` ranks of one ``torchrun`` island on this machine.

    Returns:
        torchrun's exit status.
    """
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "--module", "veriloco.cli", *(sys.argv[1:] if argv is None else argv)]
    return subprocess.call(args)


def check_island(nproc: int, adversary: str | None) -> None:
    """Refuse what an island cannot be: another size than torchrun started, or an adversary (the
    catalogue's behaviours train in one process)."""
    world = island_world()
    if world is not None and world != nproc:
        raise CommandError(f"--nproc-per-node {nproc} under a torchrun of {world} processes")
    if adversary not in (None, "honest"):
        raise CommandError("adversaries train in one process: drop --nproc-per-node or --adversary")


def lead(spec_json: bytes, device: str, threads: int | None) -> IslandBehaviour:
    """Rank 0: join the island, send the spec to the other ranks, and return the behaviour that
    trains the host's epochs with them (an :class:`~trainer.island.IslandBehaviour`)."""
    import torch.distributed as dist  # noqa: PLC0415 (torch loads only for a daemon)

    from protocol.rules.spec import RunSpec  # noqa: PLC0415 (as above)
    from trainer.island import IslandBehaviour, broadcast_bytes, join_island  # noqa: PLC0415 (as above)
    from trainer.island_leaf import side_group  # noqa: PLC0415 (as above)

    group, where = join_island(device, threads)
    broadcast_bytes(spec_json, side_group(tuple(dist.get_process_group_ranks(group))), _SPEC_BYTES)
    return IslandBehaviour(RunSpec.from_canonical(spec_json), group, where)


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
