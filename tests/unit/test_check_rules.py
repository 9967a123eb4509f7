"""kvprov check's rules one at a time, on values (no inventory file): each names what is
wrong, exactly."""

import json

from kvprov import check
from kvprov.check import Finding


def test_environment_takes_names_with_a_string_or_a_number():
    assert check.environment({"A_1": "x", "_B": 2, "C": 1.5, "D": ""}) == []
    assert check.environment({"1A": "x", "B-C": "y", "N": None, "L": [1], "M": {"k": 1}}) == [
        Finding('"1A" is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)', ("1A",)),
        Finding('"B-C" is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)', ("B-C",)),
        Finding("N: give a string or a number, got nothing (null)", ("N",)),
        Finding("L: give a string or a number, got a list", ("L",)),
        Finding("M: give a string or a number, got a mapping", ("M",)),
    ]


def test_fraction_is_more_than_0_and_at_most_1():
    assert check.fraction(1) == check.fraction(0.5) == check.fraction(1e-9) == []
    assert check.fraction(0) == [Finding("must be in (0, 1], got 0")]
    assert check.fraction(1.01) == [Finding("must be in (0, 1], got 1.01")]
    assert check.fraction(-0.5) == [Finding("must be in (0, 1], got -0.5")]


def test_nixl_plugins_reports_every_plugin_that_is_not_a_table():
    assert check.nixl_plugins({"posix": True, "gds": [], "gds_mt": {"active": True}}) == [
        Finding("[plugin.posix] must be a table of settings (a mapping), got the boolean true", ("posix",)),
        Finding("[plugin.gds] must be a table of settings (a mapping), got a list", ("gds",)),
    ]


def instance_findings(*instances) -> list[str]:
    names: dict = {}
    ports: dict = {}
    return [f.message for i, inst in enumerate(instances) for f in check._instance(i, inst, names, ports)]


def test_each_instance_finding_points_at_its_element():
    names: dict = {}
    ports: dict = {}
    paths = [f.path for i, inst in enumerate([{"name": "a", "port": 8000}, {"port": 8000}, {"name": "a"},
                                              {"name": "B", "port": "x"}, {"name": "c", "port": 1, "junk": 1}])
             for f in check._instance(i, inst, names, ports)]
    assert paths == [(1,), (1, "port"), (2, "name"), (2,), (3, "name"), (3, "port"), (4, "junk")]


def test_instances_need_a_unique_name_and_port():
    assert instance_findings({"name": "a", "port": 8000}, {"name": "b", "port": 8001}) == []
    assert instance_findings({"port": 8000}, {"name": "a"}, {"name": "a", "port": 8000}) == [
        "instance 1: no name (it names the units, e.g. kvprov-vllm-<name>.service)",
        "instance a: no port (the --port it serves on)",
        'instance 3: name "a" is already used by instance 2',
        "instance 3: port 8000 is already used by instance 1",
    ]
    assert instance_findings({"name": "A b", "port": 0}) == [
        'instance 1: name must be lower-case letters, digits, _ or - (it names the unit and the storage directory), '
        'got the string "A b"',
        "instance 1: port 0 is out of range: must be 1..65535"]


def test_cuda_visible_devices_as_a_number_says_how_to_write_it():
    def message(devices) -> str:
        [m] = instance_findings({"name": "a", "port": 1, "cuda_visible_devices": devices})
        return m

    assert message(0) == 'instance a: cuda_visible_devices: expected a string, got the number 0: quote it ("0")'
    assert message(True) == ('instance a: cuda_visible_devices: expected a string, got the boolean true: '
                             'quote it ("true")')
    assert message(1.5) == 'instance a: cuda_visible_devices: expected a string, got the number 1.5: quote it ("1.5")'


def host_problems(tmp_path, **host_vars) -> list[str]:
    """`kvprov check` on one host gpu1 with these variables: "VARIABLE: MESSAGE" per problem."""
    inv = {"all": {"children": {"gpu_nodes": {"hosts": {"gpu1": {"kvprov_storage_server": "10.0.0.5", **host_vars}}}}}}
    path = tmp_path / "inv.yml"
    path.write_text(json.dumps(inv))  # JSON is YAML
    return [f"{p.variable}: {p.message}" for p in check.run(str(path))[1]]


