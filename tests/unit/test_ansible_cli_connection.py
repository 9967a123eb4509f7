"""ansible-playbook's connection, privilege and run options on kvprov's commands (#39 item 4):
`--private-key`, `-k/--ask-pass`, `--connection-password-file`, `-b/--become`, `--become-method`,
`--become-user`, `-K`, deploy's `--skip-tags`, `--list-hosts` (deploy, audit, validate, collect,
bench), and `-l` and `--json` on every command that reads an inventory. Each reaches the
ansible-playbook kvprov starts (its command line as ansible-runner recorded it in the run's
artifacts; a fake ssh shows what reaches the connection); a password typed at a prompt is in
no command line, artifact, report or console line; --list-hosts contacts no host (a listening
socket counts the connections a run makes)."""

from __future__ import annotations

import argparse
import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kvprov import ansible_cli, cli, deploy, runner, vault

INVENTORY = ("all:\n  children:\n    gpu_nodes:\n      hosts:\n{hosts}      vars:\n"
             "        kvprov_storage_profile: local\n        kvprov_storage_pnfs_layout: none\n{vars}")
SSH_PASSWORD, BECOME_PASSWORD = "ssh-pw-Kq83-secret", "become-pw-Zr51-secret"

# What an ssh that asks for a password does (ansible-core 2.19 answers through SSH_ASKPASS, no
# sshpass): ask, note the answer and the arguments, then fail to connect (unreachable).
FAKE_SSH = """#!/bin/sh
printf '%s\\n' "$*" >> "$(dirname "$0")/ssh-args"
"$SSH_ASKPASS" "deployer@gpu's password: " >> "$(dirname "$0")/typed" 2>/dev/null
echo "ssh: connect to host gpu port 22: Connection refused" >&2
exit 255
"""


@pytest.fixture(autouse=True)
def forget_options():
    """kvprov's Ansible options are the process's (one command a process): none after a test."""
    yield
    ansible_cli.configure(argparse.Namespace())
    vault.configure(argparse.Namespace())


def inventory(d: Path, hosts=("v1", "v2"), **host_vars) -> Path:
    lines = "".join(f"        {h}:\n" for h in hosts)
    more = "".join(f"        {k}: {v}\n" for k, v in host_vars.items())
    (d / "inv.yml").write_text(INVENTORY.format(hosts=lines, vars=more))
    return d / "inv.yml"


def commands_with_an_inventory(parser: argparse.ArgumentParser, path: str = "") -> dict[str, argparse.ArgumentParser]:
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out.update(commands_with_an_inventory(child, f"{path} {name}".strip()))
        elif "--inventory" in action.option_strings:
            out[path] = parser
    return out


CONNECTION = {"-u", "--user", "--private-key", "--key-file", "-k", "--ask-pass", "--connection-password-file",
              "--conn-pass-file", "-b", "--become", "--become-method", "--become-user", "-K", "--ask-become-pass",
              "--become-password-file", "--become-pass-file", "-f", "--forks", "-e", "--extra-vars", "-v"}


def test_every_command_that_reads_an_inventory_takes_limit_json_and_the_connection_options():
    found = commands_with_an_inventory(cli.build_parser())
    assert set(found) == {"check", "render", "deploy", "validate", "collect", "bench", "audit", "storage check",
                          "loadtest"}
    for name, parser in found.items():
        options = {o for a in parser._actions for o in a.option_strings}
        assert {"-l", "--limit", "--json"} | CONNECTION <= options, (name, CONNECTION - options)
    listing = {name for name, parser in found.items() if "--list-hosts" in {o for a in parser._actions
                                                                             for o in a.option_strings}}
    assert listing == {"deploy", "audit", "validate", "collect", "bench"}


@pytest.mark.parametrize("command", [["deploy", "inv.yml"], ["audit", "inv.yml"], ["storage", "check", "inv.yml"],
                                     ["loadtest", "inv.yml"], ["collect", "inv.yml", "--out", "o"]])
