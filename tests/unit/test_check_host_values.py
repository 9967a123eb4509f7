"""kvprov check's host rules on one host's effective values, the way the roles' preflight
runs them (host_from_values + check_host_values: the role defaults overlaid with the host's
values; no inventory file, no Ansible)."""

from pathlib import Path

import yaml

from kvprov import check, inventory

SPECS = check.read_specs(inventory.roles_dir())
DEFAULTS = inventory.read_role_defaults(inventory.roles_dir())
SERVER = {"kvprov_storage_server": "10.0.0.5", "kvprov_engine_uid": 2001, "kvprov_engine_model_revision": "0123abc"}


def host(**values) -> inventory.Host:
    return check.host_from_values("gpu1", {**SERVER, **values}, DEFAULTS)


def problems(**values) -> list[str]:
    """"SEVERITY VARIABLE: MESSAGE" for each problem of host gpu1 with these values."""
    found = check.check_host_values(host(**values), SPECS)
    assert all(p.host == "gpu1" and p.file is None and p.line is None for p in found)
    return [f"{p.severity} {p.variable}: {p.message}" for p in found]


def private_file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


# ---------------------------------------------------------------------------- the values the host gets

def test_a_host_has_the_role_defaults_and_its_own_values_marked_as_set():
    h = host(kvprov_engine_user="svc", kvprov_engine_uid=0, ansible_user="x")
    assert h.name == "gpu1" and h.groups == ["all"]
    assert h.value("kvprov_engine_user") == "svc" and not h.is_default("kvprov_engine_user")
    # a value equal to its default stays the default; a kvprov_ variable not given is the default
    assert h.is_default("kvprov_engine_uid") and h.is_default("kvprov_storage_mount_point")
    assert h.value("kvprov_storage_mount_point") == "/mnt/kvcache"
    assert h.value("ansible_user") == "x"
    assert "ansible_user" not in check.host_from_values("gpu1", {}, {"ansible_user": DEFAULTS["kvprov_engine"]}).vars


def test_the_lab_defaults_pass_and_a_bad_value_is_reported_once_with_the_host():
    assert problems() == []
    assert problems(kvprov_engine_user="Bad User") == [
        'error kvprov_engine_user: "Bad User" is not a valid user name (lower-case letters, digits, _ and -)']
    # a role default that breaks a rule is not the host's doing: the setting rules skip it
    defaults = {**DEFAULTS, "kvprov_engine_user": inventory.Var("kvprov_engine_user", "Bad User",
                                                                inventory.Origin("defaults/main.yml", 1, True))}
    assert check.check_host_values(check.host_from_values("gpu1", SERVER, defaults), SPECS) == []


def test_variables_of_no_role_are_left_to_the_inventory_check():
    assert problems(kvprov_no_such_thing=1, other_var=2) == []


def test_old_sglang_names_still_work_with_a_warning():
    for key, value in (("instances", [{"name": "a", "port": 8001}]), ("install", False), ("user", "svc"),
                       ("home", "/srv/engine"), ("model_path", "org/model"), ("host", "127.0.0.2"),
                       ("extra_args", ["--x"])):
        assert problems(**{f"kvprov_sglang_{key}": value}) == [
            f"warning kvprov_sglang_{key}: renamed kvprov_engine_{key} (the old name still works; every engine reads "
            "the new one)"], key


# ---------------------------------------------------------------------------- setting rules on values

def test_user_names_are_system_user_names_and_not_root():
    assert check.user_name("kvprov-engine") == check.user_name("_svc1") == []
    assert problems(kvprov_engine_user="root") == [
        "error kvprov_engine_user: the engine must not run as root: name a system user (kvprov creates it)"]
    assert problems(kvprov_engine_user="a" * 33)[0].startswith("error kvprov_engine_user: ")


def test_the_metrics_allow_list_takes_addresses_and_networks():
    assert check.networks(["10.0.0.0/8", "10.1.2.3", "fd00::/8", "10.0.0.1/8"]) == []
    assert problems(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_metrics_allow=["10.0.0.0/8", "10.0.0.0/33", "x"]) == [
        'error kvprov_lmcache_mp_metrics_allow: item 2: "10.0.0.0/33" is not an address or CIDR (e.g. 10.0.0.0/8)',
        'error kvprov_lmcache_mp_metrics_allow: item 3: "x" is not an address or CIDR (e.g. 10.0.0.0/8)']


def test_model_path_is_an_id_or_a_plain_directory():
    assert check.model_path("Qwen/Qwen3-8B") == check.model_path("/models/q..3") == []
    assert check.model_path("org/../x") == []  # a Hugging Face id, not a path
    bad = ' must be a Hugging Face id or an absolute directory without spaces, quotes, backslashes, $ or %'
    for value in ("", "my model", "a'b", 'a"b', "a\\b", "$HOME/m", "50%"):
        assert problems(kvprov_engine_model_path=value) == [f'error kvprov_engine_model_path: "{value}"{bad}'], value
    assert problems(kvprov_engine_model_path="/models/../etc") == [
        'error kvprov_engine_model_path: "/models/../etc" must not contain ..']


def test_numbers_that_must_not_be_negative_or_zero():
    assert check.non_negative(0) == check.non_negative(0.0) == check.non_negative(True) == []
    assert problems(kvprov_bench_min_read_gbps=-0.5) == ["error kvprov_bench_min_read_gbps: must be 0 or more, got -0.5"]
    assert check.positive_number(0.1) == []
    assert problems(kvprov_lmcache_mp_l1_size_gb=0, kvprov_engine="lmcache_mp") == [
        "error kvprov_lmcache_mp_l1_size_gb: must be more than 0, got 0"]


def test_a_number_is_an_int_or_a_float_but_not_a_boolean():
    assert check.type_error(2, "float") is None and check.type_error(2.5, "float") is None
    assert problems(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_l2_size_gb=True) == [
        "error kvprov_lmcache_mp_l2_size_gb: expected a number, got the boolean true"]
    assert check.type_error("2", "float") == 'expected a number, got the string "2"'


