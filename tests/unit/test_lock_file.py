"""The controller lock's file, in-process and fast: where it lives, its name, what it holds
while held (only the holder's JSON, whatever was there before), that leaving the block
releases it, the owner of several sources, and the extra vars for the host-side lock."""

import json
import os

import pytest

from kvprov import lock
from kvprov.errors import EXIT_BUSY, KvprovError


def test_the_lock_lives_under_the_state_dir_named_by_the_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("KVPROV_LOCK_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert lock.locks_dir() == tmp_path / "state/kvprov/locks"
    a, b = tmp_path / "a.yml", tmp_path / "b.yml"
    path = lock.lock_path([str(b), str(a)])
    assert path.parent == tmp_path / "state/kvprov/locks" and len(path.name) == len("0123456789abcdef.lock")
    assert path == lock.lock_path([str(a), str(b)]) != lock.lock_path(str(a))
    monkeypatch.setenv("KVPROV_LOCK_DIR", str(tmp_path / "elsewhere"))
    assert lock.locks_dir() == tmp_path / "elsewhere"


def test_the_file_holds_only_the_holder_and_leaving_the_block_releases_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPROV_LOCK_DIR", str(tmp_path / "locks"))
    inv = str(tmp_path / "inv.yml")
    path = lock.lock_path(inv)
    path.parent.mkdir()
    path.write_text("x" * 4096)  # an older, longer holder's note
    with lock.inventory_lock(inv, "deploy"):
        held = json.loads(path.read_text())
        assert held["pid"] == os.getpid() and held["command"] == "deploy" and held["inventory"] == [inv]
        fd = os.open(path, os.O_RDONLY)
        try:
            assert lock._holder(fd) == f"`kvprov deploy` (pid {os.getpid()}, since {held['since']})"
        finally:
            os.close(fd)  # (flock is per open file: this closes nothing of the lock's)
    with lock.inventory_lock(inv, "audit --fix"):  # released on leaving, and the directory already there
        assert json.loads(path.read_text())["command"] == "audit --fix"
    with pytest.raises(KvprovError) as e:
        with lock.inventory_lock(inv, "deploy"):
            with lock.inventory_lock(inv, "deploy"):
                pass
    assert e.value.exit_code == EXIT_BUSY and "`kvprov deploy` (pid" in str(e.value)


def test_an_unreadable_note_names_another_run(tmp_path):
    for text in ("", "not json", '{"pid": 1}', "[1]"):
        (tmp_path / "l").write_text(text)
        fd = os.open(tmp_path / "l", os.O_RDONLY)
        try:
            assert lock._holder(fd) == "another kvprov run"
        finally:
            os.close(fd)


def test_owner_of_several_sources_and_the_host_lock_vars(tmp_path):
    a, b = str(tmp_path / "a.yml"), str(tmp_path / "b.yml")
    assert lock.owner([b, a]).endswith(f":{a},{b}")
    v = lock.host_lock_vars([a], "deploy")
    assert set(v) == {"kvprov_lock_owner", "kvprov_lock_command", "kvprov_run_id"}
    assert v["kvprov_lock_owner"] == lock.owner([a]) and v["kvprov_lock_command"] == "kvprov deploy"
    assert len(v["kvprov_run_id"]) == 12 and int(v["kvprov_run_id"], 16) >= 0
    assert lock.host_lock_vars([a], "deploy")["kvprov_run_id"] != v["kvprov_run_id"]


def test_the_lock_directory_is_made_with_its_parents(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPROV_LOCK_DIR", str(tmp_path / "state/kvprov/locks"))  # none of it there yet
    inv = str(tmp_path / "inv.yml")
    with lock.inventory_lock(inv, "deploy"):
        assert lock.lock_path(inv).parent == tmp_path / "state/kvprov/locks"
        assert (tmp_path / "state/kvprov/locks").stat().st_mode & 0o777 == 0o700
