"""One format per sink (kvprov/sinks.py), on the second security review's exact inputs (#24):
what `kvprov check` says of each, and what the roles render (or refuse to render) from it.
The quoting was also read back by a real systemd 252 (lab container: `systemctl show`, and
ExecStart=printf of the rendered words); these tests pin the rendered form that it read back."""

import shlex
import subprocess
import sys

import pytest
import yaml

from kvprov import sinks
from kvprov.validate import parsers
from tests.unit.test_check_host_values import problems
from tests.unit.test_namespace import ROOT

KNOWN = parsers.mount_state.expectations


def errors(**values) -> list[str]:
    return [p for p in problems(kvprov_engine="vllm_offload", kvprov_vllm_offload_cpu_bytes_to_use=1 << 30, **values)
            if p.startswith("error")]


# ---------------------------------------------------------------------------- the formats

@pytest.mark.parametrize("value, word", [
    ("--port", "--port"),
    ("a b", '"a b"'),
    ("a' LD_PRELOAD='/dev/shm/x.so", "\"a' LD_PRELOAD='/dev/shm/x.so\""),  # finding 11: one word, not two
    ("--foo\\", '"--foo\\\\"'),  # a trailing backslash is no line continuation
    ('{"a":"b"}', '"{\\"a\\":\\"b\\"}"'),
    ("$HOME%h", '"$$HOME%%h"'),
])
def test_a_command_line_word_reads_back_as_itself(value, word):
    assert sinks.unit_word(value) == word
    # kvprov's unit parser (shell rules for the quotes, systemd's %% and $$) reads it back whole
    assert parsers.exec_argv(f"/bin/x {word}", from_show=False) == ["/bin/x", value]


def test_an_environment_assignment_escapes_percent_but_not_dollar():
    assignment = sinks.unit_word("FOO=a' LD_PRELOAD='/dev/shm/x.so $HOME %n", command_line=False)
    assert assignment == "\"FOO=a' LD_PRELOAD='/dev/shm/x.so $HOME %%n\""
    unit = parsers.parse_unit(f"[Service]\nEnvironment={assignment}\n")
    assert parsers.unit_environment(unit) == {"FOO": "a' LD_PRELOAD='/dev/shm/x.so $HOME %n"}


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x1bb", "a\u2028b", "a\u2029b", "a\x85b", "x" * 5000,
                                   # zero-width and bidirectional overrides: text that reads otherwise (#38)
                                   "a\u200bb", "a\u202eb", "a\u2066b", "a\ufeffb", "a\u200fb"])
def test_no_sink_takes_a_line_break_a_control_character_or_a_huge_value(value):
    for sink in (sinks.unit_word, sinks.unit_path, sinks.mount_source, sinks.netdev):
        with pytest.raises(sinks.SinkError):
            sink(value)


def test_a_message_shows_the_invisible_character():
    assert sinks.string_problem("a\u2028b").startswith('"a\\u2028b" contains U+2028 (line separator)')
    assert "U+0085" in sinks.string_problem("/m\x85x")
    assert sinks.string_problem("/etc/kvprov/\u202egpj.toml").startswith(
        '"/etc/kvprov/\\u202egpj.toml" contains U+202E (right-to-left override)')
    assert sinks.string_problem("café ☕ résumé") is None  # other non-ASCII text is fine


@pytest.mark.parametrize("path", ["/mnt/kvcache/ --high-percent 1 --low-percent 0", "/mnt/kv'c", "/a/../etc",
                                  "/a/./b", "relative", "/a%n", "/a$b"])
def test_a_unit_path_is_plain(path):
    with pytest.raises(sinks.SinkError, match="unit path"):
        sinks.unit_path(path)


@pytest.mark.parametrize("option", ["suid", "dev", "exec", "defaults", "user", "users", "owner", "group",
                                    "x-systemd.requires=foo.service", "x-systemd.after=%n", "context=x", "bogus"])
def test_mount_options_outside_the_allow_list_are_refused(option):
    assert sinks.mount_option_problem(option, KNOWN)
    with pytest.raises(sinks.SinkError):
        sinks.mount_options(["hard", option], KNOWN)


