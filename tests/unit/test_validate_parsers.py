"""The pure parsers of `kvprov validate` on realistic captured text, and on garbage."""

import pytest

from kvprov import paths
from kvprov.validate import parsers
from kvprov.validate.parsers import ParseError
from tests.conftest import FIXTURES

BUNDLES = FIXTURES / "bundles"

# ---------------------------------------------------------------------------- gdscheck -p

GDSCHECK_NVFS_COMPAT = """\
 GDS release version: 1.13.0.11
 nvidia_fs version:  2.24 libcufile version: 2.12
 Platform: x86_64
 =====================
 DRIVER CONFIGURATION:
 =====================
 NVMe P2PDMA        : Unsupported
 NVMe               : nvfs
 NFS                : nvfs, compat
 --Mellanox PeerDirect : Disabled
 --rdma library        : Not Loaded (libcufile_rdma.so)
 --rdma devices        : Not configured
 =====================
 CUFILE CONFIGURATION:
 =====================
 properties.use_compat_mode : true
 properties.force_compat_mode : false
 ==============
 PLATFORM INFO:
 ==============
 IOMMU: enabled
 Platform verification error :
 IOMMU is enabled: GDS P2P is not supported
"""

GDSCHECK_NO_DRIVER = """\
 GDS release version: 1.9.1.3
 nvidia_fs version:  2.21 libcufile version: 2.12
 Platform: x86_64
 ============
 ENVIRONMENT:
 ============
 =====================
 DRIVER CONFIGURATION:
 =====================
 NVMe               : Unsupported
 NFS                : Unsupported
 --Mellanox PeerDirect : Disabled
 =====================
 CUFILE CONFIGURATION:
 =====================
 properties.use_compat_mode : true
 cuFile initialization failed: nvidia-fs driver not loaded
"""


def test_gdscheck_of_a_working_gds_host():
    g = parsers.parse_gdscheck((BUNDLES / "gpu_a01" / "gdscheck.txt").read_text())
    assert g.nfs == "Supported" and g.nfs_supported
    assert g.peerdirect == "Enabled"
    assert g.get("rdma devices") == "Configured"
    assert g.use_compat_mode is False and not g.nfs_in_compat
    assert g.platform_verified is True
    assert g.get("properties.posix_pool_slab_size_kb") == "4 1024 16384"
    assert g.errors == []


def test_gdscheck_newer_builds_report_nvfs_and_compat():
    g = parsers.parse_gdscheck(GDSCHECK_NVFS_COMPAT)
    assert g.nfs == "nvfs, compat"
    assert g.nfs_supported and g.nfs_in_compat  # nvfs is there, but this mount runs in compat
    assert g.use_compat_mode is True
    assert g.peerdirect == "Disabled"
    assert g.platform_verified is False
    assert "Platform verification error :" in g.errors


def test_gdscheck_without_the_driver():
    g = parsers.parse_gdscheck(GDSCHECK_NO_DRIVER)
    assert g.nfs == "Unsupported" and not g.nfs_supported
    assert g.platform_verified is None  # no platform line at all
    assert g.errors == ["cuFile initialization failed: nvidia-fs driver not loaded"]


@pytest.mark.parametrize("text", ["", "gdscheck: command not found\n", "\x1b[31mSegmentation fault\n",
                                  "random: words\nmore : words\n"])
def test_gdscheck_garbage_is_a_parse_error(text):
    with pytest.raises(ParseError, match="gdscheck -p"):
        parsers.parse_gdscheck(text)


def test_gdscheck_error_text_is_quoted_in_the_parse_error():
    with pytest.raises(ParseError, match="libcufile.so.0: cannot open"):
        parsers.parse_gdscheck("gdscheck: error while loading shared libraries: libcufile.so.0: cannot open\n")


# ---------------------------------------------------------------------------- rdma link

