"""Two changes to one inventory at once: the second is refused, naming the first."""

import os
import subprocess
import sys

import pytest

from kvprov import lock
from kvprov.errors import EXIT_BUSY, KvprovError
from tests.conftest import ROOT, kvprov

HOLD = """
import sys, time
from kvprov import lock
with lock.inventory_lock(sys.argv[1], "deploy"):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_second_deploy_is_refused_naming_the_holder(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPROV_LOCK_DIR", str(tmp_path / "locks"))
    inv = str(ROOT / "inventory/example.yml")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, inv], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(KvprovError) as e:
            with lock.inventory_lock(inv, "audit --fix"):
                pass
        assert e.value.exit_code == EXIT_BUSY
        assert f"`kvprov deploy` (pid {holder.pid}, since " in str(e.value) and "is changing these hosts" in str(e.value)
        r = kvprov("deploy", inv)  # the real command, with the same lock directory
        assert r.returncode == EXIT_BUSY and f"(pid {holder.pid}" in r.stderr
    finally:
        holder.kill()
        holder.wait()
    with lock.inventory_lock(inv, "deploy"):  # a killed holder leaves nothing held
        assert (tmp_path / "locks").stat().st_mode & 0o777 == 0o700


def test_other_inventories_are_not_locked(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPROV_LOCK_DIR", str(tmp_path))
    with lock.inventory_lock(str(ROOT / "inventory/example.yml"), "deploy"):
        with lock.inventory_lock(str(ROOT / "inventory/lab.yml"), "deploy"):
            assert len(list(tmp_path.iterdir())) == 2


# ---------------------------------------------------------------------------- host-side lock

def _host_lock_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("kvprov_host_lock", ROOT / "plugins/modules/kvprov_host_lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hl = _host_lock_module()


def test_host_lock_is_refused_to_another_controller_and_taken_over_from_our_own_interrupted_run(tmp_path):
    path = str(tmp_path / "run" / "deploy.lock")
    assert hl.take(path, "laptop:/inv.yml", "kvprov deploy", "r1", check=False) == (True, "")
    assert (tmp_path / "run").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "run/deploy.lock").stat().st_mode & 0o777 == 0o600
    ok, message = hl.take(path, "awx:/inv.yml", "kvprov audit --fix", "r2", check=False)
    assert not ok and "`kvprov deploy` from laptop:/inv.yml (run r1" in message and path in message
    # the same controller and inventory: the run that held it is gone (it held the controller lock)
    ok, message = hl.take(path, "laptop:/inv.yml", "kvprov deploy", "r3", check=False)
    assert ok and "took over" in message and "run r1" in message
    assert not hl.release(path, "r1", check=False)  # only the holder releases
    assert hl.release(path, "r3", check=False) and not os.path.lexists(path)
    assert os.listdir(tmp_path / "run") == []


def test_host_lock_check_mode_reads_only_and_a_lock_it_cannot_read_is_held(tmp_path):
    path = str(tmp_path / "run" / "deploy.lock")
    assert hl.take(path, "laptop:/inv.yml", "kvprov deploy --check", "r1", check=True) == (True, "")
    assert not (tmp_path / "run").exists()
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "run/deploy.lock").write_text("not json")
    ok, message = hl.take(path, "laptop:/inv.yml", "kvprov deploy", "r2", check=False)
    assert not ok and "is changing this host" in message


def test_host_lock_never_follows_a_link_or_uses_a_directory_others_can_write(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    os.symlink(victim, run / "deploy.lock")
    with pytest.raises(OSError):
        hl.take(str(run / "deploy.lock"), "laptop:/inv.yml", "kvprov deploy", "r1", check=False)
    assert victim.read_text() == "keep"
    (run / "deploy.lock").unlink()
    run.chmod(0o777)
    with pytest.raises(PermissionError):
        hl.take(str(run / "deploy.lock"), "laptop:/inv.yml", "kvprov deploy", "r1", check=False)


def test_another_user_of_the_same_controller_is_another_owner_refused_not_taken_over(tmp_path, monkeypatch):
    """#24 finding 10: the owner is user@controller:inventory; only the same owner, holding the
    inventory's controller lock (its earlier run is gone), takes a host lock over."""
    inv = str(ROOT / "inventory/example.yml")
    mine = lock.owner(inv)
    monkeypatch.setenv("USER", "operator2")
    monkeypatch.setenv("LOGNAME", "operator2")
    theirs = lock.owner(inv)
    assert mine != theirs and theirs.startswith("operator2@") and mine.split("@", 1)[1] == theirs.split("@", 1)[1]
    path = str(tmp_path / "run" / "deploy.lock")
    assert hl.take(path, theirs, "kvprov deploy", "r1", check=False) == (True, "")
    ok, message = hl.take(path, mine, "kvprov loadtest (engine restart)", "r2", check=False)
    assert not ok and f"`kvprov deploy` from {theirs} (run r1" in message


def test_an_engine_restart_is_refused_while_a_deploy_runs_and_takes_the_host_lock(tmp_path, monkeypatch):
    """loadtest --replay/--cross-host and validate --engine-roundtrip restart engines: refused
    while a deploy holds the inventory's lock, and restart.yml takes the host's lock."""
    from kvprov import loadtest, loadtest_client

    monkeypatch.setenv("KVPROV_LOCK_DIR", str(tmp_path / "locks"))
    inv = str(ROOT / "inventory/example.yml")
    ep = loadtest_client.Endpoint(name="h/main", url="http://127.0.0.1:9", model_path="/m", host="h",
                                  units=["kvprov-vllm-main.service"])
    with lock.inventory_lock(inv, "deploy"):
        with pytest.raises(KvprovError) as e:
            loadtest.restart_engine([inv], ep, 1, 1)
    assert e.value.exit_code == EXIT_BUSY and "`kvprov deploy`" in str(e.value)
    play = (ROOT / "playbooks/restart.yml").read_text()
    assert play.index("kvprov_host_lock") < play.index("systemctl', 'restart'") < play.rindex("state: absent")
