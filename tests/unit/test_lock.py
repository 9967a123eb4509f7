"""Two changes to one inventory at once: the second is refused, naming the first."""

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
