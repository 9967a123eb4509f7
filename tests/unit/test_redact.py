"""kvprov.redact: the one rule that keeps secret values out of diffs, reports and bundles."""

import importlib.util

import pytest

from kvprov import redact
from tests.conftest import ROOT


@pytest.mark.parametrize("line, shown", [
    ("VLLM_API_KEY=s3cr3t", "VLLM_API_KEY=<redacted>"),
    ('export HF_TOKEN="s3cr3t"', 'export HF_TOKEN="<redacted>"'),
    ("  aws_secret_access_key: s3cr3t", "  aws_secret_access_key: <redacted>"),
    ('access_key = "s3cr3t"', 'access_key = "<redacted>"'),
    ('Environment="PASSWORD=s3cr3t" "PORT=8000"', 'Environment="PASSWORD=<redacted>" "PORT=8000"'),
    ('{"api_key": "s3cr3t", "port": 8000}', '{"api_key": "<redacted>", "port": 8000}'),
    ("ExecStart=/v/bin/python3 -m x --api-key s3cr3t --port 8000", "ExecStart=/v/bin/python3 -m x --api-key <redacted> --port 8000"),
    # to the next space: a secret may hold a comma (the options after it are hidden too)
    ("srv:/kv /mnt nfs4 password=s3cr3t,sec=krb5 0 0", "srv:/kv /mnt nfs4 password=<redacted> 0 0"),
    # not secrets: a reference systemd expands, ordinary settings
    ("ExecStart=/x --api-key ${KVPROV_ENGINE_API_KEY}", "ExecStart=/x --api-key ${KVPROV_ENGINE_API_KEY}"),
    ("thread_count = 32", "thread_count = 32"),
    ("Options=vers=4.1,proto=rdma,port=20049", "Options=vers=4.1,proto=rdma,port=20049"),
])
def test_secret_values_are_redacted_and_nothing_else(line, shown):
    assert redact.redact_line(line) == shown


def test_secret_files_and_diffs():
    assert redact.is_secret_path("/etc/kvprov/secrets/engine.env")
    assert not redact.is_secret_path("/etc/kvprov/nixl_backend_config.toml")
    diff = ["--- a (desired)\n", "+++ a (live)\n", "@@ -1 +1 @@\n", "-TOKEN=a\n", "+TOKEN=b\n", " port=1\n"]
    assert redact.redact_diff(diff, "/etc/kvprov/x.env") == (
        diff[:3] + ["-TOKEN=<redacted>\n", "+TOKEN=<redacted>\n", " port=1\n"], True)
    assert redact.redact_diff(diff, "/etc/kvprov/secrets/engine.env")[0][3:] == ["-<redacted>\n", "+<redacted>\n",
                                                                               " <redacted>\n"]


def test_the_collector_carries_the_same_rule():
    spec = importlib.util.spec_from_file_location("kvprov_collect", ROOT / "plugins/modules/kvprov_collect.py")
    collector = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(collector)
    assert collector.SECRET_NAME == redact.SECRET_NAME


def test_the_second_reviews_leaks_are_redacted_whole():
    """#24 finding 7: --admin-api-key, --hf-token, URL passwords, and no tail left of a quoted value."""
    cases = {
        "ExecStart=/x --admin-api-key sekrit --port 1": "ExecStart=/x --admin-api-key <redacted> --port 1",
        "    --hf-token hf_abc \\": "    --hf-token <redacted> \\",
        'Environment="VLLM_API_KEY=a,b;c"': 'Environment="VLLM_API_KEY=<redacted>"',
        'Environment="FOO=1" "HF_TOKEN=a b" \'API_KEY=x y\'': 'Environment="FOO=1" "HF_TOKEN=<redacted>" \'API_KEY=<redacted>\'',
        "DATABASE_URL=postgres://u:pw@db/x": "DATABASE_URL=postgres://u:<redacted>@db/x",
        "x --url https://user:s3cr3t@h/x": "x --url https://user:<redacted>@h/x",
        'Environment="A_KEY=${KVPROV_ENGINE_API_KEY}"': 'Environment="A_KEY=${KVPROV_ENGINE_API_KEY}"',
    }
    assert {line: redact.redact_line(line) for line in cases} == cases


