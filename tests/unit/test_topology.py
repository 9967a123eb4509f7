import pytest

from kvprov.lab import topology


def test_default_lab_addresses_and_ports():
    t = topology.Topology()
    assert [v.name for v in t.vms] == ["kvlab-storage", "kvlab-gpu1"]
    assert t.storage.ssh_port == 2220 and t.clients_vms[0].ssh_port == 2221
    assert t.storage.data_ips == ["10.99.1.1"]
    assert t.clients_vms[0].data_ips == ["10.99.1.2"]
    assert t.storage_address_for(1) == "10.99.1.1"
    assert t.tcp_ports() == [2220, 2221, 40001]


def test_storage_gets_one_data_link_per_client():
    t = topology.Topology(clients=3)
    assert t.storage.data_ips == ["10.99.1.1", "10.99.2.1", "10.99.3.1"]
    assert t.storage.links == ("listen=127.0.0.1:40001", "listen=127.0.0.1:40002", "listen=127.0.0.1:40003")
    assert t.clients_vms[2].links == ("connect=127.0.0.1:40003",)
    macs = [n.mac for v in t.vms for n in v.nics]
    data_macs = [n.mac for v in t.vms for n in v.nics[1:]]
    assert len(set(data_macs)) == len(data_macs)
    assert len(set(macs)) == len(t.vms) + len(data_macs) - 0  # every VM's mgmt MAC distinct too


def test_kernel_cmdline_carries_role_hostname_and_nics():
    vm = topology.Topology().clients_vms[0]
    cmd = vm.kernel_cmdline()
    assert "systemd.hostname=kvlab-gpu1" in cmd
    assert "kvprov.role=client" in cmd
    assert "kvprov.nic=52:54:00:4b:00:01,mgmt0,10.0.2.15/24,10.0.2.2" in cmd
    assert "kvprov.nic=52:54:00:4b:01:02,data0,10.99.1.2/24" in cmd.split()


def test_containers_get_their_own_subnets_and_short_device_names():
    t = topology.Topology(containers=150)
    c = t.container_hosts[-1]
    assert (c.name, c.ip, c.host_ip, c.netns) == ("kvlab-c150", "10.98.150.2", "10.98.150.1", "kvlab-c150")
    assert all(len(c.veth) <= 15 for c in t.container_hosts)  # IFNAMSIZ


@pytest.mark.parametrize("kw", [{"clients": 0}, {"clients": 9}, {"containers": -1}, {"containers": 201}])
def test_out_of_range_sizes_are_refused(kw):
    with pytest.raises(ValueError, match="must be between"):
        topology.Topology(**kw)
