"""The engine checks' failure paths on the GPU host's bundle (gpu_a01, SGLang) with one captured
file edited, and on the vLLM bundles of test_validate_engines: where the command line and the
environment are read from, the storage directory's settings and captures, the units' states,
/health and the cache counters."""

import json

from kvprov.validate import bundle as bf
from kvprov.validate.checks.engine import flag, json_flag
from kvprov.validate.result import FAIL, PASS, SKIP, WARN
from tests.conftest import FIXTURES
from tests.unit.test_validate_context_captures import one_check
from tests.unit.test_validate_engines import VLLM_METRICS, EngineBundle, edit_json_flag, prometheus, vllm_unit

ROOT = FIXTURES / "bundles/gpu_a01"
FILES = {str(p.relative_to(ROOT)): p.read_bytes() for p in ROOT.rglob("*") if p.is_file()}
UNIT = "kvprov-sglang-gpu0-3.service"
SHOW = f"systemctl/{UNIT}.txt"
UNIT_FILE = f"files/etc/systemd/system/{UNIT}"
DIR = "/mnt/kvcache/gpu-a01.corp.example.com/gpu0-3"
OTHER_DIR = "/mnt/kvcache/gpu-a01.corp.example.com/gpu4-7"
ENV = "SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR"
LOGS = f"`journalctl -u {UNIT} -b -n 200`"
DEPLOY = "kvprov deploy INVENTORY --limit gpu-a01.corp.example.com --tags engine"


def edited(**changes) -> dict:
    """gpu_a01's files, each of `changes` ({name: (old, new)} or {name: None} to drop it) applied."""
    files = dict(FILES)
    for key, change in changes.items():
        name = {"show": SHOW, "unit_file": UNIT_FILE, "gpu": "gpu.json"}[key]
        if change is None:
            del files[name]
            continue
        text = files[name].decode()
        for old, new in change:
            assert old in text, old
            text = text.replace(old, new)
        files[name] = text.encode()
    return files


def result(files: dict, suffix: str, instance: str = "gpu0-3"):
    return one_check(files, f"engine.{instance}.{suffix}")


def storage_dirs(**entry) -> dict:
    files = dict(FILES)
    data = json.loads(files["storage_dirs.json"])
    data["instances"]["gpu0-3"].update(entry)
    for key in [k for k, v in entry.items() if v is ...]:
        del data["instances"]["gpu0-3"][key]
    files["storage_dirs.json"] = json.dumps(data).encode()
    return files


def storage_env(value: str):
    """The storage directory set to `value` where systemd and the unit file both have it."""
    line = f"{ENV}={DIR}"
    r = result(edited(show=[(line, f"{ENV}={value}")], unit_file=[(line, f"{ENV}={value}")]), "storage_env")
    return r.status, r.found


# ---------------------------------------------------------------------------- flags

def test_flag_reads_both_spellings_and_the_last_one_wins():
    assert flag(["python3", "--port", "8000"], "--port") == "8000"
    assert flag(["python3", "--port=8001"], "--port") == "8001"
    assert flag(["--port", "1", "--port=2", "--host", "h"], "--port") == "2"
    assert flag(["--port=", "--portable"], "--port") == ""
    assert flag(["python3", "--model", "m", "--port"], "--port") is None  # no value after it
    assert flag(["--host", "h"], "--port") is None


def test_json_flag_value_or_why_not():
    assert json_flag(["--kv-transfer-config", '{"kv_role": "kv_both"}'], "--kv-transfer-config") == (
        {"kv_role": "kv_both"}, "")
    assert json_flag([], "--l2-adapter") == (None, "no --l2-adapter")
    assert json_flag(["--l2-adapter", "[1]"], "--l2-adapter") == (None, "--l2-adapter is not a JSON object")
    value, why = json_flag(["--l2-adapter", "{fs"], "--l2-adapter")
    assert value is None and why.startswith("--l2-adapter is not JSON (Expecting property name")


