"""`kvprov loadtest [INVENTORY] [--url URL ...]`: a multi-turn serving benchmark against
OpenAI-compatible engine endpoints, with the cache hits per source read from the
engines' own /metrics. This module finds the endpoints (inventory, --url, ssh tunnels), runs
the conversations and load points, and holds the command and validate's engine round trip;
the prompts and token counts are in kvprov/loadtest_workload.py, the HTTP client in
kvprov/loadtest_client.py, the counter and sample arithmetic in kvprov/loadtest_metrics.py,
the load shapes in kvprov/loadtest_shapes.py and the files written in kvprov/loadtest_report.py.

Endpoints: every engine instance of the inventory's gpu_nodes (its port and listen
address from the desired state, the host's ansible_host when it listens on every
interface, the API key from kvprov_engine_api_key_file sent as a Bearer token), or the
servers given with --url (no inventory needed). No request goes anywhere else.

Workload: per endpoint, per initial prompt length, --users conversations run side by
side; each turn appends the previous answer and a new user message to the history, so
later turns share a growing prefix. A point is one endpoint x prompt length x turn:
requests/s, output tokens/s, TTFT and end-to-end latency percentiles (streamed), errors,
and the delta of the engine's cache counters over the point. It stops by itself after
users x turns x lengths requests per endpoint, or at --duration.

Writes DIR/loadtest.json, loadtest.png and loadtest.html (--out DIR); --compare A.json
B.json ... overlays earlier runs instead (DIR/compare.png, compare.html). docs/loadtest.md
describes the JSON.

--replay (inventory only): after an endpoint's sweep (which warms its caches), its engine
units are restarted through the inventory, so the GPU and host tiers are empty, and the
same conversations run again: the replay's first turns can only hit the storage tier. The
JSON's "replay" rows give the storage hits and TTFT p50 of the cold run against the replay.

--cross-host (inventory only): after every sweep, each instance's conversations run on an
instance of another host that shares its storage namespace, restarted first: that host never
saw them, so its first turns can only hit what the other host stored on the shared volume.
The JSON's "cross_host" rows give the storage hits and TTFT p50 against the host's own cold
run; an instance no other host shares a namespace with is named, with why, and exits 1.

Exit 0: every endpoint measured without an error; 1: an endpoint was down, answered
errors or is not OpenAI-compatible (one line each; the others are still measured);
2: usage error, a prompt longer than the model's context (refused before any request) or
a bad inventory; 4: the loadtest extra not installed (pip install 'kvprov[loadtest]'); 130: Ctrl-C
(what was measured is written).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import math
import random
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

from kvprov import inventory, vault
from kvprov.check import TIERLESS_ENGINES
from kvprov.errors import EXIT_CHECKS_FAILED, EXIT_ENVIRONMENT, EXIT_OK, EXIT_USAGE, KvprovError
from kvprov.loadtest_client import (AsyncClient, Client, Endpoint, EndpointError, _progress, choose_api, read_counters,
                                    wait_ready)
from kvprov.loadtest_metrics import (cache_summary, counter_delta, cross_host_rows, delivery, engine_view,
                                     measure_point, replay_rows)
# kvprov/validate/checks/engine_sglang.py imports cache_counters from here: that file is a mutation target
# hashed whole (benchmarks/mutation.py), so its import was left as it was
from kvprov.loadtest_metrics import cache_counters  # noqa: F401  (engine_sglang.py's import)
from kvprov.loadtest_workload import (Conversation, TokenCounter, context_problems, make_conversations,
                                      token_counter)
from kvprov.validate.report import clean as printable

# The loadtest extra (pyproject.toml), which a core install lacks: this module and its helpers import
# them only inside the functions that use them (validate imports this module), so a run checks first.
EXTRA = ("aiohttp", "matplotlib", "tokenizers")


def require_extra(command: str = "kvprov loadtest") -> None:
    """One line and exit 4 (environment) where the extra is missing, never an ImportError's traceback."""
    import importlib.util

    def installed(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except ValueError:  # sys.modules holds None for it: its import is blocked
            return False

    missing = [name for name in EXTRA if not installed(name)]
    if missing:
        raise KvprovError(f"{command} needs the loadtest extra: pip install 'kvprov[loadtest]' "
                          f"(not installed: {', '.join(missing)})", EXIT_ENVIRONMENT)


FORMAT = 1
INTERRUPTED = 130
DEFAULT_PROMPT_TOKENS = (1000, 4000)
ANY_ADDRESS = ("0.0.0.0", "::")


# ---------------------------------------------------------------------------- endpoints

def _host_in_url(address: str) -> str:
    try:
        return f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    except ValueError:
        return address


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def parse_url(text: str) -> str:
    """A --url as the base the API paths are appended to (scheme://host:port[/prefix], /v1 cut)."""
    parts = urlsplit(text if "://" in text else f"http://{text}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise KvprovError(f"--url {text}: want http(s)://HOST:PORT[/PREFIX]", EXIT_USAGE)
    if parts.username or parts.password or parts.query or parts.fragment:
        raise KvprovError(f"--url {text}: no user, password, query or fragment (the API key goes in "
                          "--api-key-file)", EXIT_USAGE)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as e:
        raise KvprovError(f"--url {text}: {e}", EXIT_USAGE) from None
    path = parts.path.rstrip("/")
    path = path[:-3] if path.endswith("/v1") else path
    return f"{parts.scheme}://{_host_in_url(parts.hostname)}:{port}{path}"


def read_api_key(path: str, variable: str) -> str:
    """The one-line API key of a controller file, vault-encrypted or not, as deploy's file lookup
    reads it (its content never reaches a message)."""
    try:
        data = Path(path).read_bytes()
        lines = (vault.decrypted(data) if vault.is_encrypted(data) else data.decode()).strip().splitlines()
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise KvprovError(f"cannot read the API key file {path} ({variable}): {getattr(e, 'strerror', None) or e}",
                          EXIT_USAGE) from None
    if len(lines) != 1 or not lines[0].strip():
        raise KvprovError(f"the API key file {path} ({variable}) must hold the key on one line", EXIT_USAGE)
    return lines[0].strip()


def url_endpoints(urls: list[str], api_key: str | None, tokenizer: str | None,
                  ca_file: str | None = None) -> list[Endpoint]:
    out = []
    for text in urls:
        base = parse_url(text)
        out.append(Endpoint(name=urlsplit(base).netloc + urlsplit(base).path, url=base, ca_file=ca_file,
                            metrics_urls=[f"{base}/metrics"], api_key=api_key, model_path=tokenizer))
    return out


def inventory_endpoints(hosts: dict[str, dict], states: dict[str, dict], instances: list[str] | None = None,
                        tokenizer: str | None = None) -> list[Endpoint]:
    """The engine instances of the inventory: `hosts` {host: its variables (inventory.Host.values())},
    `states` {host: desired state (kvprov.desired.load)}; `instances`: names (`main` or `host/main`)
    to keep. Pure: reads the API key files only."""
    out = []
    for host, state in sorted(states.items()):
        v = hosts.get(host, {})
        engine = state["engine"]
        listen = str(v.get("kvprov_sglang_host") or v.get("kvprov_engine_host") or "127.0.0.1")
        reach = str(v.get("ansible_host") or host)
        problem, via = None, None
        if listen in ANY_ADDRESS:
            address = reach
        elif _is_loopback(listen):  # through an ssh tunnel (open_tunnels), also when ssh reaches the host on this
            # controller's loopback (a port-forwarded VM): this loopback is not the host's, and whatever listens on
            # its port would get the prompts and the key (#38); direct only for the controller itself
            address, via = listen, (None if v.get("ansible_connection") == "local" else v)
        else:
            address = listen
        key_file = v.get("kvprov_engine_api_key_file") or ""
        key = str(vault.revealed(v.get("kvprov_engine_api_key") or "")).strip()  # the key as a value (vaulted or not)
        limit = int(v.get("kvprov_vllm_max_model_len") or 0) if engine["name"] != "sglang_hicache" else 0
        for inst in engine["instances"]:
            name = f"{host}/{inst['name']}"
            if instances and inst["name"] not in instances and name not in instances:
                continue
            base = f"{engine.get('scheme', 'http')}://{_host_in_url(address)}:{inst['port']}"
            metrics = [f"{base}/metrics"]
            if inst.get("metrics_port"):  # the LMCache MP server's Prometheus port binds every interface
                metrics.append(f"http://{_host_in_url(address if _is_loopback(address) else reach)}:"
                               f"{inst['metrics_port']}/metrics")
            ep = Endpoint(name=name, url=base, metrics_urls=metrics, engine=engine["name"], problem=problem,
                          host=host, units=list(inst.get("units", [])), storage_dir=inst.get("storage_dir") or None,
                          max_model_len=limit or None, max_model_len_from="kvprov_vllm_max_model_len" if limit else "",
                          model_path=tokenizer or v.get("kvprov_engine_model_path"),
                          ca_file=v.get("kvprov_engine_tls_ca_file") or None, via=via)
            if key and not problem:
                ep.api_key = key
            elif key_file and not problem:
                try:
                    ep.api_key = read_api_key(key_file, "kvprov_engine_api_key_file")
                except KvprovError as e:
                    ep.problem = str(e)
            out.append(ep)
    return out


def open_tunnels(endpoints: list[Endpoint], stack: ExitStack) -> None:
    """Reach the endpoints on a host's loopback through an ssh tunnel per host (kvprov.tunnel),
    closed with `stack`; a tunnel that does not open is that host's endpoints' problem. The
    URLs stay the engine's own (the JSON's); the clients connect to the tunnel's Unix sockets
    (Endpoint.sockets), which only this user reaches."""
    from kvprov import tunnel

    by_host: dict[str, list[Endpoint]] = {}
    for ep in endpoints:
        if ep.via is not None and not ep.problem:
            by_host.setdefault(ep.host, []).append(ep)
    for host, eps in by_host.items():
        urls = {u for ep in eps for u in [ep.url, *ep.metrics_urls] if _is_loopback(urlsplit(u).hostname or "")}
        ports = sorted({urlsplit(u).port for u in urls})
        _progress(f"{host}: the engine listens on its loopback: ssh tunnel for port(s) {','.join(map(str, ports))}")
        try:
            sockets = stack.enter_context(tunnel.forward(host, eps[0].via, ports))
        except KvprovError as e:
            for ep in eps:
                ep.problem = str(e)
            continue
        for ep in eps:
            ep.tunnel = f"ssh tunnel to {host}'s {urlsplit(ep.url).netloc}"
            ep.sockets = {urlsplit(u).netloc: sockets[urlsplit(u).port] for u in [ep.url, *ep.metrics_urls]
                          if u in urls}


def load_inventory_endpoints(path: str | list[str], limit: str | None, instances: list[str] | None,
                             tokenizer: str | None) -> list[Endpoint]:
    from kvprov import desired

    states = desired.load(path, limit)  # checks the inventory first (exit 2 on problems)
    hosts = {h.name: h.values() for h in inventory.load(path).hosts}
    eps = inventory_endpoints(hosts, states, instances, tokenizer)
    if not eps:
        raise KvprovError(f"{path}: no engine instance matches" + (f" --instances {','.join(instances)}"
                                                                   if instances else ""), EXIT_USAGE)
    return eps


# ---------------------------------------------------------------------------- running

@dataclass
class Settings:
    prompt_tokens: list[int]
    turns: int = 3
    users: int = 2
    output_tokens: int = 64
    turn_tokens: int = 100
    duration: float = 600.0
    request_timeout: float = 300.0
    api: str = "auto"
    seed: str = "0"
    ignore_eos: bool = True
    replay: bool = False
    cross_host: bool = False
    restart_timeout: float = 900.0
    shapes: tuple = ()  # load shapes (kvprov/loadtest_shapes.py); none: one wave of `users` per turn
    requests: int = 100  # measured requests per load point
    warmup: int = 10  # requests before them, not counted
    repeats: int = 1


def cross_host_pairs(endpoints: list[Endpoint]) -> tuple[list[tuple[Endpoint, Endpoint]], dict[str, str]]:
    """--cross-host: each endpoint (source) with the next endpoint on another host whose engine
    shares its storage directory (a namespace), in a ring per namespace: A -> B, B -> C, C -> A.
    Returns the pairs and, per endpoint left out, why."""
    pairs, why = [], {}
    live = [e for e in endpoints if not e.problem]
    for a in live:
        if not a.storage_dir:
            why[a.name] = f"engine {a.engine} keeps no KV files on the volume"
            continue
        group = [e for e in live if e.storage_dir == a.storage_dir and e.engine == a.engine]
        others = [e for e in group[group.index(a) + 1:] + group[:group.index(a)] if e.host != a.host]
        down = [e for e in endpoints if e.problem and e.host != a.host and e.storage_dir == a.storage_dir]
        if not others and down:
            why[a.name] = ("the other hosts' instances of its namespace could not be measured: "
                           + "; ".join(f"{e.name}: {e.problem}" for e in down))
        elif not others:
            why[a.name] = (f"no other host's instance uses its storage directory {a.storage_dir}: the namespace is "
                           "not shared (kvprov_engine_storage_sharing instance, a storage_dir of its own, or an "
                           "engine tier that is per instance), or the other hosts are not in this run")
        else:
            pairs.append((a, others[0]))
    return pairs, why


class Stop:
    """When to stop: the --duration deadline, or Ctrl-C."""

    def __init__(self, duration: float):
        self.deadline = time.monotonic() + duration
        self.reason: str | None = None

    def check(self) -> bool:
        if self.reason is None and time.monotonic() >= self.deadline:
            self.reason = "duration"
        return self.reason is not None


def _request_body(ep: Endpoint, s: Settings, history: list[dict]) -> tuple[str, dict]:
    body = {"model": ep.model, "max_tokens": s.output_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if s.ignore_eos:
        body["ignore_eos"] = True  # vLLM and SGLang: every answer is output_tokens long
    if ep.api == "chat":
        return "/v1/chat/completions", {**body, "messages": history}
    prompt = "".join(f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}\n\n" for m in history)
    return "/v1/completions", {**body, "prompt": prompt + "Assistant:"}


def run_conversations(ep: Endpoint, conversations: list[Conversation], s: Settings, stop: Stop,
                      on_point=None, phase: str = "sweep") -> list[dict]:
    """Run the conversations against one endpoint turn by turn (the users of a turn as one wave,
    sent together from one event loop) and return one point per turn. A later phase (e.g. a
    replay after a restart) passes the same conversations again. Stops early at `stop` (a turn
    cut short is dropped); Ctrl-C raises KeyboardInterrupt, after `on_point` has seen every
    completed point."""
    return asyncio.run(_conversations(ep, conversations, s, stop, on_point, phase))


async def _conversations(ep: Endpoint, conversations: list[Conversation], s: Settings, stop: Stop, on_point,
                         phase: str) -> list[dict]:
    counters = Client(ep, s.request_timeout)  # /metrics between the waves, when nothing is in flight
    histories: list[list[dict]] = [[] for _ in conversations]
    points: list[dict] = []
    turns = max(len(c.messages) for c in conversations)
    async with AsyncClient(ep, s.request_timeout) as client:
        for turn in range(1, turns + 1):
            if stop.check():
                break
            before, metric_errors = read_counters(counters, ep.metrics_urls)
            path_bodies = []
            for i, conv in enumerate(conversations):
                histories[i].append({"role": "user", "content": conv.messages[turn - 1]})
                path_bodies.append(_request_body(ep, s, histories[i]))
            start = time.monotonic()
            wave = [asyncio.ensure_future(client.stream(path, body)) for path, body in path_bodies]
            _, pending = await asyncio.wait(wave, timeout=max(0.0, stop.deadline - start))
            seconds = time.monotonic() - start
            if pending:  # cut short by --duration: not a point (nor an engine error)
                for task in pending:
                    task.cancel()
                await asyncio.wait(pending)
                stop.check()
                break
            samples = [{**task.result(), "due": start} for task in wave]
            for i, x in enumerate(samples):
                histories[i].append({"role": "assistant", "content": x.get("text") or ""})
            after, errs = read_counters(counters, ep.metrics_urls)
            metric_errors += [e for e in errs if e not in metric_errors]
            conv0 = conversations[0]
            delta = counter_delta(before, after)
            measured = measure_point(samples, seconds)
            point = {"phase": phase, "instance": ep.name, "engine": ep.engine, "url": ep.url, "api": ep.api,
                     "prompt_tokens": conv0.prompt_tokens, "turn": turn, "users": len(conversations),
                     "new_tokens": sorted({c.message_tokens[turn - 1] for c in conversations}),
                     "history_tokens_mean": round(sum(sum(c.message_tokens[:turn]) for c in conversations)
                                                  / len(conversations) + (turn - 1) * s.output_tokens, 1),
                     **measured,
                     "delivery": delivery(samples, len(conversations), start, measured["ttft_ms"]["p50"]),
                     "engine_view": engine_view(delta),
                     "cache": cache_summary(delta) if (before or after) else None,
                     "metrics_errors": metric_errors}
            points.append(point)
            if on_point:
                on_point(point)
            if point["ok"] == 0 and point["requests"]:
                break  # every request failed: do not hammer a broken endpoint with the later turns
    return points


def _short(point: dict) -> str:
    """The console's warning for a point whose delivered load fell short of the asked one."""
    why = point["delivery"]["short"]
    return f"; WARNING: less load than asked: {why}" if why else ""


def run(endpoints: list[Endpoint], s: Settings, progress, counters: dict[str, TokenCounter],
        restart=None, pairs: list[tuple[Endpoint, Endpoint]] | None = None) -> dict:
    """The sweep over every measurable endpoint, and with s.replay the restart (`restart(ep)`)
    and replay of the same conversations; returns the result document (points so far when
    interrupted: result['stopped'] == 'interrupted')."""
    stop = Stop(s.duration)
    live = [ep for ep in endpoints if not ep.problem]
    unpaired: dict[str, str] = {}
    if pairs is None:  # with s.cross_host: every instance's on the next host of its namespace
        pairs, unpaired = cross_host_pairs(endpoints) if s.cross_host else ([], {})
    total = (len(live) * (2 if s.replay else 1) + len(pairs)) * len(s.prompt_tokens) * s.turns
    if s.shapes:
        total = len(live) * len(s.prompt_tokens) * len(s.shapes) * s.repeats
    result = {"points": [], "planned_points": total, "stopped": None, "cross_host_skipped": unpaired}
    done = [0]
    t0 = time.monotonic()

    def on_point(p: dict) -> None:
        done[0] += 1
        result["points"].append(p)
        ttft = p["ttft_ms"]["p50"]
        if p["phase"] == "load":
            from kvprov.loadtest_shapes import load_label

            p99 = p["ttft_ms"]["p99"]
            progress(f"[{done[0]}/{total}] {p['instance']} {p['prompt_tokens']} tokens, {load_label(p)}, repeat "
                     f"{p['repeat']}/{s.repeats}: {p['ok']}/{p['requests']} ok (after {p['warmup']} warm-up), "
                     f"{p['requests_per_s'] or 0:.2f} req/s, {p['output_tokens_per_s'] or 0:.1f} output tok/s, "
                     f"TTFT p50 " + (f"{ttft:.0f} ms" if ttft is not None else "-")
                     + " p99 " + (f"{p99:.0f} ms" if p99 is not None else "- (needs 100 requests)")
                     + (f"; first error: {p['first_error']}" if p["first_error"] else "") + _short(p))
            return
        progress(f"[{done[0]}/{total}] {p['instance']} {p['phase']} {p['prompt_tokens']} tokens, turn {p['turn']}/{s.turns}: "
                 f"{p['ok']}/{p['requests']} ok, {p['requests_per_s'] or 0:.2f} req/s, "
                 f"{p['output_tokens_per_s'] or 0:.1f} output tok/s, TTFT p50 "
                 + (f"{ttft:.0f} ms" if ttft is not None else "-")
                 + (f", sent within {p['delivery']['spread_ms']:.0f} ms" if p["delivery"]["spread_ms"] is not None else "")
                 + f" ({done[0] / max(1e-9, time.monotonic() - t0) * 60:.1f} points/min)"
                 + (f"; first error: {p['first_error']}" if p["first_error"] else "") + _short(p))

    try:
        if s.shapes:
            _run_shapes(live, s, stop, counters, on_point)
            live = []  # nothing else: --replay and --cross-host are wave runs
        for ep in live:
            counter = counters[ep.name]
            for n in s.prompt_tokens:
                if stop.check():
                    break
                convs = make_conversations(counter, n, s.users, s.turns, s.turn_tokens, f"{s.seed}/{ep.name}")
                points = run_conversations(ep, convs, s, stop, on_point)
                if points and points[0]["ok"] == 0:
                    ep.problem = f"every request failed: {points[0]['first_error']}"
                    break
            if s.replay and not ep.problem and not stop.check():
                progress(f"{ep.name}: restarting {', '.join(ep.units)} on {ep.host} (GPU and host tiers emptied)")
                try:
                    restart(ep)
                except EndpointError as e:
                    ep.problem = f"restart for the replay: {e}"
                    continue
                for n in s.prompt_tokens:
                    if stop.check():
                        break
                    convs = make_conversations(counter, n, s.users, s.turns, s.turn_tokens, f"{s.seed}/{ep.name}")
                    run_conversations(ep, convs, s, stop, on_point, phase="replay")
        for a, b in pairs:  # after every sweep: the sources' prefixes are in the namespace
            if stop.check() or a.problem or b.problem:
                continue
            progress(f"{a.name} -> {b.name}: restarting {', '.join(b.units)} on {b.host} (its GPU and host tiers "
                     f"emptied), then {a.name}'s conversations there")
            try:
                restart(b)
            except EndpointError as e:
                unpaired[a.name] = f"restart of {b.name} for the cross-host replay: {e}"
                continue
            for n in s.prompt_tokens:
                if stop.check():
                    break
                convs = make_conversations(counters[a.name], n, s.users, s.turns, s.turn_tokens, f"{s.seed}/{a.name}")
                run_conversations(b, convs, s, stop, lambda p, a=a: on_point({**p, "source": a.name}),
                                  phase="cross_host")
    except KeyboardInterrupt:
        stop.reason = "interrupted"
    result["stopped"] = stop.reason
    return result


def _run_shapes(live: list[Endpoint], s: Settings, stop: Stop, counters: dict, on_point) -> None:
    """Every endpoint x prompt length x load shape x repeat (kvprov/loadtest_shapes.py), each
    point on conversations of its own (no point serves another's prefixes)."""
    from kvprov import loadtest_shapes as shapes

    for ep in live:
        for n, shape, k in [(n, shape, k) for n in s.prompt_tokens for shape in s.shapes
                            for k in range(1, s.repeats + 1)]:
            if stop.check():
                return
            seed = f"{s.seed}/{ep.name}/{n}/{shape.label()}/{k}"
            point = shapes.run_point(ep, s, shape, shapes.Supply(counters[ep.name], n, s, seed), s.requests,
                                     s.warmup, stop, seed)
            if point is None:  # cut short by --duration
                return
            on_point({**point, "repeat": k})
            if point["ok"] == 0:  # do not hammer a broken endpoint with the other points
                ep.problem = f"every request failed: {point['first_error']}"
                break


# ---------------------------------------------------------------------------- the command

def _positive_list(kind, what: str):
    """argparse type: comma-separated positive numbers of `kind`, sorted, each once."""
    def conv(text: str) -> list:
        try:
            values = sorted({kind(x) for x in text.split(",") if x.strip()})
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} separated by commas, got {text!r}") from None
        if not values or any(not math.isfinite(v) or v <= 0 for v in values):
            raise argparse.ArgumentTypeError(f"expected positive {what} separated by commas, got {text!r}")
        return values
    return conv


def _positive(kind):
    def conv(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
        return value
    return conv


def add_parser(sub) -> None:
    p = sub.add_parser("loadtest", help="multi-turn serving benchmark of the engines (throughput, TTFT, cache hits)",
                       description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    inventory.add_inventory_args(p, required=False, help="measure this inventory's engine instances")
    p.add_argument("--url", action="append", default=[], metavar="URL",
                   help="an OpenAI-compatible server to measure instead (repeatable; no inventory needed)")
    p.add_argument("--api-key-file", metavar="F", help="with --url: a file holding the API key (sent as Bearer)")
    p.add_argument("--cacert", metavar="F", help="with an https --url: the CA certificates to verify it with "
                                                  "(default: the trust store)")
    inventory.add_limit_arg(p)
    p.add_argument("--instances", metavar="NAMES", help="comma-separated instance names (main or host/main)")
    p.add_argument("--prompt-tokens", type=_positive_list(int, "token counts"), default=",".join(map(str, DEFAULT_PROMPT_TOKENS)), metavar="L1,L2,...",
                   help="initial prompt lengths in tokens (default %(default)s)")
    p.add_argument("--turns", type=_positive(int), default=3, metavar="N", help="turns per conversation (3)")
    p.add_argument("--users", type=_positive(int), default=2, metavar="N", help="conversations side by side (2)")
    p.add_argument("--output-tokens", type=_positive(int), default=64, metavar="N", help="tokens per answer (64)")
    p.add_argument("--turn-tokens", type=_positive(int), default=100, metavar="N",
                   help="tokens of each later user message (100)")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=_positive_list(int, "request counts"), metavar="C1,C2,...",
                      help="load shape: hold C conversations in flight (closed loop), one point per C, over "
                           "--requests requests; instead of --users' single wave per turn")
    load.add_argument("--request-rate", type=_positive_list(float, "numbers"), metavar="R1,R2,...",
                      help="load shape: requests offered at R per second (conversations arriving as a Poisson "
                           "process of R / --turns per second), one point per R")
    p.add_argument("--requests", type=_positive(int), default=100, metavar="N",
                   help="with a load shape: measured requests per point (100: enough for a p99)")
    p.add_argument("--warmup", type=int, default=10, metavar="N",
                   help="with a load shape: requests before the measured ones, not counted (10)")
    p.add_argument("--repeats", type=_positive(int), default=1, metavar="K",
                   help="with a load shape: run each point K times (the report gives the median and the spread)")
    p.add_argument("--duration", type=_positive(float), default=600, metavar="S",
                   help="stop after S seconds whatever is left (600)")
    p.add_argument("--request-timeout", type=_positive(float), default=300, metavar="S", help="per request (300)")
    p.add_argument("--ready-timeout", type=float, default=READY_TIMEOUT, metavar="S",
                   help=f"wait this long for an engine that is still starting (refuses connections or answers "
                        f"503), e.g. right after a deploy ({READY_TIMEOUT:g}; 0: not at all)")
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="let answers end early (for servers that refuse vLLM's and SGLang's ignore_eos; output "
                        "tokens/s then depends on where the model stops)")
    p.add_argument("--api", choices=("auto", "chat", "completions"), default="auto",
                   help="auto: chat when the server answers it, else completions")
    p.add_argument("--tokenizer", metavar="PATH", help="tokenizer.json or the model directory holding it "
                                                      "(default: the inventory's kvprov_engine_model_path)")
    p.add_argument("--seed", default=None, help="workload seed (default: a new one per run, recorded in the JSON)")
    p.add_argument("--label", help="the run's name in charts and --compare (default: the time)")
    p.add_argument("--out", metavar="DIR", help="where loadtest.json/.png/.html go (default loadtest-<time>)")
    p.add_argument("--json", metavar="F", help="also write the JSON to F ('-': to stdout, the paths written to stderr)")
    p.add_argument("--replay", action="store_true",
                   help="(inventory) after each endpoint's sweep, restart its engine units and replay the same "
                        "conversations: what comes back from the storage tier, and TTFT cold vs replayed")
    p.add_argument("--cross-host", action="store_true",
                   help="(inventory) after the sweep, replay each instance's conversations on an instance of another "
                        "host sharing its storage namespace, restarted first (it never saw them): what the shared "
                        "tier serves across hosts, and TTFT against that host's own cold one")
    p.add_argument("--restart-timeout", type=_positive(float), default=900, metavar="S",
                   help="with --replay: how long an engine may take to answer again after its restart (900)")
    p.add_argument("--compare", nargs="+", metavar="RUN.json",
                   help="no load: overlay these earlier runs into DIR/compare.png and compare.html")
    p.set_defaults(func=cmd_loadtest)


def restart_engine(sources: list[str], ep: Endpoint, timeout: float, probe_timeout: float) -> None:
    """Restart the endpoint's engine units on its host (playbooks/restart.yml), under the
    inventory's controller lock and the host's lock, and wait until it answers /v1/models
    again; EndpointError when it does not (KvprovError EXIT_BUSY while another run holds a lock)."""
    from kvprov import lock, runner

    command = "loadtest (engine restart)"
    with lock.inventory_lock(sources, command):  # never while a deploy changes these hosts; then the host's lock
        result = runner.run("restart.yml", sources, name="loadtest-restart", limit=ep.host, stream=sys.stderr,
                            extravars={"kvprov_restart_units": ep.units, **lock.host_lock_vars(sources, command)})
    if result.failures or result.rc != 0:
        raise EndpointError("; ".join(f.message for f in result.failures) or f"ansible-playbook exited {result.rc}")
    wait_ready(ep, probe_timeout, timeout, " after the restart")


# ---------------------------------------------------------------------------- validate --engine-roundtrip

READY_TIMEOUT = 300.0  # a CPU vLLM on the lab answers ~1 min after its unit starts; a GPU model load can take minutes
ROUNDTRIP = Settings(prompt_tokens=[1024], turns=1, users=1, output_tokens=4, duration=1800, replay=True,
                     seed="kvprov-roundtrip")  # 1024 tokens: several LMCache chunks / vLLM blocks


def roundtrip_result(ep: Endpoint, points: list[dict]):
    """validate's engine.<instance>.roundtrip: a restarted engine (GPU and host tiers empty)
    serves the warmed prefix from the storage tier."""
    from kvprov.validate.result import FAIL, PASS, Result

    instance = ep.name.split("/", 1)[-1]
    expected = "after a restart (GPU and host tiers empty) the engine serves a stored prefix from the storage tier"
    fix = (f"look at the engine's log (journalctl -u {' -u '.join(ep.units)}) and its storage directory "
           f"(engine.{instance}.storage_dir)")
    rows = replay_rows(points)
    if ep.problem or not rows:
        return Result(f"engine.{instance}.roundtrip", "engine", FAIL, expected,
                      ep.problem or "the warm-up or the replay did not complete", fix, ep.host or ep.name)
    row = rows[0]
    times = f"TTFT p50 cold {row['cold_ttft_ms_p50'] or 0:.0f} ms, after the restart {row['replay_ttft_ms_p50'] or 0:.0f} ms"
    if row["storage_hit_tokens"] > 0:
        return Result(f"engine.{instance}.roundtrip", "engine", PASS, expected,
                      f"{row['storage_hit_tokens']:.0f} of the replayed prompt's tokens came from the storage tier; "
                      f"{times}", "", ep.host or ep.name)
    stored = sum((p.get("cache") or {}).get("counters", {}).get("lmcache_mp_l2_store_completed_objects_chunks", 0)
                 for p in points if p["phase"] == "sweep")
    why = ("the warm-up stored nothing in the storage tier (lmcache_mp_l2_store_completed_objects_chunks did not grow)"
           if ep.engine == "lmcache_mp" and not stored else "no prompt token came from the storage tier after the restart")
    return Result(f"engine.{instance}.roundtrip", "engine", FAIL, expected, f"{why}; hits {row['hit_tokens']}; {times}",
                  fix, ep.host or ep.name)


def cross_host_result(a: Endpoint, b: Endpoint, points: list[dict]):
    """validate's engine.<instance>.cross_host (on host B): B, restarted (GPU and host tiers
    empty) and never sent A's conversation, serves A's prefix from the namespace they share."""
    from kvprov.validate.result import FAIL, PASS, Result

    instance = b.name.split("/", 1)[-1]
    expected = f"a prefix {a.name} stored in the shared namespace {b.storage_dir} is served to {b.name} from it"
    fix = (f"both hosts must see the same files in {b.storage_dir} (the same volume and namespace; `kvprov check` "
           f"names settings that key the files differently); look at journalctl -u {' -u '.join(b.units)}")
    rows = cross_host_rows(points)
    if a.problem or b.problem or not rows:
        return Result(f"engine.{instance}.cross_host", "engine", FAIL, expected,
                      a.problem or b.problem or "the warm-up or the replay on the other host did not complete", fix,
                      b.host or b.name)
    row = rows[0]
    times = (f"TTFT p50 of its own cold prompt {row['cold_ttft_ms_p50'] or 0:.0f} ms, of {a.name}'s prefix "
             f"{row['cross_host_ttft_ms_p50'] or 0:.0f} ms")
    if row["storage_hit_tokens"] > 0:
        return Result(f"engine.{instance}.cross_host", "engine", PASS, expected,
                      f"{row['storage_hit_tokens']:.0f} of the prompt's tokens came from the storage tier; {times}", "",
                      b.host or b.name)
    return Result(f"engine.{instance}.cross_host", "engine", FAIL, expected,
                  f"no prompt token came from the storage tier: {b.name} did not find what {a.name} stored; hits "
                  f"{row['hit_tokens']}; {times}", fix, b.host or b.name)


def roundtrip(sources: list[str], limit: str | None) -> list:
    """`kvprov validate --engine-roundtrip`: per engine instance, a one-conversation warm-up, a
    restart of its units and a replay (the same path as `kvprov loadtest --replay`); then, per
    namespace shared by several hosts, the warmed prefix of each instance replayed on another
    host's instance, restarted first (`kvprov loadtest --cross-host`)."""
    require_extra("kvprov validate --engine-roundtrip")
    with ExitStack() as tunnels:
        eps = load_inventory_endpoints(sources, limit, None, None)
        open_tunnels(eps, tunnels)
        return _roundtrip(sources, eps)


def _roundtrip(sources: list[str], eps: list[Endpoint]) -> list:
    from kvprov.validate.result import SKIP, Result

    results = []
    for ep in eps:
        if ep.engine in TIERLESS_ENGINES:
            results.append(Result(f"engine.{ep.name.split('/', 1)[-1]}.roundtrip", "engine", SKIP, "",
                                  f"engine {ep.engine} has no KV tier: nothing to serve from storage after a restart",
                                  "", ep.host or ep.name))
            continue
        points: list[dict] = []
        if not ep.problem:
            try:
                wait_ready(ep, 30, READY_TIMEOUT)
                ep.api = choose_api(ep, 30, ROUNDTRIP.api)
            except EndpointError as e:
                ep.problem = str(e)
        if not ep.problem:
            _progress(f"{ep.name}: engine round trip (warm-up, restart, replay)")
            counter = token_counter(ep, 30)
            points = run([ep], ROUNDTRIP, _progress, {ep.name: counter},
                         lambda e: restart_engine(sources, e, ROUNDTRIP.restart_timeout, 30))["points"]
        results.append(roundtrip_result(ep, points))
    pairs, _ = cross_host_pairs([e for e in eps if e.engine not in TIERLESS_ENGINES])
    cross = replace(ROUNDTRIP, replay=False, cross_host=True)
    for a, b in pairs:
        _progress(f"{a.name} -> {b.name}: cross-host round trip (restart {b.name}, then {a.name}'s prefix there)")
        points = run([a, b], cross, _progress, {e.name: token_counter(e, 30) for e in (a, b)},
                     lambda e: restart_engine(sources, e, cross.restart_timeout, 30), [(a, b)])["points"]
        results.append(cross_host_result(a, b, points))
    return results


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def cmd_loadtest(args) -> int:
    require_extra()
    with ExitStack() as tunnels:  # ssh tunnels to engines on a host's loopback, closed at the end
        return _loadtest(args, tunnels)


def _loadtest(args, tunnels: ExitStack) -> int:
    from kvprov import loadtest_report as report
    from kvprov.loadtest_shapes import load_rows

    sources = inventory.from_args(args)
    if args.compare:
        if sources or args.url:
            raise KvprovError("--compare reads earlier runs: give no inventory or --url", EXIT_USAGE)
        runs = [report.load_run(f) for f in args.compare]
        out = Path(args.out or f"loadtest-compare-{_stamp()}")
        paths = report.write_compare(runs, out)
        print("\n".join(str(p) for p in paths))
        return EXIT_OK
    if bool(sources) == bool(args.url):
        raise KvprovError("give an INVENTORY or --url URL (not both)", EXIT_USAGE)
    if (args.api_key_file or args.cacert) and not args.url:
        raise KvprovError("--api-key-file and --cacert go with --url (the inventory names its own files)", EXIT_USAGE)
    if args.cacert and not Path(args.cacert).is_file():
        raise KvprovError(f"--cacert {args.cacert}: not a file", EXIT_USAGE)
    if args.url and (args.replay or args.cross_host):
        raise KvprovError("--replay and --cross-host restart the engines through the inventory: not with --url",
                          EXIT_USAGE)
    if args.url and (args.limit or args.instances):
        raise KvprovError("--limit and --instances select inventory instances: not with --url", EXIT_USAGE)
    from kvprov.loadtest_shapes import Shape

    shapes = tuple(Shape("concurrency", c) for c in args.concurrency or ()) + tuple(
        Shape("rate", r) for r in args.request_rate or ())  # each sorted, each value once (_positive_list)
    if shapes and (args.replay or args.cross_host):
        raise KvprovError("--replay and --cross-host measure single waves: not with --concurrency or --request-rate",
                          EXIT_USAGE)
    if args.warmup < 0:
        raise KvprovError(f"--warmup {args.warmup}: give 0 or more requests", EXIT_USAGE)
    s = Settings(prompt_tokens=args.prompt_tokens, turns=args.turns, users=args.users,
                 shapes=shapes, requests=args.requests, warmup=args.warmup, repeats=args.repeats,
                 output_tokens=args.output_tokens, turn_tokens=args.turn_tokens, duration=args.duration,
                 request_timeout=args.request_timeout, api=args.api, replay=args.replay, ignore_eos=args.ignore_eos,
                 restart_timeout=args.restart_timeout, cross_host=args.cross_host,
                 seed=args.seed if args.seed is not None else f"{random.getrandbits(32):08x}")
    out = Path(args.out or f"loadtest-{_stamp()}")
    started = datetime.now(timezone.utc)
    if args.url:
        key = read_api_key(args.api_key_file, "--api-key-file") if args.api_key_file else None
        endpoints = url_endpoints(args.url, key, args.tokenizer, args.cacert)
    else:
        names = [n.strip() for n in args.instances.split(",") if n.strip()] if args.instances else None
        endpoints = load_inventory_endpoints(sources, args.limit, names, args.tokenizer)
        open_tunnels(endpoints, tunnels)

    probe_timeout = min(30.0, s.request_timeout)
    ready_by = time.monotonic() + args.ready_timeout  # one deadline for all: a fleet waits once
    for ep in endpoints:  # models and context, before any inference request
        if not ep.problem:
            try:
                wait_ready(ep, probe_timeout, max(0.0, ready_by - time.monotonic()))
            except EndpointError as e:
                ep.problem = str(e)
    counters = {ep.name: token_counter(ep, probe_timeout) for ep in endpoints}
    refused = context_problems(endpoints, s.prompt_tokens, s.turns, s.turn_tokens, s.output_tokens,
                               frozenset(name for name, c in counters.items() if not c.exact))
    if refused:
        for line in refused:
            print(f"kvprov loadtest: refused: {printable(line)}", file=sys.stderr)
        raise KvprovError("prompt lengths over the model's context: nothing was sent (lower --prompt-tokens, "
                          "--turns, --turn-tokens or --output-tokens)", EXIT_USAGE)
    for ep in endpoints:
        if not ep.problem:
            try:
                ep.api = choose_api(ep, probe_timeout, s.api)
            except EndpointError as e:
                ep.problem = str(e)
    for ep in endpoints:
        if ep.problem:
            print(f"kvprov loadtest: {ep.name} ({ep.url}): {printable(ep.problem)}", file=sys.stderr)
    live = [ep for ep in endpoints if not ep.problem]
    load = (f"{', '.join(x.label() for x in s.shapes)}, {s.requests} requests a point after {s.warmup} warm-up, "
            f"{s.repeats} repeat(s)" if s.shapes else f"{s.users} users")
    _progress(f"{len(live)} endpoint(s), prompt lengths {','.join(map(str, s.prompt_tokens))}, {s.turns} turns, "
              f"{load}, {s.output_tokens} output tokens, at most {s.duration:g} s")
    for ep in live:
        _progress(f"{ep.name}: model {ep.model}, {ep.api} API, tokens {counters[ep.name].note}")

    def restart(ep: Endpoint) -> None:
        restart_engine(sources, ep, s.restart_timeout, probe_timeout)

    result = run(endpoints, s, _progress, counters, restart) if live else {"points": [], "planned_points": 0,
                                                                             "stopped": None, "cross_host_skipped": {}}
    for name, why in result["cross_host_skipped"].items():
        print(f"kvprov loadtest: {name}: no cross-host replay: {printable(why)}", file=sys.stderr)
    for ep in live:  # a later failure (every request of a turn failed)
        if ep.problem:
            print(f"kvprov loadtest: {ep.name} ({ep.url}): {printable(ep.problem)}", file=sys.stderr)
    errors = {}
    for p in result["points"]:
        if p["errors"]:
            e = errors.setdefault(p["instance"], [0, 0, p["first_error"]])
            e[0] += p["errors"]
        if p["instance"] in errors:
            errors[p["instance"]][1] += p["requests"]
    for name, (n, total, first) in errors.items():
        ep = next(e for e in endpoints if e.name == name)
        if not ep.problem:
            print(f"kvprov loadtest: {name} ({ep.url}): {n} request(s) failed; first: {printable(first)}",
                  file=sys.stderr)
    failed = any(ep.problem for ep in endpoints) or bool(errors) or bool(result["cross_host_skipped"])
    code = INTERRUPTED if result["stopped"] == "interrupted" else EXIT_CHECKS_FAILED if failed else EXIT_OK
    if result["stopped"] == "duration":
        _progress(f"stopped at --duration {s.duration:g} s after {len(result['points'])} of "
                  f"{result['planned_points']} points")
    finished = datetime.now(timezone.utc)
    doc = {"format": FORMAT, "kind": "kvprov-loadtest", "label": args.label or started.strftime("%Y-%m-%d %H:%M"),
           "started": started.isoformat(timespec="seconds"), "finished": finished.isoformat(timespec="seconds"),
           "seconds": round((finished - started).total_seconds(), 3),
           "settings": {"prompt_tokens": s.prompt_tokens, "turns": s.turns, "users": s.users,
                        "output_tokens": s.output_tokens, "turn_tokens": s.turn_tokens, "duration_s": s.duration,
                        "request_timeout_s": s.request_timeout, "api": s.api, "seed": s.seed,
                        "ignore_eos": s.ignore_eos, "replay": s.replay, "cross_host": s.cross_host,
                        "load": [{"shape": x.kind, "load": x.value} for x in s.shapes],
                        "requests": s.requests if s.shapes else None, "warmup": s.warmup if s.shapes else None,
                        "repeats": s.repeats if s.shapes else None,
                        "source": "inventory" if sources else "url",
                        "inventory": sources or None},
           "endpoints": [{**ep.public(), "tokenizer": counters[ep.name].describe()} for ep in endpoints],
           "planned_points": result["planned_points"], "done_points": len(result["points"]),
           "stopped": result["stopped"], "exit_code": code, "points": result["points"],
           "replay": replay_rows(result["points"]), "cross_host": cross_host_rows(result["points"]),
           "load": load_rows(result["points"]),
           "cross_host_skipped": result["cross_host_skipped"]}
    try:
        paths = report.write_run(doc, out, args.json)
    except KeyboardInterrupt:  # a second Ctrl-C while writing: finish writing anyway
        paths = report.write_run(doc, out, args.json)
    if args.json == "-":  # stdout is the JSON's alone
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    print("\n".join(str(p) for p in paths), file=sys.stderr if args.json == "-" else sys.stdout)
    if result["stopped"] == "interrupted":
        print("kvprov loadtest: interrupted; what was measured is written", file=sys.stderr)
    return code
