"""An island's model sharded by FSDP2, with gradients reduced in the protocol's order.

Each transformer block and then the whole model are wrapped by ``torch.distributed.fsdp.
fully_shard``: every rank keeps a dim-0 chunk (``torch.chunk`` of the parameter into ``W`` pieces)
of each parameter and of its AdamW moments; the forward and backward all-gather a block's
parameters when it runs. FSDP2 reduce-scatters the gradients of a block after its backward; here
that collective is :class:`OrderedReduceScatter`, which moves each rank's chunks to their owner
(``all_to_all_single``) and sums the ``W`` contributions in :func:`trainer.reduction.tree_sum`'s
order, so the sharded gradient holds exactly the bits a one-process accumulation of the same
micro-batches computes (the island takes one micro-batch per rank per step). FSDP2's division of
the gradient by ``W`` is turned off: the step already scales each micro-batch's loss by ``1/M``.

What else needs the whole of a tensor to get the one-process bits: the gradient-norm clip
(:func:`clip_gradients` all-gathers one gradient at a time to take its norm the way one process
does) and nothing more; AdamW is elementwise and runs on each rank's chunks.

The collectives are the process group's: gloo on CPU, NCCL on CUDA (``all_to_all_single`` and
``all_gather`` exist on both).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter  # the hook's interface (not re-exported)
from torch.distributed.tensor import DTensor

from trainer.reduction import tree_sum


class OrderedReduceScatter(ReduceScatter):
    """FSDP2's reduce-scatter, summing the ranks' contributions in the canonical tree order."""

    def allocate(self, size: Sequence[int | torch.SymInt], *, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
        return torch.empty(size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup,
                 op: object, async_op: bool = False) -> dist.Work | None:
        if async_op:
            raise ValueError("the ordered reduce-scatter is synchronous")
        if op != dist.ReduceOp.SUM:
            raise ValueError(f"the ordered reduce-scatter sums; FSDP asked for {op}")
        world = dist.get_world_size(group)
        # input: W equal chunks, chunk j destined for rank j; after the exchange, chunk r of
        # `received` is rank r's contribution to this rank's shard.
        received = torch.empty_like(input_tensor)
        dist.all_to_all_single(received, input_tensor, group=group)
        output_tensor.copy_(tree_sum(list(received.view(world, -1))))
        return None


def shard_model(model: nn.Module, group: dist.ProcessGroup, device: torch.device) -> None:
    """Shard ``model`` (already on ``device``) across ``group`` with FSDP2, in place: each of its
    ``blocks`` (when it has them) and then the root, each reduce-scattering with
    :class:`OrderedReduceScatter`."""
    mesh = DeviceMesh.from_group(group, device.type)
    for block in getattr(model, "blocks", []):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    comm = OrderedReduceScatter()
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_custom_reduce_scatter(comm)
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)


def local(t: torch.Tensor) -> torch.Tensor:
    """The part of ``t`` this rank holds: its local chunk of a sharded tensor, else ``t`` itself
    (not a copy)."""
    return t.to_local() if isinstance(t, DTensor) else t


def whole(t: torch.Tensor) -> torch.Tensor:
    """``t`` whole: a sharded tensor is all-gathered (a collective: every rank must call it in the
    same order), any other is returned as it is."""
    return t.full_tensor() if isinstance(t, DTensor) else t


def chunk_of(full: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rank ``rank``'s dim-0 chunk of ``full`` as FSDP2 lays it out (``torch.chunk``; trailing
    ranks may hold an empty chunk)."""
    chunks = torch.chunk(full, world, dim=0)
    if rank < len(chunks):
        return chunks[rank]
    return full.new_empty((0, *full.shape[1:]))


def clip_gradients(grads: Sequence[torch.Tensor], max_norm: float) -> None:
    """Scale ``grads`` in place so their global L2 norm is at most ``max_norm``.

    The arithmetic of ``torch.nn.utils.clip_grad_norm_(…, foreach=False)``: each gradient's norm
    over the whole tensor, the norm of those norms, a coefficient ``max_norm / (norm + 1e-6)``
    clamped to 1. A sharded gradient is all-gathered one at a time for its norm (one gradient's
    memory at a time), so every layout computes the same coefficient; the scaling is elementwise
    on the local chunks.
    """
    if not grads:
        return
    norms = [torch.linalg.vector_norm(whole(g), 2.0) for g in grads]
    total = torch.linalg.vector_norm(torch.stack(norms), 2.0)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        local(g).mul_(coef)
