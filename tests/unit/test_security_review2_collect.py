"""Security review #24, finding 9: `kvprov collect --out DIR` writes a host's captured files
(names and contents the host chose) as root under DIR/<host>/. A link planted at DIR/<host>
or at any directory below it (DIR/<host>/files) must not be followed: nothing is written
through it, and the CLI path reports it as a clear error naming the host. Names from the
host never leave the bundle (no '..', no absolute name, no NUL, not '.')."""

from __future__ import annotations

import os

import pytest

from kvprov import runner
from kvprov.errors import EXIT_USAGE, KvprovError
from kvprov.validate import collect
from kvprov.validate.collect import _safe_name, write_bundle

CAPTURED = {"files/etc/kvprov/nixl.toml": "planted by the host", "proc/mountinfo": "m"}


def listing(path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.fixture
def out_and_target(tmp_path):
    out, target = tmp_path / "out", tmp_path / "target"
    out.mkdir()
    target.mkdir()
    return out, target


def test_a_link_planted_at_dir_host_is_not_followed(out_and_target):
    out, target = out_and_target
    (out / "gpu1").symlink_to(target)
    with pytest.raises(OSError) as e:
        write_bundle(out / "gpu1", CAPTURED)
    assert e.value.filename == str(out / "gpu1") and "symbolic link" in e.value.strerror
    assert listing(target) == []


def test_a_link_planted_at_dir_host_files_is_not_followed(out_and_target):
    out, target = out_and_target
    (out / "gpu1").mkdir()
    (out / "gpu1" / "files").symlink_to(target)
    with pytest.raises(OSError) as e:
        write_bundle(out / "gpu1", CAPTURED)
    assert e.value.filename == str(out / "gpu1" / "files")
    assert listing(target) == []


def test_a_link_deeper_down_is_not_followed_either(out_and_target):
    out, target = out_and_target
    (out / "gpu1" / "files" / "etc").mkdir(parents=True)
    (out / "gpu1" / "files" / "etc" / "kvprov").symlink_to(target)
    with pytest.raises(OSError):
        write_bundle(out / "gpu1", CAPTURED)
    assert listing(target) == []


def test_a_hard_link_planted_as_a_file_is_not_written_to(out_and_target):
    out, target = out_and_target
    victim = target / "victim"
    victim.write_text("mine")
    (out / "gpu1" / "proc").mkdir(parents=True)
    os.link(victim, out / "gpu1" / "proc" / "mountinfo")
    with pytest.raises(OSError, match="not a regular file of its own"):
        write_bundle(out / "gpu1", {"proc/mountinfo": "x"})
    assert victim.read_text() == "mine"


def test_names_with_a_nul_or_only_a_dot_are_dropped(out_and_target):
    out, _ = out_and_target
    for bad in ("a\0b", ".", "./", "a/\0", "../gpu2/x", "/etc/x"):
        assert _safe_name(bad) is None, repr(bad)
    assert write_bundle(out / "gpu1", {"a\0b": "x", ".": "x", "../gpu2/x": "x", "ok": "y"}) == ["ok"]
    assert listing(out) == ["gpu1", "gpu1/ok"]


def test_collect_reports_a_planted_link_naming_the_host_and_writes_nothing_through_it(out_and_target, monkeypatch):
    out, target = out_and_target
    (out / "gpu1").mkdir()
    (out / "gpu1" / "files").symlink_to(target)
    captured = {"files": CAPTURED}
    monkeypatch.setattr(collect.check, "require_valid", lambda sources: [])
    monkeypatch.setattr(collect, "run_with_states", lambda *a, **k: runner.RunResult(rc=0, artifacts=None,
                                                                                 captured={"gpu1": captured}))
    with pytest.raises(KvprovError) as e:
        collect.collect("inv.yml", out, timeout=5)
    assert e.value.exit_code == EXIT_USAGE
    assert f"cannot write the bundle of gpu1 under --out {out}: {out / 'gpu1' / 'files'}" in str(e.value)
    assert listing(target) == []


def test_collect_refuses_a_host_name_that_is_not_one_directory(out_and_target, monkeypatch):
    out, target = out_and_target
    monkeypatch.setattr(collect.check, "require_valid", lambda sources: [])
    monkeypatch.setattr(collect, "run_with_states", lambda *a, **k: runner.RunResult(
        rc=0, artifacts=None, captured={f"../{target.name}": {"files": CAPTURED}}))
    with pytest.raises(KvprovError, match="cannot name a directory under --out"):
        collect.collect("inv.yml", out, timeout=5)
    assert listing(target) == []
