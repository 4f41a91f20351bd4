#!/usr/bin/env python3
"""`redguard list` over a large keyspace: the L1 (one server) and L2
(a Cluster of four masters) scenarios of `scripts/bench --list`.

Starts its own redis-servers on free loopback ports (no persistence), fills
them with locks among an application's keys, runs the given `redguard`
binary's `list` RUNS times per case, and writes

    OUT/results.json   (schema "redguard-bench-list/1": host, config, rows)
    OUT/results.md     (the table)

Each row gives the wall times (median, min, max) and, from one extra run,
the server's command calls (`INFO commandstats`, summed over the masters)
and the output's line count. Every server is stopped on exit.

    scripts/bench_list.py REDGUARD_BIN OUT [RUNS]
"""

import datetime
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

UUID = "e605b3b7-3c5e-4d1a-9f00-1b2c3d4e5f60"
SERVER = os.environ.get("REDIS_SERVER") or "redis-server"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cli(port, *args, check=True):
    out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
                         capture_output=True, text=True, timeout=120)
    if check and out.returncode != 0:
        raise RuntimeError(f"redis-cli {args}: {out.stderr}")
    return out.stdout


def start(port, base, *extra):
    d = os.path.join(base, str(port))
    os.makedirs(d, exist_ok=True)
    subprocess.run([SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--daemonize", "yes", "--dir", d,
                    "--pidfile", os.path.join(d, "redis.pid"),
                    "--logfile", os.path.join(d, "redis.log"), *extra], check=True)
    for _ in range(100):
        if cli(port, "ping", check=False).strip() == "PONG":
            return
        time.sleep(0.1)
    raise RuntimeError(f"redis-server on {port} did not start")


def stop(port, base):
    cli(port, "shutdown", "nosave", check=False)
    pidfile = os.path.join(base, str(port), "redis.pid")
    for _ in range(50):
        if not os.path.exists(pidfile):
            return
        time.sleep(0.1)
    try:
        os.kill(int(open(pidfile).read()), 15)
    except (OSError, ValueError):
        pass


def crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def slot(key):
    k = key.encode()
    s = k.find(b"{")
    if s >= 0:
        e = k.find(b"}", s + 1)
        if e > s + 1:
            k = k[s + 1:e]
    return crc16(k) % 16384


def resp(*args):
    parts = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(parts)


def dataset(keys, locks, integers, hashes):
    """The commands of one keyspace: `locks` lock hashes (one holder
    client, 8 threads, a record with 1,000 hold starts), `integers`
    application integers, `hashes` application hashes of 3 fields, and
    plain strings for the rest. Yields (key, command bytes)."""
    strings = keys - locks - integers - hashes
    for i in range(locks):
        name, holder = f"job:{i}", f"{UUID}:{i % 8 + 1}"
        yield name, resp("HSET", name, holder, 1) + resp("PEXPIRE", name, 600000)
        if i < 1000:
            rec = f"redguard:client:{{{UUID}}}"
            yield rec, resp("HSET", rec, f"hold:{holder}|{name}", 1700000000000)
    rec = f"redguard:client:{{{UUID}}}"
    yield rec, resp("HSET", rec, "host", "bench", "pid", 1, "program", "bench", "version", 0)
    for i in range(integers):
        yield f"app:count:{i}", resp("SET", f"app:count:{i}", i * 7)
    for i in range(hashes):
        k = f"app:cart:{i}"
        yield k, resp("HSET", k, "sku1", 2, "sku2", 1, "total", 30)
    for i in range(strings):
        yield f"app:page:{i}", resp("SET", f"app:page:{i}", "<html>" + "x" * 40)


def load(route, data):
    """Sends each command to the port `route(key)` names, with
    `redis-cli --pipe`."""
    per_port = {}
    for key, cmd in data:
        per_port.setdefault(route(key), []).append(cmd)
    for port, cmds in per_port.items():
        out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "--pipe"],
                             input=b"".join(cmds), capture_output=True, timeout=300)
        if out.returncode != 0 or b"errors: 0" not in out.stdout:
            raise RuntimeError(f"load on {port}: {out.stdout[-300:]} {out.stderr[-300:]}")


def commandstats(ports):
    calls = {}
    for p in ports:
        for line in cli(p, "info", "commandstats").splitlines():
            if line.startswith("cmdstat_"):
                name, rest = line[len("cmdstat_"):].split(":", 1)
                n = int(rest.split(",")[0].split("=")[1])
                calls[name] = calls.get(name, 0) + n
    return calls