def test_short_and_long_spellings_and_ansibles_aliases_parse_alike(command):
    parse = cli.build_parser().parse_args
    short = parse([*command, "-u", "ops", "-k", "-b", "-K", "-l", "g1", "-f", "3", "--private-key", "k",
                   "--become-user", "svc", "--become-method", "su"])
    long = parse([*command, "--user", "ops", "--ask-pass", "--become", "--ask-become-pass", "--limit", "g1",
                  "--forks", "3", "--key-file", "k", "--become-user", "svc", "--become-method", "su"])
    assert vars(short) == vars(long)
    assert (short.remote_user, short.ask_pass, short.become, short.ask_become_pass, short.private_key_file,
            short.become_user, short.become_method) == ("ops", True, True, True, "k", "svc", "su")
    files = parse([*command, "--conn-pass-file", "c", "--become-pass-file", "b"])
    assert (files.connection_password_file, files.become_password_file) == ("c", "b")
    assert vars(files) == vars(parse([*command, "--connection-password-file", "c", "--become-password-file", "b"]))
    plain = parse(command)
    assert (plain.ask_pass, plain.become, plain.private_key_file, plain.become_user) == (False, False, None, None)


def test_deploys_skip_tags_and_list_hosts_parse():
    args = cli.build_parser().parse_args(["deploy", "inv.yml", "-t", "nixl,engine", "--skip-tags", "gds",
                                          "--list-hosts"])
    assert (args.tags, args.skip_tags, args.list_hosts) == ("nixl,engine", "gds", True)
    args = cli.build_parser().parse_args(["deploy", "inv.yml"])
    assert (args.skip_tags, args.list_hosts) == (None, False)


@pytest.mark.parametrize("both", [["-k", "--connection-password-file", "f"], ["-K", "--become-password-file", "f"]])
def test_a_prompt_and_a_password_file_for_the_same_password_are_a_usage_error(both, capsys):
    assert cli.main(["deploy", "inv.yml", *both]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_options_reach_ansible_playbook_as_it_takes_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("key", "conn", "become"):
        (tmp_path / name).write_text("x\n")
    args = cli.build_parser().parse_args(["deploy", "inv.yml", "-u", "ops", "--private-key", "key", "-b",
                                          "--become-method", "su", "--become-user", "svc",
                                          "--connection-password-file", "conn", "--become-password-file", "become"])
    ansible_cli.configure(args)
    assert ansible_cli.playbook_args() == [
        "-u", "ops", "--private-key", str(tmp_path / "key"), "--become", "--become-method", "su",
        "--become-user", "svc", "--connection-password-file", str(tmp_path / "conn"),
        "--become-password-file", str(tmp_path / "become")]
    assert ansible_cli.private_key() == str(tmp_path / "key") and ansible_cli.remote_user() == "ops"
    ansible_cli.configure(cli.build_parser().parse_args(["deploy", "inv.yml"]))
    assert ansible_cli.playbook_args() == [] and ansible_cli.private_key() is None
    for option in ("--private-key", "--connection-password-file", "--become-password-file"):
        with pytest.raises(Exception, match=f"{option} missing: cannot read the file") as e:
            ansible_cli.configure(cli.build_parser().parse_args(["deploy", "inv.yml", option, "missing"]))
        assert e.value.exit_code == 2


def test_typed_passwords_go_to_root_only_files_asked_once_each(monkeypatch):
    asked = []
    monkeypatch.setattr("getpass.getpass", lambda prompt: asked.append(prompt) or
                        {"SSH password: ": SSH_PASSWORD, "BECOME password: ": BECOME_PASSWORD}[prompt])
    ansible_cli.configure(cli.build_parser().parse_args(["deploy", "inv.yml", "-k", "-K"]))
    assert asked == ["SSH password: ", "BECOME password: "]
    words = ansible_cli.playbook_args()
    assert words[0::2] == ["--connection-password-file", "--become-password-file"]
    for path, password in zip(words[1::2], (SSH_PASSWORD, BECOME_PASSWORD)):
        assert Path(path).read_text() == password + "\n"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(Path(path).parent).st_mode) == 0o700
    assert SSH_PASSWORD not in " ".join(words) and BECOME_PASSWORD not in " ".join(words)


