"""#38, item 2: root never follows a link the engine user can write. The engine role's own task
that creates the instance work directories (in the engine's home, which the engine user
owns), run by ansible-playbook as root on this machine with the task's own arguments."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ansible-playbook") is None,
                                reason="needs root and ansible-playbook")
TASK = "Create the engine's directories on this host (config, restarts owed, secrets, per-instance work)"


def run_task(tmp_path, directory: str) -> subprocess.CompletedProcess:
    """The role's task, its loop one instance work directory owned by `daemon` (the engine user's
    stand-in: a user with a group of its name)."""
    [task] = [t for t in yaml.safe_load((ROOT / "roles/engine/tasks/main.yml").read_text()) if t.get("name") == TASK]
    task = {**task, "loop": [{"path": directory, "owner": "daemon", "mode": "0750"}]}
    task.pop("tags", None)
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [task]}]))
    return subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(book),
                           "-e", f"ansible_python_interpreter={sys.executable}"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ANSIBLE_NOCOLOR": "1"})


def test_a_link_the_engine_put_where_its_work_directory_goes_is_refused_and_its_target_keeps_its_owner(tmp_path):
    home, victim = tmp_path / "home", tmp_path / "etc"
    home.mkdir()
    victim.mkdir(mode=0o755)
    shutil.chown(home, "daemon")
    (home / "main").symlink_to(victim)  # what a compromised engine can do in its own home
    r = run_task(tmp_path, str(home / "main"))
    assert r.returncode != 0 and "already exists as a link" in r.stdout, r.stdout[-3000:]
    st = victim.stat()
    assert (st.st_uid, oct(st.st_mode & 0o777)) == (0, "0o755")  # not handed to the engine user


def test_the_work_directory_is_created_for_the_engine_user_then_left_alone(tmp_path):
    directory = tmp_path / "home" / "main"
    directory.parent.mkdir()
    first, second = run_task(tmp_path, str(directory)), run_task(tmp_path, str(directory))
    assert first.returncode == 0 and "changed=1" in first.stdout, first.stdout[-3000:]
    assert second.returncode == 0 and "changed=0" in second.stdout, second.stdout[-3000:]
    st = directory.stat()
    assert (directory.owner(), oct(st.st_mode & 0o777)) == ("daemon", "0o750")
