"""bundle.collect on local_c1's collect.json edited: what it says about a capture from
another kvprov, another host, collector errors (at most ten named), and a good one."""

import json

from kvprov.validate import bundle as bf
from kvprov.validate import evaluate as ev
from kvprov.validate.bundle import Bundle
from tests.conftest import FIXTURES

ROOT = FIXTURES / "bundles/local_c1"
FILES = {str(p.relative_to(ROOT)): p.read_bytes() for p in ROOT.rglob("*") if p.is_file()}


def collect(**changes):
    data = {**json.loads(FILES["collect.json"]), **changes}
    b = Bundle(files={**FILES, "collect.json": json.dumps(data).encode()})
    [r] = [r for r in ev.evaluate(b, bf.load_desired(b)) if r.id == "bundle.collect"]
    return r.status, r.found


def test_a_good_capture_says_when_and_by_which_kvprov():
    assert collect() == ("pass", "collected 2026-11-29T23:11:05Z by kvprov 0.1.0")
    data = json.loads(FILES["collect.json"])
    del data["time"], data["kvprov_version"]
    b = Bundle(files={**FILES, "collect.json": json.dumps(data).encode()})
    [r] = [r for r in ev.evaluate(b, bf.load_desired(b)) if r.id == "bundle.collect"]
    assert r.found == "collected ? by kvprov ?"


def test_collector_errors_are_named_ten_at_most():
    errors = {f"file{i}.txt": f"error {i}" for i in range(12)}
    status, found = collect(errors=errors)
    assert status == "warn"
    assert found == "the collector reported: " + "; ".join(f"file{i}.txt: error {i}" for i in range(10))


def test_another_host_and_an_unknown_format_are_both_named():
    status, found = collect(host="kvlab-c2", format=99)
    assert status == "warn"
    assert found == (f"format 99 (this kvprov reads {', '.join(map(str, bf.READABLE_FORMATS))}) / collect.json names "
                     "host kvlab-c2, desired.json kvlab-c1: files of two hosts mixed?")
