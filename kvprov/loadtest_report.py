"""What `kvprov loadtest` writes: the JSON of a run (docs/loadtest.md), a PNG chart
(matplotlib, Agg backend: no display needed) and a one-page HTML report embedding it;
and the same chart and report overlaying earlier runs (--compare).

The chart has three panels: output tokens/s and TTFT p50 against the initial prompt
length (one colour per instance, or per run and instance when comparing; TTFT solid for
the first turn, dashed for the last, whose prefix the engine has seen), and the prompt
tokens served from each cache source over the whole run (where the hits came from)."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

from kvprov.errors import EXIT_ENVIRONMENT, EXIT_USAGE, KvprovError
from kvprov.loadtest_shapes import load_label
from kvprov.validate.report import write_file

JSON_NAME, PNG_NAME, HTML_NAME = "loadtest.json", "loadtest.png", "loadtest.html"
MODE = 0o644  # results name hosts and URLs, never a key; people open them in a browser as themselves


# ---------------------------------------------------------------------------- files

def _write(path: Path, data: bytes) -> None:
    """Atomically (kvprov.validate.report.write_file), creating the directory."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise KvprovError(f"cannot write {path}: {e.strerror or e}", EXIT_USAGE) from None
    write_file(str(path), data, MODE)


def load_run(path: str) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise KvprovError(f"--compare {path}: {getattr(e, 'strerror', None) or e}", EXIT_USAGE) from None
    if not isinstance(doc, dict) or doc.get("kind") != "kvprov-loadtest" or not isinstance(doc.get("points"), list):
        raise KvprovError(f"--compare {path}: not the JSON of a kvprov loadtest run", EXIT_USAGE)
    doc.setdefault("label", Path(path).stem)
    doc["_file"] = str(path)
    return doc


def write_run(doc: dict, out: Path, json_copy: str | None = None) -> list[Path]:
    """DIR/loadtest.json first (so a missing matplotlib loses nothing), then the PNG and the HTML."""
    text = (json.dumps(doc, indent=2) + "\n").encode()
    paths = [out / JSON_NAME]
    _write(out / JSON_NAME, text)
    if json_copy and json_copy != "-":  # -: the caller prints it to stdout
        _write(Path(json_copy), text)
        paths.append(Path(json_copy))
    png = load_chart(doc) if doc.get("load") else chart([doc])  # a load sweep: against the load
    _write(out / PNG_NAME, png)
    _write(out / HTML_NAME, run_html(doc, png).encode())
    return paths + [out / PNG_NAME, out / HTML_NAME]


def write_compare(runs: list[dict], out: Path) -> list[Path]:
    labels = [r["label"] for r in runs]
    if len(set(labels)) < len(labels):  # the same label twice: tell them apart by file
        for r in runs:
            r["label"] = f"{r['label']} ({Path(r['_file']).stem})"
    png = chart(runs)
    _write(out / "compare.png", png)
    _write(out / "compare.html", compare_html(runs, png).encode())
    return [out / "compare.png", out / "compare.html"]


# ---------------------------------------------------------------------------- figures (pure)

def series(doc: dict) -> dict[str, dict]:
    """Per instance: {length: {tokens_per_s, ttft_first, ttft_last}} from a run's sweep points."""
    out: dict[str, dict] = {}
    turns = doc.get("settings", {}).get("turns") or 1
    for p in doc["points"]:
        if p.get("phase", "sweep") != "sweep":
            continue
        s = out.setdefault(p["instance"], {}).setdefault(p["prompt_tokens"], {"tokens": 0, "seconds": 0.0})
        s["tokens"] += p.get("output_tokens") or 0
        s["seconds"] += p.get("seconds") or 0.0
        ttft = (p.get("ttft_ms") or {}).get("p50")
        if p["turn"] == 1:
            s["ttft_first"] = ttft
        if p["turn"] == turns:
            s["ttft_last"] = ttft
    for inst in out.values():
        for s in inst.values():
            s["tokens_per_s"] = s["tokens"] / s["seconds"] if s["seconds"] > 0 else None
    return out


# What each phase of a run is, in the hit panels (a sweep is the cold run).
PHASE_LABELS = {"sweep": "cold run", "replay": "after a restart", "cross_host": "on another host", "load": "load"}


