"""desired.json's format: a newer kvprov's is refused saying so, an older one's (format 2,
SGLang only) is read, and write_desired writes what from_dict reads back."""

import copy
import json

import pytest

from kvprov.validate.bundle import FORMAT, Desired, DesiredError, write_desired
from tests.conftest import FIXTURES

BASE = json.loads((FIXTURES / "bundles/lab_gpu1/desired.json").read_text())


def problems(data) -> list[str]:
    with pytest.raises(DesiredError) as e:
        Desired.from_dict(data)
    return e.value.problems


def test_format_newer_older_and_wrong():
    assert problems({**BASE, "format": FORMAT + 1}) == [
        f"format: {FORMAT + 1}; this kvprov reads bundle format {FORMAT} (a newer kvprov wrote it: upgrade kvprov)"]
    assert problems({**BASE, "format": FORMAT - 1}) == [f"format: {FORMAT - 1}; this kvprov reads bundle format {FORMAT}"]
    assert problems({**BASE, "format": "9"}) == [f"format: '9'; this kvprov reads bundle format {FORMAT}"]
    assert problems([]) == ["must be a JSON object, not list"]


def test_a_format_2_desired_json_reads_as_sglang_hicache():
    old = copy.deepcopy(BASE)
    engine = old.pop("engine")
    old["format"] = 2
    old["sglang"] = {"user": engine["user"], "install": engine["install"],
                     "instances": [{k: v for k, v in i.items() if k in ("name", "unit", "storage_dir", "port")}
                                   for i in engine["instances"]]}
    d = Desired.from_dict(old)
    assert d.engine == "sglang_hicache" and d.engine_user == engine["user"]
    assert [(i.name, i.units, i.port) for i in d.instances] == [
        (i["name"], (i["unit"],), i["port"]) for i in engine["instances"]]
    old["sglang"] = "not a mapping"
    assert problems(old)[0] == f"format: 2; this kvprov reads bundle format {FORMAT}"


def test_write_desired_round_trips(tmp_path):
    d = Desired.from_dict(BASE)
    path = write_desired(tmp_path / "new" / "dir", d)
    assert path == tmp_path / "new/dir/desired.json"
    text = path.read_text()
    assert text.endswith("}\n") and text.startswith('{\n  "format": ')
    assert Desired.from_dict(json.loads(text)) == d


def test_each_kind_of_value_is_checked_and_named():
    def with_(**changes):
        data = copy.deepcopy(BASE)
        for dotted, value in changes.items():
            *path, last = dotted.split("__")
            node = data
            for step in path:
                node = node[step]
            node[last] = value
        return data

    assert problems(with_(storage__options=["a", 1])) == ["storage.options: must be a list of strings"]
    assert problems(with_(storage__options="a")) == ["storage.options: must be a list of strings"]
    assert problems(with_(files={"rel": {}})) == ["files: must map absolute paths to {mode, role, content}"]
    assert problems(with_(files={"/a": {"mode": "0644", "role": "x"}})) == [
        "files: ['/a'] must have exactly the keys mode, role, content"]
    assert problems(with_(venvs={"/v": {"a": 1}})) == [
        "venvs: must map venv paths to {distribution: pinned version or null}"]
    assert problems(with_(venvs={"/v": ["a"]})) == [
        "venvs: must map venv paths to {distribution: pinned version or null}"]
    d = Desired.from_dict(with_(venvs={"/v": {"a": None, "b": "1"}},
                                files={"/a": {"mode": "0644", "role": "x", "content": "c"}}))
    assert [f.path for f in d.files] == ["/a"]
