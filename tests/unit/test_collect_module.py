"""The collector module's whole capture (collect()), file by file, on this machine. Real: the
I/O, stat and usage probes, the NIXL probe (a venv whose python has no nixl), the files it
reads, the account, /proc, the engine's HTTP /health and /metrics (a local server). FAKE
(this machine runs no systemd, RDMA or package database of the kind a GPU host has): the
commands systemctl, rdma, ip, dpkg-query and rpm answer canned text; `runuser -u USER --`
runs its command as this user."""

import http.server
import json
import os
import pwd
import sys
import threading

import pytest

from kvprov.validate import bundle as bf

collector = bf.collector
USER = pwd.getpwuid(os.getuid()).pw_name
METRICS = "vllm:prefix_cache_hits_total 5.0\nvllm:num_requests_running 1\nlmcache_mp_lookup_hit_l2_tokens 7\n"


@pytest.fixture
def engine_http():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = {"/health": b"ok", "/metrics": METRICS.encode(), "/bad": b"ok \xff",
                    "/big": b"x" * ((4 << 20) - 10) + b"\nvllm:prefix_cache_hits_total 1\n"}.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def host(monkeypatch, tmp_path, engine_http):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    canned = {
        ("systemctl", "show", "kvprov-x-main.service"): (0, f"LoadState=loaded\nMainPID={os.getpid()}\n", ""),
        ("systemctl", "show", "kvprov-x-gone.service"): (1, "", "Unit kvprov-x-gone.service could not be found.\n"),
        ("systemctl", "is-active", "kvprov-x-main.service"): (0, "", ""),
        ("systemctl", "is-active", "kvprov-x-srv.service"): (3, "", ""),
        ("rdma",): (0, "link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev ib0\n", ""),
        ("ip",): (1, "", ""),
        ("dpkg-query",): (127, "", "No such file or directory"),
        ("rpm",): (0, "rdma-core\t48.0-1\n", ""),
    }
    calls = []
    real = collector.run

    def fake_run(cmd, timeout, stdin=None):
        calls.append(cmd)
        if cmd[0] == "runuser":  # as the engine user: this user here
            assert cmd[1:3] == ["-u", USER] and cmd[3] == "--"
            return real(cmd[4:], timeout, stdin)
        for key, answer in canned.items():
            if tuple(cmd[:len(key)]) == key or (key[0] == "systemctl" and cmd[:2] == list(key[:2])
                                                and cmd[-1] == key[2]):
                return (*answer, False)
        assert cmd[0] in (sys.executable, "/usr/bin/python3") or cmd[0].endswith("/bin/python3"), cmd
        return real(cmd, timeout, stdin)

    monkeypatch.setattr(collector, "run", fake_run)
    mp = tmp_path / "kv"
    (mp / "main").mkdir(parents=True)
    (mp / "main" / "chunk").write_bytes(b"x" * 100)
    venv = tmp_path / "venv"
    (venv / "lib/python3.11/site-packages/Foo_Bar-1.2.dist-info").mkdir(parents=True)
    (venv / "lib/python3.11/site-packages/Foo_Bar-1.2.dist-info/METADATA").write_text("Name: Foo_Bar\nVersion: 1.2\n")
    nixl = tmp_path / "nixl"
    (nixl / "bin").mkdir(parents=True)
    (nixl / "bin/python3").symlink_to(sys.executable)
    pending = tmp_path / "pending"
    pending.mkdir()
    (pending / "kvprov-x-main.service").touch()
    conf = tmp_path / "etc" / "engine.conf"
    conf.parent.mkdir()
    conf.write_text("port = 1\n")
    desired = {
        "host": "gpu 1", "files": [str(conf), str(tmp_path / "etc" / "absent.conf")], "venvs": [str(venv)],
        "dirs": [str(mp), str(mp / "main"), str(tmp_path / "etc")], "units": [
            {"unit": "kvprov-x-main.service"}, {"unit": "kvprov-x-gone.service"}],
        "storage": {"mount_point": str(mp), "transport": "rdma", "profile": "local", "server": "s", "export": "/kv"},
        "nixl": {"venv": str(nixl), "plugin": "posix"}, "gds": {"cufile_path": "/etc/cufile.json"},
        "engine": {"user": USER, "connect_host": "127.0.0.1", "instances": [
            {"name": "main", "unit": "kvprov-x-main.service", "units": ["kvprov-x-main.service", "kvprov-x-srv.service"],
             "port": engine_http, "metrics_port": 1, "storage_dir": str(mp / "main")}]},
    }
    return {"desired": desired, "calls": calls, "canned": canned, "tmp": tmp_path, "mp": mp, "conf": conf,
            "pending": str(pending)}


pytestmark = pytest.mark.skipif(os.path.isdir("/proc/driver/nvidia/gpus"), reason="a GPU host captures more")