def hits_by_source(doc: dict) -> dict[tuple[str, str], dict[str, float]]:
    """Per (instance, phase): prompt tokens per cache source over the phase's points."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for p in doc["points"]:
        hits = (p.get("cache") or {}).get("hit_tokens") or {}
        inst = out.setdefault((p["instance"], p.get("phase", "sweep")), {})
        for source, n in hits.items():
            inst[source] = inst.get(source, 0.0) + n
    return out


def _phase_order(item) -> tuple:
    (instance, phase), _ = item
    return instance, list(PHASE_LABELS).index(phase) if phase in PHASE_LABELS else len(PHASE_LABELS), phase


def _models(run: dict) -> str:
    """Each endpoint's model and engine: "tiny on lmcache_mp"."""
    return ", ".join(sorted({f"{e.get('model')} on {e.get('engine') or 'a server'}" for e in run.get("endpoints", [])
                             if not e.get("problem")})) or "no endpoint"


def run_title(run: dict) -> str:
    """What a run measured: its label, model and engine per endpoint, and its load shape."""
    s = run.get("settings", {})
    return (f"{run['label']}: {_models(run)} · {s.get('users')} user(s) × {s.get('turns')} turn(s), "
            f"{s.get('output_tokens')} output tokens")


def load_chart(doc: dict) -> bytes:
    """The PNG of a load sweep: output throughput and TTFT (p50, and p99 where 100 requests
    support it) against the load, one line per instance and prompt length, bars from the
    lowest to the highest repeat."""
    plt = _pyplot()
    rows = doc["load"]
    shape = rows[0]["shape"]
    fig, (tput, ttft) = plt.subplots(1, 2, figsize=(14, 5.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lines: dict[tuple, list[dict]] = {}
    for r in rows:
        lines.setdefault((r["instance"], r["prompt_tokens"]), []).append(r)
    for k, ((inst, tokens), rs) in enumerate(sorted(lines.items())):
        rs = sorted(rs, key=lambda r: r["load"])
        xs, c = [r["load"] for r in rs], colors[k % len(colors)]
        for ax, key, style, name in ((tput, "output_tokens_per_s", "o-", ""), (ttft, "ttft_ms_p50", "o-", " p50"),
                                     (ttft, "ttft_ms_p99", "s--", " p99")):
            cells = [r[key] for r in rs]
            if not any(cells):
                continue
            ys = [cell["median"] if cell else None for cell in cells]
            err = [[(cell["median"] - cell["min"]) if cell else 0 for cell in cells],
                   [(cell["max"] - cell["median"]) if cell else 0 for cell in cells]]
            ax.errorbar(xs, [y if y is not None else float("nan") for y in ys], yerr=err, fmt=style, color=c,
                        capsize=3, label=f"{inst}, {tokens}-token prompts{name}")
    xlabel = "conversations in flight (concurrency)" if shape == "concurrency" else "request rate (req/s, Poisson)"
    for ax, title, unit in ((tput, "Output throughput", "output tokens/s"), (ttft, "Time to first token", "ms")):
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(unit)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        if ax.lines:
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    s = doc.get("settings", {})
    fig.suptitle(f"kvprov loadtest: {doc['label']} · {_models(doc)} · {s.get('turns')} turns, {s.get('output_tokens')} "
                 f"output tokens · {s.get('requests')} requests a point after {s.get('warmup')} warm-up, "
                 f"{s.get('repeats')} repeat(s)", fontsize=10)
    _ring([(r["load"], r["ttft_ms_p50"]["median"]) for r in rows if r.get("short") and r["ttft_ms_p50"]], ttft)
    _short_note(fig, doc["points"])
    fig.tight_layout()
    return _png(fig, plt)


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise KvprovError("matplotlib is not installed (the loadtest extra: pip install 'kvprov[loadtest]'): "
                          "the JSON is written, the chart and the HTML are not", EXIT_ENVIRONMENT) from None
    return plt


def _png(fig, plt) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def chart(runs: list[dict]) -> bytes:
    """The PNG: throughput and TTFT against initial prompt length, and cache hits per source."""
    plt = _pyplot()
    first = first_turn_ttft(runs)
    bars = [((f"{run['label']} · " if len(runs) > 1 else "") + f"{inst} · {PHASE_LABELS.get(phase, phase)}", sources)
            for run in runs for (inst, phase), sources in sorted(hits_by_source(run).items(), key=_phase_order)]
    lookups = any(s in LOOKUP_SOURCES and n for _, srcs in bars for s, n in srcs.items())
    panels = 3 + bool(first) + lookups
    fig, axes = plt.subplots(1, panels, figsize=(5.4 * panels, 6.4),
                             gridspec_kw={"width_ratios": [1, 1] + [1.1] * (panels - 2)})
    tput, ttft, hits = axes[:3]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lengths: set[int] = set()
    k = 0
    for run in runs:
        prefix = f"{run['label']} · " if len(runs) > 1 else ""
        for inst, by_len in sorted(series(run).items()):
            c = colors[k % len(colors)]
            k += 1
            xs = sorted(by_len)
            lengths.update(xs)
            name = prefix + inst
            tput.plot(xs, [by_len[x]["tokens_per_s"] for x in xs], "o-", color=c, label=name)
            ttft.plot(xs, [by_len[x].get("ttft_first") for x in xs], "o-", color=c, label=f"{name}, turn 1")
            if (run.get("settings", {}).get("turns") or 1) > 1:
                ttft.plot(xs, [by_len[x].get("ttft_last") for x in xs], "s--", color=c,
                          label=f"{name}, turn {run['settings']['turns']}")
    for ax, title, unit in ((tput, "Output throughput", "output tokens/s"), (ttft, "Time to first token (p50)", "ms")):
        ax.set_title(title)
        ax.set_xlabel("initial prompt length (tokens)")
        ax.set_ylabel(unit)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        if lengths and max(lengths) / min(lengths) >= 8:
            ax.set_xscale("log", base=2)
        if lengths:
            ax.set_xticks(sorted(lengths))
            ax.set_xticklabels([str(x) for x in sorted(lengths)], rotation=45 if len(lengths) > 5 else 0)
        if ax.lines:
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
        else:
            ax.text(0.5, 0.5, "no point measured", ha="center", va="center", transform=ax.transAxes)
    served, found = split_hits(bars)
    _hit_bars(hits, served, "Prompt tokens the engine served from cache",
              "no cache hits counted\n(or no cache counters exposed)")
    if lookups:  # LMCache counts what its lookups found, not what the engine took: an axis of their own
        _hit_bars(axes[3], found, "LMCache lookups that hit (tokens found, per tier)", "no LMCache lookup hit")
    if first:
        _first_turn_bars(axes[-1], first)
    points = [p for run in runs for p in run["points"]]
    _ring([(p["prompt_tokens"], p["ttft_ms"]["p50"]) for p in short_points(points) if p.get("phase", "sweep") == "sweep"],
          ttft)
    fig.suptitle("kvprov loadtest: " + "\nvs ".join(run_title(r) for r in runs), fontsize=10)
    _short_note(fig, points)
    fig.tight_layout()
    return _png(fig, plt)


def short_points(points: list[dict]) -> list[dict]:
    """The points whose delivered load fell short of the asked one (their delivery says why)."""
    return [p for p in points if (p.get("delivery") or {}).get("short")]


def _ring(xys: list[tuple], ax) -> None:
    """A red ring around each (x, TTFT) whose point delivered less load than asked."""
    xys = [(x, y) for x, y in xys if y is not None]
    if xys:
        ax.plot([x for x, _ in xys], [y for _, y in xys], "o", ms=13, mfc="none", mec="#b00020", mew=1.5,
                label="delivered less load than asked")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)


def _where(p: dict) -> str:
    """Which point: instance, prompt length, and its load (a load point) or turn (a wave)."""
    return f"{p['instance']}, {p['prompt_tokens']} tokens, " + (_phase(p) if p.get("phase") == "load"
                                                                else f"turn {p['turn']}")


def _short_note(fig, points: list[dict]) -> None:
    """A red line under the chart when points delivered less load than asked."""
    short = short_points(points)
    if short:
        p = short[0]
        fig.text(0.01, 0.005, f"WARNING: {len(short)} of {len(points)} points delivered less load than asked "
                 f"(first: {_where(p)}: "
                 f"{p['delivery']['short']})", color="#b00020", fontsize=8, ha="left", va="bottom", wrap=True)


# What a first turn's TTFT was measured after (the chart's fourth panel).
FIRST_TURN = (("cold", "cold (nothing cached)"), ("restart", "after a restart (storage tier only)"),
              ("cross_host", "on another host (shared storage tier only)"))


def first_turn_ttft(runs: list[dict]) -> dict[str, dict[str, float]]:
    """{run · instance · prompt length: {cold, restart, cross_host: TTFT p50 ms}} for the runs with
    a replay or a cross-host replay: what the storage tier does to the first turn."""
    out: dict[str, dict[str, float]] = {}
    for run in runs:
        prefix = f"{run['label']} · " if len(runs) > 1 else ""
        for r in run.get("replay") or []:
            out.setdefault(f"{prefix}{r['instance']} · {r['prompt_tokens']}", {}).update(
                {"cold": r["cold_ttft_ms_p50"], "restart": r["replay_ttft_ms_p50"]})
        for r in run.get("cross_host") or []:
            bar = out.setdefault(f"{prefix}{r['instance']} · {r['prompt_tokens']}", {})
            bar.update({"cross_host": r["cross_host_ttft_ms_p50"]})
            bar.setdefault("cold", r["cold_ttft_ms_p50"])
    return {k: {m: v for m, v in bars.items() if v is not None} for k, bars in out.items()}


def _first_turn_bars(ax, first: dict[str, dict[str, float]]) -> None:
    names = sorted(first)
    width = 0.8 / len(FIRST_TURN)
    for j, (key, label) in enumerate(FIRST_TURN):
        xs = [i + (j - 1) * width for i, n in enumerate(names) if key in first[n]]
        if xs:
            ax.bar(xs, [first[n][key] for n in names if key in first[n]], width, label=label)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([n.replace(" · ", "\n") + " tok" for n in names], fontsize=7)
    ax.set_title("First turn TTFT (p50): where the prefix came from", fontsize=10)
    ax.set_ylabel("ms")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=1, frameon=False)


