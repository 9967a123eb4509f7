"""The storage system's defaults are written twice (DEFAULTS, which the inventory is read
against, and the System dataclass's fields): they agree; a GPU node as a client is a value."""

import dataclasses

from kvprov.storage import systems
from kvprov.storage.systems import Client, System

FIELD_OF = {"kvprov_storage_svm": "svm", "kvprov_storage_credentials_file": "credentials_file",
            "kvprov_storage_ca_bundle": "ca_bundle", "kvprov_storage_validate_certs": "validate_certs",
            "kvprov_storage_api_port": "api_port", "kvprov_storage_api_timeout": "api_timeout",
            "kvprov_storage_data_addresses": "data_addresses",
            "kvprov_storage_min_free_percent": "min_free_percent",
            "kvprov_storage_min_free_inodes_percent": "min_free_inodes_percent"}


def test_the_dataclass_defaults_are_the_inventory_defaults():
    bare = System("s", "linux", "10.0.0.1")
    assert set(FIELD_OF) | {"kvprov_storage_system"} == set(systems.DEFAULTS)
    for var, attr in FIELD_OF.items():
        assert getattr(bare, attr) == systems.DEFAULTS[var], var
    assert {f.name for f in dataclasses.fields(System)} == {"name", "kind", "address", *FIELD_OF.values()}


def test_a_client_is_a_value():
    a = Client("gpu1", "10.0.0.1", "/kv", True, 20049, "files", "d", None)
    assert len({a, dataclasses.replace(a)}) == 1
