"""kvprov keeps the newest run artifacts and removes its own older ones, nothing else."""

import os
import shutil
import time
from pathlib import Path

from kvprov import runner

DAY = 86400


def make(d, name, age_days):
    path = d / name
    path.mkdir()
    (path / "artifacts").mkdir()
    t = time.time() - age_days * DAY
    os.utime(path, (t, t))
    return path


def test_keeps_the_newest_and_anything_from_the_last_day_and_only_removes_its_own(tmp_path):
    runs = [make(tmp_path, f"202612{day:02d}-101010-deploy-{day}", age_days=30 - day) for day in range(1, 9)]
    recent = make(tmp_path, "20261101-000000-audit-fix-7", age_days=0.5)  # old name, but touched today
    foreign = make(tmp_path, "20261101-000000-notes", age_days=40)  # not a kvprov run name
    (tmp_path / "20261101-000000-deploy-9").symlink_to(foreign)  # a link is never followed or removed
    removed = runner.prune_runs(tmp_path, keep=3)
    assert sorted(removed) == runs[:5]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [r.name for r in runs[5:]] + [recent.name, foreign.name, "20261101-000000-deploy-9"])
    assert runner.prune_runs(tmp_path, keep=3) == []


def test_a_run_prunes_beyond_KVPROV_RUNS_KEEP(tmp_path, monkeypatch):
    old = [make(tmp_path, f"2020010{i}-000000-audit-{i}", age_days=100) for i in range(1, 4)]
    monkeypatch.setenv("KVPROV_RUNS_DIR", str(tmp_path))
    monkeypatch.setenv("KVPROV_RUNS_KEEP", "2")
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  children:\n    gpu_nodes:\n      hosts: {}\n")
    result = runner.run("desired.yml", str(inv), name="desired")
    assert result.artifacts.exists()
    assert [p.exists() for p in old] == [False, False, True]  # the new run and the newest old one stay


def test_a_run_another_process_pruned_meanwhile_is_skipped_not_an_error(tmp_path, monkeypatch):
    """Two kvprov processes (testinfra's workers, a deploy beside an audit) prune the same
    directory: a run listed by one and removed by the other before it is looked at."""
    now = time.time()
    for i in range(3):
        d = tmp_path / f"20260101-00000{i}-deploy-{i}"
        d.mkdir()
        os.utime(d, (now - 3 * 86400, now - 3 * 86400))
    gone = tmp_path / "20260101-000000-deploy-0"
    real_stat, looks = Path.stat, []

    def stat(self, *a, **kw):  # the other process removes it after the listing, before the age is read
        if self == gone:
            looks.append(1)
            if len(looks) == 3:  # after the listing's lstat and stat
                shutil.rmtree(gone, ignore_errors=True)
        return real_stat(self, *a, **kw)
    monkeypatch.setattr(Path, "stat", stat)
    assert runner.prune_runs(tmp_path, keep=1, now=now) == [tmp_path / "20260101-000001-deploy-1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["20260101-000002-deploy-2"]