# ---------------------------------------------------------------------------- where the configuration is read

def test_without_environment_in_systemctl_show_the_unit_file_gives_the_storage_directory():
    files = edited(show=[(f"Environment=PYTHONHASHSEED=0 CUDA_VISIBLE_DEVICES=0,1,2,3 {ENV}={DIR} "
                          "TORCH_EXTENSIONS_DIR=/var/lib/sglang/gpu0-3/torch_extensions "
                          "HF_HOME=/var/lib/sglang/huggingface\n",
                          "")])
    r = result(files, "storage_env")
    assert (r.status, r.found) == (PASS, f"{DIR} ({ENV}, the unit file)")


def test_an_empty_captured_command_line_falls_back_to_systemctl_show(tmp_path):
    b = EngineBundle(tmp_path, "vllm_offload")
    b.write("systemctl/" + vllm_unit("main") + ".cmdline.json", "[]")
    r = b.results()["engine.main.unit"]
    assert (r.status, r.found) == (PASS, "loaded, enabled; configuration read from systemctl show")


def test_a_command_line_that_is_no_list_of_strings_falls_back_to_systemctl_show(tmp_path):
    b = EngineBundle(tmp_path, "vllm_offload")
    b.write_json("systemctl/" + vllm_unit("main") + ".cmdline.json", {"--port": "8000"})
    r = b.results()["engine.main.unit"]
    assert (r.status, r.found) == (PASS, "loaded, enabled; configuration read from systemctl show")


def test_a_unit_file_missing_on_the_host_fails_the_unit_check():
    r = result(edited(unit_file=None), "unit")
    assert r.status == FAIL
    assert r.found == f"{bf.live_file('/etc/systemd/system/' + UNIT)}: /etc/systemd/system/{UNIT} is not on the " \
                      "host (not in the bundle)"
    assert r.fix == DEPLOY


# ---------------------------------------------------------------------------- engine.<i>.unit

def test_unit_without_load_or_unit_file_state_fails_showing_question_marks():
    r = result(edited(show=[("LoadState=loaded\n", ""), ("UnitFileState=enabled\n", "")]), "unit")
    assert (r.status, r.found) == (
        FAIL, f"{UNIT}: LoadState=? (`systemctl daemon-reload`); {UNIT}: UnitFileState=?: not started at boot")


def test_unit_changed_since_systemd_read_it_is_a_warning_with_a_reload():
    r = result(edited(show=[("NeedDaemonReload=no", "NeedDaemonReload=yes")]), "unit")
    assert (r.status, r.found, r.fix) == (
        WARN, f"{UNIT} changed since systemd read it: `systemctl daemon-reload`",
        f"systemctl daemon-reload && systemctl restart {UNIT}")


def test_vllm_connector_and_role_must_be_the_engines(tmp_path):
    b = EngineBundle(tmp_path, "vllm_offload")
    b.set_argv(vllm_unit("main"), edit_json_flag("--kv-transfer-config", lambda kv: kv.update(
        kv_connector="LMCacheConnectorV1", kv_role="kv_producer")))
    r = b.results()["engine.main.unit"]
    assert (r.status, r.found) == (
        FAIL, "kv_connector LMCacheConnectorV1 (the running process), want OffloadingConnector; "
              "kv_role kv_producer, want kv_both (store and load)")


# ---------------------------------------------------------------------------- engine.<i>.state

def state(*changes, gpu=None):
    r = result(edited(show=list(changes), **({"gpu": gpu} if gpu else {})), "state")
    return r.status, r.expected, r.found, r.fix


def test_state_without_states_or_restart_count_is_not_running():
    assert state(("ActiveState=active\n", ""), ("SubState=running\n", ""), ("NRestarts=0\n", "")) == (
        FAIL, f"{UNIT} active (running), no restarts", f"{UNIT}: ActiveState=? SubState=? NRestarts=0: not running",
        f"`systemctl start {UNIT}`; {LOGS}")


