"""kvprov/deployed_secrets.py at its edges (#41 item 1): every secret file the engine role copies
counts, the state directory and key stay root-only and are never reached through a link, and a
record is rewritten whole."""

from __future__ import annotations

import json
import os
import stat
import textwrap

import pytest

from kvprov import deployed_secrets


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state/kvprov/deployed-secrets"


def inventory(tmp_path, hosts: dict[str, dict[str, str]]) -> list[str]:
    lines = "\n".join(f"        {h}: {json.dumps(v)}" for h, v in hosts.items())
    inv = tmp_path / "inv.yml"
    inv.write_text(textwrap.dedent("""\
        all:
          children:
            gpu_nodes:
              vars: {kvprov_storage_server: 10.0.0.5, kvprov_engine: vllm_baseline, kvprov_engine_install: false}
              hosts:
        """) + lines + "\n")
    return [str(inv)]


@pytest.mark.parametrize("variable", ["kvprov_engine_api_key_file", "kvprov_engine_admin_api_key_file",
                                      "kvprov_engine_hf_token_file", "kvprov_engine_s3_credentials_file",
                                      "kvprov_engine_tls_cert_file", "kvprov_engine_tls_key_file"])
def test_each_secret_file_the_engine_role_copies_is_digested(tmp_path, state, variable):
    secret = tmp_path / "secret"
    secret.write_text("one\n")
    sources = inventory(tmp_path, {"h": {variable: str(secret)}})
    first = deployed_secrets.digests(sources, ["h"])["h"]
    assert first and len(first) == 64
    deployed_secrets.save(sources, ["h"])
    assert deployed_secrets.changed(sources, ["h"]) == []
    secret.write_text("two\n")
    assert deployed_secrets.changed(sources, ["h"]) == ["h"]


def test_every_host_asked_for_is_answered_whatever_comes_first(tmp_path, state):
    secret = tmp_path / "secret"
    secret.write_text("k\n")
    sources = inventory(tmp_path, {"plain": {}, "keyed": {"kvprov_engine_api_key_file": str(secret)}})
    got = deployed_secrets.digests(sources, ["plain", "keyed", "unknown"])
    assert got["plain"] == "" and got["unknown"] == "" and len(got["keyed"]) == 64
    assert deployed_secrets.changed(sources, []) == []  # deploy --full: nothing to read


def test_the_state_directory_is_made_private_even_when_it_was_not(tmp_path, state):
    state.mkdir(parents=True, mode=0o755)
    os.chmod(state, 0o755)
    deployed_secrets.digests(inventory(tmp_path, {"h": {}}), ["h"])
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    key = (state / "key").read_bytes()
    assert len(key) == 32 and stat.S_IMODE((state / "key").stat().st_mode) == 0o600
    deployed_secrets.digests(inventory(tmp_path, {"h": {}}), ["h"])
    assert (state / "key").read_bytes() == key  # made once, then kept


def test_a_link_in_the_keys_place_is_never_followed(tmp_path, state):
    state.mkdir(parents=True)
    outside = tmp_path / "outside-key"
    (state / "key").symlink_to(outside)  # dangling: reading it fails, creating through it must too
    with pytest.raises(FileExistsError):
        deployed_secrets.digests(inventory(tmp_path, {"h": {}}), ["h"])
    assert not outside.exists()


def test_a_record_is_rewritten_whole_over_a_leftover_temporary_file(tmp_path, state):
    secret = tmp_path / "secret"
    secret.write_text("k\n")
    sources = inventory(tmp_path, {"h": {"kvprov_engine_api_key_file": str(secret)}})
    deployed_secrets.save(sources, ["h"])
    [record] = state.glob("*.json")
    leftover = os.open(state / f".{record.name}.{os.getpid()}", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(leftover, b"x" * 10_000)  # a crashed run's leftover (made as save makes it), longer than a record
    os.close(leftover)
    deployed_secrets.save(sources, ["h"])
    assert set(json.loads(record.read_text())) == {"h"} and deployed_secrets.changed(sources, ["h"]) == []
