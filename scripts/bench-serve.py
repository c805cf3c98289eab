#!/usr/bin/env python3
"""Load benchmark: `ferrite serve` against llama-server on the same GGUF file.

For each stream count N (default 1, 8, 32, 64), N client threads each send
streaming /v1/completions requests back to back until R requests (default
max(2N, 8)) are done; both servers use the same thread count, llama-server
gets -np N (continuous batching, N slots). Servers are measured alternately
(ferrite, llama, for each N) so machine noise hits both. Reported per server
and N: aggregate generated tokens/s (content chunks over wall time), p50/p99
time to first token and inter-token latency, errors, and peak RSS (VmHWM).
With --soak N, then N short requests against ferrite: errors and RSS growth
after warm-up. Then, unless --no-embed, embeddings at a fixed rate against ferrite alone
(llama-server has no MiniLM of ours): requests sent, failures, p50/p99 latency,
RSS before and after.

Standard library only. Started by scripts/bench-serve.sh (which builds ferrite);
the command and the figures are printed (and written as JSON with --json).
"""

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle works.",
    "List some facts about the planet Mars.",
    "Describe a busy market in the morning.",
    "What makes a good cup of tea?",
    "Tell me about the history of the printing press.",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, path, proc, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server not ready")


def rss_kib(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


BANNED = {}


def stream_one(port, prompt, max_tokens, model):
    """One streamed completion: (ttft, [itl...], n_tokens) or raises."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "stream": True, "logit_bias": BANNED})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
    times = []
    done = False
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            done = True
            break
        v = json.loads(data)
        if "error" in v:
            raise RuntimeError(str(v["error"])[:200])
        for ch in v.get("choices", []):
            if ch.get("text"):
                times.append(time.perf_counter())
    c.close()
    if not done:
        raise RuntimeError("stream ended without [DONE]")
    if not times:
        raise RuntimeError("no tokens")
    return times[0] - t0, [b - a for a, b in zip(times, times[1:])], len(times)


def load(port, n_streams, n_requests, max_tokens, model):
    lock = threading.Lock()
    counter = [0]
    ttft, itl, tokens, errors = [], [], [0], []

    def worker():
        while True:
            with lock:
                i = counter[0]
                if i >= n_requests:
                    return
                counter[0] += 1
            try:
                t, gaps, n = stream_one(port, PROMPTS[i % len(PROMPTS)], max_tokens, model)
                with lock:
                    ttft.append(t)
                    itl.extend(gaps)
                    tokens[0] += n
            except Exception as e:  # noqa: BLE001 - every failure is counted
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(n_streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"tok_s": tokens[0] / wall, "tokens": tokens[0], "wall_s": wall,
            "ttft_p50_ms": pct(ttft, 50), "ttft_p99_ms": pct(ttft, 99),
            "itl_p50_ms": pct(itl, 50), "itl_p99_ms": pct(itl, 99),
            "errors": len(errors), "first_error": errors[0] if errors else None}


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))
    return round(xs[k] * 1000, 1)


def start(cmd):
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def embed_rate(port, rate, seconds, pid):
    """Embedding requests at `rate`/s for `seconds`; latencies and failures."""
    lat, errors = [], []
    lock = threading.Lock()
    rss0 = rss_kib(pid, "VmRSS")

    def one(i):
        body = json.dumps({"model": "minilm", "input": f"{PROMPTS[i % len(PROMPTS)]} #{i}"})
        t0 = time.perf_counter()
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            c.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            ok = r.status == 200
        except OSError as e:
            ok, r = False, e
        with lock:
            (lat.append(time.perf_counter() - t0) if ok else errors.append(str(r)))

    threads = []
    t0 = time.perf_counter()
    n = int(rate * seconds)
    for i in range(n):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t = threading.Thread(target=one, args=(i,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return {"requests": n, "failures": len(errors), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "rss_before_mib": rss0 // 1024, "rss_after_mib": rss_kib(pid, "VmRSS") // 1024}


def soak(port, n_requests, n_streams, model, pid):
    """`n_requests` short streamed completions, `n_streams` at a time:
    errors and RSS after the first 10% and at the end (memory must stay
    flat once caches and allocator pools are warm)."""
    warm = max(1, n_requests // 10)
    first = load(port, n_streams, warm, 4, model)
    rss_warm = rss_kib(pid, "VmRSS")
    rest = load(port, n_streams, n_requests - warm, 4, model)
    rss_end = rss_kib(pid, "VmRSS")
    return {"requests": n_requests, "errors": first["errors"] + rest["errors"],
            "rss_after_warmup_mib": round(rss_warm / 1024, 1), "rss_end_mib": round(rss_end / 1024, 1),
            "rss_growth_mib": round((rss_end - rss_warm) / 1024, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferrite", default="target/release/ferrite")
    ap.add_argument("--llama-server", default=os.path.expanduser(
        "~/.cache/ferrite-reference/llama.cpp/build/bin/llama-server"))
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--streams", default="1,8,32,64")
    ap.add_argument("--requests", type=int, default=0, help="requests per N (default max(2N, 8))")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx-per-slot", type=int, default=512)
    ap.add_argument("--embed-rate", type=float, default=50)
    ap.add_argument("--embed-seconds", type=float, default=30)
    ap.add_argument("--no-embed", action="store_true")
    ap.add_argument("--soak", type=int, default=0,
                    help="then this many 4-token requests (8 at a time) against ferrite: errors, RSS growth")
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--llama-args", default="",
                    help="extra llama-server arguments, e.g. '--poll 0' (no spin-waiting: fairer on a busy machine)")
    ap.add_argument("--ban-tokens", default="0,2",
                    help="token ids given logit bias -100 in every request so that every reply runs "
                         "max_tokens (default: SmolLM2's <|endoftext|> and <|im_end|>)")
    ap.add_argument("--json")
    a = ap.parse_args()
    BANNED.update({t: -100 for t in a.ban_tokens.split(",") if t})
    streams = [int(x) for x in a.streams.split(",")]
    print("command:", " ".join(sys.argv), flush=True)
    results = {"ferrite": {}, "llama-server": {}, "embed": None}

    fport = free_port()
    fproc = start([a.ferrite, "serve", a.model, "minilm", "--port", str(fport), "-t", str(a.threads),
                   "--ctx", str(a.ctx_per_slot), "--max-seqs", str(max(streams))])
    wait_ready(fport, "/ready", fproc)
    fmodel = os.path.basename(a.model).removesuffix(".gguf")
    try:
        for n in streams:
            reqs = a.requests or max(2 * n, 8)
            r = load(fport, n, reqs, a.max_tokens, fmodel)
            r["peak_rss_mib"] = rss_kib(fproc.pid, "VmHWM") // 1024
            results["ferrite"][n] = r
            print(f"ferrite      N={n:3d} {fmt(r)}", flush=True)
            if a.no_llama:
                continue
            lport = free_port()
            lproc = start([a.llama_server, "-m", a.model, "--port", str(lport), "-t", str(a.threads),
                           "-tb", str(a.threads), "-np", str(n), "-c", str(n * a.ctx_per_slot),
                           "--no-warmup"] + a.llama_args.split())
            try:
                wait_ready(lport, "/health", lproc)
                r = load(lport, n, reqs, a.max_tokens, fmodel)
                r["peak_rss_mib"] = rss_kib(lproc.pid, "VmHWM") // 1024
            finally:
                stop(lproc)
            results["llama-server"][n] = r
            print(f"llama-server N={n:3d} {fmt(r)}", flush=True)
        if a.soak:
            results["soak"] = soak(fport, a.soak, 8, fmodel, fproc.pid)
            print("ferrite soak:", results["soak"], flush=True)
        if not a.no_embed:
            results["embed"] = embed_rate(fport, a.embed_rate, a.embed_seconds, fproc.pid)
            print("ferrite embeddings:", results["embed"], flush=True)
    finally:
        stop(fproc)
        print(f"ferrite serve exit code after SIGTERM: {fproc.returncode}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


def fmt(r):
    return (f"{r['tok_s']:7.1f} tok/s  TTFT p50 {r['ttft_p50_ms']} p99 {r['ttft_p99_ms']} ms  "
            f"ITL p50 {r['itl_p50_ms']} p99 {r['itl_p99_ms']} ms  errors {r['errors']}  "
            f"peak RSS {r['peak_rss_mib']} MiB" + (f"  ({r['first_error']})" if r["first_error"] else ""))


if __name__ == "__main__":
    main()
