#!/usr/bin/env python3
"""A copy of the installed onnxruntime that runs its AVX2/FMA3 kernels on an AVX-512 CPU.

Why: onnxruntime's CPU kernels (MLAS) pick their code at run time from cpuid
and XCR0, and there is no switch to lower that choice (MLAS_PLATFORM's
constructor, onnxruntime/core/mlas/lib/platform.cpp, reads no environment
variable and no session option). To compare ferrite's AVX2 kernel set
(FERRITE_KERNELS=avx2) with onnxruntime's AVX2 code on an AVX-512 machine,
this script copies the onnxruntime package of the Python running it into a
cache directory and changes a few bytes of the copy's extension module so that
every AVX-512 test in it comes out false, as on a CPU (or an OS) without
AVX-512. The installed package is never modified; the copy is used by putting
its parent directory first on sys.path (scripts/bench-embed.sh --ort-avx2).

The patch is known only for the exact file it was written for (checked by
SHA-256, onnxruntime 1.32.0, cp311 manylinux_2_28 x86_64 wheel); any other
build is refused with a message, never patched blind. The four changes, found
with objdump in the stripped module (file offset = address in its text
segment), each first checked against the expected original bytes:

  mlas-avx-vnni  MLAS_PLATFORM: the AVX-VNNI (VEX) test's `je` becomes `jmp`,
                 so the u8s8 GEMM keeps its AVX2 kernel (Zen 2/3 have no
                 AVX-VNNI; the f32 models here do not use it either way).
  mlas-avx512    MLAS_PLATFORM: the 6-byte `je` into the AVX512F block (taken
                 when XCR0 has the opmask/ZMM state bits) becomes a 6-byte nop:
                 the f32 GEMM stays MlasGemmFloatKernelFma3, softmax/exp/GELU
                 etc. their Fma3/Avx2 kernels, NchwcBlockSize 8.
  cpuid-info     onnxruntime's CPUIDInfo: `and $0xe6, %r9d` (XCR0) becomes
                 `and $0x06`, so its AVX-512 state test (== 0xe6) fails and
                 HasAVX512f/Skylake/BF16 are false.
  cpuinfo        the bundled cpuinfo library: the `sete` recording "the OS
                 saves the AVX-512 registers" becomes a nop (the flag stays 0).

Usage (with the reference venv's Python, the one bench-embed.py runs in):

  PY=scripts/refenv python
  $PY scripts/ort-avx2.py                  # make the copy if missing; print the directory for sys.path
  $PY scripts/ort-avx2.py --compare ONNX   # outputs of the original and the patched copy on one ONNX model
  $PY scripts/ort-avx2.py --profile ONNX   # perf samples of both: share of time on instructions using zmm/ymm

--compare runs each onnxruntime in its own process on the same inputs
(fixed-seed token ids, 8 sequences of 16..128 tokens with padding) and prints
the largest absolute difference and the smallest cosine per token between the
two outputs. --profile runs each under `perf record` (cpu-clock, user space;
this VM has no hardware counters), maps every sample inside the extension
module to the instruction at that address (objdump) and counts the samples
whose instruction names a zmm or a ymm register.
"""

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import common

CACHE = common.REFERENCE / "ort-avx2"
MARKER = "FERRITE_ORT_AVX2.json"
MODULE = "onnxruntime_pybind11_state.cpython-311-x86_64-linux-gnu.so"

# SHA-256 of the original extension module -> (version, patches).
# Each patch: (name, file offset, original bytes, new bytes).
KNOWN = {
    "f31fb5f25aea85032805e0722c07a41443a23c8b612c7238dbea3cf67e9042ba": (
        "1.32.0",
        [
            ("mlas-avx-vnni", 0x1724623, "7438", "eb38"),
            ("mlas-avx512", 0x172466E, "0f8454010000", "660f1f440000"),
            ("cpuid-info", 0x17748D3, "4181e1e6000000", "4181e106000000"),
            ("cpuinfo", 0x1B71D03, "410f94c1", "0f1f4000"),
        ],
    ),
}


