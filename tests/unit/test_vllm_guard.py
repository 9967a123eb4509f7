"""vLLM's unauthenticated routes are closed with a key (#24): vLLM checks its API key under
/v1, /v2, /inference and /cohere only, so POST /invocations (SageMaker's route) and /tokenize
serve without it. With a key, kvprov's vLLM units load roles/vllm/templates/kvprov_vllm_guard.py.j2
with --middleware, which asks for the key on every route but /health, /ping, /version and
/metrics.

Run with vLLM's own code (the engine venv's CPU build): its argument parser reads the rendered
unit's command line, its init_entrypoints_middleware adds its own key check and the
--middleware class (imported from the unit's PYTHONPATH, aimed at the rendered file), and
Starlette's test client sends the requests. The control is the same app from the same
command line without --middleware: /invocations answers without a key."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kvprov.validate.parsers import exec_argv, parse_unit, unit_environment
from tests.conftest import render_one_host
from tests.unit.test_engine_parsers import ENGINE_PY

KEY = "sk-kvprov-Secret_42.x"
SITE = "/usr/local/lib/kvprov-vllm"
UNIT = "etc/systemd/system/kvprov-vllm-main.service"

APP = r'''
import json, sys
from fastapi import FastAPI
from fastapi.testclient import TestClient
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.entrypoints.serve.middleware.register import init_entrypoints_middleware
from vllm.utils.argparse_utils import FlexibleArgumentParser

args = make_arg_parser(FlexibleArgumentParser(prog="vllm-serve")).parse_args(json.loads(sys.argv[1]))
app = FastAPI()
for path in ("/v1/models", "/invocations", "/tokenize", "/health", "/metrics"):
    app.add_api_route(path, lambda: {"ok": True}, methods=["GET", "POST"])
init_entrypoints_middleware(args, app, ())
client = TestClient(app)
out = {}
for path in ("/v1/models", "/invocations", "/tokenize", "/health", "/metrics", "/invocations/"):
    for key in ("none", "wrong", "right"):
        headers = {} if key == "none" else {"Authorization": "Bearer " + ({"wrong": "x", "right": sys.argv[2]}[key])}
        out[f"{path} {key}"] = client.post(path, headers=headers).status_code
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    if not os.access(ENGINE_PY, os.X_OK):
        pytest.fail(f"engine venv python {ENGINE_PY} missing (scripts/install-deps builds it)")
    return render_one_host(tmp_path_factory.mktemp("vllmguard"), KEY, kvprov_engine="vllm_baseline",
                           kvprov_engine_host="0.0.0.0", kvprov_engine_clients=["10.0.0.0/24"])


def statuses(rendered: Path, argv: list[str]) -> dict[str, int]:
    env = unit_environment(parse_unit((rendered / UNIT).read_text()))
    assert env["PYTHONPATH"] == SITE and "VLLM_API_KEY" not in env  # the key: the root-only EnvironmentFile
    r = subprocess.run([ENGINE_PY, "-c", APP, json.dumps(argv), KEY], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(rendered / SITE.lstrip("/")), "VLLM_API_KEY": KEY})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])


def test_the_unit_loads_the_guard_which_asks_for_the_key_on_every_route_but_the_probes(rendered):
    [start] = [v for k, v in parse_unit((rendered / UNIT).read_text())["Service"] if k == "ExecStart"]
    argv = exec_argv(start, from_show=False)
    argv = argv[argv.index("serve") + 2:] if "serve" in argv else argv[3:]  # `vllm serve MODEL` or `python3 -m M`
    assert argv[argv.index("--middleware") + 1] == "kvprov_vllm_guard.KeyOnEveryRoute"
    got = statuses(rendered, argv)
    for path in ("/v1/models", "/invocations", "/tokenize", "/invocations/"):
        assert (got[f"{path} none"], got[f"{path} wrong"], got[f"{path} right"]) == (401, 401, 200), (path, got)
    for path in ("/health", "/metrics"):
        assert {got[f"{path} {k}"] for k in ("none", "wrong", "right")} == {200}, (path, got)

    # the control: vLLM alone, from the same command line, serves /invocations without a key
    i = argv.index("--middleware")
    alone = statuses(rendered, argv[:i] + argv[i + 2:])
    assert alone["/invocations none"] == 200 and alone["/tokenize none"] == 200 and alone["/v1/models none"] == 401


def test_without_a_key_no_guard_is_rendered(tmp_path):
    rendered = render_one_host(tmp_path, kvprov_engine="vllm_baseline")
    unit = (rendered / UNIT).read_text()
    assert "--middleware" not in unit and "PYTHONPATH" not in unit
    assert not (rendered / SITE.lstrip("/")).exists()