def test_empty_means_unset_for_the_optional_paths():
    assert problems(kvprov_engine_find_links="", kvprov_engine_wheelhouse="/srv/wheels") == []
    assert problems(kvprov_engine_find_links="wheels") == [
        'error kvprov_engine_find_links: "wheels" is not an absolute path: start it with /']


def test_nixl_backend_options_list_items_are_scalars():
    assert problems(kvprov_nixl_backend_options={"paths": ["/a", 2, True]}) == []
    assert problems(kvprov_nixl_backend_options={"paths": ["/a", None, [1]]}) == [
        "error kvprov_nixl_backend_options: paths: values must be scalars (string, number, boolean), got nothing "
        "(null)",
        "error kvprov_nixl_backend_options: paths: values must be scalars (string, number, boolean), got a list"]


def test_a_plugin_thread_count_is_a_positive_integer():
    def plugin(count) -> list[str]:
        return problems(kvprov_nixl_plugins={"gds_mt": {"active": True, "thread_count": count}})

    assert plugin(1) == []
    assert plugin(0) == ["error kvprov_nixl_plugins: [plugin.gds_mt] thread_count: expected a positive integer, "
                         "got the number 0"]


# ---------------------------------------------------------------------------- engines

def test_an_engine_reachable_beyond_loopback_needs_an_api_key_and_its_clients(tmp_path):
    """Closed by default (#24): beyond loopback, an API key and the clients' networks (the unit's
    IPAddressAllow=), as vLLM's key leaves POST /invocations open."""
    no_key = ("error kvprov_engine_host: the engine listens on 0.0.0.0 without an API key: anyone who reaches it "
              "can use the model and fill the KV cache; set kvprov_engine_api_key_file (or kvprov_engine_api_key)")
    no_clients = ("error kvprov_engine_host: the engine listens on 0.0.0.0 for any address: name its clients' "
                  "networks in kvprov_engine_clients (e.g. [10.0.0.0/8]); vLLM's API key does not guard every route "
                  "(POST /invocations serves without it), the unit's IPAddressAllow= does")
    assert problems(kvprov_engine_host="0.0.0.0") == [no_key, no_clients]
    assert problems(kvprov_engine_host="::1") == problems(kvprov_engine_host="127.0.0.1") == []
    key = private_file(tmp_path, "key", "s3cret\n")
    # (SGLang's admin routes always have a key of their own: tests/unit/test_sglang_admin_key.py)
    assert problems(kvprov_engine_host="0.0.0.0", kvprov_engine_api_key_file=key) == [no_clients]
    assert problems(kvprov_engine_host="0.0.0.0", kvprov_engine_api_key_file=key,
                    kvprov_engine_clients=["10.0.0.0/8"]) == []
    assert problems(kvprov_engine_host="0.0.0.0", kvprov_engine_api_key_file=key, kvprov_engine_clients=["x y"]) == [
        'error kvprov_engine_clients: item 1: "x y" is not an address or CIDR (e.g. 10.0.0.0/8)']


S3_WARNING = ("talks to S3 and kvprov_engine_s3_credentials_file is not set: the AWS SDK then takes credentials "
              "from its default chain (an instance role, ~/.aws of the engine user); set "
              "kvprov_engine_s3_credentials_file unless the hosts have such a role")


def test_s3_without_a_credentials_file_is_a_warning_for_the_engine_that_uses_it(tmp_path):
    obj = {"obj": {"active": True, "bucket": "kv"}}
    inproc_s3 = {"remote_url": "s3://kv-bucket/cache"}
    assert problems(kvprov_nixl_plugins=obj) == [
        f"warning kvprov_nixl_plugins: the active NIXL plugin obj {S3_WARNING}"]
    # (a second tier beside local_disk; with the fs tier kvprov writes remote_url itself)
    assert problems(kvprov_engine="lmcache_inproc", kvprov_lmcache_inproc_tier="local_disk",
                    kvprov_lmcache_inproc_config=inproc_s3) == [
        f"warning kvprov_lmcache_inproc_config: LMCache's remote_url s3:// {S3_WARNING}"]
    # not in use: an inactive obj plugin, another remote, or the setting of another engine
    assert problems(kvprov_nixl_plugins={**obj, "obj": {"active": False}, "gds_mt": {"active": True}}) == []
    assert problems(kvprov_engine="lmcache_inproc", kvprov_lmcache_inproc_tier="local_disk",
                    kvprov_lmcache_inproc_config={"remote_url": "fs://localhost:0/kv"}) == []
    assert problems(kvprov_engine="lmcache_inproc", kvprov_nixl_plugins=obj) == []
    assert problems(kvprov_engine="sglang_hicache", kvprov_lmcache_inproc_config=inproc_s3) == [
        "warning kvprov_lmcache_inproc_config: only engine lmcache_inproc reads it, but this host's kvprov_engine is "
        "sglang_hicache: it has no effect here; remove it or set it on the groups of that engine"]
    creds = private_file(tmp_path, "s3", "AWS_ACCESS_KEY_ID=AKIA1\nAWS_SECRET_ACCESS_KEY=s3cret\n")
    assert problems(kvprov_nixl_plugins=obj, kvprov_engine_s3_credentials_file=creds) == []
    assert problems(kvprov_engine="lmcache_inproc", kvprov_lmcache_inproc_tier="local_disk",
                    kvprov_lmcache_inproc_config=inproc_s3,
                    kvprov_engine_s3_credentials_file=creds) == []


def owners(engine: str, **values) -> list[str]:
    """The variables reported as another engine's on a host of `engine`, with that engine."""
    out = []
    for line in problems(kvprov_engine=engine, **values):
        assert line.startswith("warning ") and f"but this host's kvprov_engine is {engine}: " in line, line
        out.append(line.split(" reads it")[0].removeprefix("warning "))
    return out


