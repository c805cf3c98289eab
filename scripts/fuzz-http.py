#!/usr/bin/env python3
"""Bad-request check of `ferrite serve`: starts it on testdata's tiny Llama,
BERT and Marian models, sends damaged requests to the chat, completions,
embeddings and translations endpoints (fields deleted or given odd values
and types, unknown fields, bodies cut short, random bytes, invalid UTF-8),
and reports every 5xx answer but 503, every dropped connection, and a
server that dies. 4xx errors are the expected answers.

    python3 scripts/fuzz-http.py [--bin target/release/ferrite] [--requests 1500] [--seed 1]

Exit status 1 if any request failed. Standard library only.
"""
import argparse, json, pathlib, random, subprocess, sys, time, http.client
ROOT = pathlib.Path(__file__).resolve().parent.parent
ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "ferrite"))
ap.add_argument("--requests", type=int, default=1500)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--port", type=int, default=18940)
args = ap.parse_args()
PORT, N, SEED = args.port, args.requests, args.seed
T = ROOT / "testdata"
server = subprocess.Popen([args.bin, "serve", str(T / "hf-decoders/tiny-llama"), str(T / "embed/bert-tiny"),
                           str(T / "translation/tiny-marian"), "--port", str(PORT), "-t", "2"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(120):
    try:
        c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=2)
        c.request("GET", "/ready")
        if c.getresponse().status == 200:
            break
    except OSError:
        pass
    time.sleep(0.5)
else:
    server.kill()
    sys.exit("fuzz-http: the server did not become ready")
rng = random.Random(SEED)
BASE = {
    "/v1/chat/completions": {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    "/v1/completions": {"model": "tiny-llama", "prompt": "Once", "max_tokens": 4, "temperature": 0.5, "top_p": 0.9},
    "/v1/embeddings": {"model": "bert-tiny", "input": ["hello", "world"]},
    "/v1/translations": {"model": "tiny-marian", "input": "Hello there.", "beams": 2},
}
ODD = [None, -1, 0, 1, 2**31, 2**63, -2**63, 1e308, -1e308, float("nan"), "", "x" * 1000, [], {}, [[]], True,
       "\u0000", "\ud7ff", 0.5, -0.5, 100000, [1, 2, 3], [-5], ["a", None], {"a": 1}]
def mutate(v, depth=0):
    if isinstance(v, dict):
        v = dict(v)
        r = rng.random()
        if r < 0.2 and v: del v[rng.choice(list(v))]
        elif r < 0.35: v[rng.choice(["n", "stream", "stop", "seed", "logprobs", "top_k", "min_p", "presence_penalty",
                                     "frequency_penalty", "max_completion_tokens", "dimensions", "encoding_format",
                                     "max_length", "response_format", "tools", "user", "echo", "best_of"])] = rng.choice(ODD + [5, True, "base64"])
        elif v:
            k = rng.choice(list(v))
            v[k] = rng.choice(ODD) if rng.random() < 0.5 else mutate(v[k], depth + 1)
        return v
    if isinstance(v, list):
        v = list(v)
        if v and rng.random() < 0.5: v[rng.randrange(len(v))] = mutate(v[rng.randrange(len(v))], depth + 1)
        else: v.append(rng.choice(ODD))
        return v
    return rng.choice(ODD)
def body_bytes(path):
    r = rng.random()
    if r < 0.1: return bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
    b = json.dumps(mutate(BASE[path]), allow_nan=True).encode()
    if r < 0.2: b = b[: rng.randrange(len(b) + 1)]
    if r < 0.25: b = b.replace(b"hi", b"\xff\xfe")
    return b
bad = 0
for i in range(N):
    path = rng.choice(list(BASE))
    b = body_bytes(path)
    try:
        c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
        c.request("POST", path, body=b, headers={"content-type": "application/json"})
        resp = c.getresponse(); data = resp.read()
        if resp.status >= 500 and resp.status != 503:
            bad += 1; print(f"[{i}] {path} {b[:300]!r} -> {resp.status} {data[:300]!r}", flush=True)
    except Exception as e:
        bad += 1; print(f"[{i}] {path} {b[:300]!r} -> EXC {e}", flush=True)
        try:
            http.client.HTTPConnection("127.0.0.1", PORT, timeout=5).request("GET", "/health")
        except Exception:
            print("server dead"); break
server.terminate()
server.wait(timeout=60)
print(f"done: {N} requests, {bad} bad")
sys.exit(1 if bad else 0)