def run_case(binary, url, args, ports, runs):
    cmd = [binary, "--url", url, "list", *args]
    times = []
    for _ in range(runs):
        t0 = time.monotonic()
        out = subprocess.run(cmd, capture_output=True, timeout=600)
        times.append(time.monotonic() - t0)
        if out.returncode != 0:
            return {"status": f"failed: exit {out.returncode}: {out.stderr.decode()[-300:]}"}
    before = commandstats(ports)
    out = subprocess.run(cmd, capture_output=True, timeout=600)
    after = commandstats(ports)
    delta = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    delta.pop("info", None)
    return {
        "status": "ok",
        "runs": runs,
        "seconds_median": round(statistics.median(times), 3),
        "seconds_min": round(min(times), 3),
        "seconds_max": round(max(times), 3),
        "lines": out.stdout.count(b"\n"),
        "command_calls": dict(sorted(delta.items(), key=lambda kv: -kv[1])),
        "command_calls_total": sum(delta.values()),
    }


def main():
    binary, out_dir = os.path.abspath(sys.argv[1]), sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    os.makedirs(out_dir, exist_ok=True)
    base = tempfile.mkdtemp(prefix="redguard-bench-list-")
    started = []
    rows = []
    try:
        # L1: one server, 100,000 keys, 10,000 of them locks.
        port = free_port()
        start(port, base)
        started.append(port)
        load(lambda _k: port, dataset(100_000, 10_000, 10_000, 10_000))
        url = f"redis://127.0.0.1:{port}/"
        for case, args in [("default", []), ("json", ["--json"]), ("kind counter", ["--kind", "counter"])]:
            row = {"id": f"L1 one server, 100k keys, 10k locks: list {case}", "scenario": "L1",
                   "args": args, "keys": 100_000, "locks": 10_000, "masters": 1}
            row.update(run_case(binary, url, args, [port], runs))
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
        stop(port, base)
        started.remove(port)

        # L2: a Cluster of four masters, 50,000 keys, 5,000 of them locks.
        ports = [free_port() for _ in range(4)]
        for p in ports:
            start(p, base, "--cluster-enabled", "yes", "--cluster-port", str(free_port()),
                  "--cluster-config-file", os.path.join(base, str(p), "nodes.conf"),
                  "--cluster-node-timeout", "5000")
            started.append(p)
        out = subprocess.run(["redis-cli", "--cluster", "create",
                              *[f"127.0.0.1:{p}" for p in ports],
                              "--cluster-replicas", "0", "--cluster-yes"],
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(out.stdout + out.stderr)
        for _ in range(200):
            if all("cluster_state:ok" in cli(p, "cluster", "info") for p in ports):
                break
            time.sleep(0.1)
        owner = [0] * 16384
        for line in cli(ports[0], "cluster", "nodes").splitlines():
            f = line.split()
            p = int(f[1].split("@")[0].split(":")[1])
            for r in f[8:]:
                a, _, b = r.partition("-")
                for s in range(int(a), int(b or a) + 1):
                    owner[s] = p
        load(lambda k: owner[slot(k)], dataset(50_000, 5_000, 10_000, 5_000))
        url = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports) + "/"
        for case, args in [("default", []), ("json", ["--json"])]:
            row = {"id": f"L2 cluster of 4 masters, 50k keys, 5k locks: list {case}",
                   "scenario": "L2", "args": args, "keys": 50_000, "locks": 5_000, "masters": 4}
            row.update(run_case(binary, url, args, ports, runs))
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    finally:
        for p in list(started):
            stop(p, base)
        shutil.rmtree(base, ignore_errors=True)

    version = subprocess.run([SERVER, "--version"], capture_output=True, text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "unknown")
    report = {
        "schema": "redguard-bench-list/1",
        "generated_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": {"nproc": os.cpu_count(), "cpu_model": cpu, "kernel": platform.release(),
                 "redis_version": version, "loadavg": open("/proc/loadavg").read().split()[:3]},
        "config": {"runs": runs, "binary": binary,
                   "l1": "1 server: 10,000 locks, 10,000 integers, 10,000 hashes, 70,000 strings",
                   "l2": "4 masters: 5,000 locks, 10,000 integers, 5,000 hashes, 30,000 strings"},
        "rows": rows,
    }
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(report, f, indent=1)
    md = ["| case | median s | min–max s | lines | server calls | top calls |",
          "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        if r["status"] != "ok":
            md.append(f"| {r['id']} | {r['status']} | | | | |")
            continue
        top = ", ".join(f"{k} {v:,}" for k, v in list(r["command_calls"].items())[:5])
        md.append(f"| {r['id']} | {r['seconds_median']:.2f} | {r['seconds_min']:.2f}–"
                  f"{r['seconds_max']:.2f} | {r['lines']:,} | {r['command_calls_total']:,} | {top} |")
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
