"""validate's Context on its own: what the I/O probe's failure reads like, typed fields of
captured JSON, and a managed file missing from the capture."""

import pytest

from kvprov.validate import evaluate as ev
from kvprov.validate.bundle import FileProblem
from kvprov.validate.context import IoProbe, _field
from tests.conftest import FIXTURES


def test_io_probe_failure_says_hung_or_what_failed():
    tail = "; the KV tier is degraded: the engines serve without it until the server answers again"
    assert IoProbe(False, True, 30, None, None).failure() == f"the storage does not answer (no answer within 30 s){tail}"
    assert IoProbe(False, True, None, None, None).failure() == f"the storage does not answer (no answer){tail}"
    assert IoProbe(False, False, 1.5, "EIO", None).failure() == "the write/read failed: EIO"
    assert IoProbe(False, False, 1.5, None, None).failure() == "the write/read failed: no error given"
    # a soft mount's answer when its server does not (#37): EIO, or ETIMEDOUT with softerr
    for error in ("OSError: [Errno 5] Input/output error: '/mnt/kvcache/.kvprov-h'", "OSError: [Errno 110] timed out"):
        probe = IoProbe(False, False, 6.2, error, None)
        assert probe.not_answering and probe.failure() == (
            f"the storage does not answer (the soft mount gave up: {error}){tail}")
    assert not IoProbe(False, False, 1.5, "OSError: [Errno 28] No space left on device", None).not_answering


def test_field_defaults_requirements_and_types():
    assert _field({}, "f.json", "k", (bool,), default=False) is False
    assert _field({"k": None}, "f.json", "k", (bool,), default=False) is False
    assert _field({"k": 3}, "f.json", "k", (int,)) == 3
    with pytest.raises(FileProblem) as e:
        _field({}, "f.json", "k", (bool,), required=True)
    assert e.value.reason == "has no 'k'"
    with pytest.raises(FileProblem) as e:
        _field({"k": True}, "f.json", "k", (int, float))
    assert e.value.reason == "'k' must be int or float, is true"


def test_a_missing_nixl_toml_fails_naming_the_nixl_role(tmp_path):
    import shutil

    b = tmp_path / "b"
    shutil.copytree(FIXTURES / "bundles/local_c1", b)
    (b / "files/etc/kvprov/nixl_backend_config.toml").unlink()
    missing = ("files/etc/kvprov/nixl_backend_config.toml: /etc/kvprov/nixl_backend_config.toml is not on the host "
               "(not in the bundle)")
    fix = "kvprov deploy INVENTORY --limit kvlab-c1 --tags nixl"
    assert [(r.id, r.status, r.expected, r.found, r.fix) for r in ev.evaluate_bundle(b) if r.category == "nixl"] == [
        ("nixl.import", "pass", "`import nixl` works in /opt/kvprov/nixl", "nixl 1.5.1", ""),
        ("nixl.backend", "pass", "NIXL creates the POSIX backend (plugin posix)", "POSIX backend created", ""),
        *[(f"nixl.{c}", "fail", "usable captured data", missing, fix) for c in ("config", "active_plugin", "options")]]