def test_a_setting_only_another_engine_reads_is_a_warning():
    assert owners("vllm_baseline", kvprov_sglang_page_size=64, kvprov_vllm_offload_block_size=32,
                  kvprov_lmcache_inproc_chunk_size=128, kvprov_lmcache_mp_l1_size_gb=5) == [
        "kvprov_lmcache_inproc_chunk_size: only engine lmcache_inproc",
        "kvprov_lmcache_mp_l1_size_gb: only engine lmcache_mp",
        "kvprov_sglang_page_size: only engine sglang_hicache",
        "kvprov_vllm_offload_block_size: only engine vllm_offload"]
    # the vllm role's variables and the LMCache version: every vLLM engine reads them, SGLang none
    assert owners("sglang_hicache", kvprov_vllm_block_size=32, kvprov_lmcache_version="0.5.5") == [
        "kvprov_lmcache_version: only engine a vLLM engine", "kvprov_vllm_block_size: only engine a vLLM engine"]
    vllm = dict(kvprov_vllm_block_size=32, kvprov_lmcache_version="0.5.5")
    for engine in ("lmcache_mp", "lmcache_inproc", "vllm_baseline"):
        assert owners(engine, **vllm) == [], engine
    assert owners("vllm_offload", **vllm, kvprov_vllm_offload_cpu_bytes_to_use=1 << 30) == []


def test_lmcache_mp_server_ports_are_its_own_and_unique_on_the_host():
    def ports(engine: str, *instances) -> list[str]:
        return problems(kvprov_engine=engine, kvprov_engine_instances=list(instances))

    assert ports("lmcache_mp", {"name": "a", "port": 8000}, {"name": "b", "port": 8001}) == []
    # the defaults: port + 10000 for LMCache, port + 11000 for its metrics
    assert ports("lmcache_mp", {"name": "a", "port": 8000}, {"name": "b", "port": 18000}, {"name": "c", "port": 19000}) == [
        "error kvprov_engine_instances: instance a: lmcache_port 18000 (its default: set it) is already the port of "
        "instance b",
        "error kvprov_engine_instances: instance a: metrics_port 19000 (its default: set it) is already the port of "
        "instance c",
        "error kvprov_engine_instances: instance c: lmcache_port 29000 (its default: set it) is already the "
        "metrics_port of instance b"]
    assert ports("lmcache_mp", {"name": "a", "port": 8000, "lmcache_port": 9000},
                 {"name": "b", "port": 8001, "metrics_port": 9000}) == [
        "error kvprov_engine_instances: instance b: metrics_port 9000 is already the lmcache_port of instance a"]
    # an instance without a usable port is the setting rules' to report; the next one is still checked
    assert ports("lmcache_mp", {"name": "a", "port": "8000"}, {"name": "b", "port": 8001, "lmcache_port": 8001}) == [
        'error kvprov_engine_instances: instance a: port: expected an integer, got the string "8000": write 8000 '
        "without quotes",
        "error kvprov_engine_instances: instance b: lmcache_port 8001 is already the port of instance b"]
    assert ports("lmcache_inproc", {"name": "a", "port": "x"}, {"name": "b", "port": 8001, "metrics_port": 9001}) == [
        'error kvprov_engine_instances: instance a: port: expected an integer, got the string "x"',
        "error kvprov_engine_instances: instance b: metrics_port belongs to engine lmcache_mp, but this host's "
        "kvprov_engine is lmcache_inproc: one instance runs one engine"]


def test_an_instance_port_is_1_to_65535():
    def port(**keys) -> list[str]:
        return problems(kvprov_engine="lmcache_mp", kvprov_engine_instances=[{"name": "a", "port": 8000, **keys}])

    assert port(port=65535, lmcache_port=1, metrics_port=2) == port(lmcache_port=65535, metrics_port=3) == []
    assert port(port=65536) == [
        "error kvprov_engine_instances: instance a: port 65536 is out of range: must be 1..65535"]
    for value, shown in ((0, "the number 0"), (65536, "the number 65536"), ("9000", 'the string "9000"'),
                         (True, "the boolean true")):
        assert port(lmcache_port=value) == [
            f"error kvprov_engine_instances: instance a: lmcache_port: expected a port 1..65535, got {shown}"], value


def test_lmcache_inproc_settings_that_kvprov_owns_or_that_contradict():
    assert problems(kvprov_engine="lmcache_inproc", kvprov_lmcache_inproc_tier="nixl",
                    kvprov_lmcache_inproc_max_local_cpu_size=0) == [
        "error kvprov_lmcache_inproc_max_local_cpu_size: the nixl tier stages through LMCache's host DRAM pool "
        "(nixl_buffer_device cpu): LMCache refuses max_local_cpu_size 0 (\"requires max_local_cpu_size > 0\")"]
    assert problems(kvprov_engine="lmcache_inproc", kvprov_lmcache_inproc_max_local_cpu_size=0) == []
    assert problems(kvprov_engine="lmcache_inproc", kvprov_lmcache_inproc_tier="nixl",
                    kvprov_lmcache_inproc_max_local_cpu_size=1) == []
    owned = ["chunk_size", "extra_config", "gds_buffer_size", "gds_path", "local_cpu", "local_disk",
             "max_local_cpu_size", "max_local_disk_size", "nixl_buffer_device"]
    assert problems(kvprov_engine="lmcache_inproc",
                    kvprov_lmcache_inproc_config={key: 1 for key in owned + ["min_retrieve_tokens"]}) == [
        f"error kvprov_lmcache_inproc_config: {key} is set by kvprov's own variables (kvprov_lmcache_inproc_*): "
        "remove it here" for key in owned]


def test_lmcache_mp_host_beyond_loopback_is_said_to_have_no_effect():
    warning = ("warning kvprov_lmcache_mp_host: " + "has no effect: LMCache 0.5.6 only logs --host, and kvprov binds the server's request channel to a Unix socket only the engine user reaches (README, Security)")
    assert problems(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_host="::1") == []
    assert problems(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_host="10.0.0.2") == [warning]


def test_the_nixl_store_pool_holds_the_l2_size():
    def pool(size: int, gb: float, file_size: int = 8192000) -> list[str]:  # 2000 L1 pages of 4 KiB
        return problems(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_l2_type="nixl_store",
                        kvprov_lmcache_mp_nixl_pool_size=size, kvprov_lmcache_mp_nixl_file_size=file_size,
                        kvprov_lmcache_mp_l2_size_gb=gb, kvprov_lmcache_mp_l1_size_gb=0.5)  # L1 below the L2

    assert pool(123, 1) == []  # 123 x 8.192 MB is 1.008 GB
    assert pool(122, 1) == [
        "error kvprov_lmcache_mp_nixl_pool_size: pool_size 122 x file_size 8192000 = 0.999 GB is less than "
        'kvprov_lmcache_mp_l2_size_gb 1: stores fail with "Insufficient NIXL storage capacity" once it is full; '
        "set pool_size to at least 123"]
    # LMCache 0.5.6 refuses a file_size that is not a whole number of 4 KiB L1 pages
    assert pool(1000, 1, 1000000) == [
        "error kvprov_lmcache_mp_nixl_file_size: 1000000 is not a multiple of LMCache's 4096-byte L1 page: "
        'nixl_store refuses it at start ("file_size (1000000) must be a multiple of page_size (4096)"); use 999424']


