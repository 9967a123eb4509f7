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


# ---------------------------------------------------------------------------- the rules, in process

def test_strict_mode_is_the_flag_or_the_environment(monkeypatch):
    from kvprov.check import strict

    monkeypatch.delenv("KVPROV_STRICT", raising=False)
    assert strict.enabled(True) and not strict.enabled(False)
    for value, on in (("1", True), ("true", True), (" YES ", True), ("0", False), ("", False), ("no", False)):
        monkeypatch.setenv("KVPROV_STRICT", value)
        assert strict.enabled() is on, value


def test_each_inventory_rule_in_process(tmp_path, monkeypatch):
    from kvprov import inventory as inv_module
    from kvprov.check import strict

    monkeypatch.delenv("KVPROV_STRICT_ROOTS", raising=False)
    d = tmp_path / "inv"
    d.mkdir()
    inside, outside = d / "key", tmp_path / "outside-key"
    for f in (inside, outside):
        f.write_text("k\n")
        f.chmod(0o600)
    (d / "link-key").symlink_to(outside)
    connection = ["ansible_become", "ansible_become_method", "ansible_become_pass", "ansible_become_password",
                  "ansible_become_user", "ansible_host", "ansible_password", "ansible_port", "ansible_ssh_pass",
                  "ansible_ssh_private_key_file", "ansible_user"]  # written out: the rule's own table is under test
    allowed = {name: "x" for name in connection}
    allowed.update({"ansible_port": 22, "ansible_become": True, "ansible_become_method": "su",
                    "ansible_ssh_private_key_file": str(inside)})
    controller = ["ansible_ssh_private_key_file", "kvprov_engine_api_key_file", "kvprov_engine_hf_token_file",
                  "kvprov_engine_tls_cert_file", "kvprov_engine_tls_key_file", "kvprov_engine_tls_ca_file",
                  "kvprov_engine_s3_credentials_file", "kvprov_engine_wheelhouse", "kvprov_storage_credentials_file"]
    hosts = {"ok": allowed, "sudo": {"ansible_become_method": "sudo", "kvprov_engine_served_model_name": "{ x }"},
             "files": {name: str(outside) for name in controller},
             "jinja": {"kvprov_engine_extra_args": ["--a", "{{ b }}"], "kvprov_engine_environment": {"{{ k }}": "v"}},
             "bad": {"ansible_become_method": "doas", "ansible_shell_executable": "/bin/sh",
                     "kvprov_engine_api_key_file": str(outside), "kvprov_engine_hf_token_file": str(d / "link-key"),
                     "kvprov_engine_environment": {"A": ["{# a comment #}"]}, "kvprov_engine_namespace": "{% x %}"}}
    path = d / "inv.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts, "vars": BASE}}}}))
    found = {(p.host, p.variable): p.message for p in strict.inventory_problems(inv_module.load(str(path)), [str(path)])}
    where = f"outside the inventory's directories ({d}); keep it there, or add its directory to KVPROV_STRICT_ROOTS"
    jinja = "strict mode: holds Jinja, which runs on the controller when a command renders it; give the value itself"
    assert {k: found.pop(k) for k in list(found) if k[0] in ("files", "jinja")} == {
        **{("files", name): f"strict mode: {outside} is a file of the controller {where}" for name in controller},
        ("jinja", "kvprov_engine_extra_args"): jinja, ("jinja", "kvprov_engine_environment"): jinja}
    assert found == {
        ("bad", "ansible_become_method"): "strict mode: the become method is one of sudo, su",
        ("bad", "ansible_shell_executable"): "strict mode: only where and as whom to connect may be set ("
        + ", ".join(connection) + "); this one chooses what runs where",
        ("bad", "kvprov_engine_api_key_file"): f"strict mode: {outside} is a file of the controller {where}",
        ("bad", "kvprov_engine_hf_token_file"): f"strict mode: {d / 'link-key'} is a file of the controller {where}",
        ("bad", "kvprov_engine_environment"): "strict mode: holds Jinja, which runs on the controller when a command "
                                              "renders it; give the value itself",
        ("bad", "kvprov_engine_namespace"): "strict mode: holds Jinja, which runs on the controller when a command "
                                            "renders it; give the value itself"}
    monkeypatch.setenv("KVPROV_STRICT_ROOTS", f"/nonexistent:{tmp_path}")
    found = {p.variable for p in strict.inventory_problems(inv_module.load(str(path)), [str(path)])}
    assert "kvprov_engine_api_key_file" not in found and "kvprov_engine_hf_token_file" not in found
    assert strict.allowed_roots([str(path), str(d)]) == [str(d), str(d), "/nonexistent", str(tmp_path)]


def test_sources_that_run_or_configure_in_process(tmp_path, monkeypatch):
    from kvprov.check import strict

    d = tmp_path / "inv"
    (d / "group_vars").mkdir(parents=True)
    (d / "hosts.yml").write_text("all: {}\n")
    for name in ("run.sh", "group_vars/all.sh", "notes.txt"):  # only the first is an inventory source
        (d / name).write_text("#!/bin/sh\n")
        (d / name).chmod(0o755)
    (d / "built.yaml").write_text("plugin: constructed\n")
    (d / "broken.yml").write_text("a: [\n")  # the loader reports it
    monkeypatch.chdir(tmp_path)
    found = [p.file for p in strict.source_problems([str(d), str(d / "gone.yml")])]
    assert found == [str(d / "built.yaml"), str(d / "run.sh")], found
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    assert strict.source_problems([str(d / "hosts.yml")])[0].file == str(tmp_path / "ansible.cfg")
    assert len(strict.source_problems([str(d / "hosts.yml")])) == 1
