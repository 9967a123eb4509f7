"""report.write_reports, what `kvprov validate`/`bench`/`audit` print and write: --json - puts
JSON on stdout instead of the table, --json F and --junit F write files next to the table, and
the table lists passes unless asked for failures and warnings only."""

import json
from argparse import Namespace

from kvprov.validate import report
from kvprov.validate.result import FAIL, PASS, Result, summarize

RESULTS = [Result("mount.present", "mount", PASS, "a mount", "mounted", host="h1"),
           Result("mount.transport", "mount", FAIL, "rdma", "tcp", "remount", host="h1")]
RESULTS.append(summarize(RESULTS))


def test_json_to_stdout_replaces_the_table(capsys):
    report.write_reports(Namespace(json="-", junit=None), RESULTS)
    out = capsys.readouterr().out
    assert json.loads(out)["hosts"]["h1"]["ok"] is False and "HOST" not in out


def test_json_and_junit_files_and_the_whole_table(tmp_path, capsys):
    report.write_reports(Namespace(json=str(tmp_path / "r.json"), junit=str(tmp_path / "r.xml")), RESULTS)
    table = capsys.readouterr().out
    assert "mount.present" in table and "mount.transport" in table
    assert json.loads((tmp_path / "r.json").read_text())["hosts"]["h1"]["counts"]["fail"] == 1
    assert (tmp_path / "r.xml").read_text().startswith("<?xml")


def test_failures_and_warnings_only(capsys):
    report.write_reports(Namespace(json=None, junit=None), RESULTS, everything=False)
    table = capsys.readouterr().out
    assert "mount.transport" in table and "mount.present" not in table
