"""kvprov check's rules on single values and the argument specs they start from: each names
what is wrong, exactly."""

import dataclasses
import datetime

import pytest

from kvprov import check
from kvprov.check import Finding, VarSpec


def test_a_spec_option_without_a_type_is_a_string(tmp_path):
    meta = tmp_path / "role_a/meta"
    meta.mkdir(parents=True)
    (meta / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    options:\n      kvprov_a: {}\n      kvprov_b: {type: list, elements: int}\n"
        "      kvprov_c:\n        choices: [x, y]\n")
    assert check.read_specs(tmp_path) == {
        "kvprov_a": VarSpec("kvprov_a", "role_a", "str"),
        "kvprov_b": VarSpec("kvprov_b", "role_a", "list", "int"),
        "kvprov_c": VarSpec("kvprov_c", "role_a", "str", None, ("x", "y"))}


def test_specs_and_findings_are_values_no_rule_can_change():
    with pytest.raises(dataclasses.FrozenInstanceError):
        VarSpec("kvprov_a", "r").type = "int"  # type: ignore[misc]
    [finding] = check.positive_number(0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        finding.message = "x"  # type: ignore[misc]
    assert len({VarSpec("kvprov_a", "r"), VarSpec("kvprov_a", "r"), Finding("m"), Finding("m")}) == 2


def test_booleans_written_as_words_in_quotes_say_how_to_write_them():
    for word in ("on", "off", "y", "n", "Yes", " FALSE "):
        plain = word.strip().lower()
        assert check.type_error(word, "bool") == (
            f'expected a boolean, got the string "{word}" (a boolean given as a string): write {plain} without quotes')
    assert check.type_error("maybe", "bool") == 'expected a boolean (true or false), got the string "maybe"'


def test_a_yaml_date_is_described_as_one():
    day = datetime.date(2024, 1, 1)
    assert check.describe(day) == check.describe(day, "2024-01-01") == "the date 2024-01-01"
    assert check.type_error(day, "str", "2024-01-01") == 'expected a string, got the date 2024-01-01: quote it ("2024-01-01")'


def test_a_template_with_only_statements_is_left_to_ansible():
    assert check.is_template("{% if x %}a{% endif %}") and check.is_template("{{ x }}")
    assert not check.is_template("100%") and not check.is_template({"{{": 1})


def test_extra_options_a_variable_sets_name_that_variable():
    assert [f.message.split(": ")[0] for f in check.extra_options(["rsize=65536,wsize=65536", "lookupcache=none"])] == [
        '"rsize=65536" is set by kvprov_storage_rsize', '"wsize=65536" is set by kvprov_storage_wsize',
        '"lookupcache=none" is set by kvprov_storage_lookupcache']


def test_the_storage_server_is_an_address_without_path_or_colon():
    assert check.storage_server("nfs.example.com") == check.storage_server("[fd00::5]") == []
    for value in ("10.0.0.5:", "10.0.0.5:/kvcache", "nfs/kv"):
        assert check.storage_server(value) == [Finding(
            f'"{value}" must be only the server address (the NetApp data LIF); put the path in kvprov_storage_export')]


def test_s3_credentials_are_found_under_any_of_their_names_at_any_depth():
    config = {"access_key": "A", "extra_config": {"AWS_ACCESS_KEY_ID": "A", "s3": [{"aws_session_token": "T"}]},
              "secret_key": "S", "Session_Token": "T", "aws_secret_access_key": "S", "bucket": "kv"}
    assert [f.path for f in check.s3_secrets_in(config)] == [
        ("access_key",), ("extra_config", "AWS_ACCESS_KEY_ID"), ("extra_config", "s3", 0, "aws_session_token"),
        ("secret_key",), ("Session_Token",), ("aws_secret_access_key",)]


def test_empty_controller_files_mean_none():
    assert check.s3_credentials_file("") == check.storage_credentials_file("") == check.controller_file("") == []
    assert check.secret_file("") == []


def test_a_bad_secret_file_is_an_error_before_its_mode_warning(tmp_path):
    bad = tmp_path / "key"
    bad.write_text("two words\n")
    bad.chmod(0o644)
    assert [f.severity for f in check.secret_file(str(bad))] == ["error", "warning"]


def test_a_secret_file_that_cannot_be_read_says_why_without_the_path_twice():
    assert check.secret_file("/proc/self/mem") == [Finding('"/proc/self/mem" cannot be read: Input/output error')]


def test_a_storage_dir_that_is_no_string():
    assert check.storage_dir_errors(5) == ["expected a string, got the number 5"]
    assert check.storage_dir_errors(None) == ['expected a string, got nothing (null): give a value, or "" for empty']


# every integer variable's range, at both edges (the table kvprov check holds, written out)
RANGES = [
    ("kvprov_storage_nfs_port", 0, 65535, " (0 takes the profile's port: 20049 RDMA, 2049 TCP)"),
    ("kvprov_storage_rsize", 4096, 1048576, ""), ("kvprov_storage_wsize", 4096, 1048576, ""),
    ("kvprov_storage_max_connect", 1, 16, ""), ("kvprov_storage_nconnect", 0, 16, " (0 leaves nconnect unset)"),
    ("kvprov_storage_mount_timeout", 1, None, " (seconds)"),
    ("kvprov_host_memory_mb", 0, None, " (MiB of host memory, MemTotal; 0: read on the host by the preflight)"),
    ("kvprov_sglang_tp_size", 1, None, ""), ("kvprov_sglang_page_size", 1, None, ""),
    ("kvprov_sglang_hicache_size", 0, None, " (GB of host DRAM per TP rank)"),
    ("kvprov_bench_model_layers", 1, None, ""), ("kvprov_bench_model_kv_heads", 1, None, ""),
    ("kvprov_bench_model_head_dim", 1, None, ""), ("kvprov_bench_files", 1, None, ""),
    ("kvprov_bench_seconds", 1, None, " (seconds per pass)"),
    ("kvprov_bench_concurrency", 0, 1024, " (0 takes the NIXL plugin's thread_count)"),
    ("kvprov_engine_uid", 0, 2**31 - 1, " (0: any)"), ("kvprov_engine_hash_seed", 0, 4294967295, ""),
    ("kvprov_deploy_max_fail_percentage", 0, 100, " (percent of a batch)"),
    ("kvprov_vllm_block_size", 1, None, ""), ("kvprov_vllm_tensor_parallel_size", 1, None, ""),
    ("kvprov_vllm_max_model_len", 0, None, " (0: the model's own)"),
    ("kvprov_vllm_offload_cpu_bytes_to_use", 0, None, ""), ("kvprov_vllm_offload_block_size", 1, None, ""),
    ("kvprov_vllm_offload_read_threads", 1, None, ""), ("kvprov_vllm_offload_write_threads", 1, None, ""),
    ("kvprov_vllm_offload_shm_headroom_bytes", 0, None, ""),
    ("kvprov_lmcache_mp_nixl_file_size", 4096, None, " (bytes; at least one KV chunk)"),
    ("kvprov_lmcache_mp_nixl_pool_size", 1, None, ""), ("kvprov_lmcache_inproc_chunk_size", 1, None, ""),
    ("kvprov_lmcache_inproc_nixl_pool_size", 1, None, ""), ("kvprov_lmcache_inproc_gds_buffer_size", 1, None, " (MiB)"),
    ("kvprov_lmcache_mp_l2_lookup_timeout", 0, 3600, " seconds (0: LMCache's adapter alone, no bound)"),
]


def test_every_integer_range_at_its_edges():
    from kvprov.check.values import VALUE_RULES, Finding

    for name, lo, hi, note in RANGES:
        rule = VALUE_RULES[name]
        span = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        assert rule(lo) == [], name
        assert rule(lo - 1) == [Finding(f"{lo - 1} is out of range: must be {span}{note}")], name
        if hi is not None:
            assert rule(hi) == [] and rule(hi + 1) == [Finding(f"{hi + 1} is out of range: must be {span}{note}")], name
    assert VALUE_RULES["kvprov_storage_rsize"](8192 + 1) == [Finding("8193 is not a multiple of 4096: use e.g. 8192")]
    # seconds, not only whole ones: the fail-open bounds the LMCache adapter takes (kvprov_l2_failopen.py.j2)
    probe = VALUE_RULES["kvprov_lmcache_mp_l2_probe_interval"]
    assert probe(0.5) == [] and probe(3600) == [] and VALUE_RULES["kvprov_lmcache_mp_l2_lookup_timeout"](0.25) == []
    assert probe(0) == [Finding("must be more than 0, got 0")]
    assert probe(3601) == [Finding("3601 is out of range: must be 0..3600 seconds")]