def test_known_nfs_options_pass_as_they_are():
    options = ["vers=4.1", "proto=rdma", "hard", "nconnect=8", "write=eager", "noatime", "nosuid", "nodev", "noexec",
               "_netdev", "actimeo=600,nocto"]
    assert sinks.mount_options(options, KNOWN) == ",".join(options)


@pytest.mark.parametrize("source", ["10.0.0.1%n:/kv", "10.0.0.1:/kv x", "host:/kv'", "host:kv"])
def test_a_mount_source_is_an_address_and_a_plain_path(source):
    with pytest.raises(sinks.SinkError, match="mount source"):
        sinks.mount_source(source)
    assert sinks.mount_source("[fd00::5]:/kvcache_vol1") == "[fd00::5]:/kvcache_vol1"


# ---------------------------------------------------------------------------- check, on the review's inputs

def test_the_review_inputs_are_refused_by_check_with_the_reason():
    def refused(fragment: str, **values):
        found = errors(**values)
        assert any(fragment in p for p in found), (values, found)

    refused('"suid" is refused', kvprov_storage_extra_options=["suid", "dev", "exec", "x-systemd.requires=a.service"])
    refused('"x-systemd.requires=a.service" is refused', kvprov_storage_extra_options=["x-systemd.requires=a.service"])
    refused("U+000A (newline)", kvprov_engine_served_model_name="{{ '{{' }}'\n[Service]\nExecStartPre=+/bin/sh")
    refused("HF_TOKEN looks like a secret", kvprov_engine_environment={"HF_TOKEN": "hf_x"})
    refused("VLLM_API_KEY looks like a secret", kvprov_engine_environment={"VLLM_API_KEY": "x"})
    refused("DATABASE_URL holds a URL with a password", kvprov_engine_environment={"DATABASE_URL": "pg://u:pw@db/x"})
    refused('"--admin-api-key" takes a secret', kvprov_engine_extra_args=["--admin-api-key=x"])
    refused('"--api-key" takes a secret', kvprov_engine_extra_args=["--api-key", "x"])
    refused('"--hf-token" takes a secret', kvprov_engine_extra_args=["--hf-token", "x"])
    refused("is not an address or DNS name", kvprov_storage_server="10.0.0.1%n")
    refused("U+2028 (line separator)", kvprov_engine_served_model_name="a\u2028b")
    refused("U+0085", kvprov_engine_served_model_name="a\x85b")
    refused('"nobody" is an account of the system', kvprov_engine_user="nobody")
    refused("/etc is a system directory", kvprov_engine_home="/etc")
    refused("is on the shared KV volume", kvprov_engine_home="/mnt/kvcache/home")
    refused("LD_PRELOAD: /mnt/kvcache/x.so is on the shared KV volume", kvprov_engine_environment={"LD_PRELOAD": "/mnt/kvcache/x.so"})
    refused("PYTHONHOME: /dev/shm/py is in a world-writable", kvprov_engine_environment={"PYTHONHOME": "/opt/a:/dev/shm/py"})
    refused("PYTHONPATH: kvprov's unit sets it", kvprov_engine_environment={"PYTHONPATH": "/opt/a"})
    refused("at most 4096", kvprov_engine_served_model_name="a" * 200_000)
    refused('"evil:80/x?" is not an address or a DNS name', ansible_host="evil:80/x?")


def test_names_that_only_look_like_secrets_pass():
    assert errors(kvprov_engine_environment={"TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
                                             "VLLM_CPU_KVCACHE_SPACE": "4"},
                  kvprov_engine_extra_args=["--max-num-batched-tokens", "8192", "--tokenizer", "/m",
                                            "--keyfile-dir", "/etc/ssl"]) == []  # (--ssl-keyfile: kvprov's own)


# ---------------------------------------------------------------------------- what the roles render

