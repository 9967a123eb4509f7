"""kvprov/sinks.py at its edges (#41 item 1: the sinks under mutation): each sink takes a plain
value as it is and says which sink refused what, the length and escaping limits at their exact
values, `.`/`..` path components at the end, mount options with a value, and TOML's surrogate
range and non-BMP escapes."""

from __future__ import annotations

import math
import tomllib

import pytest

from kvprov import sinks
from kvprov.sinks import SinkError

KNOWN = lambda option: option  # noqa: E731  (every option known: the rules before the allow-list)


def test_plain_values_pass_every_sink_as_they_are():
    assert sinks.unit_path("/mnt/kv_cache/a.b-c/") == "/mnt/kv_cache/a.b-c/"
    assert sinks.plain_name("kvprov-engine@1.service") == "kvprov-engine@1.service"
    assert sinks.toml_key("Backend_2") == "Backend_2"
    assert sinks.netdev("eth0.100") == "eth0.100" and sinks.netdev("x" * 15) == "x" * 15
    assert sinks.unit_text("50% of the cache") == "50%% of the cache"
    assert sinks.mount_options(["vers=4.2,proto=rdma", " port=20049 "], KNOWN) == "vers=4.2,proto=rdma,port=20049"


def test_each_sink_names_itself_when_it_refuses():
    cases = [(lambda: sinks.unit_word("a\nb"), "unit command-line word: "),
             (lambda: sinks.unit_word("a\nb", command_line=False), "unit Environment= assignment: "),
             (lambda: sinks.plain_name("a b"), 'name: "a b" is not a plain name'),
             (lambda: sinks.unit_text("a\rb"), "unit text: "),
             (lambda: sinks.toml_key("a.b"), 'TOML key: "a.b" is not a plain TOML key'),
             (lambda: sinks.netdev("x" * 16), "network interface: "),
             (lambda: sinks.unit_path("relative"), 'unit path: "relative" must be a plain absolute path')]
    for call, start in cases:
        with pytest.raises(SinkError) as e:
            call()
        assert str(e.value).startswith(start), (str(e.value), start)


@pytest.mark.parametrize("path", ["/mnt/kv/..", "/mnt/kv/.", "/..", "/mnt/./kv", "/mnt/../kv"])
def test_a_dot_or_dot_dot_component_is_refused_at_the_end_too(path):
    assert "must be a plain absolute path" in sinks.unit_path_problem(path)


def test_the_unit_path_still_takes_dots_inside_names():
    assert sinks.unit_path_problem("/mnt/kv/..hidden") is None and sinks.unit_path_problem("/mnt/kv/a..") is None


@pytest.mark.parametrize("ch, said", [("\t", "U+0009 (tab)"), ("\n", "U+000A (newline)"), ("\r", "U+000D (carriage return)"),
                                      ("\x01", "U+0001 (a control character)"),
                                      ("\u2028", "U+2028 (line separator)"), ("\u200b", "U+200B (zero width space)")])
def test_a_refused_character_is_named(ch, said):
    assert f"contains {said}: it would start a new line" in sinks.string_problem(f"a{ch}b")


def test_shown_cuts_past_the_limit_only():
    assert sinks.shown("x" * 80) == "x" * 80
    assert sinks.shown("x" * 81) == "x" * 80 + "…"
    assert sinks.shown("ab\ncd", limit=4) == "ab\\u…"
    assert sinks.shown("ab\ncd") == "ab\\u000acd"


def test_the_length_limit_is_4096_characters():
    assert sinks.string_problem("x" * 4096) is None
    assert sinks.string_problem("x" * 4097) == "is 4097 characters long; at most 4096"


def test_a_refused_mount_option_says_what_the_mount_keeps():
    assert sinks.mount_option_problem("suid", KNOWN) == (
        '"suid" is refused: it lets a setuid binary another host planted on the shared volume run as its owner '
        "(kvprov mounts the KV volume nosuid,nodev,noexec)")


@pytest.mark.parametrize("option", ["user=bob", "Users", "DEFAULTS", " exec ", "group=1"])
def test_a_refused_option_is_refused_with_a_value_or_in_any_case(option):
    assert "is refused: " in sinks.mount_option_problem(option, KNOWN)


def test_a_mount_option_with_a_line_break_or_an_odd_character_is_refused_before_the_allow_list():
    assert "contains U+000A (newline)" in sinks.mount_option_problem("vers=4.2\n", KNOWN)
    assert sinks.mount_option_problem("vers=4;2", KNOWN).startswith('"vers=4;2" may hold only letters, digits')
    assert "is not an NFS option kvprov knows" in sinks.mount_option_problem("vers=4.2", lambda o: None)


@pytest.mark.parametrize("value", ["\ud800", "\udfff", "a\udc00b"])
def test_a_lone_surrogate_is_refused_in_toml(value):
    with pytest.raises(SinkError, match="lone surrogate"):
        sinks.toml_value(value)


@pytest.mark.parametrize("value", ["\ue000", "\ud7ff", "😀", "a😀\U0010ffffb", 'q"uote\\'])
def test_toml_strings_read_back_exactly(value):
    text = sinks.toml_value(value)
    assert tomllib.loads(f"k = {text}")["k"] == value
    if value == "😀":
        assert text == '"\\U0001f600"'


def test_toml_numbers_are_finite_and_strings_checked():
    assert sinks.toml_value(1.5) == "1.5" and sinks.toml_value(-0.0) == "-0.0" and sinks.toml_value(7) == "7"
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(SinkError, match="is not a number a TOML reader takes"):
            sinks.toml_value(bad)
    with pytest.raises(SinkError, match="^TOML value: .*U\\+000A"):
        sinks.toml_value("a\nb")
    assert sinks.toml_value([1, "a", True]) == '[1, "a", true]'
