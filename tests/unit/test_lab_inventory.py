import yaml

from kvprov import inventory as inventory_model
from kvprov.lab import inventory, topology
from kvprov.storage import systems
from tests.conftest import ROOT


def test_checked_in_lab_inventory_is_the_generated_default():
    """inventory/lab.yml must never drift from what `kvprov lab up` generates."""
    assert (ROOT / "inventory/lab.yml").read_text() == inventory.render(topology.Topology())


def test_checked_in_engine_inventory_is_the_generated_one():
    """inventory/lab-engine.yml (README: try an engine on the lab) is what kvprov/lab/inventory.py says."""
    assert (ROOT / "inventory/lab-engine.yml").read_text() == inventory.render_engine(1)
    inv = yaml.safe_load(inventory.render_engine(3))
    engine = inv["all"]["children"]["gpu_nodes"]["children"]["lab_engine"]
    assert engine["hosts"] == {"kvlab-c3": {"ansible_host": "10.98.3.2"}}
    assert engine["vars"]["kvprov_engine"] == "lmcache_mp" and engine["vars"]["kvprov_engine_require_gpu"] is False


def test_generated_inventory_lists_exactly_the_running_hosts():
    inv = yaml.safe_load(inventory.render(topology.Topology(clients=2, containers=3)))
    gpu = inv["all"]["children"]["gpu_nodes"]["children"]
    assert list(gpu["lab_gpu_vms"]["hosts"]) == ["kvlab-gpu1", "kvlab-gpu2"]
    assert gpu["lab_gpu_vms"]["hosts"]["kvlab-gpu2"] == {
        "ansible_host": "127.0.0.1", "ansible_port": 2222,
        "kvprov_lab_data_ip": "10.99.2.2", "kvprov_storage_server": "10.99.2.1"}
    assert gpu["lab_containers"]["hosts"]["kvlab-c3"] == {"ansible_host": "10.98.3.2"}
    storage = inv["all"]["children"]["kv_storage"]
    assert storage["vars"] == {"kvprov_storage_system": "linux"}
    assert storage["children"]["lab_storage"]["hosts"] == {"kvlab-storage": {
        "ansible_host": "127.0.0.1", "ansible_port": 2220,
        "kvprov_storage_data_addresses": ["10.99.1.1", "10.99.2.1"]}}
    assert inv["all"]["vars"]["ansible_user"] == "root"


def test_every_lab_gpu_vm_mounts_from_the_storage_vm():
    """`kvprov storage check` maps each GPU-node VM to kvlab-storage through its data addresses."""
    inv = inventory_model.load(ROOT / "inventory/lab.yml")
    (storage,) = systems.systems(inv)
    assert (storage.name, storage.kind) == ("kvlab-storage", "linux")
    served, orphans = systems.assign(systems.clients(inv), {storage.name: storage.data_addresses})
    assert orphans == [] and [c.host for c in served["kvlab-storage"]] == ["kvlab-gpu1"]
    assert served["kvlab-storage"][0].layout == "block" and served["kvlab-storage"][0].rdma


def test_a_changed_engine_inventory_leaves_the_next_one_as_generated():
    """Tests change the returned inventory's variables (API key, listen address): never the module's."""
    data = inventory.build_engine(1)
    data["all"]["children"]["gpu_nodes"]["children"]["lab_engine"]["vars"]["kvprov_engine_host"] = "0.0.0.0"
    data["all"]["children"]["gpu_nodes"]["children"]["lab_engine"]["vars"]["kvprov_engine_pip_remove"].append("x")
    assert (ROOT / "inventory/lab-engine.yml").read_text() == inventory.render_engine(1)