def test_a_gpu_block_of_0_is_the_range_rules_to_report():
    assert problems(kvprov_engine="vllm_offload", kvprov_vllm_offload_cpu_bytes_to_use=1 << 30,
                    kvprov_vllm_offload_block_size=64, kvprov_vllm_block_size=1) == []
    assert problems(kvprov_engine="vllm_offload", kvprov_vllm_offload_cpu_bytes_to_use=1 << 30,
                    kvprov_vllm_block_size=0) == [
        "error kvprov_vllm_block_size: 0 is out of range: must be >= 1"]


# ---------------------------------------------------------------------------- the evictor's marks

def test_the_evictor_marks_are_compared_only_when_each_is_in_range():
    def marks(high: int, low: int) -> list[str]:
        return problems(kvprov_engine_evict_high_percent=high, kvprov_engine_evict_low_percent=low)

    assert marks(1, 1) == [
        "error kvprov_engine_evict_low_percent: 1 is not below kvprov_engine_evict_high_percent 1: the evictor "
        "stops under the low mark once the high one is reached; set it lower, e.g. 0"]
    assert marks(100, 99) == marks(1, 0) == []
    assert marks(0, 0) == ["error kvprov_engine_evict_high_percent: 0 is out of range: must be 1..100 (percent of "
                           "the volume, and of the limit)"]
    assert marks(90, 100) == ["error kvprov_engine_evict_low_percent: 100 is out of range: must be 0..99 (percent, "
                              "below the high mark)"]


# ---------------------------------------------------------------------------- the acceptance test's file size

def bench(layout: str = "page_first", **geometry) -> list[str]:
    values = dict(kvprov_bench_model_layers=3, kvprov_sglang_page_size=1, kvprov_bench_model_kv_heads=8,
                  kvprov_sglang_tp_size=2, kvprov_bench_model_head_dim=128, kvprov_bench_kv_dtype_bytes=2)
    found = problems(kvprov_sglang_hicache_mem_layout=layout, **{**values, **geometry})
    return [line.split(" (layers x")[0] for line in found]


def test_the_acceptance_tests_kv_file_size_must_suit_o_direct():
    """layers x page size x KV heads per TP rank x head dim x dtype bytes, x2 unless page_first*."""
    prefix = "error kvprov_sglang_page_size: the acceptance test's KV files would be"
    assert bench() == [f"{prefix} 3072 bytes"]  # 3 x 1 x 4 x 128 x 2
    assert bench("page_first_direct") == [f"{prefix} 3072 bytes"]
    assert bench("layer_first") == [f"{prefix} 6144 bytes"]
    assert bench(kvprov_bench_model_kv_heads=1, kvprov_bench_kv_dtype_bytes=1) == [f"{prefix} 384 bytes"]  # 1 head/rank
    assert bench(kvprov_bench_model_layers=4, kvprov_sglang_tp_size=1) == []  # 4 x 1 x 8 x 128 x 2 = 8192
    # a geometry value or a layout the other rules reject: only they report
    assert bench(kvprov_sglang_page_size=0) == ["error kvprov_sglang_page_size: 0 is out of range: must be >= 1"]
    assert bench("no_such") == ["error kvprov_sglang_hicache_mem_layout: must be one of layer_first, page_first, "
                                'page_first_direct, page_first_kv_split, page_head; got the string "no_such"']


# ---------------------------------------------------------------------------- NFS mount options

def test_proto_belongs_to_the_profile():
    tcp = {"kvprov_storage_profile": "nfs_tcp", "kvprov_storage_pnfs_layout": "none"}
    assert problems(**tcp, kvprov_storage_extra_options=["proto=tcp6"]) == [
        'error kvprov_storage_extra_options: "proto=tcp6" (IPv6) cannot be given here: the kvcache_mount role sets '
        "proto=tcp itself and rejects proto= in the extra options"]
    assert problems(**tcp, kvprov_storage_extra_options=["proto=rdma"]) == [
        'error kvprov_storage_extra_options: "proto=rdma" contradicts profile nfs_tcp (proto=tcp): remove it, or set '
        "kvprov_storage_profile: netapp_pnfs_rdma"]


def test_locks_the_server_does_not_hold_are_refused_on_the_shared_volume():
    found = problems(kvprov_storage_extra_options=["nolock", "local_lock=flock,lock", "local_lock=none", "local_lock=all"])
    tail = (" keeps locks on this host only, but the KV volume is shared: the evictor's lease (an fcntl lock on the "
            "namespace) would no longer keep two hosts' evictors apart; remove it")
    assert found == [f'error kvprov_storage_extra_options: "{o}"{tail}' for o in ("nolock", "local_lock=flock",
                                                                                   "local_lock=all")]
    assert problems(kvprov_storage_extra_options=["lock", "local_lock=none"]) == []


def test_extra_options_only_ansible_can_read_are_left_alone():
    assert problems(kvprov_storage_extra_options=["noatime", "{{ more }}"]) == []
    assert problems(kvprov_storage_extra_options=["noatime", 5]) == [
        "error kvprov_storage_extra_options: item 2: expected a string, got the number 5"]


def test_nconnect_and_trunking_are_compared_only_when_both_are_known():
    assert problems(kvprov_storage_nconnect=4, kvprov_storage_trunking="{{ trunking }}",
                    kvprov_storage_extra_options=["max_connect=2", "nconnect=2"]) == []