def test_rdma_link_soft_roce_and_connectx():
    links = parsers.parse_rdma_link(
        "link rxe_data0/1 state ACTIVE physical_state LINK_UP netdev data0 \n"
        "link mlx5_0/1 subnet_prefix fe80:0000:0000:0000 lid 12 sm_lid 1 lmc 0 state ACTIVE physical_state LINK_UP\n"
        "link mlx5_2/1 state DOWN physical_state DISABLED netdev ens6f0np0 \n")
    assert [(x.name, x.state, x.physical_state, x.netdev) for x in links] == [
        ("rxe_data0/1", "ACTIVE", "LINK_UP", "data0"),
        ("mlx5_0/1", "ACTIVE", "LINK_UP", ""),  # InfiniBand: no netdev shown
        ("mlx5_2/1", "DOWN", "DISABLED", "ens6f0np0")]


def test_rdma_link_with_no_device_is_an_empty_list():
    assert parsers.parse_rdma_link("") == []


def test_rdma_link_garbage():
    with pytest.raises(ParseError, match="link DEV/PORT"):
        parsers.parse_rdma_link("Command \"link\" is unknown, try \"rdma help\".\n")


# ---------------------------------------------------------------------------- /proc/modules

def test_modules_with_taint_flags():
    mods = parsers.parse_modules((BUNDLES / "gpu_a01" / "proc/modules").read_text())
    assert mods["rpcrdma"] == "Live" and mods["nvidia_fs"] == "Live" and mods["nfs_layout_nfsv41_files"] == "Live"
    assert "mlx5_ib" in mods and len(mods) == 24


def test_modules_loading_state_and_garbage():
    assert parsers.parse_modules("rpcrdma 344064 0 - Loading 0xffffffffc0a00000\n") == {"rpcrdma": "Loading"}
    assert parsers.parse_modules("") == {}
    with pytest.raises(ParseError):
        parsers.parse_modules("<html>404 Not Found</html>\n")


# ---------------------------------------------------------------------------- systemd

SHOW = """\
Type=simple
Restart=on-failure
NRestarts=2
ExecStart={ path=/opt/sg/bin/python3 ; argv[]=/opt/sg/bin/python3 -m sglang.launch_server ; ignore_errors=no }
Environment=PYTHONHASHSEED=0 "HF_HOME=/var/lib/hugging face" SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR=/mnt/kv/h/main
ActiveState=activating
SubState=auto-restart
ConditionResult=yes
"""


def test_systemctl_show_keeps_equals_signs_in_values():
    props = parsers.parse_systemctl_show(SHOW)
    assert props["NRestarts"] == "2" and props["SubState"] == "auto-restart"
    assert props["ExecStart"].startswith("{ path=/opt/sg/bin/python3 ;")
    env = parsers.split_environment(props["Environment"])
    assert env == {"PYTHONHASHSEED": "0", "HF_HOME": "/var/lib/hugging face",
                   "SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR": "/mnt/kv/h/main"}


def test_systemctl_show_garbage():
    with pytest.raises(ParseError, match="KEY=VALUE"):
        parsers.parse_systemctl_show("Failed to connect to bus: No such file or directory\n")


def test_environment_with_unbalanced_quotes_is_read_word_by_word():
    assert parsers.split_environment('A=1 "B=2 C=3') == {"A": "1", "C": "3"}


UNIT = """\
# Ansible managed
[Unit]
Description=x
; a comment
[Service]
Environment=A=1
Environment=SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR=/tmp/first
ExecStart=/usr/bin/python3 -m x \\
    --flag one \\
    --hicache-storage-backend-extra-config @/etc/kvprov/nixl_backend_config.toml
Environment=SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR=/mnt/kvcache/h/main
User=sglang

[Mount]
Options=vers=4.1
Options=vers=4.2
"""


