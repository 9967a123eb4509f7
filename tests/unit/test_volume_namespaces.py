"""#37 item 1: a change lands in a new namespace; the old one is aged out by the evictor and shown
by `kvprov audit`. The collector lists, beside each shared namespace a host uses, the model's
other namespaces (same PREFIX, another fingerprint) on real directories (tmp_path), as the
engine user (FAKE: runuser runs its command as this user, see test_collect_module's `host`);
audit shows them in the console, --json and --prom without changing its exit code; validate
does not read them; a bundle of an older collector shows nothing."""

import json
import os
import re
import shutil
import sys
import time

import pytest

from kvprov import audit, cli, namespace, volume_namespaces
from kvprov.validate import bundle as bf
from kvprov.validate.bundle import Bundle
from tests.conftest import FIXTURES, ROOT
from tests.unit.test_audit_gather import ansible, captured, with_unmanaged_file  # noqa: F401 - a fixture
from tests.unit.test_collect_module import Seen, engine_http, host  # noqa: F401 - fixtures

collector = bf.collector
DAY = 86400
CURRENT = "models-tiny-0123456789ab"
OLD, NEVER, LINK, FILE = ("models-tiny-" + c * 12 for c in "abcd")


def fill(d, sizes):
    d.mkdir(parents=True)
    for i, size in enumerate(sizes):
        (d / f"chunk{i}").write_bytes(b"x" * size)


def mark(d, age_s):
    (d / ".kvprov-in-use").touch()
    t = time.time() - age_s
    os.utime(d / ".kvprov-in-use", (t, t))


@pytest.fixture
def volume(host, tmp_path):
    """<mount>/kv/lmcache_mp: the host's namespace, two old ones of its model (one run on 9 days
    ago, one never), a link named like one to a directory elsewhere, a file named like one, and
    other models' namespaces."""
    parent = host["mp"] / "kv" / "lmcache_mp"
    fill(parent / CURRENT, [8192])
    mark(parent / CURRENT, 60)
    fill(parent / OLD, [8192, 8192])
    mark(parent / OLD, 9 * DAY + 3600)
    fill(parent / NEVER, [4096])
    fill(tmp_path / "elsewhere", [1 << 20])
    (parent / LINK).symlink_to(tmp_path / "elsewhere")
    (parent / FILE).write_text("not a namespace")
    fill(parent / "other-model-aaaaaaaaaaaa", [4096])
    fill(parent / "models-tiny-2-aaaaaaaaaaaa", [4096])  # another model whose name starts alike
    fill(parent / "models-tiny", [4096])  # no fingerprint: not a shared namespace
    d = host["desired"]
    d["engine"]["name"] = "lmcache_mp"
    d["engine"]["instances"][0]["storage_dir"] = str(parent / CURRENT) + "/"
    return {**host, "parent": parent}


def test_the_pattern_is_the_namespaces_and_the_evictors():
    evict = (ROOT / "roles/engine/files/kvprov-evict.py").read_text()
    assert f're.compile(r"{collector.FINGERPRINTED}")' in evict
    name = namespace.namespace("lmcache_mp", {"kvprov_engine_model_path": "/models/tiny"}.get)
    m = re.fullmatch(collector.FINGERPRINTED, name)
    assert m and m.group(1) == namespace.split(name)[0] == "models-tiny"


def test_which_instance_directories_are_shared_namespaces():
    d = {"storage": {"mount_point": "/mnt/kv/"}, "engine": {"name": "vllm_offload", "instances": [
        {"storage_dir": "/mnt/kv/kv/vllm_offload/m-0123456789ab/"}, {"storage_dir": "/mnt/kv/kv/vllm_offload/m-0123456789ab"},
        {"storage_dir": "/mnt/kv/kv/lmcache_mp/m-0123456789ab"}, {"storage_dir": "/mnt/kv/h1/main"},
        {"storage_dir": "/mnt/kv/kv/vllm_offload/m-0123456789ab/fp-0123456789ab"}, {"storage_dir": ""},
        {"storage_dir": "/mnt/kv/kv/vllm_offload/no-fingerprint"}]}}
    assert collector.namespace_dirs(d) == ["/mnt/kv/kv/vllm_offload/m-0123456789ab"]
    del d["engine"]["name"]  # a desired state without the engine's name: none
    assert collector.namespace_dirs(d) == []


