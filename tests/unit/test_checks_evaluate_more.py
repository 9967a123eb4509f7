"""evaluate_bundle against an inventory when the bundle's own desired.json is unusable: the
host comes from collect.json, else the directory's name; a host without instances."""

import json
import shutil

import pytest

from kvprov.errors import KvprovError
from kvprov.validate import evaluate as ev
from kvprov.validate.result import FAIL, SKIP
from tests.conftest import FIXTURES

LOCAL = FIXTURES / "bundles/local_c1"


def broken_copy(tmp_path, collect: dict | None):
    b = tmp_path / "somehost"
    shutil.copytree(LOCAL, b)
    (b / "desired.json").write_text("{")
    if collect is None:
        (b / "collect.json").unlink()
    else:
        (b / "collect.json").write_text(json.dumps(collect))
    return b


@pytest.mark.parametrize("collect, host", [({"host": "kvlab-c9"}, "kvlab-c9"), ({"host": ""}, "somehost"),
                                           ({"host": 7}, "somehost"), (None, "somehost")])
def test_the_host_of_a_bundle_without_desired_json(tmp_path, collect, host):
    with pytest.raises(KvprovError) as e:
        ev.evaluate_bundle(broken_copy(tmp_path, collect), {"gpu1": {}}, "inv.yml")
    assert str(e.value) == f"{tmp_path}/somehost: host {host} is not a GPU node of inv.yml (its gpu_nodes: gpu1)"


def test_an_unusable_desired_json_is_judged_against_the_inventory(tmp_path):
    want = json.loads((LOCAL / "desired.json").read_text())
    results = ev.evaluate_bundle(broken_copy(tmp_path, {"host": "kvlab-c1"}), {"kvlab-c1": want}, "inv.yml")
    first, summary = results[0], results[-1]
    assert (first.id, first.status, first.host) == ("bundle.desired", FAIL, "kvlab-c1")
    assert first.found.startswith("the bundle's desired.json is unusable (")
    assert (summary.id, summary.status, summary.host) == ("summary", FAIL, "kvlab-c1")


def test_a_host_without_engine_instances_skips_them_once(tmp_path):
    b = tmp_path / "b"
    shutil.copytree(LOCAL, b)
    data = json.loads((b / "desired.json").read_text())
    data["engine"]["instances"] = []
    (b / "desired.json").write_text(json.dumps(data))
    engine = [(r.id, r.category, r.status, r.expected, r.found) for r in ev.evaluate_bundle(b)
              if r.category == "engine"]
    assert engine == [("engine.instances", "engine", SKIP, "", "no engine instance in the inventory")]
