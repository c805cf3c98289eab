#!/usr/bin/env python3
"""Corrupt-file check: copies a small model directory of testdata/ (Marian,
T5, Llama, Qwen2, BERT), damages one of its files (JSON values deleted or
replaced by odd ones, bytes flipped, the file cut short), runs ferrite on
it, and reports every run that panicked (exit 101), died of a signal or
took over 30 s. A clear error (exit 1) is the expected answer.

    python3 scripts/fuzz-files.py [--bin target/release/ferrite] [--runs 200] [--seed 1]

Each failure's directory is kept under ferrite-fuzz-files/ in the
temporary directory ($TMPDIR) to
reproduce it. Exit status 1 if any run failed. Standard library only.
"""
import argparse, json, random, shutil, subprocess, sys, tempfile, pathlib
ROOT = pathlib.Path(__file__).resolve().parent.parent
ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "ferrite"))
ap.add_argument("--runs", type=int, default=200)
ap.add_argument("--seed", type=int, default=1)
args = ap.parse_args()
BIN, N, SEED = args.bin, args.runs, args.seed
T = ROOT / "testdata"
CASES = [
    (T / "translation/tiny-marian", lambda d: [BIN, "translate", d, "-"], "Hello there.\n"),
    (T / "translation/tiny-t5", lambda d: [BIN, "translate", d, "-"], "translate English to German: Hello.\n"),
    (T / "hf-decoders/tiny-llama", lambda d: [BIN, "run", d, "-p", "Once upon", "-n", "4", "--temp", "0"], None),
    (T / "hf-decoders/tiny-qwen2", lambda d: [BIN, "run", d, "-p", "Hi", "-n", "4", "--temp", "0"], None),
    (T / "embed/bert-tiny", lambda d: [BIN, "embed", d], "hello world\n"),
]
rng = random.Random(SEED)

def mutate_json(v):
    if isinstance(v, dict) and v:
        k = rng.choice(list(v))
        r = rng.random()
        if r < 0.25: del v[k]
        elif r < 0.5: v[k] = rng.choice([0, -1, 2**63, 1e308, "x", None, [], {}, 3.5, True, 10**6])
        else: v[k] = mutate_json(v[k])
    elif isinstance(v, list) and v:
        i = rng.randrange(len(v))
        r = rng.random()
        if r < 0.3: del v[i]
        elif r < 0.6: v[i] = rng.choice([0, -1, 2**40, "", None, "\u0000", 1e30])
        else: v[i] = mutate_json(v[i])
    elif isinstance(v, int) and not isinstance(v, bool):
        return rng.choice([0, -1, v * 1000, v + 1, 2**32, 2**63 - 1])
    return v

def mutate(path):
    data = path.read_bytes()
    if path.suffix == ".json" and rng.random() < 0.7:
        try:
            v = json.loads(data)
            for _ in range(rng.randint(1, 3)):
                v = mutate_json(v)
            path.write_text(json.dumps(v))
            return "json"
        except Exception:
            pass
    r = rng.random()
    b = bytearray(data)
    if r < 0.3 and len(b) > 1:
        cut = rng.randrange(len(b)); path.write_bytes(bytes(b[:cut])); return f"truncate@{cut}"
    head = min(len(b), 4096 if rng.random() < 0.7 else len(b))
    for _ in range(rng.randint(1, 8)):
        if head: b[rng.randrange(head)] = rng.randrange(256)
    path.write_bytes(bytes(b)); return "flip"

bad = 0
for it in range(N):
    src, cmd, stdin = rng.choice(CASES)
    with tempfile.TemporaryDirectory(prefix="fz") as td:
        d = pathlib.Path(td) / src.name
        shutil.copytree(src, d)
        files = [f for f in d.iterdir() if f.is_file()]
        f = rng.choice(files)
        how = mutate(f)
        try:
            p = subprocess.run(cmd(str(d)), input=stdin, capture_output=True, text=True, timeout=30,
                               errors="replace")
            rc = p.returncode
            err = p.stderr[-600:]
        except subprocess.TimeoutExpired:
            rc, err = "TIMEOUT", ""
        if rc == 101 or rc == "TIMEOUT" or (isinstance(rc, int) and rc < 0):
            bad += 1
            keep = pathlib.Path(tempfile.gettempdir()) / "ferrite-fuzz-files" / ("seed%d-run%d" % (SEED, it))
            shutil.copytree(d, keep / src.name)
            print(f"[{it}] {src.name} {f.name} {how}: rc={rc}\n{err}\n-> {keep}", flush=True)
print(f"done: {N} runs, {bad} bad")
sys.exit(1 if bad else 0)
