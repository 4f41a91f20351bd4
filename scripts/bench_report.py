#!/usr/bin/env python3
"""Summarise raw benchmark driver output into results.json, a markdown table
and an SVG chart. Standard library only.

    python3 scripts/bench_report.py OUT_DIR RUN_DIR [RUN_DIR ...]
    python3 scripts/bench_report.py --merge RUN_DIR
    python3 scripts/bench_report.py --servers OUT.md OUT_DIR [OUT_DIR ...]
    python3 scripts/bench_report.py --single OUT.json META.json RAW.json

Each RUN_DIR holds one repetition: redguard.json and floor.json (raw driver
JSON of benches/bench, the shared peers format) and meta.json; the first
RUN_DIR may also hold w1.json and w2.json. Statistics use exactly the
definitions of ../shared/bench/analyze.py (nearest-rank percentiles, same
S2 handoff / release-to-other / overlap rules), so rows are comparable with
the peers report.

Writes OUT_DIR/results.json, OUT_DIR/results.md (also printed) and
OUT_DIR/bench.svg. With --servers, reads the results.json of one OUT_DIR
per server (`scripts/bench --servers`) and writes one table, a row per
server, every ratio to the floor on the same server.
"""
import json
import math
import os
import statistics
import sys


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    k = max(1, math.ceil(p / 100.0 * len(sorted_vals)))
    return sorted_vals[min(k, len(sorted_vals)) - 1]


def us(ns):
    return None if ns is None else round(ns / 1000.0, 1)


def rate(n, elapsed_ns):
    return round(n / (elapsed_ns / 1e9), 1) if elapsed_ns > 0 else None


def sum_s1(r):
    if not r:
        return None
    lat = sorted(r["lat_ns"])
    return {"cycles": len(lat), "elapsed_s": round(r["elapsed_ns"] / 1e9, 3),
            "cycles_per_s": rate(len(lat), r["elapsed_ns"]),
            "p50_us": us(pct(lat, 50)), "p99_us": us(pct(lat, 99)),
            "errors": r["errors"], "last_error": r.get("last_error")}


def s2_events(r):
    return sorted((e for e in r["events"] if e[2] <= r["t_end_ns"]), key=lambda e: e[2])


def sum_s2(r):
    if not r:
        return None
    t0, t1 = r["t_start_ns"], r["t_end_ns"]
    ev = s2_events(r)
    per = [0] * r["workers"]
    for e in ev:
        per[e[0]] += 1
    hand, same, overlaps = [], 0, 0
    for a, b in zip(ev, ev[1:]):
        if b[2] < a[3]:
            overlaps += 1
        if a[0] == b[0]:
            same += 1
        else:
            hand.append(b[2] - a[3])
    rel_other, nxt = [], None
    for i in range(len(ev) - 1, -1, -1):
        if i + 1 < len(ev) and ev[i + 1][0] != ev[i][0]:
            nxt = ev[i + 1][2]
        if nxt is not None:
            rel_other.append(nxt - ev[i][3])
    wait = sorted(e[2] - e[1] for e in ev)
    hand.sort()
    rel_other.sort()
    pairs = max(0, len(ev) - 1)
    return {"workers": r["workers"], "window_s": round((t1 - t0) / 1e9, 3),
            "acquisitions": len(ev), "acquisitions_per_s": rate(len(ev), t1 - t0),
            "handoffs": len(hand), "handoff_p50_us": us(pct(hand, 50)),
            "handoff_p99_us": us(pct(hand, 99)),
            "release_to_other_p50_us": us(pct(rel_other, 50)),
            "release_to_other_p99_us": us(pct(rel_other, 99)),
            "wait_p50_us": us(pct(wait, 50)), "wait_p99_us": us(pct(wait, 99)),
            "self_reacquire_frac": round(same / pairs, 4) if pairs else None,
            "per_worker_acquisitions": per,
            "starvation_ratio": round(max(per) / min(per), 2) if per and min(per) > 0 else None,
            "acquire_failures": r["acquire_failures"], "overlaps": overlaps,
            "errors": r["errors"], "last_error": r.get("last_error")}