def test_state_restart_count_garbage_or_too_large_counts_as_none():
    for count in ("many", "1234567890", "-1"):
        assert state(("NRestarts=0", f"NRestarts={count}"))[:3] == (
            PASS, f"{UNIT} active (running), no restarts", f"{UNIT}: ActiveState=active SubState=running NRestarts=0")
    assert state(("NRestarts=0", "NRestarts=123456789"))[0] == WARN


def test_state_auto_restart_fails_even_before_the_first_restart():
    assert state(("ActiveState=active", "ActiveState=activating"), ("SubState=running", "SubState=auto-restart"))[
        :3] == (FAIL, "active (running)", f"{UNIT}: ActiveState=activating SubState=auto-restart NRestarts=0: failed "
                                          "or in a restart loop")


def test_state_active_but_not_running_fails():
    assert state(("SubState=running", "SubState=exited"))[:3] == (
        FAIL, f"{UNIT} active (running), no restarts", f"{UNIT}: ActiveState=active SubState=exited NRestarts=0: "
                                                        "not running")


GONE = [('"present": true', '"present": false')]


def test_state_without_a_gpu_the_gpu_unit_must_not_run():
    expected = "inactive: no GPU, so the service does not run (and never fails)"
    assert state(gpu=GONE) == (
        WARN, expected, f"{UNIT}: ActiveState=active SubState=running NRestarts=0 although no GPU", f"look at {LOGS}")
    assert state(("ActiveState=active", "ActiveState=inactive"), ("SubState=running", "SubState=dead"),
                 ("ConditionResult=yes", "ConditionResult=no"), gpu=GONE) == (
        PASS, expected, f"{UNIT}: ActiveState=inactive SubState=dead NRestarts=0 ConditionResult=no: no GPU: service "
                        "skipped by its condition (ConditionPathExistsGlob=/dev/nvidia[0-9]*)", "")
    assert state(("ActiveState=active", "ActiveState=inactive"), ("SubState=running", "SubState=dead"), gpu=GONE)[
        :3] == (SKIP, expected, f"{UNIT}: ActiveState=inactive SubState=dead NRestarts=0: no GPU: not started")


def test_state_of_a_unit_without_the_gpu_condition_ignores_a_missing_gpu():
    files = edited(gpu=GONE)
    desired = json.loads(files["desired.json"])
    unit = desired["files"][f"/etc/systemd/system/{UNIT}"]
    unit["content"] = unit["content"].replace("ConditionPathExistsGlob=/dev/nvidia[0-9]*", "")
    files["desired.json"] = json.dumps(desired).encode()
    r = result(files, "state")
    assert (r.status, r.found) == (PASS, f"{UNIT}: ActiveState=active SubState=running NRestarts=0")


def test_state_when_the_engine_is_not_installed_here():
    files = dict(FILES)
    desired = json.loads(files["desired.json"])
    desired["engine"]["install"] = False
    files["desired.json"] = json.dumps(desired).encode()
    r = result(files, "state")
    assert (r.status, r.expected, r.found) == (
        WARN, "inactive: kvprov_engine_install is false, so the service does not run (and never fails)",
        f"{UNIT}: ActiveState=active SubState=running NRestarts=0 although kvprov_engine_install is false")


# ---------------------------------------------------------------------------- engine.<i>.storage_env

def test_storage_env_on_local_temporary_directories():
    local = "is on local /tmp: the third tier lands on local disk (and in the service's private /tmp)"
    assert storage_env("/var/tmp/kv,/dev/shm/kv") == (
        FAIL, f"/var/tmp/kv,/dev/shm/kv ({ENV}, systemctl show): /var/tmp/kv {local}; /dev/shm/kv {local}")


def test_storage_env_relative_directory():
    assert storage_env("kvcache/gpu0-3") == (
        FAIL, f"kvcache/gpu0-3 ({ENV}, systemctl show): kvcache/gpu0-3 is relative: it resolves against the "
              "service's working directory")


