"""kvprov check's rules one at a time, on values (no inventory file): each names what is
wrong, exactly."""

from kvprov import check
from kvprov.check import Finding


def test_environment_takes_names_with_a_string_or_a_number():
    assert check.environment({"A_1": "x", "_B": 2, "C": 1.5, "D": ""}) == []
    assert check.environment({"1A": "x", "B-C": "y", "N": None, "L": [1], "M": {"k": 1}}) == [
        Finding('"1A" is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)', ("1A",)),
        Finding('"B-C" is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)', ("B-C",)),
        Finding("N: give a string or a number, got nothing (null)", ("N",)),
        Finding("L: give a string or a number, got a list", ("L",)),
        Finding("M: give a string or a number, got a mapping", ("M",)),
    ]