def sum_s3(r):
    if not r:
        return None
    lat = sorted(r["lat_ns"])
    el = r["t_finish_ns"] - r["t_start_ns"]
    return {"workers": r["workers"], "names_per_worker": r["names_per_worker"],
            "cycles": len(lat), "elapsed_s": round(el / 1e9, 3),
            "cycles_per_s": rate(len(lat), el),
            "p50_us": us(pct(lat, 50)), "p99_us": us(pct(lat, 99)),
            "errors": r["errors"], "last_error": r.get("last_error")}


def summarise(raw):
    return {"library": raw["library"], "version": raw["version"],
            "s1": sum_s1(raw.get("s1")), "s2": sum_s2(raw.get("s2")), "s3": sum_s3(raw.get("s3"))}


def handoffs_ns(raw):
    """S2 release->other samples of one raw row (for the distribution chart)."""
    r = raw.get("s2")
    if not r:
        return []
    ev = s2_events(r)
    out, nxt = [], None
    for i in range(len(ev) - 1, -1, -1):
        if i + 1 < len(ev) and ev[i + 1][0] != ev[i][0]:
            nxt = ev[i + 1][2]
        if nxt is not None:
            out.append(nxt - ev[i][3])
    return sorted(out)


def load(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def get(d, *path):
    for p in path:
        if d is None:
            return None
        d = d.get(p)
    return d


def fmt(v, nd=0):
    return "–" if v is None else f"{v:,.{nd}f}"


def spread(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


# ---------------------------------------------------------------------------
# SVG (hand written: two panels)
# ---------------------------------------------------------------------------

def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def svg_chart(path, runs, rg_raw, fl_raw, title, ab=None):
    W, H = 960, 420
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W/2}" y="20" text-anchor="middle" font-size="14" font-weight="bold">{esc(title)}</text>']
    colors = {"redguard": "#1f77b4", "floor": "#999999"}

    # Panel 1: throughput bars, redguard vs floor, per scenario, median of runs with min-max whisker.
    px, py, pw, ph = 60, 50, 380, 300
    metrics = [("S1 cyc/s", ("s1", "cycles_per_s")), ("S2 acq/s", ("s2", "acquisitions_per_s")),
               ("S3 cyc/s", ("s3", "cycles_per_s"))]
    vals = {}
    for label, p in metrics:
        for who in ("redguard", "floor"):
            vals[(label, who)] = spread([get(r[who], *p) for r in runs])
    vmax = max([v["max"] for v in vals.values() if v] + [1])
    decade = 10 ** math.floor(math.log10(vmax))
    top = next(decade * m for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10) if vmax <= decade * m)
    out.append(f'<text x="{px + pw/2}" y="{py - 10}" text-anchor="middle">throughput (median of {len(runs)} runs, whisker = min..max)</text>')
    for k in range(6):
        v = top * k / 5
        y = py + ph - ph * k / 5
        out.append(f'<line x1="{px}" y1="{y:.1f}" x2="{px + pw}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{px - 5}" y="{y + 4:.1f}" text-anchor="end">{v:,.0f}</text>')
    gw = pw / len(metrics)
    for i, (label, _) in enumerate(metrics):
        for j, who in enumerate(("redguard", "floor")):
            v = vals[(label, who)]
            if not v:
                continue
            bw = gw * 0.32
            x = px + i * gw + gw * 0.16 + j * bw
            h = ph * v["median"] / top
            out.append(f'<rect x="{x:.1f}" y="{py + ph - h:.1f}" width="{bw:.1f}" height="{h:.1f}" fill="{colors[who]}"/>')
            ymin, ymax = py + ph - ph * v["min"] / top, py + ph - ph * v["max"] / top
            cx = x + bw / 2
            out.append(f'<line x1="{cx:.1f}" y1="{ymin:.1f}" x2="{cx:.1f}" y2="{ymax:.1f}" stroke="black"/>')
            out.append(f'<text x="{cx:.1f}" y="{py + ph - h - 4:.1f}" text-anchor="middle" font-size="10">{v["median"]:,.0f}</text>')
        out.append(f'<text x="{px + i * gw + gw/2:.1f}" y="{py + ph + 16}" text-anchor="middle">{label}</text>')
    out.append(f'<line x1="{px}" y1="{py + ph}" x2="{px + pw}" y2="{py + ph}" stroke="black"/>')
    # Separate processes see different load: the in-process A/B ratios are
    # the ones the S1/S3 goals are judged on.
    ab_ratio = lambda k: get(ab, k, "ratio", "median")
    if ab_ratio("s1") is not None and ab_ratio("s3") is not None:
        out.append(f'<text x="{px + pw/2}" y="{H - 8}" text-anchor="middle" font-size="11">'
                   f'redguard / floor interleaved in one process (A/B): S1 {ab_ratio("s1"):.2f}, '
                   f'S3 {ab_ratio("s3"):.2f}</text>')
    for j, who in enumerate(("redguard", "floor (2 EVALSHA, spin in S2)")):
        c = colors["redguard" if j == 0 else "floor"]
        out.append(f'<rect x="{px + j * 190}" y="{py + ph + 30}" width="12" height="12" fill="{c}"/>')
        out.append(f'<text x="{px + j * 190 + 16}" y="{py + ph + 40}">{esc(who)}</text>')

    # Panel 2: S2 release->other latency CDF (log x), redguard vs floor, from the first run.
    qx, qy, qw, qh = 540, 50, 380, 300
    out.append(f'<text x="{qx + qw/2}" y="{qy - 10}" text-anchor="middle">S2 release→other latency, CDF (run 1)</text>')
    lo, hi = 10.0, 100000.0  # µs
    def xpos(v_us):
        v = min(max(v_us, lo), hi)
        return qx + qw * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    for d in range(1, 6):
        v = 10 ** d
        x = xpos(v)
        out.append(f'<line x1="{x:.1f}" y1="{qy}" x2="{x:.1f}" y2="{qy + qh}" stroke="#eee"/>')
        lab = f"{v/1000:g} ms" if v >= 1000 else f"{v:g} µs"
        out.append(f'<text x="{x:.1f}" y="{qy + qh + 16}" text-anchor="middle">{lab}</text>')
    for k in range(6):
        y = qy + qh - qh * k / 5
        out.append(f'<line x1="{qx}" y1="{y:.1f}" x2="{qx + qw}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{qx - 5}" y="{y + 4:.1f}" text-anchor="end">{k * 20}%</text>')
    for who, raw in (("redguard", rg_raw), ("floor", fl_raw)):
        samples = handoffs_ns(raw) if raw else []
        if not samples:
            continue
        n = len(samples)
        step = max(1, n // 400)
        pts = []
        for i in range(0, n, step):
            pts.append(f"{xpos(samples[i] / 1000):.1f},{qy + qh - qh * (i + 1) / n:.1f}")
        pts.append(f"{xpos(samples[-1] / 1000):.1f},{qy:.1f}")
        out.append(f'<polyline fill="none" stroke="{colors[who]}" stroke-width="2" points="{" ".join(pts)}"/>')
    for target, lab in ((500, "p50 target 0.5 ms"), (3000, "p99 target 3 ms")):
        x = xpos(target)
        out.append(f'<line x1="{x:.1f}" y1="{qy}" x2="{x:.1f}" y2="{qy + qh}" stroke="#d62728" stroke-dasharray="4,3"/>')
        out.append(f'<text x="{x + 3:.1f}" y="{qy + 12 + (0 if target == 500 else 14)}" fill="#d62728" font-size="10">{lab}</text>')
    out.append(f'<rect x="{qx}" y="{qy}" width="{qw}" height="{qh}" fill="none" stroke="black"/>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


# ---------------------------------------------------------------------------

def merge(d):
    """Joins <row>-s1/s2/s3.json of one run directory into <row>.json."""
    for row in ("floor", "redguard"):
        parts = {}
        for s in ("s1", "s2", "s3"):
            path = os.path.join(d, f"{row}-{s}.json")
            if os.path.exists(path) and os.path.getsize(path) > 0:
                parts[s] = load(path)
        if len(parts) < 3:
            print(f"{d}: {row}: missing parts, not merged", file=sys.stderr)
            continue
        merged = dict(parts["s1"])
        for s in ("s2", "s3"):
            merged[s] = parts[s][s]
        with open(os.path.join(d, f"{row}.json"), "w") as f:
            json.dump(merged, f)


def servers(out_md, out_dirs):
    """One S1/S2/S3 row per server: A/B ratios for S1 and S3, S2 beside the
    floor's S2 on the same server."""
    md = ["| server | load | S1 redguard / floor, A/B (p25–p75) | S1 cyc/s redguard / floor "
          "| S2 acq/s redguard / floor | S2 rel→other ms p50 / p99 redguard (floor) "
          "| S2 overlaps / fails | S3 redguard / floor, A/B (p25–p75) | S3 cyc/s redguard / floor |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for d in out_dirs:
        r = load(os.path.join(d, "results.json"))
        if not r:
            md.append(f"| {os.path.basename(d)} | no results |||||||")
            continue
        host = get(r, "meta", "host") or {}
        name = host.get("server", os.path.basename(d))
        version = (host.get("server_version") or "").split(" sha=")[0].replace(" server v=", " ")
        run = r["runs"][0]
        g2, f2 = run["redguard"]["s2"] or {}, run["floor"]["s2"] or {}
        ab = r.get("ab") or {}
        def abr(k):
            x = (ab.get(k) or {}).get("ratio")
            return "–" if not x else f"{x['median']:.3f} ({x['p25']:.3f}–{x['p75']:.3f})"
        def abc(k):
            x = ab.get(k) or {}
            if "redguard_cps" not in x:
                return "–"
            return f"{x['redguard_cps']['median']:,.0f} / {x['floor_cps']['median']:,.0f}"
        ms = lambda v: "–" if v is None else f"{v / 1000:,.2f}"
        loads = run.get("loadavg", {})
        load_ab = " ".join((loads.get("ab") or ["?"])[:1])
        md.append(
            f"| {name} ({version}) | {load_ab} | {abr('s1')} | {abc('s1')} "
            f"| {fmt(g2.get('acquisitions_per_s'))} / {fmt(f2.get('acquisitions_per_s'))} "
            f"| {ms(g2.get('release_to_other_p50_us'))} / {ms(g2.get('release_to_other_p99_us'))} "
            f"({ms(f2.get('release_to_other_p50_us'))} / {ms(f2.get('release_to_other_p99_us'))}) "
            f"| {g2.get('overlaps', '–')} / {g2.get('acquire_failures', '–')} "
            f"| {abr('s3')} | {abc('s3')} |")
    with open(out_md, "w") as f:
        f.write("\n".join(md) + "\n")


def single(out_json, meta_path, raw_path):
    """One mode run alone (`scripts/bench --names`, `--w1`): its raw
    document with the run's host and load, and one line per case."""
    raw = load(raw_path) or {}
    result = {"schema": "redguard-bench/1", "meta": load(meta_path) or {}, **raw}
    with open(out_json, "w") as f:
        json.dump(result, f, indent=1)
    n = raw.get("names")
    if n:
        print(f"N1 {n['n']:,} distinct names after {n['warmup']:,}, {n['threads']} threads: "
              f"RSS +{n['rss_growth_kib'] / 1024:.1f} MB ({n['rss_per_name_b']:.1f} B/name), "
              f"heap +{n['heap_growth_kib'] / 1024:.2f} MB ({n['heap_per_name_b']:.2f} B/name), "
              f"{n['names_per_s']:,.0f} names/s, {n['errors']} errors; left: {n['stats_after']}")
    for w in raw.get("w1") or []:
        print(f"W1 {w['n']:,} locks, {w['watchdog_s']:g} s lease: watchdog CPU "
              f"{w['watchdog_cpu_frac'] * 100:.1f}% of a core, {w['rss_per_hold_b']:,.0f} B per hold, "
              f"lowest PTTL {(w.get('min_pttl_frac') or 0) * 100:.1f}%, {w['lost_guards']} lost")


def main():
    if sys.argv[1] == "--single":
        single(*sys.argv[2:5])
        return
    if sys.argv[1] == "--merge":
        merge(sys.argv[2])
        return
    if sys.argv[1] == "--servers":
        servers(sys.argv[2], sys.argv[3:])
        return
    out_dir, run_dirs = sys.argv[1], sys.argv[2:]
    runs, raws = [], []
    for d in run_dirs:
        rg, fl = load(os.path.join(d, "redguard.json")), load(os.path.join(d, "floor.json"))
        if rg is None or fl is None:
            continue
        raws.append((rg, fl))
        loads = {}
        for fn in sorted(os.listdir(d)):
            if fn.endswith(".load"):
                with open(os.path.join(d, fn)) as f:
                    loads[fn[:-5]] = f.read().split()
        runs.append({"redguard": summarise(rg), "floor": summarise(fl), "loadavg": loads})
    if not runs:
        sys.exit("no complete run (redguard.json + floor.json)")
    meta = load(os.path.join(run_dirs[0], "meta.json")) or {}
    # W1 cases: w1.json, or one w1-<case>.json per driver process.
    w1 = get(load(os.path.join(run_dirs[0], "w1.json")), "w1") or []
    for fn in sorted(os.listdir(run_dirs[0]), key=lambda f: [(0, int(t), "") if t.isdigit() else (1, 0, t)
                                                                for t in f.replace(".", "-").split("-")]):
        if fn.startswith("w1-") and fn.endswith(".json") and os.path.getsize(os.path.join(run_dirs[0], fn)):
            w1 += get(load(os.path.join(run_dirs[0], fn)), "w1") or []
    w2 = get(load(os.path.join(run_dirs[0], "w2.json")), "w2")
    ab = get(load(os.path.join(run_dirs[0], "ab.json")), "ab")
    rw = get(load(os.path.join(run_dirs[0], "rw.json")), "rw")
    sem = get(load(os.path.join(run_dirs[0], "sem.json")), "sem")

    ratios = []
    for r in runs:
        g, f = r["redguard"], r["floor"]
        def ratio(*p):
            a, b = get(g, *p), get(f, *p)
            return round(a / b, 3) if a and b else None
        ratios.append({"s1_vs_floor": ratio("s1", "cycles_per_s"),
                       "s3_vs_floor": ratio("s3", "cycles_per_s")})
    s2 = [r["redguard"]["s2"] for r in runs if r["redguard"]["s2"]]
    checks = {
        "s1_ge_0.95_floor": spread([x["s1_vs_floor"] for x in ratios]),
        "s3_ge_0.9_floor": spread([x["s3_vs_floor"] for x in ratios]),
        "s2_rel_other_p50_us": spread([x["release_to_other_p50_us"] for x in s2]),
        "s2_rel_other_p99_us": spread([x["release_to_other_p99_us"] for x in s2]),
        "s2_overlaps": sum(x["overlaps"] for x in s2),
        "s2_acquire_failures": sum(x["acquire_failures"] for x in s2),
        "s2_starvation_ratio_max": max((x["starvation_ratio"] or float("inf")) for x in s2) if s2 else None,
    }
    result = {"schema": "redguard-bench/1", "meta": meta, "runs": runs, "ratios": ratios,
              "targets": checks, "ab": ab, "rw": rw, "sem": sem, "w1": w1, "w2": w2}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(result, f, indent=1)

    md = []
    host = meta.get("host", {})
    md.append(f"redguard benchmark — {meta.get('generated_at', '?')}, {host.get('nproc', '?')} cores "
              f"({host.get('cpu_model', '?')}), kernel {host.get('kernel', '?')}, "
              f"redis-server {host.get('redis_version', '?')} on loopback, {len(runs)} run(s); "
              f"load average at start {meta.get('loadavg', '?')}.")
    md.append("")
    md.append("| run | row | S1 cyc/s | S1 µs p50 / p99 | S2 acq/s | S2 handoff ms p50 / p99 | "
              "S2 rel→other ms p50 / p99 | S2 self-reacq | S2 per-worker max/min | S2 fails / overlaps | "
              "S3 cyc/s | S3 µs p50 / p99 | S1 vs floor | S3 vs floor |")
    md.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, (r, rt) in enumerate(zip(runs, ratios), 1):
        for who in ("redguard", "floor"):
            x = r[who]
            s1, s2r, s3 = x["s1"] or {}, x["s2"] or {}, x["s3"] or {}
            ms = lambda v: "–" if v is None else f"{v / 1000:,.2f}"
            md.append(
                f"| {i} | {'redguard ' + x['version'] if who == 'redguard' else 'floor (raw-sync)'} "
                f"| {fmt(s1.get('cycles_per_s'))} | {fmt(s1.get('p50_us'))} / {fmt(s1.get('p99_us'))} "
                f"| {fmt(s2r.get('acquisitions_per_s'))} "
                f"| {ms(s2r.get('handoff_p50_us'))} / {ms(s2r.get('handoff_p99_us'))} "
                f"| {ms(s2r.get('release_to_other_p50_us'))} / {ms(s2r.get('release_to_other_p99_us'))} "
                f"| {fmt((s2r.get('self_reacquire_frac') or 0) * 100)}% "
                f"| {fmt(s2r.get('starvation_ratio'), 2)} "
                f"| {s2r.get('acquire_failures', '–')} / {s2r.get('overlaps', '–')} "
                f"| {fmt(s3.get('cycles_per_s'))} | {fmt(s3.get('p50_us'))} / {fmt(s3.get('p99_us'))} "
                f"| {fmt(rt['s1_vs_floor'], 2) + 'x' if who == 'redguard' else '1.00x'} "
                f"| {fmt(rt['s3_vs_floor'], 2) + 'x' if who == 'redguard' else '1.00x'} |")
    md.append("")
    c = checks
    def sp(v, nd=2, unit=""):
        return "–" if not v else f"{v['median']:.{nd}f}{unit} (min {v['min']:.{nd}f}, max {v['max']:.{nd}f})"
    md.append(f"Targets over {len(runs)} runs (median, spread): S1 vs floor {sp(c['s1_ge_0.95_floor'])} "
              f"(goal ≥ 0.95); S3 vs floor {sp(c['s3_ge_0.9_floor'])} (goal ≥ 0.9); "
              f"S2 release→other p50 {sp(c['s2_rel_other_p50_us'], 0, ' µs')} (goal ≤ 500 µs), "
              f"p99 {sp(c['s2_rel_other_p99_us'], 0, ' µs')} (goal ≤ 3000 µs); "
              f"overlaps {c['s2_overlaps']}, acquire failures {c['s2_acquire_failures']}, "
              f"worst per-worker max/min {fmt(c['s2_starvation_ratio_max'], 2)} (goal ≤ 3). "
              "Separate processes a few seconds apart see different load on a shared machine: "
              "the S1/S3 goals are judged on the A/B ratios below (both libraries in one process).")
    md.append("")
    md.append("1-minute load average when each part started: " + "; ".join(
        f"run {i}: " + ", ".join(f"{k} {v[0]}" for k, v in sorted(r.get("loadavg", {}).items()))
        for i, r in enumerate(runs, 1)) + ".")
    extra = runs[0].get("loadavg", {})
    if any(k in extra for k in ("ab", "rw", "sem")):
        md.append("")
        md.append("Load average at the start of the single-process modes: " + ", ".join(
            f"{k} {' / '.join(extra[k])}" for k in ("ab", "rw", "sem") if k in extra) + ".")
    if ab and "s1" in ab and "ratio" in ab["s1"]:
        md.append("")
        md.append("A/B in one process (redguard and the floor alternate: S1 in blocks of "
                  f"{ab['s1']['block_cycles']:,} cycles, {ab['s1']['rounds']} blocks each; S3 with 8 threads "
                  f"in phases of {ab['s3'].get('phase_s', 0) * 1000:.0f} ms, {ab['s3'].get('rounds', 0)} each):")
        md.append("")
        md.append("| scenario | redguard / floor, median (p25 – p75) | redguard cyc/s (median) | floor cyc/s (median) | client CPU µs/cycle redguard / floor |")
        md.append("|---|---:|---:|---:|---:|")
        for k in ("s1", "s3"):
            x = ab.get(k) or {}
            if "ratio" not in x:
                continue
            r = x["ratio"]
            cpu = "–"
            if k == "s1" and "redguard_thread_cpu_us_per_cycle" in x:
                cpu = (f"{x['redguard_thread_cpu_us_per_cycle']['median']:.1f} / "
                       f"{x['floor_thread_cpu_us_per_cycle']['median']:.1f}")
            md.append(f"| {k.upper()} | {r['median']:.3f} ({r['p25']:.3f} – {r['p75']:.3f}) "
                      f"| {x['redguard_cps']['median']:,.0f} | {x['floor_cps']['median']:,.0f} | {cpu} |")
    if rw and rw.get("phases"):
        md.append("")
        md.append(f"Read-write lock, S2's procedure (8 threads, one name, {rw['window_s']:g} s per phase, blocking "
                  f"`lock()`, {rw['read_percent']} % reads), beside the reentrant lock in alternating phases "
                  f"({rw['rounds']} pairs, ABBA):")
        md.append("")
        md.append("| phase | lock | acq/s | reads / writes | wait p50 / p99 ms | per-worker max/min | overlaps | errors |")
        md.append("|---:|---|---:|---:|---:|---:|---:|---:|")
        ms = lambda v: "–" if v is None else f"{v / 1000:,.2f}"
        for i, p in enumerate(rw["phases"], 1):
            md.append(f"| {i} | {p['lock']} | {p['acquisitions_per_s']:,.0f} | {p['reads']:,} / {p['writes']:,} "
                      f"| {ms(p['wait_p50_us'])} / {ms(p['wait_p99_us'])} | {fmt(p['starvation_ratio'], 2)} "
                      f"| {p['overlaps']} | {p['errors']} |")
        r = rw.get("ratio") or {}
        if r:
            md.append("")
            md.append(f"Read-write / reentrant acquisitions per second: median {r['median']:.2f} "
                      f"(min {r['min']:.2f}, max {r['max']:.2f}).")
    if sem:
        md.append("")
        md.append("Semaphore `try_acquire(1)` + `release()` cycles beside the floor's lock/unlock, interleaved "
                  "in one process (1 thread: blocks of 1,000 cycles; 8 threads sharing 8 permits: 500 ms phases):")
        md.append("")
        md.append("| threads | semaphore / floor, median (p25 – p75) | semaphore cyc/s (median) | floor cyc/s (median) | permits back |")
        md.append("|---:|---:|---:|---:|---:|")
        for k, threads in (("s1", 1), ("s3", 8)):
            x = sem.get(k) or {}
            if "ratio" not in x or not x["ratio"]:
                continue
            r = x["ratio"]
            md.append(f"| {threads} | {r['median']:.3f} ({r['p25']:.3f} – {r['p75']:.3f}) "
                      f"| {x['redguard_cps']['median']:,.0f} | {x['floor_cps']['median']:,.0f} "
                      f"| {x.get('permits_left')} / {x.get('permits')} |")
    if w1:
        md.append("")
        md.append("W1 watchdog at scale (one client, one thread holding N locks, hold = 3 renewal periods; "
                  "each case in its own process). RSS / held lock counts everything the process grew by "
                  "(the application's Lock handles and guards included); RSS / hold leaves out the Lock "
                  "handles (made before the clock started). Watchdog CPU = the scheduling thread plus its "
                  "renewal I/O threads:")
        md.append("")
        md.append("| N | lease | batch | acquire s | renewals / period | renewals per lock (periods held) | round trips / period | ⌈N/batch⌉ | "
                  "round trips / tick | lowest pttl (of lease) | lost | watchdog CPU (of a core) | "
                  "RSS / held lock (incl. Lock+guard) | RSS / hold (library) | release all s |")
        md.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for w in w1:
            rp = w.get("renewals_per_lock")
            rp = "–" if rp is None else f"{rp:.3f} ({w['periods']:.4f})"
            frac = w.get("min_pttl_frac")
            md.append(
                f"| {w['n']:,} | {w['watchdog_s']:g} s | {w['renew_batch']} | {w['acquire_s']:.1f} "
                f"| {w['renewals_per_period']:,.0f} | {rp} | {w['round_trips_per_period']:,.1f} | {w['ceil_n_over_batch']:,} "
                f"| {w['round_trips_per_tick']:.2f} "
                f"| {'–' if frac is None else f'{frac * 100:.1f}%'} ({fmt(w.get('min_pttl_ms'))} ms) "
                f"| {w['lost_guards']} | {w['watchdog_cpu_frac'] * 100:.1f}% "
                f"| {w['rss_per_lock_b']:,.0f} B | {w['rss_per_hold_b']:,.0f} B | {w['release_s']:.1f} |")
    if w2:
        md.append("")
        md.append(f"W2 waiter fan-out: {w2['threads']:,} threads on {w2['locks']} locks held by another client, "
                  f"released one by one every {w2['release_gap_ms']:g} ms; each waiter releases at once, "
                  f"handing over to the next waiter of its lock.")
        md.append("")
        md.append("| acquired | failures | overlaps | pub/sub conns (Redis, waiting) | client pub/sub conns | "
                  "Redis conns total (waiting) | waiter pool conns | first wake p50 / p99 ms | "
                  "waiter→waiter handoff p50 / p99 ms | all wake-ups p50 / p99 ms |")
        md.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        ms = lambda v: "–" if v is None else f"{v / 1000:,.2f}"
        md.append(
            f"| {w2['acquired']:,} / {w2['threads']:,} | {w2['failures']} | {w2['overlaps']} "
            f"| {w2['redis_pubsub_waiting']} | {w2['client_pubsub_connections']} "
            f"| {w2['redis_connections_waiting']} | {w2['client_pool_connections']} "
            f"| {ms(w2['wake_first_p50_us'])} / {ms(w2['wake_first_p99_us'])} "
            f"| {ms(w2['handoff_p50_us'])} / {ms(w2['handoff_p99_us'])} "
            f"| {ms(w2['wake_p50_us'])} / {ms(w2['wake_p99_us'])} |")
    text = "\n".join(md) + "\n"
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(text)
    print(text)
    rg0, fl0 = raws[0]
    svg_chart(os.path.join(out_dir, "bench.svg"), runs, rg0, fl0,
              f"redguard vs raw-Redis floor — {meta.get('generated_at', '')[:10]}, "
              f"{host.get('nproc', '?')} cores ({host.get('cpu_model', '?')}), "
              f"redis {host.get('redis_version', '?')}", ab)


if __name__ == "__main__":
    main()