def test_one_nconnect_is_no_trunking_so_max_connect_in_the_extra_options_is_named_once(tmp_path):
    assert host_problems(tmp_path, kvprov_storage_nconnect=1, kvprov_storage_extra_options=["max_connect=2"]) == [
        'kvprov_storage_nconnect: nconnect 1 together with session trunking ("max_connect" in '
        "kvprov_storage_extra_options): use one or the other (NetApp: with both, only the metadata server "
        "benefits); set kvprov_storage_trunking: none to keep nconnect, or kvprov_storage_nconnect: 0"]


def test_nconnect_in_the_extra_options_is_fine_without_trunking(tmp_path):
    assert host_problems(tmp_path, kvprov_storage_trunking="none", kvprov_storage_extra_options=["nconnect=4"]) == []


def test_a_trunking_flag_in_the_extra_options_names_the_variable_to_set(tmp_path):
    assert host_problems(tmp_path, kvprov_storage_extra_options=["trunkdiscovery"]) == [
        'kvprov_storage_extra_options: "trunkdiscovery" conflicts with kvprov_storage_trunking: auto (the role adds '
        "max_connect or trunkdiscovery itself): set kvprov_storage_trunking: trunkdiscovery instead"]


def test_secret_file_holds_one_printable_line_and_is_private(tmp_path):
    good = tmp_path / "key"
    good.write_text("s3cr3t-Value_1!\n")
    good.chmod(0o600)
    assert check.secret_file(str(good)) == [] and check.secret_file("") == []
    good.chmod(0o640)
    assert check.secret_file(str(good)) == [
        Finding(f'"{good}" can be read by others on this controller: chmod 600 it', severity="warning")]
    rule = ("must hold the secret on one line of printable ASCII without spaces, quotes, backslashes, $ or ` "
            "(systemd's EnvironmentFile= would rewrite it)")
    for text in ("two\nlines\n", "with space\n", 'quo"te\n', "\n", "dollar$\n"):
        bad = tmp_path / "bad"
        bad.write_text(text)
        bad.chmod(0o600)
        assert check.secret_file(str(bad)) == [Finding(f'"{bad}" {rule}')], text
    assert check.secret_file(str(tmp_path / "none")) == [
        Finding(f'"{tmp_path}/none" is not a file on this controller (deploy copies the secret from it)')]
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe")
    assert check.secret_file(str(binary)) == [
        Finding(f'"{binary}" cannot be read: \'utf-8\' codec can\'t decode byte 0xff in position 0: invalid start byte')]


def test_extra_options_that_a_variable_sets_name_it_and_why_4_0_is_refused():
    tail = ": remove it from the extra options and set that variable"
    v40 = ' ("4.1" or "4.2"); NFSv4.0 cannot do pNFS'
    assert [f.message for f in check.extra_options(["noatime", "vers=4", "nfsvers=4.0", "minorversion=0",
                                                    "minorversion=1", "vers=4.2", "port", 7])] == [
        f'"vers=4" is set by kvprov_storage_nfs_version{tail}{v40} and vers=4 can land on 4.0',
        f'"nfsvers=4.0" is set by kvprov_storage_nfs_version{tail}{v40}',
        f'"minorversion=0" is set by kvprov_storage_nfs_version{tail}{v40}',
        f'"minorversion=1" is set by kvprov_storage_nfs_version{tail}',
        f'"vers=4.2" is set by kvprov_storage_nfs_version{tail}',
        f'"port" is set by kvprov_storage_nfs_port{tail}',
    ]
    assert [f.path for f in check.extra_options(["noatime", "rsize=1", "wsize=2"])] == [(1,), (2,)]
    # soft or hard, and how long a call waits, are the variables' (#37: a KV mount is soft by default)
    assert [f.message for f in check.extra_options(["hard", "timeo=600", "retrans=5", "softerr"])] == [
        f'"hard" is set by kvprov_storage_soft{tail}', f'"timeo=600" is set by kvprov_storage_timeo{tail}',
        f'"retrans=5" is set by kvprov_storage_retrans{tail}', f'"softerr" is set by kvprov_storage_soft{tail}']


