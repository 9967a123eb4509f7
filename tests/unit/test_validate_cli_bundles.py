"""`kvprov validate --bundle` in-process: a directory that is no usable bundle is one failed
host (bundle.desired) with what was expected and how to fix it; nothing usable at all exits 2."""

import json

from kvprov import cli
from kvprov.errors import EXIT_CHECKS_FAILED, EXIT_USAGE
from tests.conftest import FIXTURES


def test_an_unusable_bundle_is_a_failed_bundle_desired_result(tmp_path, capsys):
    bad = tmp_path / "gpu-b07"
    bad.mkdir()
    out = tmp_path / "r.json"
    rc = cli.main(["validate", "--bundle", str(bad), "--bundle", str(FIXTURES / "bundles/local_c1"),
                   "--json", str(out)])
    assert rc == EXIT_CHECKS_FAILED
    err = capsys.readouterr().err
    assert f"kvprov: error: {bad}: desired.json: missing from the bundle" in err
    assert "kvprov: note: each bundle's own desired.json is trusted" in err
    [failed] = json.loads(out.read_text())["hosts"]["gpu-b07"]["results"][:1]
    assert {k: failed[k] for k in ("id", "category", "status", "expected", "fix")} == {
        "id": "bundle.desired", "category": "bundle", "status": "fail",
        "expected": "a bundle with a desired.json this kvprov reads (docs/bundle.md)",
        "fix": "capture it again with `kvprov collect`"}


def test_no_usable_bundle_at_all_exits_2(tmp_path):
    (tmp_path / "empty").mkdir()
    assert cli.main(["validate", "--bundle", str(tmp_path / "empty"), "--json", str(tmp_path / "r.json")]) == EXIT_USAGE
