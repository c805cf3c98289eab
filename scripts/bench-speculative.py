#!/usr/bin/env python3
"""Speculative decoding, side by side: ferrite's plain decoding, ferrite
--lookup (and --draft FILE), and llama.cpp's llama-lookup (n-gram drafts)
at several draft lengths, on the committed workloads in bench/speculative/
(Qwen2.5 chat-formatted prompts: four input-grounded tasks and two open
ones), same file, same threads, greedy, alternating rounds; prints the
median tg of each and the ratios.

    python3 scripts/bench-speculative.py                       # qwen2.5-0.5b, 2 threads
    python3 scripts/bench-speculative.py --model F.gguf --draft D.gguf --threads 2 --rounds 3

ferrite's figure is `ferrite bench --lookup --json` (tg of the generated
tokens, prompt prefilled once, not timed; it checks that the text equals
plain decoding's); llama-lookup's is its own "decoded N tokens in S
seconds" line (the prompt not included). Stdlib only; the binaries come
from target/release (built here) and scripts/env.sh's llama.cpp build
(scripts/common.py reads its settings).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import common

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = REPO / "bench" / "speculative"
LLAMA_BIN = common.LLAMA_BIN


def model_path(name):
    p = Path(name)
    if p.exists():
        return p
    models = Path(os.environ.get("FERRITE_MODELS", REPO / "models"))
    hits = sorted(models.glob(f"*{name.replace('.', '*')}*.gguf"))
    if not hits:
        hits = sorted(models.glob("qwen2.5-coder-0.5b*.gguf"))
    if not hits:
        sys.exit(f"no model file for {name} in {models} (scripts/fetch-models.sh)")
    return hits[0]


def ferrite(binary, model, workload, n, threads, spec):
    """(plain t/s, speculative t/s, accepted/drafted) of one `bench` run."""
    cmd = [str(binary), "bench", str(model), "--prompt-file", str(workload),
           "-n", str(n), "-t", str(threads), "-r", "1", "--json"] + spec
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    j = json.loads(out.strip().splitlines()[-1])
    drafted = j["drafted_per_run"]
    rate = j["accepted_per_run"] / drafted if drafted else 0.0
    return j["tg_tok_s_plain"], j["tg_tok_s_spec"], rate


def llama_lookup(model, workload, n, threads, n_max):
    cmd = [str(LLAMA_BIN / "llama-lookup"), "-m", str(model), "-f", str(workload),
           "-n", str(n), "-t", str(threads), "--temp", "0", "-c", "8192",
           "--spec-draft-n-max", str(n_max)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    text = out.stdout + out.stderr
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", text)
    if out.returncode != 0 or not m:
        sys.exit(f"llama-lookup failed:\n{text[-2000:]}")
    drafted = int(re.search(r"n_drafted\s*=\s*(\d+)", text).group(1))
    accepted = int(re.search(r"n_accept\s*=\s*(\d+)", text).group(1))
    return int(m.group(1)) / float(m.group(2)), accepted / drafted if drafted else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--draft", help="also ferrite --draft FILE")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=128, help="tokens generated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lookup-n-max", default="3,8,16",
                    help="llama-lookup --spec-draft-n-max values (the best is taken)")
    ap.add_argument("--only", help="comma-separated workload names")
    args = ap.parse_args()
    model = model_path(args.model)
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "ferrite-cli"],
                   cwd=REPO, check=True)
    binary = REPO / "target/release/ferrite"
    names = sorted(p.stem for p in WORKLOADS.glob("*.txt"))
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    n_maxes = [int(v) for v in args.lookup_n_max.split(",")]
    print(f"model {model.name}, {args.threads} threads, tg{args.n}, {args.rounds} rounds; "
          f"CPU: {cpu_name()}")
    head = "| workload | ferrite plain | ferrite --lookup (acc.) |"
    if args.draft:
        head += " ferrite --draft (acc.) |"
    head += "".join(f" llama-lookup n_max={k} (acc.) |" for k in n_maxes)
    head += " lookup ÷ plain | lookup ÷ best llama |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name in names:
        w = WORKLOADS / f"{name}.txt"
        runs = {}
        for _ in range(args.rounds):
            p, s, a = ferrite(binary, model, w, args.n, args.threads, ["--lookup"])
            runs.setdefault("plain", []).append(p)
            runs.setdefault("lookup", []).append((s, a))
            if args.draft:
                _, s, a = ferrite(binary, model, w, args.n, args.threads,
                                  ["--draft", args.draft])
                runs.setdefault("draft", []).append((s, a))
            for k in n_maxes:
                runs.setdefault(k, []).append(llama_lookup(model, w, args.n, args.threads, k))
        med = {key: statistics.median(v if key == "plain" else [x[0] for x in v])
               for key, v in runs.items()}
        acc = {key: v[-1][1] for key, v in runs.items() if key != "plain"}
        row = f"| {name} | {med['plain']:.1f} | {med['lookup']:.1f} ({acc['lookup']:.0%}) |"
        if args.draft:
            row += f" {med['draft']:.1f} ({acc['draft']:.0%}) |"
        row += "".join(f" {med[k]:.1f} ({acc[k]:.0%}) |" for k in n_maxes)
        best = max(med[k] for k in n_maxes)
        row += f" {med['lookup'] / med['plain']:.2f}× | {med['lookup'] / best:.2f}× |"
        print(row, flush=True)


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
