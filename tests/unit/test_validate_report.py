"""Reports of `kvprov validate`: the table, JSON and JUnit XML (parsed back with xml.etree)."""

import json
import xml.etree.ElementTree as ET

import pytest

from kvprov.validate import evaluate as ev
from kvprov.validate import report
from kvprov.validate.result import FAIL, PASS, SKIP, WARN, Result
from tests.conftest import FIXTURES

BUNDLES = FIXTURES / "bundles"


def sample() -> list[Result]:
    rs = [Result("mount.present", "mount", PASS, "an NFS mount", "10.99.1.1:/kv (nfs4)", "", "h1"),
          Result("mount.transport", "mount", FAIL, "rdma", "xprt: tcp", "modprobe rpcrdma", "h1"),
          Result("gds.gpu", "gds", SKIP, "a GPU", "no NVIDIA GPU", "", "h1"),
          Result("bundle.collect", "bundle", WARN, "no error", "gdscheck.txt: timed out", "collect again", "h1")]
    return rs + [ev.summarize(rs)]


def test_table_shows_expected_and_fix_only_where_needed():
    table = report.format_table(sample())
    lines = table.splitlines()
    assert lines[0].split() == ["HOST", "CHECK", "STATUS", "FOUND"]
    assert lines[1].split()[:3] == ["h1", "mount.present", "pass"]
    fail = lines.index(next(line for line in lines if "mount.transport" in line))
    assert lines[fail].split()[:3] == ["h1", "mount.transport", "FAIL"]
    assert lines[fail + 1].strip() == "expected: rdma" and lines[fail + 2].strip() == "fix: modprobe rpcrdma"
    skip = lines.index(next(line for line in lines if "gds.gpu" in line))
    assert "expected" not in lines[skip + 1]  # skips say why in FOUND, nothing more
    assert "WARN" in table and "fix: collect again" in table
    assert "summary" not in table.split("\n\n")[0]  # the summary is the verdict line, not a row
    assert lines[-1] == "h1: FAILED (1 failed, 1 warnings, 1 skipped, 1 passed)"


def test_table_neutralises_terminal_escapes():
    rs = [Result("rdma.link", "rdma", FAIL, "ACTIVE", "\x1b[2J\x1b[31mred\u202e", "fix\x07", "h\x1b")]
    table = report.format_table(rs)
    assert "\x1b" not in table and "\x07" not in table and "\u202e" not in table
    assert "\\x1b[2J\\x1b[31mred\\u202e" in table and "fix: fix\\x07" in table


def test_json_report():
    data = report.to_json(sample())
    assert data["ok"] is False
    h1 = data["hosts"]["h1"]
    assert h1["ok"] is False and h1["counts"] == {"pass": 1, "fail": 1, "warn": 1, "skip": 1}
    assert [r["id"] for r in h1["results"]][-1] == "summary"
    assert h1["results"][1] == {"id": "mount.transport", "category": "mount", "status": "fail", "expected": "rdma",
                                "found": "xprt: tcp", "fix": "modprobe rpcrdma", "host": "h1", "detail": ""}
    assert json.loads(report.format_json(sample())) == data


def test_junit_is_valid_xml_with_a_testcase_per_check():
    root = ET.fromstring(report.to_junit(sample()))
    assert root.tag == "testsuites" and root.get("tests") == "4" and root.get("failures") == "1"
    assert root.get("skipped") == "1"
    suite = root.find("testsuite")
    assert suite.get("name") == "h1"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == ["mount.present", "mount.transport", "gds.gpu", "bundle.collect"]
    assert cases["mount.transport"].get("classname") == "h1.mount"
    failure = cases["mount.transport"].find("failure")
    assert failure.get("message") == "xprt: tcp" and "fix: modprobe rpcrdma" in failure.text
    assert cases["gds.gpu"].find("skipped").get("message") == "no NVIDIA GPU"
    assert cases["bundle.collect"].find("system-out").text.startswith("warning: ")
    assert cases["mount.present"].find("failure") is None and cases["mount.present"].find("skipped") is None


def test_junit_stays_valid_with_hostile_text():
    rs = [Result("x.y", "bundle", FAIL, "e", "nul\x00 esc\x1b bell\x07 \ud800 <tag> & \"q\"", "f", "h<1>")]
    text = report.to_junit(rs)
    root = ET.fromstring(text)  # parses: no character XML 1.0 forbids
    failure = root.find("testsuite/testcase/failure")
    assert "<tag> & \"q\"" in failure.get("message") and "\x00" not in failure.get("message")
    assert root.find("testsuite").get("name") == "h<1>"


def test_reports_of_several_hosts():
    results = ev.evaluate_bundle(BUNDLES / "lab_gpu1") + ev.evaluate_bundle(BUNDLES / "lab_no_layout")
    # both bundles are kvlab-gpu1: give the second its own name to read it as another host
    for r in results[len(results) // 2:]:
        r.host = "kvlab-gpu2"
    data = report.to_json(results)
    assert data["hosts"]["kvlab-gpu1"]["ok"] is True and data["hosts"]["kvlab-gpu2"]["ok"] is False
    assert data["ok"] is False and report.ok(results) is False
    root = ET.fromstring(report.to_junit(results))
    assert [s.get("name") for s in root.findall("testsuite")] == ["kvlab-gpu1", "kvlab-gpu2"]
    assert root.find("testsuite[@name='kvlab-gpu2']").get("failures") == "2"
    table = report.format_table(results)
    assert table.splitlines()[-2:] == ["kvlab-gpu1: ok (0 failed, 0 warnings, 12 skipped, 23 passed)",
                                       "kvlab-gpu2: FAILED (2 failed, 0 warnings, 12 skipped, 21 passed)"]


def test_ok_allows_warnings_and_skips():
    assert report.ok([Result("a", "mount", WARN), Result("b", "mount", SKIP), Result("c", "mount", PASS)])
    assert not report.ok([Result("a", "mount", FAIL)])
    assert report.format_table([]) == "no results"


def test_reports_and_bundles_are_written_for_their_owner_only(tmp_path):
    from kvprov.errors import KvprovError
    from kvprov.validate.collect import write_bundle
    from kvprov.validate.report import write_file

    target = tmp_path / "r.json"
    target.write_text("old")
    target.chmod(0o644)
    write_file(str(target), "{}")
    assert target.read_text() == "{}" and target.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left
    write_file(str(tmp_path / "x.prom"), "m 1\n", mode=0o644)
    assert (tmp_path / "x.prom").stat().st_mode & 0o777 == 0o644
    with pytest.raises(KvprovError, match="cannot write"):
        write_file(str(tmp_path / "missing" / "r.json"), "{}")

    victim = tmp_path / "victim"
    victim.write_text("mine")
    bundle = tmp_path / "bundle"
    (bundle / "proc").mkdir(parents=True)
    (bundle / "proc/mountinfo").symlink_to(victim)  # a link planted in the output directory
    with pytest.raises(OSError):
        write_bundle(bundle, {"proc/mountinfo": "x"})
    assert victim.read_text() == "mine"
    assert write_bundle(bundle, {"desired.json": "{}"}) == ["desired.json"]
    assert (bundle / "desired.json").stat().st_mode & 0o777 == 0o600