def render(tmp_path, host: str, values: dict) -> subprocess.CompletedProcess:
    overlay = tmp_path / "overlay.yml"
    overlay.write_text(yaml.safe_dump({"all": {"hosts": {host: values}}}))
    return subprocess.run([sys.executable, "-m", "kvprov", "render", str(ROOT / "inventory/example.yml"), "-i",
                           str(overlay), "--host", host, "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)


def test_hostile_words_render_as_one_word_each_and_the_mount_is_hardened(tmp_path):
    host = "gpu-c01.corp.example.com"
    r = render(tmp_path, host, {"kvprov_engine_environment": {"FOO": "a' LD_PRELOAD='/dev/shm/x.so", "BAR": 'x$y%n"q\\z'},
                                "kvprov_engine_extra_args": ["--foo\\", "--bar=a b$HOME%h"]})
    assert r.returncode == 0, r.stdout + r.stderr
    unit = parsers.parse_unit((tmp_path / f"out/{host}/etc/systemd/system/kvprov-vllm-gpu0-3.service").read_text())
    env = parsers.unit_environment(unit)
    assert env["FOO"] == "a' LD_PRELOAD='/dev/shm/x.so" and env["BAR"] == 'x$y%n"q\\z' and "LD_PRELOAD" not in env
    assert parsers.exec_argv(parsers.unit_value(unit, "Service", "ExecStart"), False)[-2:] == ["--foo\\", "--bar=a b$HOME%h"]
    mount = parsers.parse_unit((tmp_path / f"out/{host}/etc/systemd/system/mnt-kvcache.mount").read_text())
    assert {"nosuid", "nodev", "noexec"} <= set(parsers.unit_value(mount, "Mount", "Options").split(","))


def test_a_template_value_is_checked_after_templating(tmp_path):
    """check cannot judge a template; the role's sink filter judges what Jinja made of it (the
    review's served_model_name that renders a root ExecStartPre=+ line)."""
    host = "gpu-c01.corp.example.com"
    r = render(tmp_path, host, {"kvprov_engine_served_model_name":
                                "{{ 'tiny%c[Service]%cExecStartPre=+/bin/sh' | format(10, 10) }}"})
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "cannot compute the desired state" in out, out
    assert "unit command-line word" in out and "U+000A (newline)" in out and host in out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("variable, sink", [("kvprov_engine_user", "name"), ("kvprov_storage_idmap_domain", "name")])
def test_a_templated_name_is_checked_where_it_lands(tmp_path, variable, sink):
    """#38: User=/Group= and idmapd.conf's Domain had no sink filter: a templated value that renders
    a newline added a root ExecStartPre=+ line to the engine units, or a section to idmapd.conf."""
    host = "gpu-c01.corp.example.com"
    r = render(tmp_path, host, {variable: "{{ 'kvprov%c[Service]%cExecStartPre=+/bin/sh' | format(10, 10) }}"})
    out = r.stdout + r.stderr
    assert r.returncode != 0 and f"kvprov refuses to render this value: {sink}:" in out and "U+000A (newline)" in out
    assert not (tmp_path / "out").exists()
    assert sinks.plain_name("kvprov-engine") == "kvprov-engine" and sinks.unit_text("50% of /kv") == "50%% of /kv"
    with pytest.raises(sinks.SinkError, match="is not a plain name"):
        sinks.plain_name("kvprov engine")


def test_an_api_beyond_loopback_answers_only_its_clients(tmp_path):
    host = "gpu-c01.corp.example.com"
    key = tmp_path / "key"
    key.write_text("k\n")
    key.chmod(0o600)
    r = render(tmp_path, host, {"kvprov_engine_host": "0.0.0.0", "kvprov_engine_api_key_file": str(key),
                                "kvprov_engine_clients": ["10.1.0.0/16", "fd00::/64"]})
    assert r.returncode == 0, r.stdout + r.stderr
    unit = parsers.parse_unit((tmp_path / f"out/{host}/etc/systemd/system/kvprov-vllm-gpu0-3.service").read_text())
    assert parsers.unit_value(unit, "Service", "IPAddressDeny") == "any"
    assert parsers.unit_value(unit, "Service", "IPAddressAllow") == "localhost 10.1.0.0/16 fd00::/64"
