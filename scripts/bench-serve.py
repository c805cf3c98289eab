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

With --prefix, instead: time to first token on prompts sharing a long
prefix, ferrite with its prefix cache against ferrite with
--prefix-cache-mib 0 (and llama-server, whose cache_prompt reuses a slot's
previous prompt): (a) --prefix-requests completions, --prefix-streams at a
time, each a shared system text of about --prefix-tokens tokens plus a
question of its own; (b) a chat of --turns turns whose history grows (each
turn sends the previous replies back). Servers take turns, --rounds rounds;
reported: per server, the median over rounds of each round's median TTFT.

Standard library only. Started by scripts/bench-serve.sh (which builds ferrite);
the command and the figures are printed (and written as JSON with --json).
"""

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time

import common

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle works.",
    "List some facts about the planet Mars.",
    "Describe a busy market in the morning.",
    "What makes a good cup of tea?",
    "Tell me about the history of the printing press.",
]


free_port = common.free_port
wait_ready = common.wait_ready


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


def stream_one(port, prompt, max_tokens, model, path="/v1/completions", extra=None):
    """One streamed completion: (ttft, [itl...], n_tokens) or raises; with
    `extra`, (ttft, [itl...], n_tokens, text)."""
    req = {"model": model, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    if path == "/v1/completions":
        req.update(prompt=prompt, logit_bias=BANNED)
    else:
        req.update(messages=prompt)
    req.update(extra or {})
    body = json.dumps(req)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", path, body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
    times = []
    text = []
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
            piece = ch.get("text") or (ch.get("delta") or {}).get("content")
            if piece:
                times.append(time.perf_counter())
                text.append(piece)
    c.close()
    if not done:
        raise RuntimeError("stream ended without [DONE]")
    if not times:
        raise RuntimeError("no tokens")
    out = times[0] - t0, [b - a for a, b in zip(times, times[1:])], len(times)
    return out + ("".join(text),) if extra is not None else out


def run_pool(n_streams, n_requests, job):
    """Calls job(i, lock) for i in 0..n_requests from `n_streams` threads;
    returns the errors (as strings)."""
    lock = threading.Lock()
    counter, errors = [0], []

    def worker():
        while True:
            with lock:
                i = counter[0]
                if i >= n_requests:
                    return
                counter[0] += 1
            try:
                job(i, lock)
            except Exception as e:  # noqa: BLE001 - every failure is counted
                with lock:
                    errors.append(str(e))

    threads = [threading.Thread(target=worker) for _ in range(n_streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def load(port, n_streams, n_requests, max_tokens, model):
    ttft, itl, tokens = [], [], [0]

    def job(i, lock):
        t, gaps, n = stream_one(port, PROMPTS[i % len(PROMPTS)], max_tokens, model)
        with lock:
            ttft.append(t)
            itl.extend(gaps)
            tokens[0] += n

    t0 = time.perf_counter()
    errors = run_pool(n_streams, n_requests, job)
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


SYSTEM_WORDS = ["garden", "river", "copper", "lantern", "winter", "market", "signal", "orbit",
                "engine", "purple", "stone", "quiet", "answer", "always", "politely", "briefly"]


def system_text(n_tokens):
    """A system prompt of about `n_tokens` tokens (numbered rules of 3 words)."""
    rules, i = [], 0
    while len(rules) * 8 < n_tokens:
        w = SYSTEM_WORDS
        rules.append(f"Rule {i + 1}: {w[i % 16]} {w[(i * 5 + 1) % 16]} {w[(i * 7 + 3) % 16]}.")
        i += 1
    return "You are a careful assistant. " + " ".join(rules)


def shared_prefix_ttft(port, model, system, n_requests, n_streams, round_no):
    """TTFT of `n_requests` completions sharing `system`, `n_streams` at a time:
    (median seconds, errors)."""
    ttft = []

    def job(i, lock):
        prompt = f"{system}\nQuestion {round_no}.{i}: what is rule {i + 1} about?\nAnswer:"
        t, _, _ = stream_one(port, prompt, 4, model)
        with lock:
            ttft.append(t)

    errors = run_pool(n_streams, n_requests, job)
    return (statistics.median(ttft) if ttft else None), errors


def chat_turns_ttft(port, model, system, turns, round_no):
    """A chat of `turns` turns, each sending the history back: (median TTFT
    over turns, errors)."""
    messages = [{"role": "system", "content": system}]
    ttft, errors = [], []
    for k in range(turns):
        messages.append({"role": "user", "content": f"Round {round_no}, turn {k}: tell me about rule {k + 1}."})
        try:
            t, _, _, text = stream_one(port, messages, 24, model, "/v1/chat/completions", {})
            ttft.append(t)
            messages.append({"role": "assistant", "content": text})
        except Exception as e:  # noqa: BLE001 - every failure is counted
            errors.append(str(e))
            messages.append({"role": "assistant", "content": "..."})
    return (statistics.median(ttft) if ttft else None), errors


def prefix_bench(a, fmodel):
    """Shared-prefix and multi-turn TTFT: cache on, cache off, llama-server, in turns."""
    system = system_text(a.prefix_tokens)
    ctx = a.prefix_tokens + 64 * a.turns + 512
    servers = {}
    common = [a.model, "--port", "{port}", "-t", str(a.threads), "--ctx", str(ctx),
              "--max-seqs", str(max(a.prefix_streams, 1))]
    servers["ferrite"] = [a.ferrite, "serve"] + common
    servers["ferrite --prefix-cache-mib 0"] = [a.ferrite, "serve"] + common + ["--prefix-cache-mib", "0"]
    if not a.no_llama:
        servers["llama-server"] = [a.llama_server, "-m", a.model, "--port", "{port}", "-t", str(a.threads),
                                   "-tb", str(a.threads), "-np", str(a.prefix_streams),
                                   "-c", str(a.prefix_streams * ctx), "--no-warmup"] + a.llama_args.split()
    procs = {}
    try:
        for name, cmd in servers.items():
            port = free_port()
            proc = start([x.replace("{port}", str(port)) for x in cmd])
            wait_ready(port, "/health" if name == "llama-server" else "/ready", proc)
            procs[name] = (port, proc)
        results = {name: {"shared": [], "turns": [], "errors": 0} for name in servers}
        # Each server sees one warm-up round (not counted) of both workloads.
        for r in range(a.rounds + 1):
            for name, (port, _) in procs.items():
                shared, e1 = shared_prefix_ttft(port, fmodel, system, a.prefix_requests, a.prefix_streams, r)
                turns, e2 = chat_turns_ttft(port, fmodel, system, a.turns, r)
                if r == 0:
                    continue
                res = results[name]
                res["shared"].append(shared)
                res["turns"].append(turns)
                res["errors"] += len(e1) + len(e2)
                print(f"round {r} {name:30s} shared-prefix TTFT median {ms(shared)} ms  "
                      f"{a.turns}-turn chat TTFT median {ms(turns)} ms  errors {len(e1) + len(e2)}"
                      + (f" ({(e1 + e2)[0][:120]})" if e1 + e2 else ""), flush=True)
        for name, res in results.items():
            res["shared_ms"] = ms(statistics.median(x for x in res["shared"] if x is not None))
            res["turns_ms"] = ms(statistics.median(x for x in res["turns"] if x is not None))
            print(f"{name:30s} median over {a.rounds} rounds: shared-prefix TTFT {res['shared_ms']} ms, "
                  f"chat-turn TTFT {res['turns_ms']} ms, errors {res['errors']}", flush=True)
        on, off = results["ferrite"], results["ferrite --prefix-cache-mib 0"]
        print(f"cache on / off TTFT ratio: shared prefix {off['shared_ms'] / on['shared_ms']:.2f}x faster, "
              f"chat turns {off['turns_ms'] / on['turns_ms']:.2f}x faster", flush=True)
        return results
    finally:
        for _, proc in procs.values():
            stop(proc)


def ms(x):
    return None if x is None else round(x * 1000, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferrite", default="target/release/ferrite")
    ap.add_argument("--llama-server", default=str(common.LLAMA_BIN / "llama-server"))
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
    ap.add_argument("--ferrite-args", default="",
                    help="extra ferrite serve arguments, e.g. '--lookup' (speculative decoding)")
    ap.add_argument("--ban-tokens", default="0,2",
                    help="token ids given logit bias -100 in every request so that every reply runs "
                         "max_tokens (default: SmolLM2's <|endoftext|> and <|im_end|>)")
    ap.add_argument("--prefix", action="store_true",
                    help="only the shared-prefix and multi-turn TTFT benchmark (see above)")
    ap.add_argument("--prefix-tokens", type=int, default=1500)
    ap.add_argument("--prefix-requests", type=int, default=8)
    ap.add_argument("--prefix-streams", type=int, default=1)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    BANNED.update({t: -100 for t in a.ban_tokens.split(",") if t})
    streams = [int(x) for x in a.streams.split(",")]
    print("command:", " ".join(sys.argv), flush=True)
    if a.prefix:
        res = prefix_bench(a, os.path.basename(a.model).removesuffix(".gguf"))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
        return
    results = {"ferrite": {}, "llama-server": {}, "embed": None}

    fport = free_port()
    fproc = start([a.ferrite, "serve", a.model, "minilm", "--port", str(fport), "-t", str(a.threads),
                   "--ctx", str(a.ctx_per_slot), "--max-seqs", str(max(streams))]
                  + a.ferrite_args.split())
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