def test_unit_file_continuations_comments_and_last_assignment():
    unit = parsers.parse_unit(UNIT)
    assert set(unit) == {"Unit", "Service", "Mount"}
    start = parsers.unit_value(unit, "Service", "ExecStart")
    assert start.split() == ["/usr/bin/python3", "-m", "x", "--flag", "one",
                             "--hicache-storage-backend-extra-config", "@/etc/kvprov/nixl_backend_config.toml"]
    assert parsers.unit_value(unit, "Mount", "Options") == "vers=4.2"  # later assignments win
    assert parsers.unit_value(unit, "Mount", "What") is None
    env = parsers.unit_environment(unit)
    assert env == {"A": "1", "SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR": "/mnt/kvcache/h/main"}


def test_unit_environment_reset_by_an_empty_assignment():
    unit = parsers.parse_unit("[Service]\nEnvironment=A=1 B=2\nEnvironment=\nEnvironment=C=3\n")
    assert parsers.unit_environment(unit) == {"C": "3"}


def test_rendered_unit_of_the_lab_bundle():
    text = (BUNDLES / "lab_gpu1" / "files/etc/systemd/system/mnt-kvcache.mount").read_text()
    unit = parsers.parse_unit(text)
    assert parsers.unit_value(unit, "Mount", "What") == "10.99.1.1:/kv"
    assert parsers.unit_value(unit, "Mount", "Options").endswith("max_connect=16,_netdev")


def test_unit_garbage():
    with pytest.raises(ParseError, match="Section"):
        parsers.parse_unit("just text\nno sections\n")


# ---------------------------------------------------------------------------- TOML, cufile.json, packages

def test_toml_types_are_kept():
    data = parsers.parse_toml('use_direct_io = "false"\n[plugin.posix]\nactive = true\nuse_aio = "true"\n')
    assert data["use_direct_io"] == "false" and data["plugin"]["posix"] == {"active": True, "use_aio": "true"}


@pytest.mark.parametrize("text", ["[plugin.posix\nactive = true\n", "active = tru\n", "a = [" * 50000])
def test_toml_garbage(text):
    with pytest.raises(ParseError):
        parsers.parse_toml(text)


CUFILE_WITH_COMMENTS = """\
{
    // cuFile's own sample has comments like this one
    "logging": { "dir": "http://not-a-comment//really", "level": "ERROR" },  // trailing
    "properties": {
        "allow_compat_mode": false, // "allow_compat_mode": true,
        "rdma_dev_addr_list": ["192.168.10.101"]
    },
    "fs": { "nfs": { "mount_table": { "/mnt/kvcache": { "rdma_dev_addr_list": ["192.168.10.101"] } } } },
    "quote": "a \\"//\\" b"
}
"""


def test_cufile_comments_are_stripped_but_not_inside_strings():
    data = parsers.parse_cufile(CUFILE_WITH_COMMENTS)
    assert data["logging"]["dir"] == "http://not-a-comment//really"
    assert data["properties"]["allow_compat_mode"] is False
    assert data["quote"] == 'a "//" b'
    assert data["fs"]["nfs"]["mount_table"]["/mnt/kvcache"] == {"rdma_dev_addr_list": ["192.168.10.101"]}


@pytest.mark.parametrize("text, match", [("{\"a\": 1,, }", "not valid JSON"), ("[1, 2]", "JSON object"),
                                         ("[" * 100000, "nested too deeply|not valid JSON")])
def test_cufile_garbage(text, match):
    with pytest.raises(ParseError, match=match):
        parsers.parse_cufile(text)


def test_packages_dpkg_and_rpm_shapes():
    pk = parsers.parse_packages("nfs-common\t1:2.6.2-4\nrdma-core:amd64\t44.0-2\nlibcufile-12-4 1.9.1.3-1\n")
    assert pk == {"nfs-common": "1:2.6.2-4", "rdma-core": "44.0-2", "libcufile-12-4": "1.9.1.3-1"}
    with pytest.raises(ParseError, match="empty"):
        parsers.parse_packages("\n")


