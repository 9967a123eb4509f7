"""rdma.* on gpu_a01 (NFS over RDMA from 192.168.10.101 on ens1f0np0, three mlx5 ports): which
module counts, the port that carries the mount judged when it is known, every port when it is
not (and why not), and how the ports are listed."""

from kvprov.validate import bundle as bf
from kvprov.validate import evaluate as ev
from kvprov.validate.bundle import Bundle
from kvprov.validate.result import FAIL, PASS, WARN
from tests.conftest import FIXTURES
from tests.unit.test_validate_context_captures import one_check

ROOT = FIXTURES / "bundles/gpu_a01"
FILES = {str(p.relative_to(ROOT)): p.read_bytes() for p in ROOT.rglob("*") if p.is_file()}
UP0 = "link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev ens1f0np0"
UP1 = "link mlx5_1/1 state ACTIVE physical_state LINK_UP netdev ens1f1np1"
DOWN2 = "link mlx5_2/1 state DOWN physical_state DISABLED netdev ens6f0np0"
FIX = ("bring the RDMA port up: cable and switch port, `ibv_devinfo`, `ip link show NETDEV`; soft-RoCE (labs): "
       "`systemctl restart kvprov-soft-roce.service`")


def run(check_id: str, drop: tuple[str, ...] = (), **text):
    files = {k: v for k, v in FILES.items() if k not in drop}
    for name, value in text.items():
        files[{"links": bf.RDMA_LINK, "modules": bf.MODULES, "mountinfo": bf.MOUNTINFO}[name]] = value.encode()
    r = one_check(files, check_id)
    return r.status, r.expected, r.found, r.fix


def links(*lines: str) -> str:
    return "".join(f"{line}\n" for line in lines)


# ---------------------------------------------------------------------------- rdma.module

def test_module_xprtrdma_counts_and_an_empty_list_is_only_a_warning():
    assert run("rdma.module", modules="xprtrdma 1 0 - Live 0x0\nsunrpc 1 1 xprtrdma, Live 0x0\n")[2] == \
        "xprtrdma (Live)"
    assert run("rdma.module", modules="") == (
        WARN, "rpcrdma loaded (NFS over RDMA)", "/proc/modules is empty: a kernel without loadable modules (rpcrdma "
                                                "may be built in: look for /sys/module/rpcrdma)", "")


def test_module_not_loaded_names_the_rdma_role():
    status, _, found, fix = run("rdma.module", modules="sunrpc 1 0 - Live 0x0\n")
    assert (status, found) == (FAIL, "rpcrdma is not loaded: this kernel cannot mount NFS over RDMA")
    assert "kvprov deploy INVENTORY --limit gpu-a01.corp.example.com --tags rdma)" in fix


# ---------------------------------------------------------------------------- rdma.link: the mount's port

def test_the_port_carrying_the_mount_is_judged_alone():
    expected = "the RDMA port of ens1f0np0 (the mount's address 192.168.10.101) ACTIVE"
    assert run("rdma.link")[:3] == (PASS, expected, "mlx5_0/1 ACTIVE (ens1f0np0)")
    down0 = "link mlx5_0/1 state DOWN physical_state DISABLED netdev ens1f0np0"
    assert run("rdma.link", links=links(down0, UP1)) == (
        FAIL, expected, "mlx5_0/1 DOWN DISABLED (ens1f0np0); other ports: mlx5_1/1 ACTIVE (ens1f1np1)", FIX)
    assert run("rdma.link", links=links(down0)) == (FAIL, expected, "mlx5_0/1 DOWN DISABLED (ens1f0np0)", FIX)


def test_unknown_port_judges_every_port_and_says_why():
    def expected(why):
        return f"every RDMA port ACTIVE (which one carries the mount is not known: {why})"

    no_addr = FILES[bf.MOUNTINFO].decode().replace("clientaddr=192.168.10.101,", "")
    assert run("rdma.link", mountinfo=no_addr)[:2] == (WARN, expected("the live mount shows no clientaddr="))
    assert run("rdma.link", drop=("ip_addr.txt",))[1] == expected("the capture has no ip_addr.txt, the interfaces' "
                                                                 "addresses")
    bad = FILES[bf.MOUNTINFO].decode().replace("clientaddr=192.168.10.101,", "clientaddr=somehost,")
    assert run("rdma.link", mountinfo=bad)[1] == expected("clientaddr=somehost is not an address")
    assert run("rdma.link", links=links(UP1, DOWN2))[1] == expected(
        "ens1f0np0 holds the mount's address 192.168.10.101, and no RDMA port names it")


def test_infiniband_ports_without_a_netdev_are_not_the_mounts():
    ib = links("link mlx5_0/1 subnet_prefix fe80::/64 lid 7 sm_lid 1 lmc 0 state ACTIVE physical_state LINK_UP",
               "link mlx5_1/1 subnet_prefix fe80::/64 lid 8 sm_lid 1 lmc 0 state DOWN physical_state POLLING")
    no_addr = FILES[bf.MOUNTINFO].decode().replace("clientaddr=192.168.10.101,", "")
    assert run("rdma.link", links=ib, mountinfo=no_addr) == (
        WARN, "every RDMA port ACTIVE (which one carries the mount is not known: the live mount shows no "
              "clientaddr=)", "mlx5_0/1 ACTIVE, mlx5_1/1 DOWN POLLING: the mount may use a port that is down", FIX)


def test_at_most_eight_ports_are_listed():
    many = links(*(f"link rxe{i}/1 state DOWN physical_state DISABLED netdev eth{i}" for i in range(10)))
    status, _, found, _ = run("rdma.link", links=many)
    assert status == FAIL
    assert found == ", ".join(f"rxe{i}/1 DOWN DISABLED (eth{i})" for i in range(8))


def test_a_tcp_profile_skips_the_rdma_checks_expecting_nothing():
    desired = FILES[bf.DESIRED].decode().replace('"transport": "rdma"', '"transport": "tcp"')
    assert '"transport": "tcp"' in desired
    b = Bundle(files={**FILES, bf.DESIRED: desired.encode()})
    rs = {r.id: r for r in ev.evaluate(b, bf.load_desired(b))}
    for check_id in ("rdma.module", "rdma.link"):
        assert (rs[check_id].status, rs[check_id].expected, rs[check_id].found) == (
            "skip", "", "storage profile netapp_pnfs_rdma does not use RDMA")


def test_no_interface_holding_the_mounts_address_is_said():
    ip = FILES["ip_addr.txt"].decode().replace("192.168.10.101/24", "192.168.10.109/24")
    files = {**FILES, "ip_addr.txt": ip.encode()}
    assert one_check(files, "rdma.link").expected == (
        "every RDMA port ACTIVE (which one carries the mount is not known: no interface holds 192.168.10.101 "
        "(ip_addr.txt))")