def test_the_collector_lists_the_models_namespaces_without_following_a_link(volume):
    out = collector.collect(volume["desired"], False, 4096, 10, "9.9")
    parent, own = volume["parent"], str(volume["parent"] / CURRENT)
    listing = json.loads(out[bf.NAMESPACES])
    assert out[bf.NAMESPACES] == json.dumps(listing, indent=2)
    assert list(listing) == [own]
    entry = listing[own]
    assert abs(entry["listed_at"] - time.time()) < 60
    ns = entry["namespaces"]
    assert sorted(ns) == sorted([CURRENT, OLD, NEVER, LINK])  # not the file, nor the other models'
    assert ns[LINK] == {"current": False, "skipped": "a link, not followed", "in_use": None, "usage": None}
    assert (ns[CURRENT]["current"], ns[OLD]["current"], ns[NEVER]["current"]) == (True, False, False)
    assert ns[NEVER]["in_use"] is None
    assert ns[OLD]["in_use"] == pytest.approx(os.stat(parent / OLD / ".kvprov-in-use").st_mtime)
    assert ns[CURRENT]["in_use"] == pytest.approx(os.stat(parent / CURRENT / ".kvprov-in-use").st_mtime)
    assert ns[OLD]["usage"]["files"] == 3 and ns[OLD]["usage"]["bytes"] >= 16384  # with the marker
    assert ns[OLD]["usage"]["complete"] is True and ns[NEVER]["usage"]["files"] == 1
    # the host's own namespace is walked once, by the usage probe: its figures are storage_dirs.json's
    assert ns[CURRENT]["usage"] == json.loads(out[bf.STORAGE_DIRS])["instances"]["main"]["usage"]
    assert ns[CURRENT]["usage"]["files"] == 2
    assert os.path.exists(volume["tmp"] / "elsewhere" / "chunk0")


def test_a_walk_out_of_time_is_incomplete_and_a_listing_that_hangs_is_an_error(volume, monkeypatch):
    own = str(volume["parent"] / CURRENT)
    rc, so, se, _ = collector.run([sys.executable, "-c", collector.NAMESPACES_PROBE, "0", collector.FINGERPRINTED,
                                   own], 10)
    assert rc == 0, se
    old = json.loads(so)[own]["namespaces"][OLD]
    assert old["usage"] == {"bytes": 0, "files": 0, "unreadable": 0, "complete": False}
    assert old["in_use"] is not None  # the marker is read all the same
    Seen(monkeypatch, scripts={collector.NAMESPACES_PROBE: (-9, "", "", True)})
    out = collector.collect(volume["desired"], False, 4096, 10, "9.9")
    assert json.loads(out[bf.NAMESPACES]) == {own: {"error": "timed out after 10s (hung mount?)"}}
    assert volume_namespaces.format_section(volume_namespaces.parse(Bundle(files=out), desired(out))) == ""


def test_a_volume_that_hangs_is_not_listed(volume, monkeypatch):
    seen = Seen(monkeypatch, scripts={collector.IO_PROBE: (-9, "", "timed out after 10s", True)})
    out = collector.collect(volume["desired"], True, 4096, 10, "9.9")
    hung = "not run: the KV mount did not answer the I/O probe within 10s (hung mount?)"
    assert json.loads(out[bf.NAMESPACES]) == {str(volume["parent"] / CURRENT): {"error": hung}}
    assert not [c for c, _ in seen.runs if collector.NAMESPACES_PROBE in c]


def desired(*_) -> bf.Desired:
    """A lab host's desired state (the fixture bundle's)."""
    return bf.load_desired(Bundle(FIXTURES / "bundles" / "lab_gpu1"))


def test_parse_rows_and_an_older_or_unusable_capture():
    d = desired({})
    assert volume_namespaces.parse(Bundle(files={}), d) == []  # an older collector: nothing, no error
    for text in ("{", "[]", '{"/k/kv/e/m-0123456789ab": 3}', '{"/k/kv/e/m-0123456789ab": {"namespaces": [1]}}'):
        assert volume_namespaces.parse(Bundle(files={bf.NAMESPACES: text}), d) == []
    rows = volume_namespaces.parse(Bundle(files={bf.NAMESPACES: json.dumps({"/k/kv/e/m-0123456789ab": {
        "listed_at": 10 * DAY, "namespaces": {
            "m-aaaaaaaaaaaa": {"current": False, "in_use": 8 * DAY + 5, "usage": {"bytes": -1, "files": True}},
            "m-0123456789ab": {"current": True, "in_use": "x", "usage": {"error": "Permission denied"}}}}})}), d)
    assert [(r.name, r.current, r.bytes, r.files, r.days, r.last_use_text(), r.note) for r in rows] == [
        ("m-0123456789ab", True, None, None, None, "-", "Permission denied"),
        ("m-aaaaaaaaaaaa", False, None, None, 1, "1 day ago", None)]