def test_one_nconnect_already_turns_auto_trunking_off():
    assert problems(kvprov_storage_nconnect=1, kvprov_storage_extra_options=["nconnect=2"]) == [
        'error kvprov_storage_extra_options: "nconnect=2" conflicts with kvprov_storage_nconnect: 1 (the mount would '
        "get both): remove it from the extra options"]
    assert problems(kvprov_storage_nconnect=1, kvprov_storage_extra_options=["max_connect=2"]) == [
        'error kvprov_storage_nconnect: nconnect 1 together with session trunking ("max_connect" in '
        "kvprov_storage_extra_options): use one or the other (NetApp: with both, only the metadata server "
        "benefits); set kvprov_storage_trunking: none to keep nconnect, or kvprov_storage_nconnect: 0"]


def test_an_instance_storage_dir_must_be_a_string():
    assert problems(kvprov_engine_instances=[{"name": "a", "port": 8000, "storage_dir": 5}]) == [
        "error kvprov_engine_instances: instance a: storage_dir expected a string, got the number 5"]


def test_a_storage_dir_off_the_mount_is_reported_at_its_own_line():
    text = "kvprov_engine_instances:\n  - name: c\n    port: 8002\n    storage_dir: /var/tmp/c\n"
    h = host()
    h.vars["kvprov_engine_instances"] = inventory.Var(
        "kvprov_engine_instances", yaml.safe_load(text)["kvprov_engine_instances"], inventory.Origin("inv.yml", 1),
        yaml.compose(text).value[0][1])
    assert [(p.line, p.message.split(":")[0]) for p in check.check_host_values(h, SPECS)] == [(4, "instance c")]


def test_lmcache_driven_transfers_need_a_gpu_worker():
    error = ("error kvprov_lmcache_mp_transfer_mode: lmcache_driven makes a CPU vLLM worker hang at start for ever (no "
             "handler for register_kv_cache_engine_driven_context): use auto")
    assert problems(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_transfer_mode="lmcache_driven",
                    kvprov_engine_require_gpu=False) == [error]
    assert problems(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_transfer_mode="lmcache_driven") == []
    assert problems(kvprov_engine="lmcache_mp", kvprov_engine_require_gpu=False) == []


def test_cuda_visible_devices_are_indexes_or_uuids_separated_by_commas():
    def devices(value: str) -> list[str]:
        return problems(kvprov_engine_instances=[{"name": "a", "port": 8000, "cuda_visible_devices": value}])

    assert devices("0,1") == devices("GPU-8f3c2a1e-0b1d") == devices("") == []
    assert devices("0;1") == ['error kvprov_engine_instances: instance a: cuda_visible_devices "0;1" must be GPU indexes '
                              'or UUIDs separated by commas, e.g. "0,1"']


# ---------------------------------------------------------------------------- where the engine loads code from

def test_a_loader_path_on_the_volume_in_a_world_writable_directory_or_relative_is_refused():
    def loaders(**env):
        return problems(kvprov_engine_environment=env)

    why = ": the engine would load code from it; name a root-owned directory"
    assert loaders(LD_PRELOAD="lib.so") == [f"error kvprov_engine_environment: LD_PRELOAD: lib.so is a relative path{why}"]
    assert loaders(PYTHONHOME="/opt/ok::/mnt/kvcache/x /tmp/y") == [  # the first bad part of each variable
        f"error kvprov_engine_environment: PYTHONHOME: /mnt/kvcache/x is on the shared KV volume, which every "
        f"host's root writes{why}"]
    assert loaders(LD_LIBRARY_PATH="/usr/lib:/dev/shm/z") == [
        f"error kvprov_engine_environment: LD_LIBRARY_PATH: /dev/shm/z is in a world-writable directory{why}"]
    assert loaders(PYTHONHOME="/opt/a:/usr/lib/b /var/lib/c", LD_AUDIT="/opt/x.so") == []
    assert loaders(OTHER="/tmp/x", HOME="rel") == []  # not a loader variable
    assert problems(kvprov_engine_environment={"PYTHONHOME": "/mnt/kv2/x"}, kvprov_storage_mount_point="/mnt/kv") == []
    assert problems(kvprov_engine_environment={"PYTHONSTARTUP": "/mnt/kv/x"}, kvprov_storage_mount_point="/mnt/kv")


def test_the_engines_home_is_its_own_local_directory():
    assert problems(kvprov_engine_home="/var/lib/kvprov-engine") == []
    # a leading // is / on Linux (normpath keeps it: POSIX leaves "//" to the system): //etc is /etc
    for home in ("/", "/usr/local/x", "/etc", "//etc", "///etc/", "//", "//usr/local/x"):
        assert problems(kvprov_engine_home=home) == [
            f"error kvprov_engine_home: {home} is a system directory: the engine user would own and write it; use a "
            "directory of its own, e.g. /var/lib/kvprov-engine"]
    assert problems(kvprov_engine_home="/mnt/kvcache/home") == [
        "error kvprov_engine_home: /mnt/kvcache/home is on the shared KV volume (/mnt/kvcache): any host's root "
        "could plant the engine's Python packages or configuration there; use a local directory, e.g. "
        "/var/lib/kvprov-engine"]
    assert problems(kvprov_engine_home="/mnt/kvcache2/home") == []
    assert problems(kvprov_engine_home="//mnt/kvcache/home")[0].startswith(
        "error kvprov_engine_home: //mnt/kvcache/home is on the shared KV volume (/mnt/kvcache)")
    assert [p for p in problems(kvprov_engine_home="/srv/home", kvprov_storage_mount_point="/")
            if "kvprov_engine_home" in p] == []  # a mount point of / is refused by itself