def installed_package():
    """The directory of the onnxruntime package this Python would import (without importing it)."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("ort-avx2: onnxruntime is not installed for this Python "
                 f"({sys.executable}); run it with the reference venv's Python")
    return pathlib.Path(list(spec.submodule_search_locations)[0])


def patch_bytes(data, patches):
    """The patched copy of `data`, or an error naming the first offset whose bytes differ."""
    out = bytearray(data)
    for name, off, old, new in patches:
        old, new = bytes.fromhex(old), bytes.fromhex(new)
        assert len(old) == len(new), name
        if bytes(out[off:off + len(old)]) != old:
            return None, f"{name}: expected {old.hex()} at {off:#x}, found {bytes(out[off:off + len(old)]).hex()}"
        out[off:off + len(old)] = new
    return bytes(out), None


def make_copy(out_root, force=False):
    """Make (or reuse) the patched copy; return the directory to put first on sys.path."""
    src = installed_package()
    so = src / "capi" / MODULE
    if not so.is_file():
        sys.exit(f"ort-avx2: {so} does not exist: this onnxruntime build is not the one the patch was written for "
                 "(CPython 3.11, Linux x86_64)")
    digest = common.sha256_file(so)
    if digest not in KNOWN:
        version = importlib.metadata.version("onnxruntime")
        sys.exit(f"ort-avx2: onnxruntime {version} at {src} has an extension module with SHA-256 {digest}; "
                 "the patch offsets are known only for "
                 + ", ".join(f"{v} ({h[:16]}…)" for h, (v, _) in KNOWN.items())
                 + ". Refusing to patch an unknown build.")
    version, patches = KNOWN[digest]
    dest = out_root / f"onnxruntime-{version}-{digest[:12]}"
    marker = dest / "onnxruntime" / MARKER
    if marker.is_file() and not force:
        info = json.loads(marker.read_text())
        if common.sha256_file(dest / "onnxruntime" / "capi" / MODULE) == info["patched_sha256"]:
            return dest
        print(f"ort-avx2: {dest} is damaged; making it again", file=sys.stderr)
    data, err = patch_bytes(so.read_bytes(), patches)
    if err:
        sys.exit(f"ort-avx2: {so}: {err}")
    out_root.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=".tmp-", dir=out_root))
    shutil.copytree(src, tmp / "onnxruntime", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp / "onnxruntime" / "capi" / MODULE).write_bytes(data)
    info = {
        "what": "onnxruntime copy whose MLAS/CPUIDInfo/cpuinfo AVX-512 (and MLAS AVX-VNNI) tests are patched "
                "to false; made by scripts/ort-avx2.py",
        "version": version, "source": str(src), "original_sha256": digest,
        "patched_sha256": hashlib.sha256(data).hexdigest(),
        "patches": [{"name": n, "offset": hex(o), "old": a, "new": b} for n, o, a, b in patches],
    }
    (tmp / "onnxruntime" / MARKER).write_text(json.dumps(info, indent=1) + "\n")
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    return dest


def ort_cmd(path_dir, code):
    """A command running `code` with the original onnxruntime (path_dir None) or the copy in path_dir."""
    prefix = "" if path_dir is None else f"import sys; sys.path.insert(0, {str(path_dir)!r}); "
    return [sys.executable, "-c", prefix + code]


RUN_CODE = r"""
import sys, numpy as np, onnxruntime as ort
onnx, out, threads, loops = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(1234)
lens = [128, 100, 77, 64, 50, 33, 20, 16]
ids = np.zeros((len(lens), 128), dtype=np.int64)
mask = np.zeros_like(ids)
for i, n in enumerate(lens):
    ids[i, 0], ids[i, 1:n - 1], ids[i, n - 1] = 101, rng.integers(1000, 20000, n - 2), 102
    mask[i, :n] = 1
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
so.intra_op_num_threads = threads
so.inter_op_num_threads = 1
sess = ort.InferenceSession(onnx, so, providers=["CPUExecutionProvider"])
feeds = {i.name: (ids if i.name == "input_ids" else mask if i.name == "attention_mask" else np.zeros_like(ids))
         for i in sess.get_inputs()}
for _ in range(loops):
    (h,) = sess.run([sess.get_outputs()[0].name], feeds)
