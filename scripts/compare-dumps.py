#!/usr/bin/env python3
"""Compare two tensor dumps and name the first tensor where they diverge.

A dump is what `ferrite run|embed|translate --dump DIR` writes: one
`NAME.stepN.npy` per named intermediate of each forward pass (f32, shape
(rows, cols), one row per token), NAME as llama.cpp's graph callback names
the tensor (`attn_norm-3`, `Qcur-3`, `ffn_out-3`, `result_output`, ...).

    python scripts/compare-dumps.py A B [--atol 1e-4] [--all]

A and B are each one of:
  - a ferrite dump directory;
  - a directory of `.npy` files written by anything else (a numpy
    re-implementation, a patched llama.cpp): names may be ferrite's /
    llama.cpp's (`attn_norm-3`) or GGUF-style (`blk.3.attn_norm`); a file
    without `.stepN` is step 0;
  - the text llama.cpp's `llama-eval-callback` prints (a `.txt`/`.log`
    file): it prints only a few values of each tensor and their sum, so
    only the sums are compared (relative difference), pass by pass (a
    pass starts at each `inp_embd`), the last print of a name in a pass
    winning (llama.cpp reuses `Qcur-3` for the projection, the norm and
    the rotation).

llama.cpp keeps only the output rows after its last layer's attention;
when one side has fewer rows, its rows are compared with the other's
last ones.

Tensors are compared in pass order (step, then encoder before decoder,
then layer, then their order within a layer). Prints one line per tensor
(or only the divergent ones without --all) and exits 1 if any differs by
more than --atol (--rtol for sums).
"""
import argparse
import os
import re
import sys

import numpy as np

# Order of the points within a layer (unknown names sort after these).
POINT_ORDER = [
    "inp_embd", "inp_norm",
    "attn_norm", "Qcur", "Kcur", "Vcur", "kqv_out", "attn_out", "attn_post_norm",
    "cross_inp", "attn_norm_cross", "kqv_out_cross", "cross_attn_out",
    "ffn_inp", "ffn_norm", "ffn_out", "ffn_post_norm", "l_out",
    "result_norm", "result_output",
]

FILE_RE = re.compile(r"^(?P<name>.+?)(?:\.step(?P<step>\d+))?\.npy$")
LLAMA_NAME_RE = re.compile(r"^(?P<point>.+)-(?P<layer>\d+)$")
GGUF_NAME_RE = re.compile(r"^(?P<prefix>enc\.)?blk\.(?P<layer>\d+)\.(?P<point>.+)$")


def canonical(name):
    """ferrite's / llama.cpp's name for a GGUF-style one (`blk.3.x` -> `x-3`)."""
    m = GGUF_NAME_RE.match(name)
    if m:
        return f"{m['prefix'] or ''}{m['point']}-{m['layer']}"
    return name


def order_key(key):
    """Pass order of (step, name)."""
    step, name = key
    enc = name.startswith("enc.")
    base = name[4:] if enc else name
    m = LLAMA_NAME_RE.match(base)
    if m:
        point, layer = m["point"], int(m["layer"])
    else:
        point = base
        layer = 1 << 30 if base.startswith("result") else -1
    rank = POINT_ORDER.index(point) if point in POINT_ORDER else len(POINT_ORDER)
    return (step, 0 if enc else 1, layer, rank, name)


def load_dir(path):
    """{(step, name): array} of a directory of .npy files."""
    out = {}
    for f in os.listdir(path):
        m = FILE_RE.match(f)
        if not m:
            continue
        step = int(m["step"] or 0)
        a = np.load(os.path.join(path, f)).astype(np.float32)
        if a.ndim == 1:
            a = a[None, :]
        out[(step, canonical(m["name"]))] = a.reshape(a.shape[0], -1)
    return out


HEADER_RE = re.compile(r"ggml_debug:\s+(?P<name>\S+(?: \([^)]*\))?) = \((?P<type>\w+)\)")
SUM_RE = re.compile(r"^\s*sum\s*=\s*(?P<sum>[-+0-9.eEinfa]+)")
SHAPE_RE = re.compile(r"= \{(?P<ne>[0-9, ]+)\}\s*$")


def load_eval_callback(path):
    """{(step, name): (rows, sum)} from llama-eval-callback's output."""
    out = {}
    step, current = -1, None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            h = HEADER_RE.search(line)
            if h:
                name = h["name"]
                if " (" in name:  # views, reshapes, permutes: not a named point
                    current = None
                    continue
                if name == "inp_embd":
                    step += 1
                shape = SHAPE_RE.search(line)
                ne = [int(x) for x in shape["ne"].split(",")] if shape else [0, 0]
                # ggml's ne[0] is the row length; the rest are rows.
                rows = int(np.prod(ne[1:])) if len(ne) > 1 else 1
                current = (max(step, 0), canonical(name), rows)
                continue
            s = SUM_RE.match(line)
            if s and current:
                step_, name, rows = current
                out[(step_, name)] = (rows, float(s["sum"]))
                current = None
    return out


def align(a, b):
    """The rows both have: the last rows of the longer one."""
    n = min(a.shape[0], b.shape[0])
    return a[a.shape[0] - n:], b[b.shape[0] - n:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a", help="a dump directory")
    ap.add_argument("b", help="a dump directory, or llama-eval-callback output (.txt/.log)")
    ap.add_argument("--atol", type=float, default=1e-4, help="largest allowed |a - b|")
    ap.add_argument("--rtol", type=float, default=1e-3,
                    help="largest allowed relative difference of sums (eval-callback text)")
    ap.add_argument("--all", action="store_true", help="print every tensor, not only divergent ones")
    args = ap.parse_args()

    a = load_dir(args.a)
    text_b = os.path.isfile(args.b)
    b = load_eval_callback(args.b) if text_b else load_dir(args.b)
    common = sorted(set(a) & set(b), key=order_key)
    if not common:
        sys.exit(f"no tensor names in common ({len(a)} in {args.a}, {len(b)} in {args.b})")
    first = None
    for key in common:
        step, name = key
        x = a[key]
        if text_b:
            rows, total = b[key]
            x = x[max(0, x.shape[0] - rows):]
            mine = float(x.astype(np.float64).sum())
            diff = abs(mine - total) / max(abs(total), 1e-6)
            bad = diff > args.rtol
            what = f"sum {mine:.6g} vs {total:.6g}, relative diff {diff:.3e}"
        else:
            x, y = align(x, b[key])
            if x.shape != y.shape:
                bad, diff = True, float("inf")
                what = f"shapes {x.shape} vs {y.shape}"
            else:
                d = np.abs(x.astype(np.float64) - y.astype(np.float64))
                diff = float(d.max()) if d.size else 0.0
                bad = not diff <= args.atol
                at = np.unravel_index(int(d.argmax()), d.shape) if d.size else ()
                what = f"max |a-b| {diff:.3e} at {tuple(int(i) for i in at)}, rows {x.shape[0]}"
        if bad and first is None:
            first = key
        if bad or args.all:
            print(f"{'DIFF' if bad else 'ok  '} step {step:3d} {name:24s} {what}")
    only_a = len(set(a) - set(b))
    only_b = len(set(b) - set(a))
    print(f"{len(common)} tensors compared ({only_a} only in A, {only_b} only in B)")
    if first is None:
        print("no divergence")
        return 0
    print(f"first divergence: {first[1]} at step {first[0]}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