def test_what_root_writes_where_the_inventory_says_stays_in_kvprovs_directories():
    """#38 item 3: a root-owned file in /etc/profile.d runs in every root login shell; a bench
    directory in /etc/sudoers.d breaks sudo."""
    why = ("is not in a directory of kvprov's: root writes it there, where other programs read their files; put it "
           "in a directory whose name starts with kvprov under /etc, /opt, /srv, /var/lib (e.g. /opt/kvprov/…)")
    assert problems(kvprov_nixl_config_path="/etc/profile.d/kvprov-nixl.sh") == [
        f"error kvprov_nixl_config_path: /etc/profile.d/kvprov-nixl.sh {why}"]
    assert problems(kvprov_gds_cufile_path="/etc/sudoers.d/cufile.json") == [
        f"error kvprov_gds_cufile_path: /etc/sudoers.d/cufile.json {why}, or use /etc/cufile.json"]
    for name in ("kvprov_nixl_venv", "kvprov_sglang_venv"):
        for path in ("/usr/local", "/opt/nixl", "/etc/kvprov/../profile.d/x", "/var/lib/dpkg/kvprov", "/opt"):
            assert [p for p in problems(**{name: path}) if "not in a directory of kvprov's" in p] == (
                [] if ".." in path else [f"error {name}: {path} {why}"]), (name, path)  # ..: refused as it is
    assert problems(kvprov_gds_cufile_path="/etc/cufile.json", kvprov_nixl_config_path="/etc/kvprov/nixl.toml",
                    kvprov_nixl_venv="/opt/kvprov/nixl", kvprov_sglang_venv="/var/lib/kvprov-venvs/sglang") == []
    assert problems(kvprov_bench_dir="/etc/sudoers.d/x") == [
        "error kvprov_bench_dir: /etc/sudoers.d/x is not on the KV mount (/mnt/kvcache): the acceptance test writes "
        "its files there as root; use a directory on the mount, e.g. /mnt/kvcache/<host>"]
    assert problems(kvprov_bench_dir="/mnt/kvcache2/x") != [] and problems(kvprov_bench_dir="/mnt/kvcache/gpu1") == []
    assert problems(kvprov_bench_dir="/data/kv/b", kvprov_storage_mount_point="/data/kv") == []


def test_names_and_sharing_that_pass():
    assert problems(ansible_host="gpu1.example.com") == problems(ansible_host="[fd00::1]") == []
    assert problems(kvprov_engine="lmcache_mp", kvprov_engine_storage_sharing="namespace") == []  # can be shared
    from kvprov.check.host import HostView

    view = HostView(host(ansible_port=2222, kvprov_engine_port_typo="x"), SPECS)  # no role specs them: as given
    assert (view.get("ansible_port"), view.get("kvprov_engine_port_typo"), view.get("absent")) == (2222, "x", None)


def test_the_accounts_deploy_never_takes_over():
    from kvprov.check import bounds

    base = ("daemon bin sys sync games man lp mail news uucp proxy www-data backup list irc gnats nobody nogroup "
            "systemd-network systemd-resolve systemd-timesync systemd-journal messagebus sshd _apt")  # base-passwd
    rhel = "adm shutdown halt operator ftp polkitd dbus rpc rpcuser statd _rpc nfsnobody"  # RHEL's setup, NFS
    daemons = "postfix chrony ntp tss"
    cloud = "admin ubuntu debian ec2-user centos cloud-user ansible"  # cloud images' login users, Ansible's
    for name in f"{base} {rhel} {daemons} {cloud}".split():
        [f] = bounds.engine_user(name)
        assert f.message.startswith(f'"{name}" is an account of the system or of another service: '), name
    assert bounds.engine_user("kvprov-engine") == [] and bounds.engine_user("root") == []  # (root: user_name's)


def test_host_rules_name_their_variable_and_pass_over_what_other_rules_refuse():
    assert problems(ansible_host="evil:80/x?") == [
        'error ansible_host: "evil:80/x?" is not an address or a DNS name (a port goes in ansible_port): kvprov '
        "builds URLs from it and sends the engine's API key there"]
    assert problems(kvprov_engine_host="gpu1.example.com") == [  # not an address: no exposure rule on top
        'error kvprov_engine_host: "gpu1.example.com" is not an IP address to listen on (e.g. 127.0.0.1, or 0.0.0.0 '
        "for every interface)"]
    assert problems(kvprov_engine_instances=[{"name": "a", "port": 8000}, "junk"]) == [
        'error kvprov_engine_instances: item 2: expected a mapping, got the string "junk"']


def test_what_kvprov_connects_to_never_starts_with_a_dash_nor_hides_a_terminal_escape():
    """#38 (Low): without ansible_host the host's name is what ssh gets; a line printed for a host
    shows its name's control characters escaped."""
    def found(name, **values):
        return [p for p in check.check_host_values(check.host_from_values(name, {**SERVER, **values}, DEFAULTS),
                                                   SPECS) if p.variable in ("inventory_hostname", "ansible_host")]

    why = ("is what kvprov connects to (no ansible_host), but it is not an address or a DNS name (letters, digits, "
           "_ . -, not starting with -, which ssh would take as an option); set ansible_host")
    [p] = found("-oProxyCommand")
    assert p.format() == f'host -oProxyCommand: inventory_hostname: the host name "-oProxyCommand" {why}'
    [p] = found("gpu\x1b]0;x\x07")
    assert p.format() == f'host gpu\\u001b]0;x\\u0007: inventory_hostname: the host name "gpu\\u001b]0;x\\u0007" {why}'
    assert found("-oProxyCommand", ansible_host="10.0.0.1") == []  # an alias: ssh gets the address
    assert [p.message for p in found("gpu1", ansible_host="-F/x")] == [
        '"-F/x" is not an address or a DNS name (a port goes in ansible_port): kvprov builds URLs from it and sends '
        "the engine's API key there"]
    assert found("gpu-a01.corp.example.com") == found("10.1.2.3") == found("fd00::1") == []


def test_lmcache_mp_page_and_pool_sizes_with_their_fixes():
    mp = {"kvprov_engine": "lmcache_mp", "kvprov_lmcache_mp_l2_type": "nixl_store"}

    def found(**values):
        return {p.split(": ", 1)[0]: p.split(": ", 1)[1] for p in problems(**mp, **values) if p.startswith("error")}

    assert found(kvprov_lmcache_mp_l1_size_gb=1.1)["error kvprov_lmcache_mp_l1_size_gb"].endswith("use e.g. 1.0")
    assert found(kvprov_lmcache_mp_l1_size_gb=2.3)["error kvprov_lmcache_mp_l1_size_gb"].endswith("use e.g. 2.25")
    assert found(kvprov_lmcache_mp_l1_size_gb=0.1)["error kvprov_lmcache_mp_l1_size_gb"].endswith("use e.g. 0.25")
    assert found(kvprov_lmcache_mp_nixl_file_size=5000)["error kvprov_lmcache_mp_nixl_file_size"].endswith(
        "use 4096")
    pool = {"kvprov_lmcache_mp_l2_size_gb": 1, "kvprov_lmcache_mp_nixl_file_size": 250_000_000}
    assert "error kvprov_lmcache_mp_nixl_pool_size" not in found(**pool, kvprov_lmcache_mp_nixl_pool_size=4)  # exactly
    assert found(**pool, kvprov_lmcache_mp_nixl_pool_size=3)["error kvprov_lmcache_mp_nixl_pool_size"].endswith(
        "set pool_size to at least 4")


