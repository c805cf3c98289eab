#!/usr/bin/env python3
"""`ferrite quantize` against llama.cpp's `llama-quantize`: the same F32 input,
the same file type and thread count, the two programs run alternately
(ROUNDS rounds), then the medians of wall time, user and system CPU time
and peak RSS, and the ratios llama.cpp / ferrite. The two outputs must be
the same bytes (checked after the first round).

    python3 scripts/bench-quantize.py                     # Qwen2.5-Coder-0.5B F32 -> Q4_K_M, 2 threads, 5 rounds
    python3 scripts/bench-quantize.py --type Q6_K --threads 1 --rounds 3
    python3 scripts/bench-quantize.py --input some-f32.gguf --ferrite path/to/ferrite

The default input is models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
dequantized to F32 once (`ferrite quantize --allow-requantize IN OUT F32`,
whose bytes are gguf-py's dequantization, as tests/quantize.rs checks on
SmolLM2), kept in --work (default: a directory under the system temporary
directory; 2.5 GB). The outputs are written there too, so the input and
outputs are on the same file system for both programs.

--ferrite: default target/release/ferrite (built with `cargo build
--release -p ferrite-cli` if missing). --llama-quantize: default
$FERRITE_LLAMACPP/build/bin/llama-quantize (made by
scripts/build-llamacpp.sh). Stdlib only.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("FERRITE_MODELS", ROOT / "models"))


def run(cmd, env=None):
    """Runs cmd; returns (wall s, user s, sys s, peak RSS MiB)."""
    start = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - start
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{err[-2000:]}")
    return wall, ru.ru_utime, ru.ru_stime, ru.ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", help="an F32 (or F16/BF16) GGUF file")
    ap.add_argument("--type", default="Q4_K_M")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "ferrite-bench-quantize"))
    ap.add_argument("--ferrite", default=str(ROOT / "target/release/ferrite"))
    ap.add_argument("--llama-quantize", default=str(common.LLAMA_BIN / "llama-quantize"))
    a = ap.parse_args()

    ferrite = Path(a.ferrite)
    if not ferrite.exists():
        subprocess.run(["cargo", "build", "--release", "-p", "ferrite-cli"], cwd=ROOT, check=True)
    lq = Path(a.llama_quantize)
    if not lq.exists():
        sys.exit(f"{lq} is missing (build llama.cpp: scripts/build-llamacpp.sh)")
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    if a.input:
        src = Path(a.input)
    else:
        src = work / "qwen2.5-coder-0.5b-instruct.f32.gguf"
        if not src.exists():
            q = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
            if not q.exists():
                sys.exit(f"{q} is missing: run scripts/fetch-models.sh")
            print(f"making {src} from {q} (once)", file=sys.stderr)
            subprocess.run([str(ferrite), "quantize", "--allow-requantize", str(q), str(src), "F32"],
                           check=True, stderr=subprocess.DEVNULL)
    fe_out, lq_out = work / f"ferrite.{a.type}.gguf", work / f"llama.{a.type}.gguf"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{lq.parent}:{env.get('LD_LIBRARY_PATH', '')}"
    cmds = {
        "ferrite": [str(ferrite), "quantize", str(src), str(fe_out), a.type, "-t", str(a.threads)],
        "llama.cpp": [str(lq), str(src), str(lq_out), a.type, str(a.threads)],
    }
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} logical CPUs; load average {os.getloadavg()[0]:.2f}")
    for name, c in cmds.items():
        print(f"{name}: {' '.join(c)}")
    results = {k: [] for k in cmds}
    for r in range(a.rounds):
        # Alternate which program goes first.
        order = list(cmds) if r % 2 == 0 else list(reversed(cmds))
        for name in order:
            results[name].append(run(cmds[name], env))
            w, u, s, m = results[name][-1]
            print(f"round {r + 1} {name:9}: {w:6.2f} s wall {u:6.2f} s user {s:5.2f} s sys {m:7.1f} MiB")
        if r == 0:
            same = common.sha256_file(fe_out) == common.sha256_file(lq_out)
            print(f"outputs {'identical' if same else 'DIFFER'}")
            if not same:
                sys.exit(1)
    med = {k: [statistics.median(x[i] for x in v) for i in range(4)] for k, v in results.items()}
    print(f"\nmedians of {a.rounds} ({a.type}, {a.threads} threads; load average now {os.getloadavg()[0]:.2f}):")
    for name, (w, u, s, m) in med.items():
        print(f"  {name:9}: {w:6.2f} s wall {u:6.2f} s user {s:5.2f} s sys {u + s:6.2f} s CPU {m:7.1f} MiB peak RSS")
    f, l = med["ferrite"], med["llama.cpp"]
    print(f"  llama.cpp / ferrite: wall {l[0] / f[0]:.2f}x, CPU (user+sys) {(l[1] + l[2]) / (f[1] + f[2]):.2f}x")
    fe_out.unlink(missing_ok=True)
    lq_out.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