@pytest.fixture
def audited(volume, ansible, tmp_path, capsys):
    """`kvprov audit` of the lab host with the namespaces the collector listed on `volume`."""
    def run(listing: bool) -> tuple[int, str, dict, str]:
        files = collector.collect(volume["desired"], False, 4096, 10, "9.9")

        def edit(captured_files):
            with_unmanaged_file(captured_files)  # a warning: exit 0
            if listing:
                captured_files[bf.NAMESPACES] = files[bf.NAMESPACES]
        ansible["captured"] = {"kvlab-gpu1": captured("lab_gpu1", edit)}
        rc = cli.main(["audit", "inventory/lab.yml", "--json", str(tmp_path / "a.json"),
                       "--prom", str(tmp_path / "a.prom")])
        return (rc, capsys.readouterr().out, json.loads((tmp_path / "a.json").read_text())["hosts"]["kvlab-gpu1"],
                (tmp_path / "a.prom").read_text())
    return run


def test_audit_shows_the_old_namespaces_without_changing_its_exit_code(audited, volume):
    rc, out, host, prom = audited(True)
    rc_before, out_before, host_before, prom_before = audited(False)
    assert rc == rc_before == 0  # information, not drift
    assert host["results"] == host_before["results"] and "namespaces" not in host_before
    assert "namespaces on the volume" not in out_before and "kvprov_engine_namespace" not in prom_before

    section = out[out.index("namespaces on the volume"):].splitlines()
    assert section[0] == f"namespaces on the volume: kvlab-gpu1 ({volume['parent']})"
    assert section[1].split() == ["NAMESPACE", "SIZE", "FILES", "LAST", "USE", "STATE"]
    rows = {line.split()[0]: line for line in section[2:6]}
    assert re.fullmatch(rf"  {CURRENT}  +\d+\.\d KiB +2  today +current", rows[CURRENT])
    assert re.fullmatch(rf"  {OLD}  +\d+\.\d KiB +3  9 days ago +old", rows[OLD])
    assert re.fullmatch(rf"  {NEVER}  +\d+\.\d KiB +1  never +old", rows[NEVER])
    assert re.fullmatch(rf"  {LINK}  +- +- +- +old, a link, not followed", rows[LINK])
    assert section[6:9] == volume_namespaces.RETIRE_HINT.splitlines()
    assert "kvprov_engine_evict_retire_days" in section[7] and "remove it by hand" in section[8]
    assert out.index("namespaces on the volume") < out.index("audit: 1 host(s)")

    listed = {n["name"]: n for n in host["namespaces"]}
    assert set(listed) == {CURRENT, OLD, NEVER, LINK}
    assert listed[OLD]["current"] is False and listed[OLD]["files"] == 3 and listed[OLD]["last_use_days"] == 9
    assert listed[OLD]["path"] == str(volume["parent"] / OLD) and listed[OLD]["complete"] is True
    assert listed[NEVER]["last_use"] is None and listed[NEVER]["last_use_days"] is None
    assert listed[LINK]["note"] == "a link, not followed" and listed[LINK]["bytes"] is None
    assert listed[CURRENT]["current"] is True

    samples = {(name, tuple(sorted(re.findall(r'(\w+)="([^"]*)"', labels)))): float(value)
               for name, labels, value in re.findall(r"^(kvprov_engine_namespace_\w+)\{([^}]*)\} (\S+)$", prom, re.M)}

    def sample(figure, name, current):
        return samples.get((f"kvprov_engine_namespace_{figure}", (
            ("current", current), ("engine", "sglang_hicache"), ("host", "kvlab-gpu1"), ("namespace", name))))
    assert sample("files", OLD, "false") == 3 and sample("complete", OLD, "false") == 1
    assert sample("bytes", CURRENT, "true") >= 8192 and sample("files", NEVER, "false") == 1
    assert abs(sample("last_use_timestamp_seconds", OLD, "false") - (time.time() - 9 * DAY - 3600)) < 120
    assert sample("last_use_timestamp_seconds", NEVER, "false") is None  # never: no sample
    assert not [k for k in samples if ("namespace", LINK) in k[1]]  # a link: nothing measured
    assert "# HELP kvprov_engine_namespace_bytes" in prom