def test_secret_looking_names_with_a_flag_value_and_s3_keys_are_left_alone():
    from kvprov.check import bounds

    for flag in ("", "0", "1", "true", "false", "yes", "no", "on", "off", "none", " On "):
        assert bounds.secret_environment({"HF_HUB_DISABLE_IMPLICIT_TOKEN": flag}) == [], flag
    assert [f.path for f in bounds.secret_environment({"HF_HUB_DISABLE_IMPLICIT_TOKEN": "2"})] == [
        ("HF_HUB_DISABLE_IMPLICIT_TOKEN",)]
    assert bounds.secret_environment({"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s",
                                      "aws_session_token": "t"}) == []  # check.s3_secrets_in_environment's


def test_loader_paths_after_other_variables_and_on_a_volume_at_the_root():
    why = ": the engine would load code from it; name a root-owned directory"
    assert problems(kvprov_engine_environment={"OTHER": "/x", "PYTHONHOME": "rel"}) == [
        f"error kvprov_engine_environment: PYTHONHOME: rel is a relative path{why}"]
    assert f"error kvprov_engine_environment: PYTHONHOME: /opt/x is on the shared KV volume, which every host's root " \
           f"writes{why}" in problems(kvprov_engine_environment={"PYTHONHOME": "/opt/x"}, kvprov_storage_mount_point="/")
    assert [p for p in problems(kvprov_engine_home=5) if not p.startswith("error kvprov_engine_home: ")] == []


def test_every_system_directory_loader_variable_and_world_writable_directory():
    system = ("/etc /usr /bin /sbin /lib /lib32 /lib64 /libx32 /boot /proc /sys /dev /run /root /var/lib/dpkg "
              "/var/lib/apt /var/log /var/spool /var/cache /opt/nvidia /tmp /var/tmp").split()
    for d in system:
        assert problems(kvprov_engine_home=f"{d}/engine")[0].startswith(
            f"error kvprov_engine_home: {d}/engine is a system directory"), d
    # PYTHONPATH: kvprov's own (test_what_kvprovs_units_set_is_refused_in_extra_args_and_environment)
    loaders = ("LD_PRELOAD LD_LIBRARY_PATH LD_AUDIT PYTHONHOME PYTHONSTARTUP PYTHONUSERBASE "
               "PYTHONPYCACHEPREFIX PATH CUDA_HOME TRITON_CACHE_DIR TORCHINDUCTOR_CACHE_DIR VLLM_CACHE_ROOT HF_HOME "
               "HF_MODULES_CACHE").split()
    for key in loaders:
        assert problems(kvprov_engine_environment={key: "rel"}) == [
            f"error kvprov_engine_environment: {key}: rel is a relative path: the engine would load code from it; "
            "name a root-owned directory"], key
    for d in ("/tmp", "/var/tmp", "/dev/shm", "/run/shm"):
        assert problems(kvprov_engine_environment={"PYTHONHOME": f"{d}/x"}) == [
            f"error kvprov_engine_environment: PYTHONHOME: {d}/x is in a world-writable directory: the engine would "
            "load code from it; name a root-owned directory"], d


def test_what_kvprovs_units_set_is_refused_in_extra_args_and_environment():
    """#38: the engine takes the last of a flag given twice, and the inventory's environment comes
    last in the unit: `--host=0.0.0.0` in the extra arguments would open the API on every interface
    past the exposure rule and the allow-list, PYTHONPATH would replace the code kvprov loads."""
    def said(flag: str, arg: str, i: int, where: str) -> str:
        return (f'error kvprov_engine_extra_args: item {i}: "{arg}" sets {flag}, which kvprov manages ({where}): the '
                "engine takes the last one, so it would replace kvprov's")

    assert problems(kvprov_engine_extra_args=["--host=0.0.0.0", "--port", "8443", "--max-num-seqs", "8"]) == [
        said("--host", "--host=0.0.0.0", 1, "kvprov_engine_host"), said("--port", "--port", 2, "kvprov_engine_instances, port")]
    # underscores, abbreviations argparse expands, the short form, SGLang's flags
    for engine, arg, flag in (("lmcache_mp", "--ssl_keyfile=/x", "--ssl-keyfile"),
                              ("lmcache_mp", "--midd", "--middleware"), ("lmcache_inproc", "-tp", "-tp"),
                              ("lmcache_inproc", "--served-model", "--served-model-name"),
                              ("sglang_hicache", "--hicache-storage-backend", "--hicache-storage-backend"),
                              ("vllm_baseline", "--root-path=/v1", "--root-path"), ("lmcache_mp", "--uds", "--uds"),
                              ("sglang_hicache", "--tp-size", "--tp-size"), ("sglang_hicache", "--host", "--host")):
        [found] = problems(kvprov_engine=engine, kvprov_engine_extra_args=[arg])
        assert found.startswith(f'error kvprov_engine_extra_args: item 1: "{arg}" sets {flag}, '), (arg, found)
    # what the other engine's unit sets is the engine's own (and keyed: kvprov/namespace.py)
    assert problems(kvprov_engine="sglang_hicache", kvprov_engine_extra_args=["--dtype", "bfloat16"]) == []
    assert problems(kvprov_engine="lmcache_mp", kvprov_engine_extra_args=["--page-size", "64"]) == []
    # the old name of the variable is named when it is the one used
    [_, found] = problems(kvprov_engine="sglang_hicache", kvprov_sglang_extra_args=["--page-size", "64"])  # renamed
    assert found.startswith('error kvprov_sglang_extra_args: item 1: "--page-size" sets --page-size, '), found
    # what kvprov does not set, values that look like flags, and too short a prefix to be one
    assert problems(kvprov_engine_extra_args=["--max-num-seqs", "8", "--enforce-eager", "--hicache-ratio", "2",
                                              "host", "--h", "--po"]) == []
    assert problems(kvprov_engine_environment={"PYTHONPATH": "/opt/mine", "CUDA_VISIBLE_DEVICES": "1",
                                               "TOKENIZERS_PARALLELISM": "false"}) == [
        "error kvprov_engine_environment: PYTHONPATH: kvprov's unit sets it for the code it loads (the vLLM key "
        "guard, SGLang's key redaction, LMCache's socket and fail-open adapter), and the inventory's would replace it "
        "in the unit",
        "error kvprov_engine_environment: CUDA_VISIBLE_DEVICES: kvprov_engine_instances sets it (cuda_visible_devices), "
        "and the inventory's would replace it in the unit"]
    for name in ("CREDENTIALS_DIRECTORY", "LMCACHE_CONFIG_FILE", "LMCACHE_TRACK_USAGE", "DO_NOT_TRACK",
                 "SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR"):
        found = problems(kvprov_engine_environment={name: "x"})  # CREDENTIALS_DIRECTORY also looks like a secret
        assert any(p.startswith(f"error kvprov_engine_environment: {name}: ") and p.endswith(
            "and the inventory's would replace it in the unit") for p in found), found