def test_a_deploy_hands_ansible_playbook_the_options_and_the_typed_password_reaches_ssh_and_nothing_else(
        tmp_path, monkeypatch, capsys):
    """A real ansible-playbook run (deploy --full, no audit) whose ssh is FAKE_SSH: -u, --private-key
    and the typed password reach the connection; --become, --become-user and the become password's
    file, --skip-tags reach ansible-playbook's command line; neither password is in the run's
    artifacts, the --json report or what kvprov printed."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("KVPROV_RUNS_DIR", raising=False)
    (tmp_path / "ssh").write_text(FAKE_SSH)
    (tmp_path / "ssh").chmod(0o755)
    (tmp_path / "key").write_text("not a real key\n")
    inv = inventory(tmp_path, hosts=("v1",), ansible_ssh_executable=tmp_path / "ssh")
    monkeypatch.setattr("getpass.getpass", lambda prompt: SSH_PASSWORD if prompt.startswith("SSH") else BECOME_PASSWORD)
    code = cli.main(["deploy", str(inv), "--full", "-k", "-K", "-u", "deployer", "--private-key", str(tmp_path / "key"),
                     "-b", "--become-user", "root", "--become-method", "sudo", "--skip-tags", "gds,nixl",
                     "--json", str(tmp_path / "out.json")])
    out, err = capsys.readouterr()
    assert code == 3, out + err  # unreachable: the fake ssh refuses
    assert (tmp_path / "typed").read_text() == SSH_PASSWORD  # what ssh got when it asked for the password
    ssh_args = (tmp_path / "ssh-args").read_text()
    assert f'IdentityFile="{tmp_path / "key"}"' in ssh_args and 'User="deployer"' in ssh_args
    [command] = (tmp_path / "state/kvprov/runs").glob("*-deploy-*/artifacts/*/command")
    words = json.loads(command.read_text())["command"]
    become_file = words[words.index("--become-password-file") + 1]
    assert Path(become_file).read_text() == BECOME_PASSWORD + "\n"  # what Ansible's become reads
    for option, value in (("-u", "deployer"), ("--private-key", str(tmp_path / "key")), ("--become-user", "root"),
                          ("--become-method", "sudo"), ("--skip-tags", "gds,nixl")):
        assert words[words.index(option) + 1] == value, (option, words)
    assert "--become" in words and "--connection-password-file" in words
    report = (tmp_path / "out.json").read_text()
    assert json.loads(report)["hosts"]["v1"]["unreachable"] == 1
    for password in (SSH_PASSWORD, BECOME_PASSWORD):
        assert password not in out + err + report
        leaked = [p for p in (tmp_path / "state").rglob("*")
                  if p.is_file() and password in p.read_text(errors="replace")]
        assert not leaked, leaked


class Listener:
    """A TCP port on this machine's loopback that counts the connections made to it (each closed
    at once: ssh then fails)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port, self.count, self.done = self.sock.getsockname()[1], 0, False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.done:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.count += 1
            conn.close()

    def close(self):
        self.done = True
        self.thread.join()
        self.sock.close()