def test_every_file_of_a_capture(host):
    d, tmp, mp = host["desired"], host["tmp"], host["mp"]
    out = collector.collect(d, True, 4096, 10, "9.9", host["pending"])
    meta = json.loads(out.pop(bf.COLLECT))
    assert meta.pop("time")[:2] == "20" and meta == {
        "format": 4, "host": "gpu 1", "kvprov_version": "9.9",
        "errors": {"proc/modules": meta["errors"].get("proc/modules"), "ip_addr.txt": "ip -o addr show exited 1",
                   f"files{tmp}/etc/absent.conf": "does not exist on the host",
                   "systemctl/kvprov-x-gone.service.txt": "Unit kvprov-x-gone.service could not be found."},
        "skipped": {"gdscheck.txt": "no NVIDIA GPU", "cufile.json": "no NVIDIA GPU", "udev.json": "no NVIDIA GPU"}}
    if os.path.exists("/proc/modules"):  # (not in every container)
        assert meta["errors"]["proc/modules"] is None and out.pop(bf.MODULES) == open("/proc/modules").read()
    fstab = out.pop("files/etc/fstab", None)
    assert (fstab is not None) == os.path.exists("/etc/fstab")
    assert out.pop(bf.MOUNTINFO) and out.pop(bf.MOUNTSTATS) is not None
    assert out.pop(bf.RDMA_LINK) == "link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev ib0\n"
    assert out.pop(f"files{host['conf']}") == "port = 1\n"
    io = json.loads(out.pop(bf.IO_PROBE))
    assert (io["bytes"], io["timed_out"]) == (4096, False)
    assert io["path"].startswith(f"{mp}/.kvprov-gpu_1/") and isinstance(io["seconds"], float)
    assert (io["ok"], io["error"]) == ((True, None) if os.geteuid() == 0 else (False, io["error"]))
    assert json.loads(out.pop(bf.GPU)) == {"present": False, "driver": None, "gpus": [], "error": None}
    assert json.loads(out.pop(bf.MANAGED_DIRS)) == {f"{tmp}/etc": ["engine.conf"]}
    modes = json.loads(out.pop(bf.FILE_MODES))
    assert modes[str(host["conf"])]["mode"] == format(os.stat(host["conf"]).st_mode & 0o7777, "04o")
    assert json.loads(out.pop(bf.RESTART_PENDING)) == ["kvprov-x-main.service"]
    assert json.loads(out.pop(bf.DEPLOY_LOCK)) == collector.deploy_lock()
    assert json.loads(out.pop(bf.VENVS)) == {str(tmp / "venv"): {"foo-bar": "1.2"}}
    assert out.pop("systemctl/kvprov-x-main.service.txt") == f"LoadState=loaded\nMainPID={os.getpid()}\n"
    argv = json.loads(out.pop("systemctl/kvprov-x-main.service.cmdline.json"))
    assert argv == collector.redact(open(f"/proc/{os.getpid()}/cmdline").read().split("\0")[:-1])
    nixl = json.loads(out.pop(bf.NIXL_PROBE))
    assert (nixl["import_ok"], nixl["backend"], nixl["backend_ok"]) == (False, "POSIX", False)
    assert "nixl" in nixl["error"]
    dirs = json.loads(out.pop(bf.DIR_MODES))
    assert list(dirs) == sorted([str(mp), str(mp / "main"), f"{tmp}/etc"])
    assert dirs[str(mp)]["is_dir"] is True and dirs[str(mp)]["owner"] == USER
    assert json.loads(out.pop(bf.ENGINE_USER)) == collector.account(USER) and collector.account(USER)["exists"]
    assert json.loads(out.pop(bf.NAMESPACES)) == {}  # an instance directory of its own: no shared namespace
    sd = json.loads(out.pop(bf.STORAGE_DIRS))
    assert sd["mount_point"]["is_dir"] and sd["mount_point"]["is_on_kv_mount"] is True
    assert sd["mount_point"]["writable_by_service_user"] is True
    main = sd["instances"]["main"]
    assert main["is_on_kv_mount"] is True and main["usage"]["bytes"] >= 100 and main["usage"]["complete"] is True
    assert json.loads(out.pop(bf.HEALTH)) == {
        "main": {"unit": "kvprov-x-main.service", "running": True, "status": 200, "ok": True, "error": None,
                 "url": f"http://127.0.0.1:{d['engine']['instances'][0]['port']}/health"},
        "main/server": {"unit": "kvprov-x-srv.service", "running": False, "url": "http://127.0.0.1:1/metrics",
                        "status": None, "ok": False, "error": "not running"}}
    assert out.pop("metrics/main.txt") == "vllm:prefix_cache_hits_total 5.0\nlmcache_mp_lookup_hit_l2_tokens 7\n"
    assert out.pop(bf.PACKAGES) == "rdma-core\t48.0-1\n"  # rpm, after dpkg-query failed
    assert out == {}
    calls = host["calls"]
    assert ["dpkg-query", "-W", "-f", "${Package}\t${Version}\n"] in calls
    assert ["rpm", "-qa", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n"] in calls
    assert ["rdma", "link"] in calls and ["ip", "-o", "addr", "show"] in calls
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    usage = next(c for c in calls if c[:5] == ["runuser", "-u", USER, "--", python])
    assert usage[5] == "-c" and usage[7:] == ["8.0", str(mp), str(mp / "main")]  # 80 % of the timeout, each path
    assert [c for c in calls if c[:2] == ["systemctl", "show"]] == [
        ["systemctl", "show", "--no-pager", "kvprov-x-main.service"],
        ["systemctl", "show", "--no-pager", "kvprov-x-gone.service"]]


def test_the_json_files_are_indented_as_docs_bundle_md_shows_them(host):
    out = collector.collect(host["desired"], True, 4096, 10, "9.9", host["pending"])
    for name in (bf.IO_PROBE, bf.GPU, bf.MANAGED_DIRS, bf.FILE_MODES, bf.VENVS, bf.DIR_MODES, bf.ENGINE_USER,
                 bf.STORAGE_DIRS, bf.HEALTH, bf.COLLECT, bf.NAMESPACES):
        assert out[name] == json.dumps(json.loads(out[name]), indent=2), name
    for name in (bf.RESTART_PENDING, bf.DEPLOY_LOCK):
        assert out[name] == json.dumps(json.loads(out[name])), name


def test_an_lmcache_server_and_tls(host, engine_http):
    d = host["desired"]
    inst = d["engine"]["instances"][0]
    inst["units"] = ["kvprov-x-main.service", "kvprov-x-main-server.service"]
    inst["metrics_port"] = engine_http
    host["canned"][("systemctl", "is-active", "kvprov-x-main-server.service")] = (0, "", "")
    out = collector.collect(d, True, 4096, 10, "9.9")
    health = json.loads(out[bf.HEALTH])
    assert health["main/server"] == {"unit": "kvprov-x-main-server.service", "running": True, "status": 200,
                                     "ok": True, "error": None, "url": f"http://127.0.0.1:{engine_http}/metrics"}
    assert out["metrics/main-server.txt"] == "vllm:prefix_cache_hits_total 5.0\nlmcache_mp_lookup_hit_l2_tokens 7\n"
    d["engine"]["tls_cert"] = str(host["tmp"] / "no-cert.pem")  # the engine serves https with this certificate
    health = json.loads(collector.collect(d, True, 4096, 10, "9.9")[bf.HEALTH])
    assert health["main"]["url"].startswith("https://") and "the deployed certificate" in health["main"]["error"]
    assert health["main/server"]["url"].startswith("http://")  # LMCache's metrics port: plain HTTP


def test_a_configuration_only_capture_of_a_tcp_host(host):
    d = host["desired"]
    d["storage"]["transport"] = "tcp"
    d["storage"]["profile"] = "nfs_tcp"
    host["canned"][("dpkg-query",)] = (0, "nfs-common\t1:2.6.2\n", "")
    out = collector.collect(d, False, 4096, 10, "9.9")
    meta = json.loads(out[bf.COLLECT])
    assert meta["skipped"] == {
        "io_probe.json": "not probed (kvprov audit reads configuration only)",
        "nixl_probe.json": "not probed (kvprov audit reads configuration only)",
        "health.json": "not probed (kvprov audit reads configuration only)",
        "metrics": "not probed (kvprov audit reads configuration only)",
        "gdscheck.txt": "no NVIDIA GPU", "cufile.json": "no NVIDIA GPU", "udev.json": "no NVIDIA GPU",
        "proc/modules": "storage profile nfs_tcp: no RDMA", "rdma_link.txt": "storage profile nfs_tcp: no RDMA",
        "ip_addr.txt": "storage profile nfs_tcp: no RDMA"}
    assert not set(out) & {bf.IO_PROBE, bf.NIXL_PROBE, bf.HEALTH, bf.MODULES, bf.RDMA_LINK, bf.IP_ADDR}
    assert not [k for k in out if k.startswith("metrics/")]
    assert out[bf.PACKAGES] == "nfs-common\t1:2.6.2\n" and not [c for c in host["calls"] if c[0] == "rpm"]
    assert json.loads(out[bf.RESTART_PENDING]) == []
    assert not [c for c in host["calls"] if c[:2] == ["systemctl", "is-active"]]
    host["canned"][("dpkg-query",)] = host["canned"][("rpm",)] = (1, "", "no package database\n")
    out = collector.collect(d, False, 4096, 10, "9.9")
    assert bf.PACKAGES not in out and json.loads(out[bf.COLLECT])["errors"][bf.PACKAGES] == "no package database"


def test_probes_that_fail_or_hang(host, tmp_path):
    d = host["desired"]
    d["storage"]["mount_point"] = str(tmp_path / "not-there")  # the I/O probe cannot make its directory
    d["nixl"]["venv"] = str(tmp_path / "no-venv")  # no python there: the probe cannot start
    d["engine"]["instances"] = []
    d["dirs"] = []
    out = collector.collect(d, True, 4096, 10, "9.9")
    io = json.loads(out[bf.IO_PROBE])
    assert out[bf.IO_PROBE] == json.dumps(io, indent=2)
    assert {k: io[k] for k in ("ok", "seconds", "timed_out", "bytes", "path")} == {
        "ok": False, "seconds": None, "timed_out": False, "bytes": 4096, "path": f"{tmp_path}/not-there/.kvprov-gpu_1/"}
    assert io["error"].startswith("FileNotFoundError: ") and "\n" not in io["error"]
    nixl = json.loads(out[bf.NIXL_PROBE])
    assert nixl == {"import_ok": False, "version": None, "plugins": [], "backend": "POSIX", "backend_ok": False,
                    "error": f"[Errno 2] No such file or directory: '{tmp_path}/no-venv/bin/python3'"}
    assert out[bf.HEALTH] == "{}"
    assert json.loads(out[bf.STORAGE_DIRS])["mount_point"]["exists"] is False


def test_run_a_missing_command_and_one_that_hangs():
    assert collector.run(["/nonexistent/cmd"], 5) == (127, "", "[Errno 2] No such file or directory: "
                                                      "'/nonexistent/cmd'", False)
    assert collector.run([sys.executable, "-c", "import time; time.sleep(5)"], 0.3) == (
        -9, "", "timed out after 0.3s", True)
    assert collector.run([sys.executable, "-c", "import sys; print(sys.stdin.read()[::-1])"], 5, "abc") == (
        0, "cba\n", "", False)


def test_an_engines_health_and_metrics(engine_http, monkeypatch, tmp_path):
    for name in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(collector, "run", lambda cmd, timeout, stdin=None: (
        (0, "", "", False) if cmd == ["systemctl", "is-active", "--quiet", "u1"] and timeout == 10 else (3, "", "", False)))
    h, metrics = collector.probe_service("u1", "127.0.0.1", engine_http, "/metrics")  # the metrics page only
    assert h == {"unit": "u1", "running": True, "url": f"http://127.0.0.1:{engine_http}/metrics", "status": 200,
                 "ok": True, "error": None}
    assert metrics == "vllm:prefix_cache_hits_total 5.0\nlmcache_mp_lookup_hit_l2_tokens 7\n"
    h, metrics = collector.probe_service("u1", "127.0.0.1", engine_http, "/nothing")
    assert (h["status"], h["ok"], metrics) == (404, False, "vllm:prefix_cache_hits_total 5.0\n"
                                                            "lmcache_mp_lookup_hit_l2_tokens 7\n")
    h, metrics = collector.probe_service("u1", "127.0.0.1", engine_http, "/health", str(tmp_path / "none.pem"))
    assert h["url"] == f"https://127.0.0.1:{engine_http}/health" and metrics is None
    assert h["error"].startswith(f"the deployed certificate {tmp_path}/none.pem: ")
    assert collector.probe_service("u2", "127.0.0.1", engine_http, "/health") == (
        {"unit": "u2", "running": False, "url": f"http://127.0.0.1:{engine_http}/health", "status": None,
         "ok": False, "error": "not running"}, None)


def test_the_cache_lines_kept_of_a_metrics_page():
    kept = ["vllm:prefix_cache_hits_total 1", "vllm:external_prefix_cache_queries_total 2",
            "vllm:prompt_tokens_cached_total 3", 'vllm:cache_config_info{block_size="16"} 1',
            "lmcache_mp_lookup_hit_l2_tokens 4", "sglang:prompt_tokens_total 5", "sglang:cached_tokens_total 6",
            "sglang:prefetched_tokens_total 7", "sglang:backuped_tokens_total 8",
            "sglang:storage_prefetch_hit_tokens 9", 'kvprov_l2_bypassed{base_path="/mnt/kv"} 1.0']
    dropped = ["vllm:num_requests_running 1", "# HELP vllm:prefix_cache_hits_total x", "sglang:gen_throughput 3"]
    assert [line for line in kept + dropped if line.startswith(collector.METRIC_PREFIXES)] == kept


def test_a_venvs_distributions(tmp_path):
    site = tmp_path / "lib/python3.11/site-packages"
    site.mkdir(parents=True)
    for name, meta in (("A_b-1.dist-info", "Name: A_b\nSummary: a: b\nVersion: 1.0\n\nName: body\nVersion: 9\n"),
                       ("noversion-1.dist-info", "Name: noversion\n"), ("nover-2.dist-info", "Version: 2\n"),
                       ("x.egg-info", "Name: x\nVersion: 3\n"), ("nometa-1.dist-info", None)):
        (site / name).mkdir()
        if meta is not None:
            (site / name / "METADATA").write_text(meta)
    (site / "big-1.dist-info").mkdir()
    (site / "big-1.dist-info/METADATA").write_text("Name: big\n" + "X: y\n" * 13110 + "Version: 1\n")
    assert collector.venv_versions(str(tmp_path)) == {"a-b": "1.0"}  # its Version is past the first 64 KiB read
    assert collector.venv_versions(str(tmp_path / "missing")) == {}


def test_a_page_is_read_up_to_4_mib_and_decoded_whatever_its_bytes(engine_http, monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    status, body, error = collector.http_get(f"http://127.0.0.1:{engine_http}/big")
    assert (status, len(body), error) == (200, 4 << 20, None)
    assert not body.endswith("vllm:prefix_cache_hits_total 1\n")
    assert collector.http_get(f"http://127.0.0.1:{engine_http}/bad") == (200, "ok \ufffd", None)
    assert collector.http_get(f"http://127.0.0.1:{engine_http}/missing")[:2] == (404, "")
    status, body, error = collector.http_get("http://127.0.0.1:1/x", timeout=2)  # nothing listens there
    assert (status, body) == (None, "") and "refused" in error


# ---------------------------------------------------------------------------- what each step is given and edges

class Seen:
    """collector.run and collector.read wrapped: each command's timeout and each file's read
    limit recorded; canned answers by the command's script (IO_PROBE, ...) or the file's path."""

    def __init__(self, monkeypatch, files=None, scripts=None, runuser=None):
        self.runs, self.reads = [], []
        self.files, self.scripts, self.runuser = files or {}, scripts or {}, runuser
        run, read = collector.run, collector.read

        def fake_run(cmd, timeout, stdin=None):
            self.runs.append((cmd, timeout))
            if cmd[0] == "runuser" and self.runuser and collector.USAGE_PROBE in cmd:
                return self.runuser
            for script, answer in self.scripts.items():
                if script in cmd:
                    return answer
            return run(cmd, timeout, stdin)

        def fake_read(path, limit=collector.MAX_FILE):
            self.reads.append((path, limit))
            if isinstance(self.files.get(path), OSError):
                raise self.files[path]
            if path in self.files:
                return self.files[path][:limit]
            return read(path, limit)

        monkeypatch.setattr(collector, "run", fake_run)
        monkeypatch.setattr(collector, "read", fake_read)

    def timeout(self, first):
        return [t for cmd, t in self.runs if cmd[:len(first)] == first]


def test_the_time_each_command_gets_and_how_much_of_each_file_is_read(host, monkeypatch):
    seen = Seen(monkeypatch, files={"/proc/modules": "rpcrdma 409600 0 - Live 0x0\n"})
    out = collector.collect(host["desired"], True, 4096, 7, "9.9")
    assert out[bf.MODULES] == "rpcrdma 409600 0 - Live 0x0\n"
    assert "proc/modules" not in json.loads(out[bf.COLLECT])["errors"]
    limits = dict(seen.reads)
    assert (limits["/proc/self/mountinfo"], limits["/proc/self/mountstats"], limits["/proc/modules"]) == (
        16 << 20, 16 << 20, 4 << 20)
    assert limits[str(host["conf"])] == collector.MAX_FILE
    assert seen.timeout(["rdma", "link"]) == seen.timeout(["ip", "-o", "addr", "show"]) == [10]
    assert seen.timeout(["systemctl", "show"]) == [15, 15]
    assert seen.timeout(["systemctl", "is-active"]) == [10, 10]
    assert seen.timeout(["dpkg-query"]) == seen.timeout(["rpm"]) == [30]
    assert seen.timeout([os.path.join(host["desired"]["nixl"]["venv"], "bin", "python3")]) == [120]
    assert seen.timeout([sys.executable, "-c", collector.IO_PROBE]) == [7]
    assert seen.timeout([sys.executable, "-c", collector.STAT_PROBE]) == [7]  # one child for every directory
    assert seen.timeout(["runuser", "-u", USER, "--", "test", "-w"]) == [7, 7]


def test_a_gpu_host_captures_the_driver_gdscheck_udev_and_cufile(host, monkeypatch):
    d, mp, tmp = host["desired"], host["mp"], host["tmp"]
    cufile = tmp / "cufile.json"
    cufile.write_text('{"logging": {}}')
    d["gds"]["cufile_path"] = str(cufile)
    d["files"].append(str(cufile))
    version = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build  "
               "(dvs-builder@U16-I3-D08-1-2)  Fri May 31 09:30:47 UTC 2024\nGCC version:  gcc version 12.2.0\n")
    mountinfo = f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n30 22 259:3 / {mp} rw - xfs /dev/nvme0n1 rw\n"
    present = {"/proc/driver/nvidia/gpus": ["0000:17:00.0", "0000:03:00.0"], "/run/udev/data": [],
               "/proc/driver/nvidia/version": None, "/usr/local/cuda/gds/tools/gdscheck.py": None,
               "/run/udev/data/b259:3": None}
    isdir, exists, listdir = os.path.isdir, os.path.exists, os.listdir
    monkeypatch.setattr(os.path, "isdir", lambda p: isinstance(present.get(p), list) or isdir(p))
    monkeypatch.setattr(os.path, "exists", lambda p: p in present or exists(p))
    monkeypatch.setattr(os, "listdir", lambda p=".": present[p] if p in present else listdir(p))
    gds = "/usr/local/cuda/gds/tools/gdscheck.py"
    quick = {collector.IO_PROBE: (0, '{"ok": true}', "", False), collector.NIXL_PROBE: (0, "{}", "", False)}
    seen = Seen(monkeypatch, files={"/proc/driver/nvidia/version": version, "/proc/self/mountinfo": mountinfo},
                scripts={gds: (0, "GDS release version: 1.9.1.3\n", "", False), **quick})
    out = collector.collect(d, True, 4096, 10, "9.9")
    assert json.loads(out[bf.GPU]) == {"present": True, "driver": "550.90.07",
                                      "gpus": ["0000:03:00.0", "0000:17:00.0"], "error": None}
    assert out[bf.GDSCHECK] == "GDS release version: 1.9.1.3\n" and seen.timeout([gds, "-p"]) == [60]
    assert json.loads(out[bf.UDEV]) == {"mount": str(mp), "fstype": "xfs", "device": "/dev/nvme0n1", "dev": "259:3",
                                        "record": "/run/udev/data/b259:3", "exists": True, "udev_dir": True}
    assert out[bf.UDEV] == json.dumps(json.loads(out[bf.UDEV]), indent=2)
    assert out[bf.CUFILE] == '{"logging": {}}' and out[f"files{cufile}"] == '{"logging": {}}'  # a GPU host's
    meta = json.loads(out[bf.COLLECT])
    assert not {"gdscheck.txt", "cufile.json", "udev.json"} & (set(meta["skipped"]) | set(meta["errors"]))
    # gdscheck that prints nothing: its error, else its exit; no tool installed: `gdscheck` from PATH
    del present[gds]
    seen.scripts = {"gdscheck": (3, "", "cuFile: no driver\n", False), **quick}
    meta = json.loads(collector.collect(d, True, 4096, 10, "9.9")[bf.COLLECT])
    assert meta["errors"]["gdscheck.txt"] == "cuFile: no driver" and ["gdscheck", "-p"] in [c for c, _ in seen.runs]
    seen.scripts = {"/usr/local/cuda/gds/tools/gdscheck": (3, "", "", False), **quick}
    present["/usr/local/cuda/gds/tools/gdscheck"] = None
    out = collector.collect(d, False, 4096, 10, "9.9")  # no probes: no gdscheck; the device has no udev record
    assert "gdscheck.txt" not in json.loads(out[bf.COLLECT])["errors"]
    del present["/run/udev/data/b259:3"]
    out = collector.collect(d, True, 4096, 10, "9.9")
    assert json.loads(out[bf.COLLECT])["errors"]["gdscheck.txt"] == "gdscheck exited 3"
    assert ["/usr/local/cuda/gds/tools/gdscheck", "-p"] in [c for c, _ in seen.runs]
    assert json.loads(out[bf.UDEV])["exists"] is False
    cufile.unlink()
    assert json.loads(collector.collect(d, True, 4096, 10, "9.9")[bf.COLLECT])["errors"]["cufile.json"].startswith(
        "[Errno 2] No such file or directory")


def test_a_hosts_without_a_gpu_skips_its_cufile_among_the_managed_files(host):
    d = host["desired"]
    d["files"].append(d["gds"]["cufile_path"])
    out = collector.collect(d, False, 4096, 10, "9.9")
    meta = json.loads(out[bf.COLLECT])
    assert f"files{d['gds']['cufile_path']}" not in set(out) | set(meta["errors"])
    assert out[f"files{host['conf']}"] == "port = 1\n"  # the files after it are still read


def test_a_volume_that_hangs_is_not_probed_again(host, monkeypatch):
    d, mp, tmp = host["desired"], host["mp"], host["tmp"]
    seen = Seen(monkeypatch, scripts={collector.IO_PROBE: (-9, "", "timed out after 10s", True)})
    out = collector.collect(d, True, 4096, 10, "9.9")
    io = json.loads(out[bf.IO_PROBE])
    assert (io["ok"], io["timed_out"], io["error"]) == (False, True, "timed out after 10s")
    assert set(io) == {"ok", "seconds", "error", "timed_out", "bytes", "path"}
    hung = "not run: the KV mount did not answer the I/O probe within 10s (hung mount?)"
    dirs = json.loads(out[bf.DIR_MODES])
    assert dirs[str(mp)]["error"] == dirs[str(mp / "main")]["error"] == hung and not dirs[str(mp)]["exists"]
    assert dirs[f"{tmp}/etc"]["is_dir"] is True and dirs[f"{tmp}/etc"]["error"] is None  # not on the volume
    sd = json.loads(out[bf.STORAGE_DIRS])
    assert sd["mount_point"]["usage"] == sd["instances"]["main"]["usage"] == {"error": hung}
    assert sd["mount_point"]["error"] == hung and sd["mount_point"]["writable_by_service_user"] is False
    stats = [c for c, _ in seen.runs if collector.STAT_PROBE in c]
    assert [c[3:] for c in stats] == [[f"{tmp}/etc"]]  # only the directory off the volume is stat'ed
    assert not [c for c, _ in seen.runs if collector.USAGE_PROBE in c or c[:1] == ["runuser"]]


def test_a_stat_of_the_volume_that_hangs_hides_none_of_the_other_directories(host, monkeypatch):
    """One child stats every directory; when it does not answer, those off the volume are stat'ed
    again apart and the volume is not probed further (no usage walk)."""
    d, mp, tmp = host["desired"], host["mp"], host["tmp"]
    run, calls = collector.run, []

    def fake_run(cmd, timeout, stdin=None):
        calls.append(cmd)
        if collector.STAT_PROBE in cmd and str(mp) in cmd:
            return -9, "", "", True
        return run(cmd, timeout, stdin)

    monkeypatch.setattr(collector, "run", fake_run)
    out = collector.collect(d, False, 4096, 10, "9.9")
    dirs = json.loads(out[bf.DIR_MODES])
    assert dirs[str(mp)]["error"] == "stat timed out (hung mount?)" and not dirs[str(mp)]["exists"]
    assert dirs[f"{tmp}/etc"]["is_dir"] is True and dirs[f"{tmp}/etc"]["error"] is None
    stats = [c[3:] for c in calls if collector.STAT_PROBE in c]
    assert len(stats) == 2 and f"{tmp}/etc" in stats[0] and str(mp) in stats[0] and stats[1] == [f"{tmp}/etc"]
    hung = "not run: stat() on the KV mount did not answer within 10s (hung mount?)"
    assert json.loads(out[bf.STORAGE_DIRS])["mount_point"]["usage"] == {"error": hung}
    assert not [c for c in calls if collector.USAGE_PROBE in c]


def test_the_io_probe_failing_without_a_word(host, monkeypatch):
    Seen(monkeypatch, scripts={collector.IO_PROBE: (1, "", "", False)})
    io = json.loads(collector.collect(host["desired"], True, 4096, 10, "9.9")[bf.IO_PROBE])
    assert (io["ok"], io["timed_out"], io["error"]) == (False, False, "failed")


@pytest.mark.parametrize("answer, error", [
    ((1, "partial", "x" * 290 + "y" * 20, False), "x" * 280 + "y" * 20),  # its last 300 characters
    ((2, "", "", False), "exited 2"),
    ((-9, "", "", True), "timed out after 10s (hung mount?)"),
])
def test_a_usage_probe_that_fails(host, monkeypatch, answer, error):
    Seen(monkeypatch, runuser=answer)
    sd = json.loads(collector.collect(host["desired"], False, 4096, 10, "9.9")[bf.STORAGE_DIRS])
    assert sd["mount_point"]["usage"] == sd["instances"]["main"]["usage"] == {"error": error}


def test_the_usage_walk_gets_at_least_a_second(host, monkeypatch):
    seen = Seen(monkeypatch)
    collector.collect(host["desired"], False, 4096, 1, "9.9")
    usage = next(c for c, _ in seen.runs if collector.USAGE_PROBE in c)
    assert usage[usage.index(collector.USAGE_PROBE) + 1] == "1"


def test_where_the_kv_mount_is_an_nfs_mount(host, monkeypatch):
    d, mp, tmp = host["desired"], host["mp"], host["tmp"]
    d["storage"].update(transport="tcp", profile="nfs_tcp")
    (tmp / "other").mkdir()
    d["engine"]["instances"].append({"name": "off", "unit": "kvprov-x-off.service", "units": [], "port": 1,
                                     "metrics_port": 1, "storage_dir": str(tmp / "other")})
    mountinfo = f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n30 22 0:45 / {mp} rw - nfs4 10.0.0.1:/kv rw\n"
    Seen(monkeypatch, files={"/proc/self/mountinfo": mountinfo})
    sd = json.loads(collector.collect(d, False, 4096, 10, "9.9")[bf.STORAGE_DIRS])
    assert (sd["mount_point"]["mount"], sd["mount_point"]["fstype"]) == (str(mp), "nfs4")
    assert sd["mount_point"]["is_on_kv_mount"] is True and sd["instances"]["main"]["is_on_kv_mount"] is True
    assert sd["instances"]["off"]["is_on_kv_mount"] is False and sd["instances"]["off"]["mount"] == "/"


def test_a_units_command_line_only_from_a_live_main_pid(host):
    canned, d = host["canned"], host["desired"]
    canned[("systemctl", "show", "kvprov-x-main.service")] = (1, f"MainPID={os.getpid()}\n", "failed\n")
    out = collector.collect(d, False, 4096, 10, "9.9")
    assert "systemctl/kvprov-x-main.service.cmdline.json" not in out  # systemctl show failed: not believed
    canned[("systemctl", "show", "kvprov-x-main.service")] = (0, "MainPID=0\n", "")
    out = collector.collect(d, False, 4096, 10, "9.9")
    assert out["systemctl/kvprov-x-main.service.txt"] == "MainPID=0\n"
    assert "systemctl/kvprov-x-main.service.cmdline.json" not in out


def test_a_nixl_probe_that_fails_is_not_believed_whatever_it_printed(host, tmp_path):
    d = host["desired"]
    python = tmp_path / "broken/bin/python3"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\necho '{\"import_ok\": true}'\nprintf 'e%.0s' $(seq 1 600) >&2\nexit 1\n")
    python.chmod(0o755)
    d["nixl"]["venv"] = str(tmp_path / "broken")
    nixl = json.loads(collector.collect(d, True, 4096, 10, "9.9")[bf.NIXL_PROBE])
    assert nixl == {"import_ok": False, "version": None, "plugins": [], "backend": "POSIX", "backend_ok": False,
                    "error": "e" * 500}


def test_the_nixl_probe_runs_its_script_in_the_venvs_python(host):
    nixl = json.loads(collector.collect(host["desired"], True, 4096, 10, "9.9")[bf.NIXL_PROBE])
    assert nixl["import_ok"] is False and nixl["error"].startswith("ModuleNotFoundError: No module named 'nixl")


def test_the_managed_files_directories_and_modes(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "a.conf").write_text("a")
    (etc / "sub").mkdir()
    (etc / "to-dir").symlink_to(etc / "sub")  # a link to a directory: an entry, not a directory
    (etc / "link.conf").symlink_to(etc / "a.conf")
    listed = collector.list_dirs([str(etc / "a.conf"), str(tmp_path / "none/x.conf")])
    assert listed[str(etc)] == ["a.conf", "link.conf", "to-dir"]
    assert listed[str(tmp_path / "none")]["error"].startswith("[Errno 2] No such file or directory")
    modes = collector.file_modes([str(etc / "a.conf"), str(etc / "link.conf"), str(etc / "gone.conf")])
    assert modes == {str(etc / "a.conf"): {"mode": format((etc / "a.conf").stat().st_mode & 0o7777, "04o"),
                                           "uid": os.getuid(), "link": False},
                     str(etc / "link.conf"): {"mode": "0777", "uid": os.getuid(), "link": True}}


def test_who_holds_the_deploy_lock(tmp_path):
    lock = tmp_path / "deploy.lock"
    assert collector.deploy_lock(str(lock)) is None  # nobody
    lock.write_text("")
    assert collector.deploy_lock(str(lock)) == {}
    lock.write_text(json.dumps({"owner": "me@c:inv", "pid": 7, "note": "n" * 400}))
    assert collector.deploy_lock(str(lock)) == {"owner": "me@c:inv", "pid": "7", "note": "n" * 300}
    for text in ("[1, 2]", "not json"):
        lock.write_text(text)
        assert collector.deploy_lock(str(lock)) == {}
    link = tmp_path / "link.lock"
    link.symlink_to(lock)
    lock.write_text('{"owner": "x"}')
    assert collector.deploy_lock(str(link))["error"].startswith("[Errno 40] Too many levels of symbolic links")


def test_stat_paths_that_fail(monkeypatch):
    entry = {"path": "/p", "exists": False, "is_dir": False, "is_link": False, "owner": None, "group": None,
             "mode": None}
    for answer, error, to in (((1, "", "boom\n", False), "boom", False), ((1, "", "", False), "exited 1", False),
                              ((-9, "", "x", True), "stat timed out (hung mount?)", True)):
        monkeypatch.setattr(collector, "run", lambda cmd, timeout, stdin=None, a=answer: a)
        assert collector.stat_paths(["/p"], 5) == ({"/p": {**entry, "error": error}}, to)
    assert collector.stat_paths(["/p"], 5, "hung") == ({"/p": {**entry, "error": "hung"}}, False)
    assert collector.stat_paths([], 5) == ({}, False)


def test_the_restarts_pending_are_listed_from_the_desired_states_directory_by_default(host):
    d = host["desired"]
    assert json.loads(collector.collect(d, False, 4096, 10, "9.9")[bf.RESTART_PENDING]) == []
    d["engine"]["restart_pending_dir"] = host["pending"]
    assert json.loads(collector.collect(d, False, 4096, 10, "9.9")[bf.RESTART_PENDING]) == ["kvprov-x-main.service"]


def test_the_restarts_pending(tmp_path):
    assert collector.list_pending(str(tmp_path / "missing")) == [] and collector.list_pending(None) == []
    (tmp_path / "f").write_text("")
    assert collector.list_pending(str(tmp_path / "f"))["error"].startswith("[Errno 20] Not a directory")


def test_run_puts_the_child_in_its_own_session_and_reaps_it_when_it_hangs(tmp_path):
    assert collector.run([sys.executable, "-c", "import os; print(os.getsid(0) == os.getpid())"], 5)[1] == "True\n"
    pidfile = tmp_path / "pid"
    code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(30)"
    assert collector.run([sys.executable, "-c", code], 0.5)[3] is True
    with pytest.raises(ProcessLookupError):  # killed and waited for: not even a zombie left
        os.kill(int(pidfile.read_text()), 0)


def test_a_file_is_decoded_whatever_its_bytes(tmp_path):
    (tmp_path / "f").write_bytes(b"ok \xff")
    assert collector.read(str(tmp_path / "f")) == "ok \ufffd"


def test_collector_helpers_at_more_edges(tmp_path):
    assert collector.mount_of("/mnt/X/a", "30 22 0:45 / /mnt/X rw - nfs4 s:/kv rw\n")["mount"] == "/mnt/X"
    assert collector.fstab_lines("s:/b /b nfs4 rw 0 0\n", "/mnt/kv", "x") == "s:/b /b nfs4 rw 0 0\n"
    assert collector.fstab_lines("s:/kv /mnt/kv nfs4 password=x\n", "/mnt/kv", "") == "s:/kv /mnt/kv nfs4 password=***\n"
    site = tmp_path / "lib/python3.11/site-packages"
    for name, meta in (("a.egg-info", "Name: a\nVersion: 1\n"), ("a0-1.dist-info", None),
                       ("b-1.dist-info", "Name: b\nVersion: 2\n")):
        (site / name).mkdir(parents=True)
        if meta:
            (site / name / "METADATA").write_text(meta)
    assert collector.venv_versions(str(tmp_path)) == {"b": "2"}


def test_the_metrics_page_probed_is_fetched_once(monkeypatch):
    asked = []
    monkeypatch.setattr(collector, "run", lambda cmd, timeout, stdin=None: (0, "", "", False))
    monkeypatch.setattr(collector, "http_get", lambda url, timeout=5, tls=None: asked.append(url) or (
        200, "lmcache_mp_lookup_hit_l2_tokens 7\nother 1\n", None))
    h, metrics = collector.probe_service("u", "127.0.0.1", 9, "/metrics")
    assert asked == ["http://127.0.0.1:9/metrics"] and metrics == "lmcache_mp_lookup_hit_l2_tokens 7\n"
    collector.probe_service("u", "127.0.0.1", 9, "/health")
    assert asked[1:] == ["http://127.0.0.1:9/health", "http://127.0.0.1:9/metrics"]


def test_the_pinned_certificate_is_the_identity_whatever_name_it_carries(tmp_path):
    from tests.tls import make_cert, pem
    from tests.unit.test_engine_tls import _serve

    cert, key = make_cert("engine.example", ips=())  # not issued for 127.0.0.1
    deployed = tmp_path / "engine-tls.crt"
    deployed.write_text(pem(cert=cert))
    server = _serve(tmp_path, cert, key)
    try:
        status, body, error = collector.http_get(f"https://127.0.0.1:{server.server_port}/metrics",
                                                 tls=collector.pinned_tls(str(deployed)))
        assert (status, error) == (200, None) and "prefix_cache_hits" in body
    finally:
        server.shutdown()


def test_every_directory_on_a_volume_that_hangs_is_passed_over(host, monkeypatch):
    d, tmp = host["desired"], host["tmp"]
    mp = tmp / "volX"  # (a mount point ending in X)
    (mp / "logs").mkdir(parents=True)
    (tmp / "volXY").mkdir()
    d["storage"]["mount_point"] = str(mp)
    d["engine"]["instances"] = []
    d["dirs"] = [str(mp), str(mp / "logs"), str(tmp / "volXY")]
    Seen(monkeypatch, scripts={collector.IO_PROBE: (-9, "", "timed out after 10s", True)})
    dirs = json.loads(collector.collect(d, True, 4096, 10, "9.9")[bf.DIR_MODES])
    hung = "not run: the KV mount did not answer the I/O probe within 10s (hung mount?)"
    assert dirs[str(mp)]["error"] == dirs[str(mp / "logs")]["error"] == hung
    assert dirs[str(tmp / "volXY")]["is_dir"] is True  # beside the mount point, not on it


def test_files_that_cannot_be_read(host, monkeypatch):
    d, tmp = host["desired"], host["tmp"]
    (tmp / "etc" / "dir.conf").mkdir()
    d["files"].append(str(tmp / "etc" / "dir.conf"))
    exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: p == "/etc/fstab" or exists(p))
    Seen(monkeypatch, files={"/etc/fstab": PermissionError(13, "Permission denied")})
    errors = json.loads(collector.collect(d, False, 4096, 10, "9.9")[bf.COLLECT])["errors"]
    assert errors[f"files{tmp}/etc/dir.conf"] == f"[Errno 21] Is a directory: '{tmp}/etc/dir.conf'"
    assert errors["files/etc/fstab"] == "[Errno 13] Permission denied"


