"""The background leaf writer hashes what a snapshot's copy delivers: it waits for a copy still in
flight (a GPU's device-to-host transfer) before it hashes, writes or records the leaf."""

from __future__ import annotations

import gc
import os
import threading
import weakref

import pytest
import torch
from suite_env import HOST

from protocol.rules.beacon import genesis_seed
from trainer.checkpoint import Checkpoint
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, start_checkpoint, train_segment
from trainer.outer import GlobalState
from trainer.snapshot import LeafWriter
from trainer.step import Stepper, TrainState


def _blank(state: TrainState) -> TrainState:
    def zeros(d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {n: torch.zeros_like(t) for n, t in d.items()}
    return TrainState(zeros(state.params), zeros(state.exp_avg), zeros(state.exp_avg_sq), state.step, state.rng_key)


def _epoch_0(spec, tmp_path) -> tuple[EpochContext, Stepper, EpochStore]:
    """Epoch 0's context, a stepper at θ_0 and an epoch store with the epoch's directory made."""
    run_id = spec.run_id()
    stepper = Stepper(spec)
    stepper.load(start_checkpoint(spec, GlobalState.initial(spec).params, 0).state)
    store = EpochStore(tmp_path, run_id, HOST)
    store.directory(0).mkdir(parents=True, exist_ok=True)
    return EpochContext(run_id, 0, HOST, genesis_seed(run_id)), stepper, store


def test_the_writer_waits_for_a_copy_in_flight_before_hashing(spec, dataset, tmp_path) -> None:
    run_id = spec.run_id()
    ctx = EpochContext(run_id, 0, HOST, genesis_seed(run_id))
    stepper = Stepper(spec)
    stepper.load(start_checkpoint(spec, GlobalState.initial(spec).params, 0).state)
    done, _ = train_segment(stepper, dataset, spec, ctx, 1)
    # A leaf whose tensors are still zeros when it is queued, filled by its `ready` only once the
    # test lets it: what a transfer from a GPU looks like to the writer.
    arrived = threading.Event()
    pending = Checkpoint(_blank(done.state), done.losses, 1)

    def ready() -> None:
        arrived.wait(timeout=30)
        for name in done.state.params:
            pending.state.params[name].copy_(done.state.params[name])
            pending.state.exp_avg[name].copy_(done.state.exp_avg[name])
            pending.state.exp_avg_sq[name].copy_(done.state.exp_avg_sq[name])

    store = EpochStore(tmp_path, run_id, HOST)
    store.directory(0).mkdir(parents=True, exist_ok=True)
    writer = LeafWriter(store, spec, 0, full_leaf_every=1, hash_threads=2)
    writer.submit(1, pending, ready)
    arrived.set()
    [digest] = writer.finish()
    assert digest == done.leaf_hash() != Checkpoint(_blank(done.state), done.losses, 1).leaf_hash()
    assert store.read_leaf(spec, 0, 1).leaf_hash() == done.leaf_hash()  # the stored file too


def test_the_writer_keeps_no_leaf_it_has_processed(spec, dataset, tmp_path) -> None:
    # Each leaf is a whole training state: a writer that held on to them would keep the epoch's
    # S + 1 states in memory (8 GB at `small`) instead of its queue's few.
    ctx, stepper, store = _epoch_0(spec, tmp_path)
    writer = LeafWriter(store, spec, 0, full_leaf_every=4)
    alive = []
    for index in range(1, 4):
        leaf, ready = train_segment(stepper, dataset, spec, ctx, 1)
        alive.append(weakref.ref(leaf.state.params["tok.weight"]))
        writer.submit(index, leaf, ready)
        del leaf, ready
    assert len(writer.finish()) == 3
    gc.collect()
    assert [ref() for ref in alive] == [None, None, None]


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_an_async_export_is_a_snapshot_later_steps_do_not_touch(spec, dataset, device) -> None:
    run_id = spec.run_id()
    ctx = EpochContext(run_id, 0, HOST, genesis_seed(run_id))
    stepper = Stepper(spec, device=device)
    stepper.load(start_checkpoint(spec, GlobalState.initial(spec).params, 0).state)
    first, ready = train_segment(stepper, dataset, spec, ctx, 1)
    expected = Checkpoint(stepper.export(), first.losses, 1).leaf_hash()  # a blocking copy, same moment
    second, ready_second = train_segment(stepper, dataset, spec, ctx, 1)  # moves the live state on
    ready()
    ready_second()
    assert first.state.step == spec.train.segment_steps and second.state.step == 2 * spec.train.segment_steps
    assert first.leaf_hash() == expected != second.leaf_hash()
    assert all(t.device.type == "cpu" for t in first.state.params.values())


@pytest.mark.skipif(not hasattr(os, "posix_fadvise") or not os.path.isdir("/proc/self/fd"),
                    reason="posix_fadvise and /proc (Linux) only")
def test_leaves_not_read_soon_leave_the_page_cache_once_on_disk(spec, dataset, tmp_path, monkeypatch) -> None:
    """Every leaf but the last segment's start and end (read in every epoch: the last segment is
    always challenged) and a leaf kept as a partial epoch's last is dropped from the page cache
    after its fsync, and reads back the same."""
    dropped: list[str] = []
    advise = os.posix_fadvise

    def spy(fd: int, offset: int, length: int, advice: int) -> None:
        if advice == os.POSIX_FADV_DONTNEED:
            tmp = os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[-1]  # .NAME.PID.TID.tmp
            dropped.append(tmp[1:].split(".safetensors")[0] + ".safetensors")
        advise(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", spy)
    ctx, stepper, store = _epoch_0(spec, tmp_path)
    writer = LeafWriter(store, spec, 0, full_leaf_every=1)
    s = spec.train.segments
    leaves = {}
    for index in range(1, s + 1):
        leaves[index], ready = train_segment(stepper, dataset, spec, ctx, 1)
        writer.submit(index, leaves[index], ready, keep=index == 1)  # as a partial epoch's last leaf
    assert writer.finish() == [leaves[i].leaf_hash() for i in range(1, s + 1)]
    assert sorted(dropped) == sorted(store.leaf_path(0, i).name for i in range(2, s - 1)), dropped
    assert all(store.read_leaf(spec, 0, i).leaf_hash() == leaves[i].leaf_hash() for i in range(1, s + 1))
