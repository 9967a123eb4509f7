"""validate's report formats, exactly: the table (columns sized to the longest host and
check id, expected/fix/detail under what did not pass), its failures-only form, and JUnit."""

from kvprov.validate import report
from kvprov.validate.result import Result, summarize

CHECKS = [Result("mount.options", "mount", "fail", "hard,proto=rdma", "soft", "remount it", "gpu1", "line1\nline2"),
          Result("gds.gpu", "gds", "skip", "", "no GPU", "", "gpu1"),
          Result("nixl.toml", "nixl", "warn", "one active", "none", "fix toml", "gpu1"),
          Result("mount.present", "mount", "pass", "mounted", "yes", "", "h2")]
RESULTS = CHECKS + [summarize(CHECKS[:3]), summarize(CHECKS[3:])]
UNDER = " " * len("HOST  CHECK          STATUS  ")


def test_table_lines_up_and_says_what_was_expected_and_the_fix():
    assert report.format_table(RESULTS).split("\n") == [
        "HOST  CHECK          STATUS  FOUND",
        "gpu1  mount.options  FAIL    soft",
        f"{UNDER}expected: hard,proto=rdma",
        f"{UNDER}fix: remount it",
        f"{UNDER}  line1",
        f"{UNDER}  line2",
        "gpu1  gds.gpu        skip    no GPU",
        "gpu1  nixl.toml      WARN    none",
        f"{UNDER}expected: one active",
        f"{UNDER}fix: fix toml",
        "h2    mount.present  pass    yes",
        "",
        "gpu1: FAILED (1 failed, 1 warnings, 1 skipped, 0 passed)",
        "h2: ok (0 failed, 0 warnings, 0 skipped, 1 passed)",
    ]


def test_table_of_failures_only_keeps_the_per_host_lines():
    lines = report.format_table(RESULTS, everything=False).split("\n")
    assert [line for line in lines if not line.startswith(" ")] == [
        "HOST  CHECK          STATUS  FOUND",
        "gpu1  mount.options  FAIL    soft",
        "gpu1  nixl.toml      WARN    none",
        "",
        "gpu1: FAILED (1 failed, 1 warnings, 1 skipped, 0 passed)",
        "h2: ok (0 failed, 0 warnings, 0 skipped, 1 passed)",
    ]
    passing = [Result("a.b", "mount", "pass", "x", "y", "", "longer-host")]  # no row: widths from the summary
    assert report.format_table(passing + [summarize(passing)], everything=False).split("\n") == [
        "HOST         CHECK    STATUS  FOUND", "", "longer-host: ok (0 failed, 0 warnings, 0 skipped, 1 passed)"]
    assert report.format_table([]) == "no results"


def test_junit_has_a_suite_per_host_and_a_case_per_check():
    assert report.to_junit(RESULTS) == """<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="kvprov validate" tests="4" failures="1" skipped="1" errors="0">
  <testsuite name="gpu1" tests="3" failures="1" skipped="1" errors="0">
    <testcase classname="gpu1.mount" name="mount.options">
      <failure message="soft" type="fail">expected: hard,proto=rdma
found: soft
fix: remount it
detail: line1
line2</failure>
    </testcase>
    <testcase classname="gpu1.gds" name="gds.gpu">
      <skipped message="no GPU" />
    </testcase>
    <testcase classname="gpu1.nixl" name="nixl.toml">
      <system-out>warning: expected: one active
found: none
fix: fix toml</system-out>
    </testcase>
  </testsuite>
  <testsuite name="h2" tests="1" failures="0" skipped="0" errors="0">
    <testcase classname="h2.mount" name="mount.present">
      <system-out>expected: mounted
found: yes</system-out>
    </testcase>
  </testsuite>
</testsuites>
"""


def test_junit_replaces_characters_xml_cannot_carry():
    bad = [Result("x.y", "mount", "fail", "", "a\x00b", "", "h")]
    assert '<failure message="a\ufffdb" type="fail">found: a\ufffdb</failure>' in report.to_junit(bad)


def test_write_file_names_the_path_and_the_reason(tmp_path):
    import pytest

    from kvprov.errors import KvprovError

    with pytest.raises(KvprovError) as e:
        report.write_file(str(tmp_path / "no/such/dir/r.json"), "x")
    assert str(e.value) == f"cannot write {tmp_path}/no/such/dir/r.json: No such file or directory"
    (tmp_path / "d").mkdir()
    with pytest.raises(KvprovError) as e:
        report.write_file(str(tmp_path), "x")  # a directory is in the way of the rename
    assert str(e.value) == f"cannot write {tmp_path}: Is a directory"
    assert list(tmp_path.parent.glob(f".{tmp_path.name}.*")) == []  # the temporary file is gone


def test_a_result_has_empty_texts_unless_given():
    from dataclasses import asdict

    assert asdict(Result("mount.options", "mount", "pass")) == {
        "id": "mount.options", "category": "mount", "status": "pass", "expected": "", "found": "", "fix": "",
        "host": "", "detail": ""}
    from kvprov.validate.result import res

    assert asdict(res("fail")) == {"id": "", "category": "", "status": "fail", "expected": "", "found": "", "fix": "",
                                   "host": "", "detail": ""}


def test_show_escapes_control_characters_and_caps_the_length():
    from kvprov.validate.result import show

    assert show("a\tb\x00c\\d") == "a\\tb\\x00c\\d"
    assert show("x" * 160) == "x" * 160 and show("x" * 161) == "x" * 160 + "..."
    assert show("abcdef", 3) == "abc..." and show("abc", 3) == "abc"
    assert show("ab\n", 4) == "ab\\n" and show("ab\n", 3) == "ab\\..."  # the escape counts
    assert show({"k": [1, None]}) == '{"k": [1, null]}'


def test_summary_counts_every_status_and_fails_on_a_failure():
    ok = [Result("a", "mount", "pass", host="h"), Result("b", "gds", "skip", host="h"),
          Result("c", "nixl", "warn", host="h")]
    assert summarize(ok) == Result("summary", "summary", "pass", "no failed check",
                                   "1 pass, 0 fail, 1 warn, 1 skip", "", "h")
    assert summarize(ok + [Result("d", "rdma", "fail", host="h")]) == Result(
        "summary", "summary", "fail", "no failed check", "1 pass, 1 fail, 1 warn, 1 skip",
        "fix the failed checks above, then collect and validate again", "h")
    assert summarize([]) == Result("summary", "summary", "pass", "no failed check", "0 pass, 0 fail, 0 warn, 0 skip")


def test_a_passing_check_shows_no_fix_or_detail_and_json_is_indented_by_two():
    passing = [Result("a.b", "mount", "pass", "x", "y", "a fix", "h", "a detail")]
    assert report.format_table(passing + [summarize(passing)]).split("\n") == [
        "HOST  CHECK  STATUS  FOUND", "h     a.b    pass    y", "", "h: ok (0 failed, 0 warnings, 0 skipped, 1 passed)"]
    assert report.format_json(passing).startswith('{\n  "ok": true,\n  "hosts": {\n    "h": {\n')