def test_a_wait_on_storage_without_a_bound_is_a_warning_and_the_deadline_a_positive_number():
    """#37: SGLang's wait_complete waits for the storage for ever (a hung storage hangs every
    request); timeout, the default, admits the request without its stored prefix after the deadline."""
    [p] = problems(kvprov_sglang_hicache_prefetch_policy="wait_complete")
    assert p.startswith("warning kvprov_sglang_hicache_prefetch_policy: wait_complete waits for the storage tier "
                        "without a bound")
    assert problems(kvprov_sglang_hicache_prefetch_policy="timeout") == []
    assert problems(kvprov_sglang_hicache_prefetch_policy="best_effort") == []
    # another engine does not read it: only the other-engine warning, not this one
    other = problems(kvprov_engine="lmcache_mp", kvprov_sglang_hicache_prefetch_policy="wait_complete")
    assert other and not [q for q in other if "without a bound" in q], other
    assert problems(kvprov_sglang_hicache_prefetch_timeout_base=0) == [
        "error kvprov_sglang_hicache_prefetch_timeout_base: must be more than 0, got 0"]
    assert problems(kvprov_sglang_hicache_prefetch_timeout_per_ki_token=-0.1) == [
        "error kvprov_sglang_hicache_prefetch_timeout_per_ki_token: must be 0 or more, got -0.1"]
    assert problems(kvprov_sglang_hicache_prefetch_timeout_base=0.5, kvprov_sglang_hicache_prefetch_timeout_per_ki_token=0) == []


def test_the_mount_waits_are_ranged():
    assert problems(kvprov_storage_timeo=0) == [
        "error kvprov_storage_timeo: 0 is out of range: must be 1..600 (tenths of a second, as nfs(5) counts them)"]
    assert problems(kvprov_storage_retrans=11) == ["error kvprov_storage_retrans: 11 is out of range: must be 0..10"]
    assert problems(kvprov_storage_soft=False, kvprov_storage_timeo=600, kvprov_storage_retrans=0) == []


def test_every_flag_the_rendered_api_units_carry_is_refused_in_the_extra_arguments(tmp_path):
    """The managed table against the templates (one source of truth): every flag kvprov renders into
    an engine's API unit (the example fleet: every engine) is refused in kvprov_engine_extra_args for
    that engine, but for the few the inventory may give. TLS flags come only with a certificate."""
    from kvprov.validate import parsers
    from kvprov.validate.checks.engine import server_command
    from tests.conftest import ROOT, kvprov

    kvprov("render", str(ROOT / "inventory/example.yml"), "--out", str(tmp_path), check=True)
    # not kvprov's to guard: the namespace keys --revision and --max-model-len, the shared-namespace
    # rule refuses --config and --kv-transfer-config, the rest changes neither exposure nor bytes
    free = {"--revision", "--max-model-len", "--config", "--kv-transfer-config", "--enable-prefix-caching",
            "--enable-metrics", "--model-type"}
    seen = {}
    for unit in tmp_path.glob("*/etc/systemd/system/kvprov-*.service"):
        start = parsers.unit_value(parsers.parse_unit(unit.read_text()), "Service", "ExecStart")
        kind, args = server_command(parsers.exec_argv(start, from_show=False))
        if kind in ("vllm", "sglang"):
            seen.setdefault(kind, set()).update(a.split("=", 1)[0] for a in args if a.startswith("-"))
    assert set(seen) == {"vllm", "sglang"}, seen
    for kind, engine in (("vllm", "lmcache_mp"), ("sglang", "sglang_hicache")):
        flags = seen[kind] - free | {"--ssl-certfile", "--ssl-keyfile", "--ssl-ca-certs", "--ssl-cert-reqs"}
        for flag in sorted(flags):
            found = problems(kvprov_engine=engine, kvprov_engine_extra_args=[flag, "x"])
            assert any(f'item 1: "{flag}" sets {flag}, which kvprov manages' in p for p in found), (engine, flag, found)
    # and the vLLM engines' own short form of --tensor-parallel-size
    assert any('"-tp" sets -tp' in p for p in problems(kvprov_engine="lmcache_mp", kvprov_engine_extra_args=["-tp"]))


def test_the_lmcache_socket_variable_is_kvprovs():
    """#38: KVPROV_LMCACHE_URL binds LMCache MP's request channel to the engine user's socket; the
    inventory's environment comes last in the unit and would move it (to a TCP port, say)."""
    assert problems(kvprov_engine="lmcache_mp", kvprov_engine_environment={"KVPROV_LMCACHE_URL": "ipc:///tmp/x"}) == [
        "error kvprov_engine_environment: KVPROV_LMCACHE_URL: kvprov sets it: the LMCache server's request channel, "
        "a Unix socket only the engine user reaches, and the inventory's would replace it in the unit"]