np.save(out, h * mask[:, :, None])
print(ort.__file__, file=sys.stderr)
"""


def compare(onnx, copy_dir):
    import numpy as np

    with tempfile.TemporaryDirectory() as td:
        outs = {}
        for label, d in (("original", None), ("avx2 copy", copy_dir)):
            out = pathlib.Path(td) / f"{label.replace(' ', '_')}.npy"
            p = subprocess.run(ort_cmd(d, RUN_CODE) + [str(onnx), str(out), "1", "1"],
                               capture_output=True, text=True)
            if p.returncode:
                sys.exit(f"ort-avx2: the {label} run failed:\n{p.stderr}")
            print(f"{label}: onnxruntime from {p.stderr.strip().splitlines()[-1]}")
            outs[label] = np.load(out).astype(np.float64)
    a, b = outs["original"], outs["avx2 copy"]
    a2, b2 = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    keep = np.linalg.norm(a2, axis=1) > 0  # padded positions are zeroed
    a2, b2 = a2[keep], b2[keep]
    cos = (a2 * b2).sum(1) / (np.linalg.norm(a2, axis=1) * np.linalg.norm(b2, axis=1))
    diff = np.abs(a2 - b2)
    print(f"{onnx}: {a2.shape[0]} token vectors of {a2.shape[1]}; identical bits: {bool((a == b).all())}; "
          f"max |diff| {diff.max():.3e} (max |value| {np.abs(a2).max():.3f}); "
          f"min cosine {cos.min():.12f} (1 - min {1 - cos.min():.1e}), mean {cos.mean():.12f}")


def profile(onnx, copy_dir, loops):
    if shutil.which("perf") is None or shutil.which("objdump") is None:
        sys.exit("ort-avx2: --profile needs perf and objdump")
    with tempfile.TemporaryDirectory() as td:
        for label, d in (("original", None), ("avx2 copy", copy_dir)):
            so = (installed_package() if d is None else d / "onnxruntime") / "capi" / MODULE
            data = pathlib.Path(td) / "perf.data"
            cmd = ["perf", "record", "-q", "-e", "cpu-clock:u", "-F", "2000", "-o", str(data), "--"] + \
                ort_cmd(d, RUN_CODE) + [str(onnx), str(pathlib.Path(td) / "out.npy"), "1", str(loops)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode:
                sys.exit(f"ort-avx2: perf record failed:\n{p.stderr}")
            script = subprocess.run(["perf", "script", "-i", str(data), "-F", "ip,dso", "--show-mmap-events"],
                                    capture_output=True, text=True, check=True).stdout
            total, in_so, addrs, maps = 0, 0, {}, []
            for line in script.splitlines():
                # The module's executable mapping: [start(length) @ file offset ...]: r-xp path
                m = re.search(r"PERF_RECORD_MMAP2? .*\[(0x[0-9a-f]+)\((0x[0-9a-f]+)\) @ (0x[0-9a-f]+) .*\]: r-xp (\S+)$",
                              line)
                if m:
                    if pathlib.Path(m.group(4)).name == MODULE:
                        maps.append(tuple(int(m.group(i), 16) for i in (1, 2, 3)))
                    continue
                m = re.match(r"\s*([0-9a-f]+)\s+\((.*)\)\s*$", line)
                if not m:
                    continue
                total += 1
                ip = int(m.group(1), 16)
                for start, length, pgoff in maps:
                    if start <= ip < start + length:
                        in_so += 1
                        # file offset, which is the address objdump prints (text segment at vaddr == offset)
                        off = ip - start + pgoff
                        addrs[off] = addrs.get(off, 0) + 1
                        break
            insn = disassemble(so, sorted(addrs))
            zmm = sum(n for a, n in addrs.items() if "%zmm" in insn.get(a, ""))
            ymm = sum(n for a, n in addrs.items() if "%ymm" in insn.get(a, ""))
            unknown = sum(n for a, n in addrs.items() if a not in insn)
            print(f"{label}: {so}")
            print(f"  {total} samples, {in_so} in the extension module; of those on instructions using "
                  f"zmm: {zmm} ({100 * zmm / max(in_so, 1):.1f}%), ymm: {ymm} ({100 * ymm / max(in_so, 1):.1f}%)"
                  + (f", not decoded: {unknown}" if unknown else ""))
            top = sorted(addrs.items(), key=lambda x: -x[1])[:5]
            for a, n in top:
                print(f"    {a:#x} {n:5d}  {insn.get(a, '?')}")


def disassemble(so, addrs):
    """{address: instruction text} for the given addresses of `so` (one objdump per distinct 4 KiB page)."""
    out = {}
    pages = sorted({a & ~0xFFF for a in addrs})
    for page in pages:
        text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={page:#x}",
                               f"--stop-address={page + 0x1000 + 16:#x}", str(so)],
                              capture_output=True, text=True).stdout
        for line in text.splitlines():
            m = re.match(r"\s*([0-9a-f]+):\s+(.*)$", line)
            if m:
                out.setdefault(int(m.group(1), 16), m.group(2).strip())
    return {a: out[a] for a in addrs if a in out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=pathlib.Path, default=CACHE, help=f"cache directory (default {CACHE})")
    ap.add_argument("--force", action="store_true", help="make the copy again even if it exists")
    ap.add_argument("--compare", metavar="ONNX", type=pathlib.Path,
                    help="compare the outputs of the original and the patched onnxruntime on this model")
    ap.add_argument("--profile", metavar="ONNX", type=pathlib.Path,
                    help="perf-sample both on this model; share of samples on zmm/ymm instructions")
    ap.add_argument("--loops", type=int, default=20, help="--profile: session runs per engine (default 20)")
    a = ap.parse_args()
    dest = make_copy(a.out, a.force)
    if a.compare:
        compare(a.compare, dest)
    if a.profile:
        profile(a.profile, dest, a.loops)
    if not (a.compare or a.profile):
        print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