# ---------------------------------------------------------------------------- mounts

def test_mountinfo_parsing_is_the_roles_own_module():
    assert parsers.mount_state.__file__ == str(paths.ROOT / "plugins/modules/kvprov_mount_state.py")
    text = (BUNDLES / "lab_gpu1" / "proc/mountinfo").read_text()
    live = parsers.parse_mountinfo(text, "/mnt/kvcache")
    assert live["source"] == "10.99.1.1:/kv" and live["fstype"] == "nfs4"
    assert live["options"]["proto"] == "rdma" and live["options"]["max_connect"] == "16"
    assert parsers.parse_mountinfo(text, "/mnt/nothing") is None
    assert ("/", "ext4", "/dev/vda") in parsers.mounts_in(text)


def test_mountinfo_escaped_mount_point():
    line = "52 27 0:48 / /mnt/kv\\040cache rw - nfs4 srv:/kv rw,vers=4.2,proto=tcp\n"
    assert parsers.parse_mountinfo(line, "/mnt/kv cache")["options"]["vers"] == "4.2"


@pytest.mark.parametrize("text", ["", "garbage\n", "\x00\x01\x02", "1 2 3\n"])
def test_mountinfo_garbage(text):
    with pytest.raises(ParseError, match="no mountinfo line"):
        parsers.parse_mountinfo(text, "/mnt/kvcache")


def test_mountinfo_bad_octal_escape_is_kept_literally_not_a_crash():
    line = "52 27 0:48 / /mnt/\\999 rw - nfs4 srv:/kv rw,vers=4.2\n"
    assert parsers.parse_mountinfo(line, "/mnt/\\999")["source"] == "srv:/kv"
    assert parsers.parse_mountinfo(line, "/mnt/kvcache") is None


def test_mountstats_garbage_and_the_parsers_crashing_input():
    with pytest.raises(ParseError, match="device"):
        parsers.parse_mountstats("no mounts here\n")
    with pytest.raises(ParseError):  # kvprov.mountstats.parse raises ValueError here (no "with")
        parsers.parse_mountstats("device x mounted on /y fstype nfs4\n")


def test_version_tuple():
    assert parsers.version_tuple("4.1") == (4, 1)
    assert parsers.version_tuple("4") == (4, 0)
    assert parsers.version_tuple("4.0") < (4, 1) <= parsers.version_tuple("4.2")
    assert parsers.version_tuple("4.x") is None and parsers.version_tuple("9" * 50) is None


# ---------------------------------------------------------------------------- ExecStart

def test_exec_argv_of_systemctl_show_keeps_json_arguments():
    """systemd prints argv[] joined with spaces, unquoted (strv_join): a JSON flag's quotes
    are its own, not shell quoting."""
    show = ('{ path=/opt/kvprov/vllm/bin/python3 ; argv[]=/opt/kvprov/vllm/bin/python3 -m x --port 8000 '
            '--kv-transfer-config {"kv_connector":"LMCacheMPConnector","kv_role":"kv_both"} ; ignore_errors=no ; '
            'start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }')
    assert parsers.exec_argv(show, from_show=True) == [
        "/opt/kvprov/vllm/bin/python3", "-m", "x", "--port", "8000", "--kv-transfer-config",
        '{"kv_connector":"LMCacheMPConnector","kv_role":"kv_both"}']
    unit = "/opt/x/python3 -m x \\\n    --kv-transfer-config '{\"kv_role\":\"kv_both\"}'".replace("\\\n    ", "")
    assert parsers.exec_argv(unit, from_show=False)[-1] == '{"kv_role":"kv_both"}'
    with pytest.raises(ParseError, match="no argv"):
        parsers.exec_argv("{ path=/x }", from_show=True)
    with pytest.raises(ParseError, match="ExecStart: No closing quotation"):
        parsers.exec_argv("/x 'open", from_show=False)
