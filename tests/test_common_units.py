"""Sizes as users write them: strict, exact, and every mistake one clear ``SizeError``."""

from __future__ import annotations

import pytest

from common.errors import XcclError, quoted
from common.units import MAX_SIZE, SizeError, format_size, parse_size, parse_size_range


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4096", 4096), ("4KiB", 4096), ("1 MiB", 1 << 20), ("1.5KiB", 1536), ("0.5kib", 512), (7, 7)],
)
def test_sizes_parse_exactly(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ("2.5", "not a whole number of bytes"),
        ("1.00000000000000001MiB", "not a whole number of bytes"),  # a float would round it to 1 MiB
        ("x", "expected a whole number of bytes"),
        ("1e3", "expected a whole number of bytes"),
        ("-1", "expected a whole number of bytes"),
        ("0", "at least 1 byte"),
        ("9" * 400, "expected a whole number of bytes"),  # no OverflowError from float('inf')
        ("99999999999999999999TiB", "at most"),
        (str(MAX_SIZE + 1), "at most"),
        (1.5, "(float)"),
        (True, "(bool)"),
        (None, "(NoneType)"),
        (0, "at least 1 byte"),
        (-4096, "at least 1 byte"),
    ],
)
def test_anything_else_is_a_size_error_of_one_short_line(given, fragment):
    with pytest.raises(SizeError) as info:
        parse_size(given)
    message = str(info.value)
    assert isinstance(info.value, XcclError) and fragment in message
    assert "\n" not in message and len(message) < 200


def test_ranges_and_lists():
    assert parse_size_range("1KiB:4KiB") == [1024, 2048, 4096]
    assert parse_size_range("1KiB:64KiB:8") == [1024, 8192, 65536]
    assert parse_size_range("1KiB, 4KiB") == [1024, 4096]
    assert parse_size_range("4096") == [4096]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (",", "item 1 of 2 is empty"),  # used to give no sizes at all, and bench exited 0
        ("", "no size"),
        (" ", "no size"),
        ("1KiB,,2KiB", "item 2 of 3 is empty"),
        ("1KiB:1MiB:2.5", "FACTOR '2.5': expected a whole number >= 2"),  # used to be a ValueError
        ("1:2:x", "FACTOR 'x'"),
        ("1:2:3:4", "got 4 fields"),
        ("1:4:1", "FACTOR >= 2"),
        ("4KiB:1KiB", "LOW <= HIGH"),
        ("1KiB:", "expected a whole number of bytes"),
        ("2.5", "not a whole number of bytes"),
    ],
)
def test_bad_ranges_are_size_errors(text, fragment):
    with pytest.raises(SizeError) as info:
        parse_size_range(text)
    assert fragment in str(info.value)


def test_format_size():
    assert [format_size(x) for x in (1, 1024, 1536, 1 << 30)] == ["1B", "1KiB", "1.50KiB", "1GiB"]


def test_a_size_of_more_digits_than_python_prints_is_a_size_error():
    """Before: quoting ``10**5000`` in the message raised ValueError (int too long for str())."""
    with pytest.raises(SizeError, match="size an int too long to print: expected at least 1 byte"):
        parse_size(10**5000)


def test_quoted_keeps_a_message_one_short_line():
    assert quoted("ring:8") == "'ring:8'"
    long = quoted("ring:" + "9" * 5000)
    assert len(long) == 60 and long.startswith("'ring:999") and long.endswith("...")
