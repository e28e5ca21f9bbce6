"""Canonical JSON and decimals: one value, one byte string; anything else is refused."""

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.rules.encoding import EncodingError, canonical_decimal, canonical_json, parse_canonical

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


def test_keys_sorted_and_compact() -> None:
    assert canonical_json({"b": [1, None, True], "a": "é\n"}) == '{"a":"é\\n","b":[1,null,true]}'.encode()


@given(json_values)
def test_round_trip_is_identity(value) -> None:
    data = canonical_json(value)
    assert parse_canonical(data) == value
    assert canonical_json(parse_canonical(data)) == data


@pytest.mark.parametrize("value, where", [(1.5, "$"), ({"a": [0.0]}, "$.a[0]"), (2**63, "$"),
                                          ({1: 2}, "$"), (b"x", "$")])
def test_non_canonical_values_refused_with_location(value, where) -> None:
    with pytest.raises(EncodingError, match=where.replace("$", r"\$").replace("[", r"\[")):
        canonical_json(value)


@pytest.mark.parametrize("text", ['{"b":1,"a":2}', '{"a": 1}', '{"a":1.0}', "[NaN]", '"\\u00e9"', "{bad"])
def test_parse_refuses_non_canonical_bytes(text) -> None:
    with pytest.raises(EncodingError):
        parse_canonical(text)


@pytest.mark.parametrize("given_, expected", [("1e-3", "0.001"), ("2.50", "2.5"), ("-0", "0"), ("100", "100"),
                                              ("1E+2", "100"), (Decimal("0.70"), "0.7"), (7, "7")])
def test_canonical_decimal(given_, expected) -> None:
    assert canonical_decimal(given_) == expected


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "abc", 0.5])
def test_canonical_decimal_refuses(bad) -> None:
    with pytest.raises(EncodingError):
        canonical_decimal(bad)