def test_int_range_says_the_range_or_the_nearest_multiple():
    rule = check.int_range(4096, 1048576, 4096, " (bytes)")
    assert rule(8192) == [] and rule(4096) == [] and rule(1048576) == []
    assert rule(4095) == [Finding("4095 is out of range: must be 4096..1048576 (bytes)")]
    assert rule(1048577) == [Finding("1048577 is out of range: must be 4096..1048576 (bytes)")]
    assert rule(10000) == [Finding("10000 is not a multiple of 4096: use e.g. 8192")]
    assert check.int_range(1)(0) == [Finding("0 is out of range: must be >= 1")]
    assert check.int_range(0, multiple=8)(5) == [Finding("5 is not a multiple of 8: use e.g. 8")]


def test_serial_takes_numbers_percentages_or_a_list_of_them():
    assert check.serial(1) == check.serial("25%") == check.serial([1, "10%", "100%"]) == []
    message = (' is not a batch size: give a number of hosts (10), a percentage ("25%") or a list of them '
               '([1, "10%", "100%"])')
    assert check.serial(0) == [Finding("the number 0" + message)]
    assert check.serial([2, "0%", "x"]) == [Finding('the string "0%"' + message)]
    assert check.serial([]) == [Finding("a list" + message)]


def test_type_error_for_a_missing_string():
    assert check.type_error(None, "str") == 'expected a string, got nothing (null): give a value, or "" for empty'
    assert check.type_error(5, "str") == "expected a string, got the number 5"
    assert check.type_error("x", "str") is None


NIXL_STORE = dict(kvprov_engine="lmcache_mp", kvprov_lmcache_mp_l2_type="nixl_store",
                  kvprov_lmcache_mp_nixl_file_size=1 << 30, kvprov_lmcache_mp_l1_size_gb=1)  # L1 below the L2


def test_lmcache_nixl_pool_must_hold_the_l2_size(tmp_path):
    assert host_problems(tmp_path, **NIXL_STORE, kvprov_lmcache_mp_nixl_pool_size=2,
                         kvprov_lmcache_mp_l2_size_gb=2.5) == [
        "kvprov_lmcache_mp_nixl_pool_size: pool_size 2 x file_size 1073741824 = 2.15 GB is less than "
        'kvprov_lmcache_mp_l2_size_gb 2.5: stores fail with "Insufficient NIXL storage capacity" once it is full; '
        "set pool_size to at least 3"]
    assert host_problems(tmp_path, **NIXL_STORE, kvprov_lmcache_mp_nixl_pool_size=3,
                         kvprov_lmcache_mp_l2_size_gb=3) == []


def test_the_evictors_low_mark_must_be_below_the_high_one(tmp_path):
    def low(high: int, low_: int) -> list[str]:
        return host_problems(tmp_path, kvprov_engine_evict_high_percent=high, kvprov_engine_evict_low_percent=low_)

    assert low(50, 60) == [
        "kvprov_engine_evict_low_percent: 60 is not below kvprov_engine_evict_high_percent 50: the evictor stops under "
        "the low mark once the high one is reached; set it lower, e.g. 40"]
    assert low(5, 5)[0].endswith("e.g. 0") and low(50, 49) == []


def test_the_offload_block_must_be_a_multiple_of_the_gpu_block(tmp_path):
    assert host_problems(tmp_path, kvprov_engine="vllm_offload", kvprov_vllm_offload_block_size=100,
                         kvprov_vllm_block_size=16, kvprov_vllm_offload_cpu_bytes_to_use=1 << 30,
                         kvprov_engine_uid=2001, kvprov_engine_model_revision="0123abc") == [
        "kvprov_vllm_offload_block_size: 100 is not a multiple of kvprov_vllm_block_size 16 (vLLM's GPU block): "
        "use e.g. 96"]


