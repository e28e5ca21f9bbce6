"""A validator's side of veriloco: replay of challenged segments and the verdicts it posts."""