def test_no_section_when_only_the_current_namespace_is_on_the_volume(audited, volume):
    for name in (OLD, NEVER):
        shutil.rmtree(volume["parent"] / name)
    (volume["parent"] / LINK).unlink()
    rc, out, host, prom = audited(True)
    assert rc == 0 and "namespaces on the volume" not in out
    assert [n["name"] for n in host["namespaces"]] == [CURRENT] and "kvprov_engine_namespace_bytes" in prom


def test_validate_does_not_read_them(tmp_path, volume):
    b = tmp_path / "lab_gpu1"
    shutil.copytree(FIXTURES / "bundles" / "lab_gpu1", b, symlinks=True)
    rc_before = cli.main(["validate", "--bundle", str(b), "--json", str(tmp_path / "before.json")])
    (b / bf.NAMESPACES).write_text(collector.collect(volume["desired"], False, 4096, 10, "9.9")[bf.NAMESPACES])
    rc = cli.main(["validate", "--bundle", str(b), "--json", str(tmp_path / "after.json")])
    assert rc == rc_before
    before, after = (json.loads((tmp_path / f).read_text()) for f in ("before.json", "after.json"))
    assert after == before


# ---------------------------------------------------------------- pure, fast (the mutation harness runs these)

def test_the_gauges_of_each_namespace_leave_out_what_was_not_measured():
    def row(name, **kw):
        return volume_namespaces.Namespace(host="h1", engine="lmcache_mp", parent="/mnt/kv/kv/lmcache_mp", name=name,
                                           **kw)
    rows = [row(OLD, current=False, bytes=4096, files=2, complete=True, last_use=1700000000.4),
            row(LINK, current=False, note="a link, not followed"),
            row(CURRENT, current=True, bytes=0, files=0, complete=False)]
    gauges = {(g.name, dict(g.labels)["namespace"]): (dict(g.labels), g.value) for g in audit.namespace_gauges(rows)}
    labels = {"host": "h1", "engine": "lmcache_mp", "namespace": OLD, "current": "false"}
    assert gauges[("kvprov_engine_namespace_bytes", OLD)] == (labels, 4096)
    assert gauges[("kvprov_engine_namespace_files", OLD)] == (labels, 2)
    assert gauges[("kvprov_engine_namespace_complete", OLD)] == (labels, 1)
    assert gauges[("kvprov_engine_namespace_last_use_timestamp_seconds", OLD)] == (labels, 1700000000)
    assert not [k for k in gauges if k[1] == LINK]  # nothing measured: no gauge
    assert gauges[("kvprov_engine_namespace_complete", CURRENT)] == ({**labels, "namespace": CURRENT,
                                                                      "current": "true"}, 0)
    assert ("kvprov_engine_namespace_bytes", CURRENT) in gauges  # 0 is a figure
    assert ("kvprov_engine_namespace_last_use_timestamp_seconds", CURRENT) not in gauges
    prom = audit.to_prom([], 0, audit.namespace_gauges(rows))
    assert f'kvprov_engine_namespace_files{{current="false",engine="lmcache_mp",host="h1",namespace="{OLD}"}} 2.0' \
        in prom


def test_the_hosts_own_namespace_takes_its_size_from_the_usage_walk():
    own, old = "/mnt/kv/kv/lmcache_mp/" + CURRENT, "/mnt/kv/kv/lmcache_mp/" + OLD
    listing = {own: {"namespaces": {CURRENT: {"current": True, "skipped": None, "usage": None},
                                    OLD: {"current": False, "skipped": None, "usage": {"bytes": 1}},
                                    LINK: {"current": True, "skipped": "a link, not followed", "usage": None}}},
               old: {"error": "gone"}}
    usage = {own + "/": {"bytes": 8192, "files": 2}, old: {"bytes": 5}, "/mnt/kv/kv/lmcache_mp/" + LINK: {"bytes": 9}}
    out = collector.with_own_usage(listing, usage)
    assert out[own]["namespaces"][CURRENT]["usage"] == {"bytes": 8192, "files": 2}
    assert out[own]["namespaces"][OLD]["usage"] == {"bytes": 1}  # walked by the listing itself
    assert out[own]["namespaces"][LINK]["usage"] is None  # skipped: never measured
    assert out[old] == {"error": "gone"}