# Cache sources, from the GPU down to storage, with the names the chart shows.
SOURCE_LABELS = {
    "vllm_prefix": "vLLM prefix cache (device)",
    "vllm_cached_host": "vLLM offload: host memory",
    "vllm_cached_disk": "vLLM offload: disk/file tier",
    "vllm_cached_p2p": "vLLM: peer (p2p)",
    "vllm_external": "vLLM KV connector (external)",
    "lmcache_l1": "LMCache L1 (host memory)",
    "lmcache_l2": "LMCache L2 (storage tier)",
    "sglang_device": "SGLang device",
    "sglang_host": "SGLang HiCache host",
    "sglang_storage": "SGLang HiCache storage",
}
# vLLM's cached-by-source counter repeats these when the plain counters are there
REDUNDANT = {"vllm_cached_device": "vllm_prefix", "vllm_cached_external_unspecified": "vllm_external"}


def chart_sources(found: set[str]) -> list[str]:
    """The sources to draw, GPU first, storage last; unknown ones after, by name."""
    keep = {s for s in found if REDUNDANT.get(s) not in found}
    return [s for s in SOURCE_LABELS if s in keep] + sorted(keep - set(SOURCE_LABELS))


# LMCache's counters of what its lookups found (L1, L2): not the tokens the engine was served.
LOOKUP_SOURCES = frozenset({"lmcache_l1", "lmcache_l2"})