def test_a_vars_file_of_no_group_or_host_is_a_warning_at_its_first_line(tmp_path):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "group_vars/gpu-nodes.yml").write_text("kvprov_storage_nfs_version: '4.2'\n")
    (tmp_path / "host_vars/gpu2.yml").write_text("x: 1\n")
    inv = {"all": {"children": {"gpu_nodes": {"hosts": {"gpu1": {"kvprov_storage_server": "10.0.0.5"}}}}}}
    (tmp_path / "inv.yml").write_text(json.dumps(inv))
    assert [(p.file, p.line, p.severity, p.message) for p in check.run(str(tmp_path / "inv.yml"))[1]] == [
        (f"{tmp_path}/group_vars/gpu-nodes.yml", 1, "warning",
         "no group gpu-nodes in the inventory: Ansible ignores this file; did you mean gpu_nodes?"),
        (f"{tmp_path}/host_vars/gpu2.yml", 1, "warning",
         "no host gpu2 in the inventory: Ansible ignores this file; did you mean gpu1?")]


# ---------------------------------------------------------------------------- rules no other test reached

def test_a_url_with_a_password_among_the_engines_arguments():
    from kvprov.check import bounds

    found = bounds.secret_arguments(["--model", "https://u:pw@hf.example/m", "--port", "8000"])
    assert [(f.message.split(";")[0], f.path) for f in found] == [
        ("item 2: a URL with a password on the command line is readable by every local user (/proc/PID/cmdline)",
         (1,))]
    assert bounds.secret_arguments(["https://hf.example/m", "--hf-revision=x"]) == []
    [f] = bounds.secret_arguments(["--port", "8000", "--api-key", "k"])
    assert (f.message.split(";")[0], f.path) == (
        'item 3: "--api-key" takes a secret: on the command line it is readable by every local user '
        "(/proc/PID/cmdline, ps) and lands in the unit, bundles and diffs", (2,))
    assert [f.path for f in bounds.secret_environment({"AWS_ACCESS_KEY_ID": "AKIA", "HF_TOKEN": "hf_x",
                                                        "PROXY": "http://u:pw@proxy:3128"})] == [("HF_TOKEN",),
                                                                                                 ("PROXY",)]


def test_tls_files_at_their_edges(tmp_path):
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from kvprov.check import values
    from tests.tls import make_cert, pem

    assert values.tls_cert_file("") == [] and values.tls_key_file("") == [] and values.tls_ca_file("") == []
    assert [f.message for f in values.tls_cert_file("rel.pem")] == [
        '"rel.pem" is not an absolute path: start it with /']
    assert [f.message for f in values.tls_cert_file(str(tmp_path / "none.pem"))] == [
        f'"{tmp_path}/none.pem" is not a file on this controller (deploy copies a certificate from it)']
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "later")])
    now = datetime.datetime.now(datetime.timezone.utc)
    later = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
             .serial_number(1).not_valid_before(now + datetime.timedelta(days=2))
             .not_valid_after(now + datetime.timedelta(days=30)).sign(key, hashes.SHA256()))
    f = tmp_path / "later.pem"
    f.write_text(pem(cert=later))
    f.chmod(0o600)
    day = later.not_valid_before_utc
    assert [x.message for x in values.tls_cert_file(str(f))] == [
        f'"{f}": the certificate is not valid before {day:%Y-%m-%d}']
    f.chmod(0o644)  # and readable by others: both, the validity first
    assert [x.message for x in values.tls_cert_file(str(f))] == [
        f'"{f}": the certificate is not valid before {day:%Y-%m-%d}', f'"{f}" can be read by others on this '
        "controller: chmod 600 it"]
    ca = tmp_path / "ca.pem"
    ca.write_text(pem(cert=make_cert("kvprov test CA")[0]))
    assert values.tls_ca_file(str(ca)) == []
    assert [x.message for x in values.tls_ca_file("ca.pem")] == ['"ca.pem" is not an absolute path: start it with /']
    assert [x.message for x in values.tls_ca_file(str(tmp_path / "none.pem"))] == [
        f'"{tmp_path}/none.pem" cannot be read on this controller: No such file or directory']
