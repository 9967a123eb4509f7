"""The namespace key as properties, not examples (#41, item 2; #37): for any values of any
engine's keying variables, arguments and environment, two hosts share a namespace exactly when
every keying value reads the same to the hash, any change of one moves the namespace, and the
spellings of one value (16 and "16", yes and true, --flag value, --flag=value, --flag_name) are
one namespace. test_namespace_keys.py holds the table of known changes; these draw the values."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kvprov import namespace

SCALAR = st.one_of(st.integers(-(2**40), 2**40), st.text(st.characters(blacklist_categories=("Cs",)), max_size=12))
VALUES = {"str": SCALAR, "bool": st.booleans(), "json": st.dictionaries(st.text(max_size=6), SCALAR, max_size=3)}
# a value an engine argument or variable takes: not empty, not read as a flag
WORD = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=10).filter(
    lambda w: not w.startswith("-"))
ENGINES = st.sampled_from(sorted(namespace.KEYING))
LONG_ARGS = sorted(a for a in namespace.KEYING_ARGS if a.startswith("--"))
# derandomized: the same examples in every run, so CI is reproducible (derandomize=False explores others)
settings.register_profile("kvprov", max_examples=300, deadline=None, database=None, derandomize=True)
settings.load_profile("kvprov")


def hosts(engine: str):
    """A host's keying variables for `engine`, every one drawn."""
    return st.fixed_dictionaries({name: VALUES[kind] for name, kind in namespace.KEYING[engine].items()})


def name(engine: str, values: dict, **more) -> str:
    return namespace.namespace(engine, {**values, **more}.get)


@given(st.data())
def test_two_hosts_share_a_namespace_exactly_when_every_keying_value_reads_the_same(data):
    engine = data.draw(ENGINES)
    a = data.draw(hosts(engine))
    # the second host: the first with any of its values redrawn (often none, so equal hosts are drawn too)
    b = {k: data.draw(VALUES[kind]) if data.draw(st.booleans()) else a[k]
         for k, kind in namespace.KEYING[engine].items()}
    same = namespace.keys(engine, a.get) == namespace.keys(engine, b.get)
    assert (name(engine, a) == name(engine, b)) == same


@given(st.data())
def test_changing_any_keying_variable_moves_the_namespace(data):
    engine = data.draw(ENGINES)
    a = data.draw(hosts(engine))
    var, kind = data.draw(st.sampled_from(sorted(namespace.KEYING[engine].items())))
    old = namespace.keys(engine, a.get)[var]
    new = data.draw(VALUES[kind].filter(lambda v: namespace.keys(engine, {**a, var: v}.get)[var] != old))
    assert name(engine, a) != name(engine, {**a, var: new})


@given(st.data())
def test_a_value_and_its_other_spellings_are_one_namespace(data):
    engine = data.draw(ENGINES)
    a = data.draw(hosts(engine))
    var, kind = data.draw(st.sampled_from(sorted(namespace.KEYING[engine].items())))
    if kind == "bool":
        value = data.draw(st.booleans())
        spellings = [value, str(value).lower(), "yes" if value else "no", 1 if value else 0]
    elif kind == "str":
        value = data.draw(st.integers(0, 2**40))
        spellings = [value, str(value)]
    else:
        return  # json: one spelling, whatever the key order (below)
    assert len({name(engine, {**a, var: s}) for s in spellings}) == 1, spellings


@given(st.data())
def test_a_keying_argument_moves_the_namespace_however_it_is_spelled(data):
    engine = data.draw(ENGINES)
    a = data.draw(hosts(engine))
    flag, value = data.draw(st.sampled_from(LONG_ARGS)), data.draw(WORD)
    home = name(engine, a)
    spelled = {name(engine, a, kvprov_engine_extra_args=args) for args in (
        [flag, value], [f"{flag}={value}"], ["--" + flag[2:].replace("-", "_"), value],
        ["--max-num-seqs", "8", flag, "other", flag, value])}  # given twice: the last value counts
    assert home not in spelled and len(spelled) == 1, spelled
    assert name(engine, a, kvprov_engine_extra_args=["--max-num-seqs", value, "--disable-log-requests"]) == home


@given(st.data())
def test_a_keying_variable_of_the_environment_moves_the_namespace_and_others_do_not(data):
    engine = data.draw(ENGINES)
    a = data.draw(hosts(engine))
    value = data.draw(WORD)
    keying = data.draw(st.one_of(st.sampled_from(namespace.KEYING_ENV), st.sampled_from(
        namespace.KEYING_ENV_PREFIXES).flatmap(lambda p: st.from_regex(r"\A[A-Z0-9_]{1,12}\Z").map(p.__add__))))
    other = data.draw(st.from_regex(r"\A(NCCL|CUDA|HF|OMP)_[A-Z0-9_]{1,12}\Z"))
    home = name(engine, a)
    assert name(engine, a, kvprov_engine_environment={keying: value}) != home
    assert name(engine, a, kvprov_engine_environment={other: value}) == home


@given(st.data())
def test_a_json_value_is_one_namespace_whatever_its_key_order(data):
    a = data.draw(hosts("lmcache_inproc"))
    config = data.draw(st.dictionaries(st.text(max_size=6), SCALAR, min_size=2, max_size=5))
    reordered = dict(reversed(list(config.items())))
    assert name("lmcache_inproc", a, kvprov_lmcache_inproc_config=config) == name(
        "lmcache_inproc", a, kvprov_lmcache_inproc_config=reordered)
