#!/usr/bin/env python3
"""Does one client's constrained decoding slow the others? (issue 44, item 11)

Starts `ferrite serve` on one GGUF file, then measures the latency of a
small plain request (greedy, --small-tokens tokens) in two situations:

  alone       nothing else running;
  neighbours  --neighbours clients at the same time, each generating a
              JSON object under a schema whose one property is an `anyOf`
              of --members string constants (a large grammar, so the
              token mask is as expensive as it gets per step), back to back.

Each situation is measured --rounds times (alternating), the median is
reported, and their ratio. For reference the same neighbours are run
without a schema (plain generation of the same length): the ratio of
"neighbours with schemas" to "neighbours without" is the mask's own cost
to a neighbour; the rest is sharing two cores with 7 other sequences.

Standard library only:

    cargo build --release -p ferrite-cli
    python3 scripts/bench-constrained-neighbours.py \
        --model models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
"""

import argparse
import http.client
import json
import statistics
import subprocess
import threading
import time

import common


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {data[:200]!r}")
    return json.loads(data)


def schema(members):
    names = [f"option number {i} of the list" for i in range(members)]
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "pick",
            "schema": {
                "type": "object",
                "properties": {
                    "items": {
                        "type": "array",
                        "items": {"anyOf": [{"const": n} for n in names]},
                    }
                },
                "required": ["items"],
            },
        },
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ferrite", default=str(common.ROOT / "target/release/ferrite"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--neighbours", type=int, default=7)
    ap.add_argument("--members", type=int, default=128)
    ap.add_argument("--small-tokens", type=int, default=16)
    ap.add_argument("--neighbour-tokens", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    port = common.free_port()
    cmd = [args.ferrite, "serve", args.model, "--port", str(port), "-t", str(args.threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        common.wait_ready(port, "/ready", proc)
        small = {
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": args.small_tokens,
            "temperature": 0,
            "logit_bias": {},
        }
        post(port, small)  # warm-up

        def timed_small():
            t0 = time.perf_counter()
            post(port, small)
            return time.perf_counter() - t0

        def with_neighbours(constrained):
            stop = threading.Event()
            errors = []
            started = threading.Barrier(args.neighbours + 1)

            def neighbour():
                body = {
                    "messages": [{"role": "user", "content": "Pick many options, as a JSON list."}],
                    "max_tokens": args.neighbour_tokens,
                    "temperature": 0,
                }
                if constrained:
                    body["response_format"] = schema(args.members)
                first = True
                while not stop.is_set():
                    if first:
                        started.wait()
                        first = False
                    try:
                        post(port, body)
                    except Exception as e:  # noqa: BLE001 (report, keep going)
                        errors.append(str(e))
                        return

            threads = [threading.Thread(target=neighbour) for _ in range(args.neighbours)]
            for t in threads:
                t.start()
            started.wait()
            time.sleep(1.0)  # let them all be admitted and decoding
            t = timed_small()
            stop.set()
            for th in threads:
                th.join()
            if errors:
                raise RuntimeError(errors[0])
            return t

        alone, plain, constrained = [], [], []
        for _ in range(args.rounds):
            alone.append(timed_small())
            plain.append(with_neighbours(False))
            constrained.append(with_neighbours(True))
        med = statistics.median
        print("command:", " ".join(cmd))
        print(f"small request ({args.small_tokens} tokens), median of {args.rounds} rounds:")
        print(f"  alone                                  {med(alone):.3f} s")
        print(f"  {args.neighbours} plain neighbours                      {med(plain):.3f} s")
        print(f"  {args.neighbours} neighbours with a {args.members}-member anyOf  {med(constrained):.3f} s")
        print(f"  constrained / plain neighbours: {med(constrained) / med(plain):.2f}x")
        fmt = lambda xs: " ".join(f"{x:.3f}" for x in xs)  # noqa: E731
        print(f"  rounds: alone [{fmt(alone)}] plain [{fmt(plain)}] constrained [{fmt(constrained)}]")
        print(f"  constrained neighbours / alone: {med(constrained) / med(alone):.2f}x")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
