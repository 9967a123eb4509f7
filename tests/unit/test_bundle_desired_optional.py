"""desired.json's optional parts (dirs, the engine account): read, written back the same,
and refused with the reason when malformed."""

import copy

import pytest

from kvprov.validate.bundle import Desired, DesiredError
from tests.unit.test_bundle_desired import BASE

DIRS = {"/etc/kvprov": {"mode": "0755", "owner": "root", "role": "nixl"},
        "/var/lib/kvprov/x": {"mode": "0750", "owner": "vllm", "role": "engine"}}


def data(**engine) -> dict:
    d = copy.deepcopy(BASE)
    d["engine"].update(engine)
    return d


def test_dirs_and_the_account_are_read_and_written_back_the_same():
    full = {**data(home="/var/lib/kvprov/vllm", shell="/usr/sbin/nologin", uid=1500), "dirs": DIRS}
    d = Desired.from_dict(full)
    assert [(x.path, x.mode, x.owner, x.role) for x in d.dirs] == [
        ("/etc/kvprov", "0755", "root", "nixl"), ("/var/lib/kvprov/x", "0750", "vllm", "engine")]
    assert (d.engine_home, d.engine_shell, d.engine_uid) == ("/var/lib/kvprov/vllm", "/usr/sbin/nologin", 1500)
    assert d.to_dict() == full
    # an absent optional part is left out, and those after it are still written
    later = data(home="/h", shell="/bin/sh", uid=None)
    written = Desired.from_dict(later).to_dict()
    assert "dirs" not in later and "dirs" not in written
    assert written == {**later, "engine": {k: v for k, v in later["engine"].items() if k != "uid"}}  # null: absent
    assert Desired.from_dict(copy.deepcopy(BASE)).to_dict() == BASE


@pytest.mark.parametrize("change, problem", [
    ({"dirs": {"etc/kvprov": DIRS["/etc/kvprov"]}}, "dirs: must map absolute paths to {mode, owner, role}"),
    ({"dirs": ["/etc/kvprov"]}, "dirs: must map absolute paths to {mode, owner, role}"),
    ({"engine": {"uid": "1500"}}, 'engine.uid: must be an integer or null, got "1500"'),
    ({"engine": {"uid": True}}, "engine.uid: must be an integer or null, got true"),
    ({"engine": {"home": 5}}, "engine.home: must be a string, got 5"),
])
def test_malformed_optional_parts_are_refused_with_the_reason(change, problem):
    d = copy.deepcopy(BASE)
    d["engine"].update(change.pop("engine", {}))
    d.update(change)
    with pytest.raises(DesiredError) as e:
        Desired.from_dict(d)
    assert problem in str(e.value)