def split_hits(bars: list[tuple[str, dict]]) -> tuple[list[tuple[str, dict]], list[tuple[str, dict]]]:
    """The bars' tokens the engine was served, and LMCache's lookup hits (LOOKUP_SOURCES): never
    on one axis, as they count different things."""
    return ([(name, {k: v for k, v in srcs.items() if k not in LOOKUP_SOURCES}) for name, srcs in bars],
            [(name, {k: v for k, v in srcs.items() if k in LOOKUP_SOURCES}) for name, srcs in bars])


def _hit_bars(ax, bars: list[tuple[str, dict]], title: str, empty: str) -> None:
    ax.set_title(title, fontsize=10)
    sources = chart_sources({s for _, srcs in bars for s, n in srcs.items() if n})
    if not sources:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    import matplotlib
    palette = matplotlib.colormaps["Set2"].colors
    width = 0.8 / len(sources)
    for j, source in enumerate(sources):
        ys = [srcs.get(source, 0) for _, srcs in bars]
        ax.barh([i + j * width for i in range(len(bars))], ys, height=width,
                label=SOURCE_LABELS.get(source, source),  # one color a source, in every panel
                color=palette[(list(SOURCE_LABELS).index(source) if source in SOURCE_LABELS else j) % len(palette)])
    ax.set_yticks([i + width * (len(sources) - 1) / 2 for i in range(len(bars))])
    ax.set_yticklabels([name for name, _ in bars], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("tokens (whole run)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)


# ---------------------------------------------------------------------------- HTML (pure)

STYLE = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:22px;margin:0 0 6px}h2{font-size:17px;margin:22px 0 8px}
table{border-collapse:collapse;font-size:12.5px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f2f2f2}td.l,th.l{text-align:left}tr.err td{background:#fde8e8}
.meta{font-size:13px;color:#444}.bad{color:#b00020;font-weight:600}img{max-width:100%;border:1px solid #ddd}"""


def _e(value) -> str:
    return html.escape("" if value is None else str(value))


def _n(value, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _hits(cache: dict | None) -> str:
    if not cache:
        return "–"
    hits = {k: v for k, v in (cache.get("hit_tokens") or {}).items() if v}
    queried = (cache.get("queried_tokens") or {}).get("vllm_prefix") or (cache.get("queried_tokens") or {}).get(
        "sglang")
    text = ", ".join(f"{k} {hits[k]:,.0f}" for k in chart_sources(set(hits))) or "0"
    total = hits.get("vllm_prefix", sum(v for k, v in hits.items() if k.startswith("sglang_")))
    return f"{text} ({total / queried:.0%} of {queried:,.0f} queried)" if queried and total else text


def _endpoints_table(doc: dict) -> str:
    rows = "".join(
        f"<tr><td class=l>{_e(ep['name'])}</td><td class=l>{_e(ep['url'])}</td><td class=l>{_e(ep.get('engine'))}</td>"
        f"<td class=l>{_e(ep.get('model'))}</td><td>{_e(ep.get('max_model_len'))}</td><td class=l>{_e(ep.get('api'))}</td>"
        f"<td class=l>{_e((ep.get('tokenizer') or {}).get('note'))}</td>"
        f"<td class=l>{'<span class=bad>' + _e(ep['problem']) + '</span>' if ep.get('problem') else 'measured'}</td></tr>"
        for ep in doc.get("endpoints", []))
    return ("<table><tr><th class=l>instance</th><th class=l>URL</th><th class=l>engine</th><th class=l>model</th>"
            "<th>context</th><th class=l>API</th><th class=l>token counts</th><th class=l>status</th></tr>"
            f"{rows}</table>")


def _points_table(doc: dict) -> str:
    head = ("<tr><th class=l>instance</th><th>prompt tokens</th><th>turn</th><th>ok / req</th><th>req/s</th>"
            "<th>output tok/s</th><th>prompt tok (server)</th><th>TTFT p50</th><th>p90</th><th>p99</th><th>latency p50</th><th>p90</th>"
            "<th>p99</th><th>sent within</th><th>answered at once</th><th class=l>cache hits (tokens, by source)</th>"
            "<th class=l>first error</th></tr>")
    rows = []
    for p in doc["points"]:
        t, lat, dl = p.get("ttft_ms") or {}, p.get("latency_ms") or {}, p.get("delivery") or {}
        rows.append(
            f"<tr{' class=err' if p.get('errors') else ''}><td class=l>{_e(p['instance'])}"
            f"{'' if p.get('phase', 'sweep') == 'sweep' else ' (' + _e(_phase(p)) + ')'}</td>"
            f"<td>{p['prompt_tokens']}</td><td>{p['turn'] or 'all'}</td><td>{p['ok']} / {p['requests']}</td>"
            f"<td>{_n(p.get('requests_per_s'), 2)}</td><td>{_n(p.get('output_tokens_per_s'), 1)}</td>"
            f"<td>{_n(p.get('server_prompt_tokens_mean'))}</td>"
            + "".join(f"<td>{_n(d.get(k))}</td>" for d in (t, lat) for k in ("p50", "p90", "p99"))
            + f"<td>{_n(dl.get('spread_ms'))}</td><td{' class=bad' if dl.get('short') else ''}>"
            f"{_n((dl.get('in_flight') or {}).get('answered_peak'))}</td>"
            + f"<td class=l>{_e(_hits(p.get('cache')))}</td><td class=l>{_e(p.get('first_error') or '')}</td></tr>")
    return f"<table>{head}{''.join(rows)}</table>" if rows else "<p class=bad>No point was measured.</p>"


def _phase(p: dict) -> str:
    if p["phase"] != "load":
        return p["phase"]
    return f"{load_label(p)}, repeat {p.get('repeat')}, after {p.get('warmup')} warm-up"


def _spread(cell: dict | None, digits: int = 0) -> str:
    if not cell:
        return "<td>-</td>"
    if cell["min"] == cell["max"]:
        return f"<td>{_n(cell['median'], digits)}</td>"
    return f"<td>{_n(cell['median'], digits)} <span class=meta>({_n(cell['min'], digits)}–{_n(cell['max'], digits)})</span></td>"


def _load_table(doc: dict) -> str:
    """Per load point: the median over its repeats, (min–max) where they differ."""
    rows = [f"<tr><td class=l>{_e(r['instance'])}</td><td>{r['prompt_tokens']}</td>"
            f"<td class=l>{_e(load_label(r))}</td><td>{r['repeats']}</td><td>{r['samples']}</td>"
            + _spread(r["requests_per_s"], 2) + _spread(r["output_tokens_per_s"], 1) + _spread(r["ttft_ms_p50"])
            + _spread(r["ttft_ms_p99"]) + "</tr>" for r in doc.get("load") or []]
    if not rows:
        return ""
    return ("<h2>Load (median of the repeats; min–max where they differ)</h2><table><tr><th class=l>instance</th>"
            "<th>prompt tokens</th><th class=l>load</th><th>repeats</th><th>requests measured</th><th>req/s</th>"
            "<th>output tok/s</th><th>TTFT p50 (ms)</th><th>TTFT p99 (ms)</th></tr>"
            f"{''.join(rows)}</table><p class=meta>A percentile is given only where its sample supports it "
            "(nearest rank: p50 from 2 requests, p90 from 10, p99 from 100 per point).</p>")


def _replay_table(doc: dict) -> str:
    """After the restart (GPU and host tiers empty): what the storage tier served on the first
    turn, and TTFT p50 of the cold first turn against the replayed one."""
    rows = [f"<tr{'' if r['storage_hit_tokens'] else ' class=err'}><td class=l>{_e(r['instance'])}</td>"
            f"<td>{r['prompt_tokens']}</td><td>{_n(r['storage_hit_tokens'])}</td>"
            f"<td>{_n(r['cold_ttft_ms_p50'])}</td><td>{_n(r['replay_ttft_ms_p50'])}</td></tr>"
            for r in doc.get("replay") or []]
    if not rows:
        return ""
    return ("<h2>Replay after a restart (GPU and host tiers empty; first turn)</h2><table><tr><th class=l>instance</th>"
            "<th>prompt tokens</th><th>tokens from the storage tier</th><th>TTFT p50 cold (ms)</th>"
            f"<th>TTFT p50 replayed (ms)</th></tr>{''.join(rows)}</table>")


def _cross_host_table(doc: dict) -> str:
    """Another host's conversations on a restarted host that never saw them: what the shared
    storage tier served on the first turn, and TTFT p50 against that host's own cold first turn."""
    rows = [f"<tr{'' if r['storage_hit_tokens'] else ' class=err'}><td class=l>{_e(r['source'])} → "
            f"{_e(r['instance'])}</td><td>{r['prompt_tokens']}</td><td>{_n(r['storage_hit_tokens'])}</td>"
            f"<td>{_n(r['cold_ttft_ms_p50'])}</td><td>{_n(r['cross_host_ttft_ms_p50'])}</td></tr>"
            for r in doc.get("cross_host") or []]
    rows += [f"<tr class=err><td class=l>{_e(name)}</td><td colspan=4 class=l>{_e(why)}</td></tr>"
             for name, why in (doc.get("cross_host_skipped") or {}).items()]
    if not rows:
        return ""
    return ("<h2>On another host (its tiers emptied by a restart; first turn)</h2><table><tr><th class=l>stored by → "
            "served by</th><th>prompt tokens</th><th>tokens from the storage tier</th><th>TTFT p50 cold on that host "
            f"(ms)</th><th>TTFT p50 from the other host's prefix (ms)</th></tr>{''.join(rows)}</table>")


def _settings_line(doc: dict) -> str:
    s = doc.get("settings", {})
    if s.get("load"):
        loads = ", ".join(load_label(x) for x in s["load"])
        return (f"prompt lengths {', '.join(map(str, s.get('prompt_tokens', [])))} tokens · {loads} · "
                f"{s.get('requests')} requests a point after {s.get('warmup')} warm-up, {s.get('repeats')} repeat(s) · "
                f"conversations of {s.get('turns')} turns of +{s.get('turn_tokens')} tokens · {s.get('output_tokens')} "
                f"output tokens per answer · at most {s.get('duration_s')} s · seed {s.get('seed')}")
    return (f"prompt lengths {', '.join(map(str, s.get('prompt_tokens', [])))} tokens · {s.get('turns')} turns of "
            f"+{s.get('turn_tokens')} tokens · {s.get('users')} users side by side · {s.get('output_tokens')} output "
            f"tokens per answer · at most {s.get('duration_s')} s · seed {s.get('seed')}")


def _status_line(doc: dict) -> str:
    stopped = {"interrupted": "interrupted (Ctrl-C): the points below are what was measured",
               "duration": "stopped at --duration"}.get(doc.get("stopped"), "complete")
    return (f"{doc.get('done_points')} of {doc.get('planned_points')} points · {stopped} · exit {doc.get('exit_code')}")


def _short_html(doc: dict) -> str:
    short = short_points(doc["points"])
    if not short:
        return ""
    items = "".join(f"<li>{_e(_where(p))}: {_e(p['delivery']['short'])}</li>" for p in short)
    return (f"<p class=bad>WARNING: {len(short)} of {len(doc['points'])} points delivered less load than asked; their "
            f"figures are not those of the load asked for:</p><ul>{items}</ul>")


def _img(png: bytes) -> str:
    return f'<img alt="throughput, TTFT and cache hits" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def run_html(doc: dict, png: bytes) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset=utf-8><title>kvprov loadtest: {_e(doc['label'])}</title>"
            f"<style>{STYLE}</style></head><body><h1>kvprov loadtest: {_e(doc['label'])}</h1>"
            f"<p class=meta>{_e(doc.get('started'))} → {_e(doc.get('finished'))} ({_n(doc.get('seconds'), 1)} s) · "
            f"{_e(_status_line(doc))}<br>{_e(_settings_line(doc))}</p>"
            f"{_short_html(doc)}{_img(png)}<h2>Endpoints</h2>{_endpoints_table(doc)}{_load_table(doc)}"
            f"{_replay_table(doc)}{_cross_host_table(doc)}"
            f"<h2>Points (instance × prompt length × turn; times in ms)</h2>{_points_table(doc)}"
            "<p class=meta>TTFT: time to the first streamed token; latency: to the end of the answer. Cache hits: "
            "the growth of the engine's own counters over the point (vLLM prefix and external caches, vLLM cached "
            "by source, LMCache MP L1/L2, SGLang by cache source).</p></body></html>\n")


def compare_html(runs: list[dict], png: bytes) -> str:
    parts = []
    for run in runs:
        parts.append(f"<h2>{_e(run['label'])}</h2><p class=meta>{_e(run.get('_file'))} · {_e(run.get('started'))} · "
                     f"{_e(_status_line(run))}<br>{_e(_settings_line(run))}</p>{_endpoints_table(run)}<br>"
                     f"{_points_table(run)}")
    title = " vs ".join(r["label"] for r in runs)
    return (f"<!DOCTYPE html><html><head><meta charset=utf-8><title>kvprov loadtest: {_e(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>kvprov loadtest: {_e(title)}</h1>{_img(png)}"
            f"{''.join(parts)}</body></html>\n")