def test_a_removed_or_added_line_that_starts_like_a_header_is_content():
    """`--api-key=OLD` removed from a file shows in the diff as `---api-key=OLD`: content, not a
    file-name header, so it is redacted (whole, in a secret file); the headers before the first
    hunk and every @@ line are kept as they are."""
    diff = ["--- a (desired)\n", "+++ a (live)\n", "@@ -1,2 +1,2 @@\n", "---api-key=OLD\n", "+++api-key=NEW\n",
            " port=1\n", "@@ -9 +9 @@\n", "---token OLD2\n", "", "+x\n"]
    shown, redacted = redact.redact_diff(diff, "/etc/kvprov/engine.args")
    assert redacted
    assert shown == diff[:3] + ["---api-key=<redacted>\n", "+++api-key=<redacted>\n", " port=1\n", diff[6],
                                "---token <redacted>\n", "", "+x\n"]
    shown, _ = redact.redact_diff(diff, "/etc/kvprov/secrets/engine.env")
    assert shown == diff[:3] + ["-<redacted>\n", "+<redacted>\n", " <redacted>\n", diff[6], "-<redacted>\n", "",
                                "+<redacted>\n"]
    assert redact.redact_diff(["--- a\n", "+++ b\n"], "/etc/kvprov/secrets/x") == (["--- a\n", "+++ b\n"], False)


@pytest.mark.parametrize("path, secret", [
    ("/etc/kvprov/secrets/engine.env", True), ("etc/kvprov/secrets/engine.env", True),
    ("//etc/kvprov/secrets/engine.env", True), ("/etc/kvprov/x/../secrets/engine.env", True),
    ("/etc/kvprov/secretsdir/x", False),  # not under secrets/, and its own name is no secret
    ("/etc/kvprov/tls/engine.key", True), ("/etc/ssl/engine.pem", True), ("/x/store.p12", True),
    ("/etc/kvprov/hf_token", True), ("/etc/kvprov/CREDENTIALS", True), ("/etc/passwd", True),
    ("/etc/kvprov/nixl.toml", False), ("/etc/kvprov/key.conf", False), ("/etc/kvprov/secrets", True),
    ("etc/kvprov/engine.env", False), ("/etc/kvprov/x.key.bak", False),
])
def test_secret_paths(path, secret):
    assert redact.is_secret_path(path) is secret


@pytest.mark.parametrize("line, shown", [
    ("api_key: |", "api_key: |"), ("token: >-", "token: >-"),  # YAML blocks: their lines follow
    ('secrets: {"api_key": "x", "port": 1}', 'secrets: {"api_key": "<redacted>", "port": 1}'),
    ("keys: [a, b]", "keys: [a, b]"), ('API_KEY=""', 'API_KEY=""'), ("API_KEY=''", "API_KEY=''"),
    ("API_KEY='s3cr3t'", "API_KEY='<redacted>'"), ('HF_TOKEN = "s3cr3t"', 'HF_TOKEN = "<redacted>"'),
    ("url = https://user:pw@host/x", "url = https://user:<redacted>@host/x"),
    ('x --hf-token "s3cr3t" --y', 'x --hf-token "<redacted>" --y'), ("x --api-key --port 1", "x --api-key --port 1"),
    ("API_KEY=Xs3cr3tX", "API_KEY=<redacted>"),  # only a quote is kept around the value
])
def test_more_lines(line, shown):
    assert redact.redact_line(line) == shown
    assert redact.redact_text(line + "\n" + line) == shown + "\n" + shown


@pytest.mark.parametrize("line, shown", [
    # #38 (Low): an HTTP Authorization header names no secret, yet carries one, in every scheme
    ("Authorization: Bearer s3cr3t", "Authorization: Bearer <redacted>"),
    ("authorization: basic dXNlcjpwdw==", "authorization: basic <redacted>"),
    ('curl -H "Authorization: Bearer s3cr3t" http://127.0.0.1:8000/v1/models',
     'curl -H "Authorization: Bearer <redacted>" http://127.0.0.1:8000/v1/models'),
    ('{"headers": {"Authorization": "Bearer s3cr3t"}}', '{"headers": {"Authorization": "Bearer <redacted>"}}'),
    ("Proxy-Authorization: s3cr3t", "Proxy-Authorization: <redacted>"),
    ("Authorization: Bearer $API_KEY", "Authorization: Bearer $API_KEY"),  # a reference, kept
    ("the route needs no authorization", "the route needs no authorization"),
    ("X-Authorization-Mode: strict", "X-Authorization-Mode: strict"),
])
def test_authorization_headers(line, shown):
    assert redact.redact_line(line) == shown
