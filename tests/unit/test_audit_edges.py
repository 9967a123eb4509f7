"""audit's checks at their edges: the lengths it shows of captured values (a hostile capture
is cut, a normal one never), a lock note without its fields, an unreadable capture, an
account captured without the desired home (an older desired.json)."""

import json

import pytest

from kvprov.validate import bundle as bf
from kvprov.validate.result import FAIL, SKIP
from tests.unit.test_audit import files_of, run
from tests.unit.test_audit_checks import installed, with_dirs_and_account

TOML = "/etc/kvprov/nixl_backend_config.toml"


def test_a_lock_note_without_its_fields_and_an_unreadable_one():
    files = files_of("lab_gpu1")
    files[bf.DEPLOY_LOCK] = "{}"
    r = run(files)["lock"]
    assert r.status == FAIL and r.found.startswith("held by `?` from ? since ?: a deploy running now")
    files[bf.DEPLOY_LOCK] = json.dumps(["not", "a", "note"])
    r = run(files)["lock"]
    assert r.status == FAIL and r.found.startswith(f"{bf.DEPLOY_LOCK}: ") and '["not", "a", "note"]' in r.found


def test_a_restart_list_the_collector_could_not_read():
    files = installed(files_of("lab_gpu1"))
    files[bf.RESTART_PENDING] = json.dumps({})
    r = run(files)["restarts"]
    assert r.status == FAIL and r.found == f"{bf.RESTART_PENDING}: unreadable"


def test_shown_values_are_cut_at_their_limits_only_when_longer():
    files = with_dirs_and_account(files_of("lab_gpu1"))
    entries = json.loads(files[bf.DIR_MODES])
    entries["/etc/kvprov"]["mode"] = "07550000"  # 8 characters: shown whole
    files[bf.DIR_MODES] = json.dumps(entries)
    assert run(files)["dir:/etc/kvprov"].found == "mode 07550000, owner root:root"
    entries["/etc/kvprov"]["mode"] = "075500001"  # 9: cut
    files[bf.DIR_MODES] = json.dumps(entries)
    assert run(files)["dir:/etc/kvprov"].found == "mode 07550000..., owner root:root"
    account = json.loads(files[bf.ENGINE_USER])
    files[bf.ENGINE_USER] = json.dumps({**account, "uid": "123456789012"})
    assert run(files)["user:sglang"].found == "uid 123456789012, as deployed"
    files[bf.ENGINE_USER] = json.dumps({**account, "uid": "1234567890123"})
    assert run(files)["user:sglang"].found == "uid 123456789012..., as deployed"
    files = files_of("lab_gpu1")
    modes = {path: {"mode": f["mode"], "uid": 0, "link": False}
             for path, f in json.loads(files[bf.DESIRED])["files"].items()}
    modes[TOML] = {"mode": "06440000", "uid": "123456789012", "link": False}
    files[bf.FILE_MODES] = json.dumps(modes)
    assert run(files)[f"file:{TOML}"].found == "identical content; mode 06440000, uid 123456789012"
    modes[TOML] = {"mode": "064400001", "uid": "1234567890123", "link": True}
    files[bf.FILE_MODES] = json.dumps(modes)
    assert run(files)[f"file:{TOML}"].found == "identical content; mode 06440000..., uid 123456789012..., a link"


@pytest.mark.parametrize("captured, home", [(False, "/var/lib/kvprov/sglang"), (True, None)])
def test_the_account_is_skipped_unless_captured_and_desired(captured, home):
    files = with_dirs_and_account(files_of("lab_gpu1"))
    desired = json.loads(files[bf.DESIRED])
    if home is None:  # a desired.json from before the account was checked
        del desired["engine"]["home"]
    files[bf.DESIRED] = json.dumps(desired)
    if not captured:
        del files[bf.ENGINE_USER]
    r = run(files)["user:sglang"]
    assert (r.status, r.found) == (SKIP, "not captured (a bundle from an older kvprov)")
