"""The sinks as properties, not examples (#41, item 2): for every sink, any string either is
refused (SinkError, which `kvprov check` and the roles' filters turn into a message) or lands as
exactly one word, assignment, name or key whose value, read back by the format's own rules, is
the input. The readers here are independent of kvprov's: systemd's word splitting (its
extract_first_word with UNQUOTE and CUNESCAPE, then `%%` and, on command lines, `$$`), tomllib
for the NIXL TOML. test_sinks.py holds the examples and the review's inputs."""

import re
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvprov import sinks

settings.register_profile("kvprov", max_examples=300, deadline=None, database=None, derandomize=True)
settings.load_profile("kvprov")

# any text, often with what the formats treat specially: quotes, backslashes, %, $, spaces,
# separators, control and invisible characters, characters beyond U+FFFF
SPECIAL = st.sampled_from(list("\"'\\%$ \t\n\r;,=#[]{}.") + ["\u2028", "\x85", "\u200b", "\ufeff", "\x7f", "😀", "é",
                                                            "%%", "$$", "\\n", "\\x41"])
TEXT = st.lists(st.one_of(st.characters(blacklist_categories=("Cs",)), SPECIAL), max_size=24).map("".join)
WHITESPACE = " \t\n\r"
ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"',
           "'": "'", "s": " "}


def systemd_words(line: str) -> list[str]:
    """A unit line's words as systemd splits them (extract_first_word, UNQUOTE|CUNESCAPE): outside
    and inside quotes a backslash escape is C's; quotes group; whitespace separates."""
    words, i = [], 0
    while True:
        while i < len(line) and line[i] in WHITESPACE:
            i += 1
        if i == len(line):
            return words
        word, quote = [], None
        while i < len(line) and (quote or line[i] not in WHITESPACE):
            c = line[i]
            if c == "\\":
                nxt = line[i + 1:i + 2]
                if nxt in ESCAPES:
                    word.append(ESCAPES[nxt])
                    i += 2
                    continue
                m = re.match(r"x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|([0-7]{3})", line[i + 1:])
                if not m:
                    raise ValueError(f"invalid escape at {i}: {line!r}")
                word.append(chr(int(m[1] or m[2] or m[3], 16)) if not m[4] else chr(int(m[4], 8)))
                i += 1 + m.end()
                continue
            if quote and c == quote:
                quote = None
            elif not quote and c in "\"'":
                quote = c
            else:
                word.append(c)
            i += 1
        if quote:
            raise ValueError(f"unbalanced quote: {line!r}")
        words.append("".join(word))


def specifiers(word: str) -> str:
    """systemd's specifier resolution for the one specifier kvprov writes: %% -> %."""
    if re.search(r"%[^%]", word.replace("%%", "")) or word.replace("%%", "").endswith("%"):
        raise ValueError(f"a specifier other than %%: {word!r}")
    return word.replace("%%", "%")


def refused_or(sink, value):
    """The sink's output, or None when it refuses the value (and says why)."""
    try:
        return sink(value)
    except sinks.SinkError as e:
        assert str(e), "a refusal says why"
        return None


@given(TEXT)
def test_a_command_line_word_is_refused_or_reads_back_as_itself(value):
    word = refused_or(sinks.unit_word, value)
    if word is None:
        return
    line = f"ExecStart=/bin/x {word} --next"
    assert "\n" not in line and not re.search(sinks.BREAKS, line)
    words = systemd_words(line.partition("=")[2])
    assert len(words) == 3 and words[2] == "--next", (value, word, words)
    # on command lines systemd expands $VAR after splitting: $$ is a $
    assert specifiers(words[1]).replace("$$", "$") == value and "$" not in words[1].replace("$$", "")


@given(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True), TEXT)
def test_an_environment_assignment_is_refused_or_sets_exactly_that_variable(name, value):
    word = refused_or(lambda v: sinks.unit_word(v, command_line=False), f"{name}={value}")
    if word is None:
        return
    words = systemd_words(f'{word} "NEXT=1"')
    assert len(words) == 2 and words[1] == "NEXT=1", (value, word, words)
    assert specifiers(words[0]) == f"{name}={value}"  # Environment= expands no $


@given(TEXT)
def test_a_unit_path_is_refused_or_one_plain_word(value):
    path = refused_or(sinks.unit_path, value)
    if path is not None:
        assert systemd_words(f"{path} /next") == [value, "/next"] and "%" not in path
        assert path.startswith("/") and "/../" not in path + "/"


@given(TEXT)
def test_a_name_is_refused_or_one_plain_word(value):
    name = refused_or(sinks.plain_name, value)
    if name is not None:
        assert systemd_words(f"{name} next") == [value, "next"] and "%" not in name


@given(TEXT)
def test_unit_text_is_refused_or_one_line_that_reads_back(value):
    text = refused_or(sinks.unit_text, value)
    if text is not None:
        assert not re.search(sinks.BREAKS, text) and specifiers(text) == value


SCALAR = st.one_of(TEXT, st.booleans(), st.integers(-(2**63), 2**63 - 1),
                   st.floats(allow_nan=True, allow_infinity=True))


@given(st.one_of(TEXT, st.from_regex(sinks.TOML_KEY, fullmatch=True)),
       st.one_of(SCALAR, st.lists(SCALAR, max_size=4), st.lists(st.lists(SCALAR, max_size=2), max_size=2),
                 st.none(), st.dictionaries(TEXT, SCALAR, max_size=2)))
def test_a_toml_key_and_value_are_refused_or_read_back_by_tomllib(key, value):
    k, v = refused_or(sinks.toml_key, key), refused_or(sinks.toml_value, value)
    if k is None or v is None:
        return
    doc = tomllib.loads(f"{k} = {v}\n[plugin.posix]\nactive = true\n")
    assert doc == {key: value, "plugin": {"posix": {"active": True}}}, (key, value, k, v)


@pytest.mark.parametrize("value", ["😀", "a\U0010ffffb", ["x😀", 1]])
def test_a_character_beyond_the_basic_plane_reaches_the_toml_whole(value):
    """Found by the property: Ansible's to_json wrote 😀 as a surrogate pair, which tomllib (SGLang
    reads the NIXL TOML with it) refuses, so the engine would not start."""
    assert tomllib.loads(f"k = {sinks.toml_value(value)}")["k"] == value


def test_the_rendered_nixl_toml_reads_back_every_option(tmp_path):
    """The role's template writes the options through the same sink: SGLang's reader (tomllib)
    gets each value whole, a character beyond U+FFFF too."""
    from tests.unit.test_sinks import render

    host, options = "gpu-a01.corp.example.com", {"note": "ok 😀 \"q\" \\ %", "thread_count": 8, "ratios": [0.5, 2]}
    r = render(tmp_path, host, {"kvprov_nixl_backend_options": options})
    assert r.returncode == 0, r.stdout + r.stderr
    [toml] = (tmp_path / "out" / host).rglob("*.toml")
    doc = tomllib.loads(toml.read_text())
    assert {k: doc[k] for k in options} == options and sum(t.get("active", False) for t in doc["plugin"].values()) == 1