def test_storage_env_another_directory_on_the_mount_names_the_instance_only_when_it_is_one():
    assert storage_env(f"{DIR}/") == (PASS, f"{DIR}/ ({ENV}, systemctl show)")
    assert storage_env("/mnt/kvcache/elsewhere") == (
        FAIL, f"/mnt/kvcache/elsewhere ({ENV}, systemctl show): /mnt/kvcache/elsewhere, not the inventory's {DIR}")
    assert storage_env(OTHER_DIR) == (
        FAIL, f"{OTHER_DIR} ({ENV}, systemctl show): {OTHER_DIR}, not the inventory's {DIR}: the directory of "
              "instance gpu4-7 (a clear() or cleaner would wipe both)")


# ---------------------------------------------------------------------------- engine.<i>.storage_dir

def storage_dir(**entry):
    r = result(storage_dirs(**entry), "storage_dir")
    return r.status, r.found, r.fix


def test_storage_dir_the_collector_could_not_check():
    assert storage_dir(error="stat timed out")[:2] == (FAIL, "the collector could not check it: stat timed out")


def test_storage_dir_missing_link_or_file_names_the_captured_path():
    assert storage_dir(exists=False) == (FAIL, f"{DIR} does not exist", DEPLOY)
    assert storage_dir(exists=False, path=None) == (FAIL, f"{DIR} does not exist", DEPLOY)
    assert storage_dir(exists=False, path="/mnt/kvcache/x") == (FAIL, "/mnt/kvcache/x does not exist", DEPLOY)
    assert storage_dir(is_link=True) == (
        FAIL, f"{DIR} is a symbolic link, not a directory: on a shared volume a link can point root's work at "
              "anyone's files", f"remove the link, then {DEPLOY}")
    assert storage_dir(is_dir=False) == (FAIL, f"{DIR} is not a directory", DEPLOY)


def test_storage_dir_off_the_mount_with_nothing_known_about_where():
    status, found, _ = storage_dir(is_on_kv_mount=False, fstype=..., device=..., mount=...)
    assert (status, found) == (
        FAIL, f"{DIR} is on ? ? (mounted on ?), not on the KV mount: it was created while /mnt/kvcache was not "
              "mounted")


def test_storage_dir_on_mount_flag_wins_and_without_it_mountinfo_decides():
    assert storage_dir(is_on_kv_mount=False)[0] == FAIL
    assert storage_dir(is_on_kv_mount=...)[:2] == (
        PASS, f"{DIR} (sglang:sglang 0750) on nfs4 192.168.10.11:/kvcache_vol1")


def test_storage_dir_not_writable_shows_owner_and_mode_as_captured():
    assert storage_dir(writable_by_service_user=False, owner=..., group=..., mode=...)[:2] == (
        FAIL, f"{DIR} (?:? ?) is not writable by sglang: every store of the tier fails while /health stays green")
    assert storage_dir(writable_by_service_user=False, mode="0750-and-more")[1].startswith(
        f"{DIR} (sglang:sglang 0750-and...) is not writable")


# ---------------------------------------------------------------------------- engine.<i>.health

def health(**entry):
    files = dict(FILES)
    data = json.loads(files["health.json"])
    data["gpu0-3"].update(entry)
    files["health.json"] = json.dumps(data).encode()
    r = result(files, "health")
    return r.status, r.expected, r.found, r.fix


def test_health_shows_the_status_answered_or_the_error():
    expected = "HTTP /health on port 8000 answers 200"
    url = "http://127.0.0.1:8000/health"
    assert health(status=204) == (PASS, expected, f"GET {url}: 204", "")
    assert health(status="200 but slow to say so") == (PASS, expected, f"GET {url}: 200 but sl...", "")
    assert health(ok=False, status=503) == (FAIL, expected, f"GET {url}: 503", f"read {LOGS}")
    assert health(ok=False, status=None, error="connection refused")[2] == f"GET {url}: connection refused"
    assert health(ok=False, status=None, url=None)[2] == f"GET {url}: not running"


