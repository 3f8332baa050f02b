"""Units are converted in one place, exactly."""

import pytest

from oomdoctor.units import UnitError, format_bytes, parse_size, to_bytes


@pytest.mark.parametrize("text,expected", [
    ("20.00 MiB", 20971520), ("79.15 GiB", 84986665370), ("0 bytes", 0), ("512 bytes", 512),
    ("1024.00 KiB", 1048576), ("42.33 GB", 45451491410), ("1.5G", 1610612736), ("17179869184.00 GiB", 2**64),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


def test_unknown_unit_is_an_error():
    with pytest.raises(UnitError):
        to_bytes("3", "furlongs")


@pytest.mark.parametrize("n,text", [(0, "0 bytes"), (1024, "1024 bytes"), (1048576, "1024.00 KiB"),
                                    (1073741824, "1024.00 MiB"), (84986665370, "79.15 GiB")])
def test_format_matches_pytorch_format_size(n, text):
    assert format_bytes(n) == text