def kvprov(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k != "KVPROV_RUNS_DIR"}, "XDG_STATE_HOME": str(cwd / "state")}
    return subprocess.run([sys.executable, "-m", "kvprov", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_list_hosts_prints_the_hosts_after_the_limit_and_contacts_none(tmp_path):
    listener = Listener()
    try:
        inventory(tmp_path, hosts=("g1", "g2", "g3"), ansible_host="127.0.0.1", ansible_port=listener.port,
                  ansible_ssh_common_args="'-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'")
        r = kvprov(tmp_path, "deploy", "inv.yml", "--list-hosts", "-l", "g1,g3", "--skip-tags", "gds")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "play #1 (gpu_nodes): Deploy the KV-cache tier" in r.stdout
        hosts = r.stdout.split("hosts (2):")[1].split()
        assert sorted(hosts) == ["g1", "g3"], r.stdout
        assert "auditing" not in r.stderr and "UNREACHABLE" not in r.stdout + r.stderr
        r = kvprov(tmp_path, "audit", "inv.yml", "--list-hosts", "-l", "g2")
        assert r.returncode == 0 and "Collect the KV-cache tier's live state" in r.stdout, r.stdout + r.stderr
        assert r.stdout.split("hosts (1):")[-1].split() == ["g2"]
        r = kvprov(tmp_path, "validate", "inv.yml", "--list-hosts", "--no-bench")
        assert r.returncode == 0 and "collect.yml" in r.stdout and "bench.yml" not in r.stdout, r.stdout + r.stderr
        assert listener.count == 0  # no host was contacted
        r = kvprov(tmp_path, "audit", "inv.yml", "-l", "g2", "--timeout", "5")  # the same without: it connects
        assert r.returncode == 3, r.stdout + r.stderr
        assert listener.count > 0
    finally:
        listener.close()


def test_list_hosts_writes_no_report_and_needs_live_hosts(tmp_path, capsys):
    inventory(tmp_path)
    assert cli.main(["deploy", str(tmp_path / "inv.yml"), "--list-hosts", "--json", "-"]) == 2
    assert "--list-hosts prints what the run would do and runs nothing: leave out --json" in capsys.readouterr().err
    assert cli.main(["audit", str(tmp_path / "inv.yml"), "--list-hosts", "--junit", "j.xml"]) == 2
    assert cli.main(["validate", "--bundle", str(tmp_path), "--list-hosts"]) == 2
    assert "give an INVENTORY, without --bundle" in capsys.readouterr().err


def test_list_hosts_gives_ansible_playbook_the_commands_playbooks_and_options(tmp_path, monkeypatch, capsys):
    listed = []

    def list_hosts(playbooks, sources, **kw):
        listed.append((playbooks, kw))
        return "playbook: listed\n"

    monkeypatch.setattr(runner, "list_hosts", list_hosts)
    monkeypatch.setattr(runner, "run", lambda *a, **kw: pytest.fail("a playbook ran"))
    inv = str(inventory(tmp_path))
    assert cli.main(["deploy", inv, "--list-hosts", "-l", "v1", "-t", "nixl", "--skip-tags", "gds"]) == 0
    assert cli.main(["validate", inv, "--list-hosts", "--engine-roundtrip"]) == 0
    assert cli.main(["collect", inv, "--out", str(tmp_path / "o"), "--list-hosts"]) == 0
    assert cli.main(["bench", inv, "--list-hosts", "-l", "v2"]) == 0
    assert capsys.readouterr().out == "playbook: listed\n" * 4
    assert listed == [(["site.yml"], {"name": "deploy-list-hosts", "limit": "v1", "extravars": {}, "tags": "nixl",
                                      "skip_tags": "gds"}),
                      (["collect.yml", "bench.yml", "restart.yml"], {"name": "validate-list-hosts", "limit": None}),
                      (["collect.yml"], {"name": "collect-list-hosts", "limit": None}),
                      (["bench.yml"], {"name": "bench-list-hosts", "limit": "v2"})]
    assert not (tmp_path / "o").exists()


def test_deploy_lists_tasks_and_tags_and_checks_syntax_as_ansible_playbook_does(tmp_path):
    """deploy's --list-tasks, --list-tags and --syntax-check: ansible-playbook's own output for
    site.yml with the command's options (here -t), one at a time; the hosts are closed ports on
    this machine, so a contacted host would fail the command."""
    inv = str(inventory(tmp_path, ansible_port=9))
    r = kvprov(tmp_path, "deploy", inv, "--list-tasks", "-t", "nixl")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "playbook: " in r.stdout and "kvprov.kvprov.nixl : Write the NIXL backend config" in r.stdout, r.stdout
    assert "kvcache_mount : Install the NFS client" not in r.stdout  # -t nixl: the always tasks and nixl's
    assert "what a run does at most" in r.stderr
    r = kvprov(tmp_path, "deploy", inv, "--list-tags")
    assert r.returncode == 0 and "TASK TAGS: [" in r.stdout and "nixl" in r.stdout, r.stdout + r.stderr
    r = kvprov(tmp_path, "deploy", inv, "--syntax-check")
    assert r.returncode == 0 and r.stdout.strip().startswith("playbook: "), r.stdout + r.stderr
    r = kvprov(tmp_path, "deploy", inv, "--syntax-check", "--list-tasks")
    assert r.returncode == 2 and "not allowed with argument" in r.stderr, r.stderr
    r = kvprov(tmp_path, "audit", inv, "--syntax-check")  # deploy's alone: the other commands run kvprov's playbooks
    assert r.returncode == 2 and "unrecognized arguments: --syntax-check" in r.stderr, r.stderr


def test_list_hosts_names_a_playbook_ansible_cannot_list(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("KVPROV_RUNS_DIR", raising=False)
    inv = inventory(tmp_path)
    with pytest.raises(Exception, match="ansible-playbook --list-hosts missing.yml failed") as e:
        runner.list_hosts(["missing.yml"], [str(inv)], name="test")
    assert e.value.exit_code == 2
    with pytest.raises(Exception, match="ansible-playbook --syntax-check missing.yml failed") as e:
        runner.list_hosts(["missing.yml"], [str(inv)], name="test", listing="--syntax-check")
    assert e.value.exit_code == 2


@pytest.mark.parametrize("tags, skip_tags, written", [
    (None, None, True), ("engine", None, True), ("nixl,engine", "gds", True), (None, "gds,nixl", True),
    ("nixl", None, False), (None, "engine", False), (None, "gds,configure", False), (None, "always", False),
    (None, "all", False), ("engine", "nixl, engine", False)])
def test_deploy_records_the_secrets_only_when_the_run_writes_them(tags, skip_tags, written):
    """deployed_secrets records what each host got; a run that skips the engine role's secret
    tasks must not record them (a rotated secret would then never be deployed)."""
    assert deploy.secrets_deployed(tags, skip_tags) is written


@pytest.mark.parametrize("skip_tags, saved", [(None, True), ("configure", False)])
def test_a_deploy_skipping_the_secrets_does_not_record_them(tmp_path, monkeypatch, skip_tags, saved):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    calls, recorded = [], []
    monkeypatch.setattr(deploy, "converge", lambda *a, **kw: calls.append(kw) or runner.RunResult(
        rc=0, artifacts=None, hosts={"v1": runner.HostSummary(ok=1)}))
    monkeypatch.setattr(deploy.deployed_secrets, "save", lambda sources, hosts: recorded.append(hosts))
    argv = ["deploy", str(inventory(tmp_path)), "--full", *(["--skip-tags", skip_tags] if skip_tags else [])]
    assert cli.main(argv) == 0
    assert calls[0]["skip_tags"] == skip_tags
    assert recorded == ([["v1"]] if saved else [])


def test_bench_json_dash_prints_the_json_alone(tmp_path, monkeypatch, capsys):
    from kvprov import bench
    from kvprov.validate.result import PASS, Result

    monkeypatch.setattr(bench, "run", lambda *a, **kw: ([Result("bench.write", "bench", PASS, "e", "f", "", "v1")],
                                                        runner.RunResult(rc=0, artifacts=None)))
    assert cli.main(["bench", str(inventory(tmp_path)), "--json", "-"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["hosts"]["v1"]