# ---------------------------------------------------------------------------- engine.<i>.cache

def test_cache_metrics_skip_comments_blank_lines_and_garbage_and_sum_over_labels(tmp_path):
    b = EngineBundle(tmp_path, "vllm_offload")
    page = ("# HELP vllm:prefix_cache_queries_total 5\n# TYPE vllm:prefix_cache_queries_total counter\n\n"
            "vllm:prefix_cache_hits_total{engine=\"1\"} not-a-number\n"
            + prometheus(VLLM_METRICS, 'engine="0"') + prometheus(VLLM_METRICS, 'engine="1"'))
    b.write("metrics/main.txt", page)
    r = b.results()["engine.main.cache"]
    assert (r.status, r.found) == (PASS, ", ".join(f"{k} {2 * v:g}" for k, v in VLLM_METRICS.items()))


def test_cache_one_query_without_the_connector_consulted_fails(tmp_path):
    b = EngineBundle(tmp_path, "vllm_offload")
    b.write("metrics/main.txt", prometheus({**VLLM_METRICS, "vllm:prefix_cache_queries_total": 1,
                                            "vllm:external_prefix_cache_queries_total": 0}, 'engine="0"'))
    assert b.results()["engine.main.cache"].status == FAIL


def test_cache_no_counter_exposed_lists_what_is_missing_without_figures(tmp_path):
    b = EngineBundle(tmp_path, "vllm_offload")
    b.write("metrics/main.txt", "process_cpu_seconds_total 12.5\n")
    r = b.results()["engine.main.cache"]
    assert (r.status, r.found) == (FAIL, "; ".join(f"{k} is not exposed" for k in VLLM_METRICS))


def test_a_unit_file_without_exec_start_is_unusable_when_nothing_else_shows_the_command_line():
    show_line = next(line for line in FILES[SHOW].decode().splitlines(keepends=True) if line.startswith("ExecStart="))
    r = result(edited(show=[(show_line, "")], unit_file=[("ExecStart=", "ExecStartPre=")]), "unit")
    assert (r.status, r.found, r.fix) == (
        FAIL, f"{UNIT_FILE}: unusable: no ExecStart= in [Service] (systemd refuses to start it)", DEPLOY)


def test_state_failed_or_restarted_once_while_stopped_fails():
    for active, sub, restarts in (("failed", "failed", "0"), ("inactive", "dead", "1")):
        assert state(("ActiveState=active", f"ActiveState={active}"), ("SubState=running", f"SubState={sub}"),
                     ("NRestarts=0", f"NRestarts={restarts}"))[:3] == (
            FAIL, "active (running)", f"{UNIT}: ActiveState={active} SubState={sub} NRestarts={restarts}: failed or "
                                      "in a restart loop")


def test_storage_dir_capacity_figures_of_the_volume_or_the_directory_alone():
    def found(**usage):
        files = dict(FILES)
        data = json.loads(files["storage_dirs.json"])
        if "volume" in usage:
            data["mount_point"]["usage"] = usage["volume"]
        if "directory" in usage:
            data["instances"]["gpu0-3"]["usage"] = usage["directory"]
        files["storage_dirs.json"] = json.dumps(data).encode()
        r = result(files, "storage_dir")
        return r.status, r.found

    volume = {"size_bytes": 1 << 40, "used_bytes": 1 << 39, "inodes": 1000, "inodes_used": 10}
    where = f"{DIR} (sglang:sglang 0750) on nfs4 192.168.10.11:/kvcache_vol1"
    assert found(volume=volume) == (WARN, f"{where}; volume 50.0% of 1.0 TiB used, inodes 1.0% of 1000; could not "
                                          "measure the directory: no figures")
    assert found(directory={"bytes": 2048, "files": 2}) == (
        WARN, f"{where}; directory 2.0 KiB in 2 files; could not measure the volume: no figures")
    assert found(directory=[1, 2]) == (FAIL, "storage_dirs.json: instances.gpu0-3.usage is not an object")
