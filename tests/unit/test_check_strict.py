"""`kvprov check --strict` and KVPROV_STRICT=1 (#38 item 6): an inventory that is data. Each
hostile inventory below passes the default check (an inventory is code, as in Ansible) and is
refused in strict mode, before anything in it runs on the controller."""

from __future__ import annotations

import os
import subprocess
import sys

import yaml

BASE = {"kvprov_storage_profile": "local", "kvprov_storage_pnfs_layout": "none",
        "kvprov_engine_model_revision": "0123abc"}


def kvprov(cwd, *args, strict_env: bool = False, roots: str | None = None) -> subprocess.CompletedProcess:
    """The CLI from `cwd` (not the checkout, whose ansible.cfg strict mode refuses)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVPROV_STRICT")}
    env.update({"KVPROV_STRICT": "1"} if strict_env else {})
    env.update({"KVPROV_STRICT_ROOTS": roots} if roots else {})
    return subprocess.run([sys.executable, "-m", "kvprov", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env=env)


def inventory(d, host_vars: dict | None = None, **group_vars) -> str:
    path = d / "inv" / "inv.yml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {
        "hosts": {"s1": host_vars}, "vars": {**BASE, **group_vars}}}}}))
    return str(path)


def refused(r) -> list[str]:
    """"VARIABLE: strict mode: MESSAGE" of each strict-mode refusal printed (the file, line and host cut)."""
    return [line.split(": strict mode: ")[0].rsplit(": ", 1)[-1] + ": strict mode: " + line.split(": strict mode: ")[1]
            for line in r.stdout.splitlines() if ": strict mode: " in line]


def test_jinja_runs_on_the_controller_at_render_unless_strict(tmp_path):
    marker = tmp_path / "ran"
    inv = inventory(tmp_path, kvprov_engine_namespace=f"{{{{ lookup('pipe', 'touch {marker}; echo ns') }}}}")
    assert kvprov(tmp_path, "check", inv).returncode == 0 and not marker.exists()  # check renders nothing
    r = kvprov(tmp_path, "render", inv, "--out", str(tmp_path / "out"), strict_env=True)
    assert r.returncode == 2 and not marker.exists(), r.stdout + r.stderr
    assert "kvprov_engine_namespace: strict mode: holds Jinja" in r.stderr and "no host was contacted" in r.stderr
    r = kvprov(tmp_path, "render", inv, "--out", str(tmp_path / "out"))
    assert r.returncode == 0 and marker.exists(), r.stdout + r.stderr  # the default: an inventory is code


def test_connection_and_interpreter_overrides_and_controller_files_are_refused(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "key").write_text("k\n")
    (outside / "key").chmod(0o600)
    inv = inventory(tmp_path, {"ansible_connection": "local", "ansible_ssh_common_args": "-o ProxyCommand=x",
                               "ansible_python_interpreter": "/tmp/python", "ansible_host": "10.0.0.1",
                               "ansible_user": "ops", "ansible_become_method": "sudo"},
                    kvprov_engine_wheelhouse="/root/.ssh", kvprov_engine_api_key_file=str(outside / "key"),
                    ansible_become_method="mine")
    assert kvprov(tmp_path, "check", inv).returncode == 0
    r = kvprov(tmp_path, "check", "--strict", inv)
    assert r.returncode == 2
    found = refused(r)
    assert sorted(line.split(":")[0] for line in found) == [
        "ansible_become_method", "ansible_connection", "ansible_python_interpreter", "ansible_ssh_common_args",
        "kvprov_engine_api_key_file", "kvprov_engine_wheelhouse"], r.stdout
    assert f"kvprov_engine_wheelhouse: strict mode: /root/.ssh is a file of the controller outside the inventory's " \
           f"directories ({tmp_path / 'inv'}); keep it there, or add its directory to KVPROV_STRICT_ROOTS" in found
    # the same through KVPROV_STRICT, and the key's directory allowed by KVPROV_STRICT_ROOTS
    r = kvprov(tmp_path, "check", inv, strict_env=True, roots=f"{outside}:/root/.ssh")
    assert r.returncode == 2 and not [f for f in refused(r) if f.startswith(("kvprov_engine_api", "kvprov_engine_w"))]


def test_a_clean_inventory_passes_and_a_link_out_of_its_directory_does_not(tmp_path):
    key = tmp_path / "inv" / "api-key"
    key.parent.mkdir()
    key.write_text("k\n")
    key.chmod(0o600)
    inv = inventory(tmp_path, {"ansible_host": "10.0.0.1", "ansible_port": 2222, "ansible_become": True},
                    kvprov_engine_api_key_file=str(key))
    r = kvprov(tmp_path, "check", "--strict", inv)
    assert r.returncode == 0 and refused(r) == [], r.stdout + r.stderr
    secret = tmp_path / "secret"
    secret.write_text("k\n")
    secret.chmod(0o600)
    key.unlink()
    key.symlink_to(secret)  # inside the directory by name, outside by what it is
    assert [f.split(":")[0] for f in refused(kvprov(tmp_path, "check", "--strict", inv))] == [
        "kvprov_engine_api_key_file"]


def test_sources_that_run_when_read_are_refused_unread(tmp_path):
    marker = tmp_path / "ran"
    d = tmp_path / "inv"
    d.mkdir()
    (d / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"s1": None},
                                                                                      "vars": BASE}}}}))
    script = d / "more.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\necho '{{}}'\n")
    script.chmod(0o755)
    (d / "built.yml").write_text("plugin: ansible.builtin.constructed\n")
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    r = kvprov(tmp_path, "check", "--strict", str(d))
    assert r.returncode == 2 and not marker.exists(), r.stdout
    assert [line.split(": strict mode: ")[0] for line in r.stdout.splitlines() if "strict mode" in line] == [
        str(tmp_path / "ansible.cfg"), str(d / "built.yml"), str(script)], r.stdout
    assert "0 host(s) checked, 3 error(s)" in r.stdout
