"""A user-defined model for the resolver tests: named in a run spec as ``custom_models:bigram``."""

from torch import nn


class Bigram(nn.Module):
    """Next-byte logits from the current byte only."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.table = nn.Embedding(vocab, vocab)

    def forward(self, idx):
        return self.table(idx)


def bigram(vocab: int = 256) -> Bigram:
    return Bigram(vocab)


def not_a_module() -> str:
    return "nope"