def test_a_soft_mount_that_gave_up_on_its_server_is_probed_no_further(host, monkeypatch):
    """#37: the I/O probe's EIO from a soft mount whose server does not answer counts as a hung
    mount: the storage directories are not stat'ed one by one (each would cost the soft timeout)."""
    real = collector.run

    def eio(cmd, timeout, stdin=None):
        if len(cmd) > 2 and cmd[2] == collector.IO_PROBE:
            return 1, "", "OSError: [Errno 5] Input/output error: '/mnt/kvcache/.kvprov-gpu_1'\n", False
        return real(cmd, timeout, stdin)

    monkeypatch.setattr(collector, "run", eio)
    out = collector.collect(host["desired"], True, 4096, 10, "9.9", host["pending"])
    io = json.loads(out[bf.IO_PROBE])
    assert (io["ok"], io["timed_out"], io["error"]) == (
        False, False, "OSError: [Errno 5] Input/output error: '/mnt/kvcache/.kvprov-gpu_1'")
    hung = "not run: the KV mount's server did not answer the I/O probe (OSError: [Errno 5] Input/output error"
    dirs = json.loads(out[bf.STORAGE_DIRS])
    assert dirs["instances"]["main"]["error"].startswith(hung) and not dirs["instances"]["main"]["exists"], dirs
    assert dirs["mount_point"]["usage"]["error"].startswith(hung), dirs
