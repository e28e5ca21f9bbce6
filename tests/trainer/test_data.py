"""The corpus: deterministic stripping, content address, refusal of other bytes, protocol batches."""

from __future__ import annotations

from decimal import Decimal

import pytest
import torch
from safetensors.torch import save_file
from suite_env import HOST, small_spec

from protocol.rules.beacon import genesis_seed
from protocol.rules.sampling import batch_indices
from trainer.data import Dataset, DatasetError, dataset_hash, split_documents, strip_markdown
from trainer.presets import SHAKESPEARE_HASH


def test_strip_markdown_removes_only_markup() -> None:
    md = ("# Hamlet\r\n\r\n## ACT I\n\n### SCENE I. Elsinore.\n\n_Enter BERNARDO_\n\n"
          "**BERNARDO**  \nWho's there?  \nLong live\\-the king! __\\[Aside]_\n\n\n\n*Exit.*\n")
    assert strip_markdown(md) == ("Hamlet\n\nACT I\n\nSCENE I. Elsinore.\n\nEnter BERNARDO\n\n"
                                  "BERNARDO\nWho's there?\nLong live-the king! [Aside]\n\nExit.\n\n")


def test_split_is_per_document_and_exact() -> None:
    docs = [b"a" * 100, b"b" * 41]
    train, val = split_documents(docs, Decimal("0.05"))
    # floor(100 * 0.05) = 5 and floor(41 * 0.05) = 2 bytes of each go to validation
    assert train == b"a" * 95 + b"b" * 39 and val == b"a" * 5 + b"b" * 2


def test_shakespeare_hash_is_pinned(dataset) -> None:
    # The session's dataset was built from the corpus by Dataset.load, which refuses other bytes.
    train, val = dataset.train.numpy().tobytes(), dataset.val.numpy().tobytes()
    assert small_spec().data.dataset_hash == SHAKESPEARE_HASH
    assert dataset_hash(train, val) == SHAKESPEARE_HASH
    assert 4_500_000 < len(train) < 5_000_000 and len(set(train)) > 60


def test_refuses_a_corpus_that_hashes_differently(tmp_path) -> None:
    spec = small_spec(data={"dataset_hash": "00" * 32})
    with pytest.raises(DatasetError, match="refusing to train"):
        Dataset.load(spec.data, tmp_path)
    with pytest.raises(DatasetError, match="hashes to"):  # another split is another dataset
        Dataset.load(small_spec(data={"val_fraction": "0.1"}).data, tmp_path)
    with pytest.raises(DatasetError, match="unknown corpus"):
        Dataset.load(small_spec(data={"corpus": "tolstoy"}).data, tmp_path)


def test_cache_is_used_only_when_it_verifies(tmp_path, dataset) -> None:
    spec = small_spec()
    cached = tmp_path / f"dataset-{spec.data.dataset_hash}.safetensors"
    save_file({"train": torch.zeros(1000, dtype=torch.uint8), "val": torch.zeros(1000, dtype=torch.uint8)}, cached)
    loaded = Dataset.load(spec.data, tmp_path)  # the forged cache does not verify: rebuilt from the corpus
    assert torch.equal(loaded.train, dataset.train) and torch.equal(loaded.val, dataset.val)
    cached.write_bytes(b"garbage")
    assert torch.equal(Dataset.load(spec.data, tmp_path).train, dataset.train)
    assert Dataset.load(spec.data, tmp_path).hash == spec.data.dataset_hash  # now served from the cache


def test_batches_are_the_protocol_assignment(dataset) -> None:
    spec = small_spec()
    run_id = spec.run_id()
    seed = genesis_seed(run_id)
    x, y = dataset.batch(run_id, seed, HOST, 3, 8)
    starts = batch_indices(run_id, seed, HOST, 3, 8, dataset.n_windows)
    assert x.dtype == y.dtype == torch.int64 and x.shape == y.shape == (8, spec.data.seq_len)
    for row, s in enumerate(starts):
        assert torch.equal(x[row], dataset.train[s:s + 64].long())
        assert torch.equal(y[row], dataset.train[s + 1:s + 65].long())
    assert dataset.n_windows == len(dataset.train) - spec.data.seq_len
    _, last_y = dataset.windows([dataset.n_windows - 1])  # the last window still has a target
    assert last_y[0, -1] == dataset.train[-1]
    x2, _ = dataset.batch(run_id, seed, HOST, 4, 8)
    assert not torch.equal(x, x2)
