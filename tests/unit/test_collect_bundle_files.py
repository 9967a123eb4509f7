"""kvprov collect's writing of a host's bundle: names that would leave the bundle are
dropped, every directory is 0700 and every file 0600 (a capture holds the host's
configuration), and the content is written as captured."""

import stat

from kvprov.validate.collect import _safe_name, write_bundle


def test_names_that_would_leave_the_bundle_are_refused():
    assert _safe_name("proc/self/mountinfo") == "proc/self/mountinfo"
    assert _safe_name("files/etc/kvprov/nixl.toml") == "files/etc/kvprov/nixl.toml"
    for bad in ("", "/etc/passwd", "../x", "a/../../x", "a//b", "a/./b", "./a", ".."):
        assert _safe_name(bad) is None, bad
    assert _safe_name("dir/") == "dir"


def test_bundle_files_are_private_and_hold_what_was_captured(tmp_path):
    root = tmp_path / "out" / "gpu1"
    files = {"b/c/d.txt": "deep\n", "b/e.txt": "", "a.txt": "top", "../escape": "no", "/abs": "no", "n.txt": None}
    assert write_bundle(root, files) == ["a.txt", "b/c/d.txt", "b/e.txt"]  # b made once, then found
    assert (root / "a.txt").read_text() == "top" and (root / "b/c/d.txt").read_text() == "deep\n"
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "out", "out/gpu1", "out/gpu1/a.txt", "out/gpu1/b", "out/gpu1/b/c", "out/gpu1/b/c/d.txt", "out/gpu1/b/e.txt"]
    for d in (root, root / "b", root / "b/c"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for f in (root / "a.txt", root / "b/c/d.txt"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def test_a_file_already_there_is_replaced_and_made_private(tmp_path):
    (tmp_path / "a.txt").write_text("an older, longer capture")
    (tmp_path / "a.txt").chmod(0o644)
    assert write_bundle(tmp_path, {"a.txt": "new"}) == ["a.txt"]
    assert (tmp_path / "a.txt").read_text() == "new"
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o600


def test_bundle_files_from_the_capture_task_result():
    import json

    from kvprov.validate.collect import bundle_files

    captured = {"changed": False, "files": {"proc/modules": "x"}}
    files = bundle_files(captured, {"host": "h"})
    assert files == {"proc/modules": "x", "desired.json": json.dumps({"host": "h"}, indent=2)}
    assert captured["files"] == {"proc/modules": "x"}  # not changed
    assert bundle_files({"files": {"a": "b"}}, None) == {"a": "b"}
    assert bundle_files({"files": {"a": "b"}}, "no") == {"a": "b"}
    assert bundle_files({}, None) == {} and bundle_files({"files": None}, None) == {}
    assert bundle_files({"files": ["a"]}, None) == {}
