#!/usr/bin/env python3
"""Tiny llama2.c checkpoints and tokenizer, with greedy goldens from llama2.c's
own C programs (karpathy/llama2.c run.c for f32, runq.c for Q8_0).

What it makes, under testdata/llama2c/ (all numbers little-endian):

  tokenizer.bin        a 512-piece vocabulary in llama2.c's tokenizer.bin format
  v0-shared.bin        model A, legacy (v0) header, classifier shared with the
                       token embedding (positive vocab_size in the header)
  v0-unshared.bin      model B, legacy header, own classifier (negative
                       vocab_size in the header, wcls stored last)
  v1.bin               model A again (bit-identical tensors), "ak42" version 1
                       (f32) as export.py's version1_export writes it
  v2-q8.bin            model B, "ak42" version 2 (Q8_0), group size 64 (the
                       default of export.py's version2_export)
  v2-q8-gs32.bin       model A, version 2, group size 32 (so that a reader
                       must take the group size from the header)
  goldens.json         greedy generations (temperature 0) of run.c / runq.c
                       for every checkpoint and prompt; see "goldens.json"
                       below

Models: dim 64, hidden_dim 192, 2 layers, 4 query heads, seq_len 128,
vocab 512; model A has 2 KV heads (grouped-query attention), model B has 4.
Weights are normal random numbers from numpy (fixed seeds, see make_model).

Run:
    scripts/refenv python scripts/make-llama2c-fixtures.py LLAMA2C

LLAMA2C is a copy of https://github.com/karpathy/llama2.c: either a git
directory (e.g. a bare clone, `git clone --bare`; files are read from its HEAD with `git show`), a work
tree of it, or any directory that holds run.c and runq.c (then pass
--commit HASH to record where they came from). Nothing of llama2.c is copied
into this repository: run.c and runq.c are compiled at run time in a temporary
directory with `gcc -O2 -o X X.c -lm` (no -Ofast, no OpenMP, plain x86-64 SSE
arithmetic without FMA contraction, glibc's expf/powf/cosf/sinf). Only numpy is
needed on the Python side.

How token ids are obtained: run.c prints decoded text, not ids. The script
compiles each program twice: unchanged, and a copy patched at run time by
exact string insertions (each anchor must occur exactly once) into
generate(): after encode() it prints the prompt ids to stderr, and after each
sampling step it prints (position, input token, next token, whether it was
forced by the prompt, the top-2 ids and their logits as %.9g), and the full
logit vector of the first sampled step. The patch only adds fprintf(stderr)
and reads; the script checks that both builds print the same stdout, that
each sampled id is the argmax the patch saw, and that decoding the ids with
run.c's decode()/safe_printf() rules (reimplemented here) gives exactly the
printed stdout.

run.c at this commit reads only the legacy (v0) format, and runq.c only
version 2, so v1.bin's goldens are run.c's outputs on v0-shared.bin, which
holds the very same f32 tensors (the runs for v1.bin say so with
"reference_checkpoint": "v0-shared.bin").

Binary layouts written here (matrices are PyTorch Linear weights: row-major
(out_features, in_features); run.c computes out[i] = sum_j W[i*n + j] x[j]):

  config = 7 x int32: dim, hidden_dim, n_layers, n_heads, n_kv_heads,
           vocab_size, seq_len          (head_size = dim / n_heads,
                                         kv_dim = head_size * n_kv_heads)
  v0:  config (28 bytes; vocab_size < 0 means "classifier not shared"), then
       f32: tok_emb (vocab, dim), rms_att (L, dim), wq (L, dim, dim),
       wk (L, kv_dim, dim), wv (L, kv_dim, dim), wo (L, dim, dim),
       rms_ffn (L, dim), w1 (L, hidden, dim), w2 (L, dim, hidden),
       w3 (L, hidden, dim), rms_final (dim), freq_cis_real (seq_len,
       head_size/2), freq_cis_imag (seq_len, head_size/2), [wcls (vocab, dim)
       if not shared]. The two freq_cis arrays (cos / sin of t * 10000^(-2i /
       head_size), as model.py's precompute_freqs_cis) are skipped by run.c.
  v1:  header of 256 bytes: uint32 magic 0x616b3432 ("ak42"), int32 version 1,
       config (vocab_size positive), uint8 shared_classifier, zeros to 256;
       then f32: rms_att (L, dim), rms_ffn (L, dim), rms_final (dim),
       tok_emb, wq, wk, wv, wo, w1, w2, w3 (each all layers), [wcls].
  v2:  header of 256 bytes: magic, int32 version 2, config, uint8
       shared_classifier, int32 group_size (at byte offset 37, unaligned),
       zeros to 256; then f32 rms_att (L, dim), rms_ffn (L, dim), rms_final
       (dim); then the quantized tensors tok_emb, wq[0..L], wk[0..L],
       wv[0..L], wo[0..L], w1[0..L], w2[0..L], w3[0..L], [wcls], each one
       (each layer separately) stored as int8 q[numel] followed by f32
       scale[numel / group_size]; group g = elements g*GS .. g*GS+GS-1 of
       the flattened row-major tensor; value = q * scale. Quantization as
       export.py's quantize_q80: scale = max|w| / 127 (f32),
       q = round_half_even(w / scale).
  tokenizer.bin: int32 max_token_length (longest piece in bytes), then for
       every id: f32 score, int32 byte length, the bytes (no terminator).
       The vocabulary size is not stored (it is the model's).

goldens.json:
  {
    "llama2c_commit", "cc" (gcc --version, first line), "cflags", "libc",
    "machine", "steps" (the -n argument: positions run, prompt included),
    "temperature" (0.0),
    "tokenizer": {"file", "vocab_size", "max_token_length", "sha256",
                  "bos", "eos", "first_byte_token"},
    "checkpoints": {name: {"format" ("v0"|"v1"|"v2"), "model" ("A"|"B"),
                  "config": {dim, hidden_dim, n_layers, n_heads, n_kv_heads,
                  vocab_size, seq_len}, "shared_classifier", "group_size"
                  (v2 only, else null), "bytes", "sha256"}},
    "runs": [{"checkpoint", "reference_checkpoint" (the file the C program
              actually read), "program" ("run.c"|"runq.c"), "prompt",
              "prompt_tokens" (encode(): BOS=1, dummy-prefix " ", BPE),
              "generated_tokens" (ids sampled after the prompt; the prompt's
              last token is the first input of sampling),
              "stopped_on_bos" (run.c stops without printing when it
              samples BOS=1; that id is not in generated_tokens),
              "top2": [[id1, logit1, id2, logit2], ...] per generated token
              (logit1 - logit2 is the margin a reimplementation must
              respect), "stop_top2" (the same for the step that sampled
              BOS, else null), "first_logits" (all logits of the first
              sampled step; logits as the C program's f32, printed %.9g), "stdout" (exactly what the program printed, including
              its final "\\n")}]
  }
"""
import argparse
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

import common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "testdata", "llama2c")

VOCAB_SIZE = 512
STEPS = 40
MAGIC = 0x616B3432  # "ak42"

PROMPTS = [
    "",
    "Once",
    "The little cat sat on the warm mat and looked at the sky.",
    "In 1969, 3 men flew 384,400 km to the Moon!",
    "She said: \"Wait... why?\" (twice)",
    "caf\u00e9 in Z\u00fcrich",
    "one  two\nthree",
]

# Text the vocabulary is learned from. ASCII only, no '<' (so no merged
# piece can look like a byte token "<0x..>" or "<unk>"), no 'Q', 'X', 'Z' or
# newline (so prompts with those exercise run.c's byte fallback).
CORPUS = """
Once upon a time there was a little girl who lived in a small house near the
forest. Every morning she went out to look at the flowers and the trees, and
every evening she came back home to eat with her mother and her father. One
day she saw a little cat sitting on the path. The cat was very hungry, so the
girl gave it some of her bread. The cat was happy and followed her home. From
that day on, the girl and the cat were the best of friends. They played in
the garden, they ran in the sun, and when it rained they sat together by the
window and watched the water fall from the sky.
The old man in the village said that the forest was a place of wonder. He
told the children that there were many animals living there: birds, foxes,
rabbits and deer. He said that if you walked quietly you could hear them
talking to each other. The children laughed, but they wanted to see for
themselves. So one morning they went into the forest together, and they
walked for a long time. They saw a big brown bear, two small birds, and a
river with clean, cold water. It was the best day of their lives.
In 1969, three men flew to the Moon. The trip took about 3 days, and the
distance is about 384,400 km. People all over the world watched it on
television. It was one of the greatest things that humans have ever done,
and many children dreamed that one day they would also travel to the stars.
Numbers are everywhere: 1, 2, 3, 4, 5, 6, 7, 8, 9 and 10. A week has 7 days,
a year has 365 days, and a day has 24 hours. Can you count to 100? Yes, I
can! It is not hard; you just need to be patient (and a little bit brave).
"Where are you going?" asked the mother. "To the park," said the boy. "I
want to play with my friends, and then I will come back for dinner." The
mother smiled and said: "Be careful, and do not forget your coat!"
"""


# ---------------------------------------------------------------------------
# tokenizer


def learn_vocab():
    """Pieces and scores of a 512-piece llama2.c vocabulary.

    ids 0..2: "<unk>", "\\n<s>\\n", "\\n</s>\\n" (what tokenizer.py exports for
    SentencePiece's unk/bos/eos); ids 3..258: byte pieces "<0x00>".."<0xFF>"
    (run.c's byte fallback is id = byte + 3); then BPE merges learned from
    CORPUS, most frequent pair first, with scores 0, -1, -2, ... (run.c merges
    the adjacent pair whose concatenation has the highest score); then every
    single character of CORPUS (space included, needed by run.c for the
    dummy prefix) with scores -1000, -1001, ...  Like SentencePiece's Llama
    vocabulary, merges come before single characters. tokenizer.py replaces
    SentencePiece's "\u2581" by a plain space, so pieces hold plain spaces.
    """
    text = " ".join(CORPUS.split())
    assert "<" not in text
    chars = sorted(set(text))
    # words with their leading space, as SentencePiece sees " " + text
    words = {}
    for w in text.split(" "):
        key = tuple(" " + w)
        words[key] = words.get(key, 0) + 1
    n_merges = VOCAB_SIZE - 3 - 256 - len(chars)
    merges = []
    seen = set(chars)
    while len(merges) < n_merges:
        pairs = {}
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + n
        if not pairs:
            raise SystemExit("corpus too small for the vocabulary")
        best = min(pairs, key=lambda p: (-pairs[p], p))
        new = best[0] + best[1]
        if new not in seen:
            seen.add(new)
            merges.append(new)
        merged = {}
        for w, n in words.items():
            out = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(new)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        words = merged
    pieces = ["<unk>", "\n<s>\n", "\n</s>\n"]
    scores = [0.0, 0.0, 0.0]
    pieces += ["<0x%02X>" % b for b in range(256)]
    scores += [0.0] * 256
    pieces += merges
    scores += [-float(i) for i in range(len(merges))]
    pieces += chars
    scores += [-1000.0 - i for i in range(len(chars))]
    assert len(pieces) == VOCAB_SIZE and len(set(pieces)) == VOCAB_SIZE
    return pieces, scores


def write_tokenizer(path, pieces, scores):
    raw = [p.encode("utf-8") for p in pieces]
    max_len = max(len(b) for b in raw)
    with open(path, "wb") as f:
        f.write(struct.pack("<i", max_len))
        for b, s in zip(raw, scores):
            f.write(struct.pack("<fi", s, len(b)))
            f.write(b)
    return max_len


def decode_like_run_c(pieces, prev, tok):
    """run.c decode() followed by safe_printf(), as bytes."""
    piece = pieces[tok].encode("utf-8")
    if prev == 1 and piece[:1] == b" ":
        piece = piece[1:]
    m = re.match(rb"<0x([0-9A-Fa-f]{1,2})>", piece)
    if m:
        piece = bytes([int(m.group(1), 16)])
    if not piece:
        return b""
    if len(piece) == 1:
        c = piece[0]
        # C locale isprint / isspace
        if not (0x20 <= c <= 0x7E or c in (0x09, 0x0A, 0x0B, 0x0C, 0x0D)):
            return b""
    return piece


# ---------------------------------------------------------------------------
# models


def make_model(seed, n_kv_heads, shared):
    """Random f32 weights. Matrices ~ N(0, (gain / sqrt(in_features))^2) with
    gains large enough that the layers, not the residual copy of the input
    embedding, decide the next token; RMSNorm weights ~ 1 + N(0, 0.25^2)."""
    cfg = dict(dim=64, hidden_dim=192, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads,
               vocab_size=VOCAB_SIZE, seq_len=128)
    rng = np.random.default_rng(seed)
    d, h, L, V = cfg["dim"], cfg["hidden_dim"], cfg["n_layers"], cfg["vocab_size"]
    kv = d // cfg["n_heads"] * n_kv_heads

    def mat(rows, cols, gain):
        return (rng.standard_normal((rows, cols)) * (gain / np.sqrt(cols))).astype(np.float32)

    def norm():
        return (1.0 + 0.25 * rng.standard_normal(d)).astype(np.float32)

    W = {"tok_emb": rng.standard_normal((V, d)).astype(np.float32)}
    for name, f in [("rms_att", norm), ("wq", lambda: mat(d, d, 2.0)),
                    ("wk", lambda: mat(kv, d, 2.0)), ("wv", lambda: mat(kv, d, 1.5)),
                    ("wo", lambda: mat(d, d, 2.0)), ("rms_ffn", norm),
                    ("w1", lambda: mat(h, d, 1.5)), ("w2", lambda: mat(d, h, 2.5)),
                    ("w3", lambda: mat(h, d, 1.5))]:
        W[name] = [f() for _ in range(L)]
    W["rms_final"] = norm()
    W["wcls"] = None if shared else mat(V, d, 1.0 * np.sqrt(d))
    return cfg, W


def freq_cis(cfg):
    hs = cfg["dim"] // cfg["n_heads"]
    freqs = (1.0 / (10000.0 ** (np.arange(0, hs, 2, dtype=np.float32) / np.float32(hs)))).astype(np.float32)
    t = np.arange(cfg["seq_len"], dtype=np.float32)
    ang = np.outer(t, freqs).astype(np.float32)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def config_bytes(cfg, vocab_size):
    return struct.pack("<7i", cfg["dim"], cfg["hidden_dim"], cfg["n_layers"], cfg["n_heads"],
                       cfg["n_kv_heads"], vocab_size, cfg["seq_len"])


def f32(*arrays):
    return b"".join(np.ascontiguousarray(a, dtype="<f4").tobytes() for a in arrays)


def write_v0(path, cfg, W):
    shared = W["wcls"] is None
    cos, sin = freq_cis(cfg)
    with open(path, "wb") as f:
        f.write(config_bytes(cfg, cfg["vocab_size"] if shared else -cfg["vocab_size"]))
        f.write(f32(W["tok_emb"]))
        for name in ["rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3"]:
            f.write(f32(*W[name]))
        f.write(f32(W["rms_final"], cos, sin))
        if not shared:
            f.write(f32(W["wcls"]))


def header(cfg, version, shared, group_size=None):
    h = struct.pack("<Ii", MAGIC, version) + config_bytes(cfg, cfg["vocab_size"])
    h += struct.pack("<B", int(shared))
    if group_size is not None:
        h += struct.pack("<i", group_size)
    assert len(h) <= 256
    return h + b"\0" * (256 - len(h))


def write_v1(path, cfg, W):
    shared = W["wcls"] is None
    with open(path, "wb") as f:
        f.write(header(cfg, 1, shared))
        f.write(f32(*W["rms_att"], *W["rms_ffn"], W["rms_final"], W["tok_emb"]))
        for name in ["wq", "wk", "wv", "wo", "w1", "w2", "w3"]:
            f.write(f32(*W[name]))
        if not shared:
            f.write(f32(W["wcls"]))


def quantize_q80(w, gs):
    """export.py's quantize_q80 in numpy float32 (torch.round is half-to-even,
    like np.round)."""
    w = np.asarray(w, dtype=np.float32).reshape(-1, gs)
    wmax = np.abs(w).max(axis=1)
    scale = (wmax / np.float32(127.0)).astype(np.float32)
    assert (scale > 0).all()
    q = np.round(w / scale[:, None]).astype(np.int8)
    return q, scale


def write_v2(path, cfg, W, gs):
    shared = W["wcls"] is None
    tensors = [W["tok_emb"]]
    for name in ["wq", "wk", "wv", "wo", "w1", "w2", "w3"]:
        tensors += W[name]
    if not shared:
        tensors.append(W["wcls"])
    with open(path, "wb") as f:
        f.write(header(cfg, 2, shared, gs))
        f.write(f32(*W["rms_att"], *W["rms_ffn"], W["rms_final"]))
        for t in tensors:
            assert t.shape[-1] % gs == 0
            q, s = quantize_q80(t, gs)
            f.write(q.tobytes())
            f.write(f32(s))


# ---------------------------------------------------------------------------
# llama2.c's C programs

PATCH_ENCODE = "    encode(tokenizer, prompt, 1, 0, prompt_tokens, &num_prompt_tokens);\n"
PATCH_ENCODE_ADD = r"""    fprintf(stderr, "FERRITE_PROMPT");
    for (int fi = 0; fi < num_prompt_tokens; fi++) { fprintf(stderr, " %d", prompt_tokens[fi]); }
    fprintf(stderr, "\n");
    int ferrite_first = 1;
"""
PATCH_STEP = "        pos++;\n\n        // data-dependent terminating condition"
PATCH_STEP_ADD = r"""        {
            int forced = pos - 1 < num_prompt_tokens - 1;
            int n = transformer->config.vocab_size;
            int b1 = 0;
            for (int fi = 1; fi < n; fi++) { if (logits[fi] > logits[b1]) b1 = fi; }
            int b2 = b1 == 0 ? 1 : 0;
            for (int fi = 0; fi < n; fi++) { if (fi != b1 && logits[fi] > logits[b2]) b2 = fi; }
            fprintf(stderr, "FERRITE_STEP %d %d %d %d %d %.9g %d %.9g\n", pos - 1, token, next,
                    forced, b1, logits[b1], b2, logits[b2]);
            if (!forced && ferrite_first) {
                ferrite_first = 0;
                fprintf(stderr, "FERRITE_LOGITS");
                for (int fi = 0; fi < n; fi++) { fprintf(stderr, " %.9g", logits[fi]); }
                fprintf(stderr, "\n");
            }
        }
"""


def patch(src):
    for anchor in (PATCH_ENCODE, PATCH_STEP):
        if src.count(anchor) != 1:
            raise SystemExit("patch anchor not found exactly once: %r" % anchor)
    src = src.replace(PATCH_ENCODE, PATCH_ENCODE + PATCH_ENCODE_ADD)
    head, tail = PATCH_STEP.split("\n\n", 1)
    return src.replace(PATCH_STEP, head + "\n" + PATCH_STEP_ADD + "\n" + tail)


def load_sources(where, commit):
    names = ["run.c", "runq.c"]
    if os.path.isfile(os.path.join(where, "run.c")):
        srcs = {n: open(os.path.join(where, n)).read() for n in names}
        if commit is None:
            r = subprocess.run(["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True)
            commit = r.stdout.strip() if r.returncode == 0 else "unknown"
        return srcs, commit
    git = ["git", "--git-dir", where]
    srcs = {n: subprocess.run(git + ["show", "HEAD:" + n], check=True, capture_output=True,
                              text=True).stdout for n in names}
    head = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    if commit is not None and commit != head:
        raise SystemExit("--commit %s but HEAD is %s" % (commit, head))
    return srcs, head


CFLAGS = ["-O2"]


def compile_all(srcs, tmp):
    bins = {}
    for name, src in srcs.items():
        for variant, text in (("plain", src), ("ids", patch(src))):
            stem = name[:-2] + ("" if variant == "plain" else "-ids")
            with open(os.path.join(tmp, stem + ".c"), "w") as f:
                f.write(text)
            exe = os.path.join(tmp, stem)
            subprocess.run(["gcc", *CFLAGS, "-o", exe, stem + ".c", "-lm"], cwd=tmp, check=True)
            bins[(name, variant)] = exe
    return bins


def run_one(bins, program, ckpt, tok, prompt, pieces):
    args = lambda exe: [exe, ckpt, "-z", tok, "-t", "0.0", "-n", str(STEPS), "-s", "1", "-i", prompt]
    plain = subprocess.run(args(bins[(program, "plain")]), capture_output=True, check=True)
    ids = subprocess.run(args(bins[(program, "ids")]), capture_output=True, check=True)
    assert plain.stdout == ids.stdout, (program, ckpt, prompt)
    prompt_tokens, steps, first_logits = None, [], None
    for line in ids.stderr.decode().splitlines():
        f = line.split()
        if not f:
            continue
        if f[0] == "FERRITE_PROMPT":
            prompt_tokens = [int(x) for x in f[1:]]
        elif f[0] == "FERRITE_STEP":
            steps.append(f[1:])
        elif f[0] == "FERRITE_LOGITS":
            first_logits = [float(x) for x in f[1:]]
    generated, top2, stopped, stop_top2 = [], [], False, None
    seq = list(prompt_tokens[:1])
    for pos, token, nxt, forced, b1, l1, b2, l2 in steps:
        pos, token, nxt, forced, b1, b2 = map(int, (pos, token, nxt, forced, b1, b2))
        assert token == seq[-1] and pos == len(seq) - 1
        if forced:
            assert nxt == prompt_tokens[pos + 1]
        else:
            assert nxt == b1, "sampled id is not the argmax"
            if nxt == 1:
                stopped = True
                stop_top2 = [b1, float(l1), b2, float(l2)]
                break
            generated.append(nxt)
            top2.append([b1, float(l1), b2, float(l2)])
        seq.append(nxt)
    assert stopped or len(seq) == STEPS + 1
    # what run.c prints: the decoded pieces of every next token, then "\n"
    text = b"".join(decode_like_run_c(pieces, a, b) for a, b in zip(seq, seq[1:])) + b"\n"
    assert text == plain.stdout, (text, plain.stdout)
    return dict(prompt=prompt, prompt_tokens=prompt_tokens, generated_tokens=generated,
                stopped_on_bos=stopped, top2=top2, stop_top2=stop_top2, first_logits=first_logits,
                stdout=plain.stdout.decode("utf-8"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("llama2c", help="llama2.c git dir, work tree, or directory with run.c and runq.c")
    ap.add_argument("--commit", help="llama2.c commit the sources come from (if not a git dir)")
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    srcs, commit = load_sources(a.llama2c, a.commit)

    pieces, scores = learn_vocab()
    tok_path = os.path.join(a.out, "tokenizer.bin")
    max_len = write_tokenizer(tok_path, pieces, scores)

    cfg_a, model_a = make_model(seed=20240601, n_kv_heads=2, shared=True)
    cfg_b, model_b = make_model(seed=20240602, n_kv_heads=4, shared=False)
    ckpts = {  # name: (format, model name, cfg, weights, group size, C program, file it reads)
        "v0-shared.bin": ("v0", "A", cfg_a, model_a, None, "run.c", "v0-shared.bin"),
        "v0-unshared.bin": ("v0", "B", cfg_b, model_b, None, "run.c", "v0-unshared.bin"),
        "v1.bin": ("v1", "A", cfg_a, model_a, None, "run.c", "v0-shared.bin"),
        "v2-q8.bin": ("v2", "B", cfg_b, model_b, 64, "runq.c", "v2-q8.bin"),
        "v2-q8-gs32.bin": ("v2", "A", cfg_a, model_a, 32, "runq.c", "v2-q8-gs32.bin"),
    }
    meta = {}
    for name, (fmt, model, cfg, W, gs, _, _) in ckpts.items():
        path = os.path.join(a.out, name)
        {"v0": lambda: write_v0(path, cfg, W), "v1": lambda: write_v1(path, cfg, W),
         "v2": lambda: write_v2(path, cfg, W, gs)}[fmt]()
        meta[name] = dict(format=fmt, model=model, config=cfg, shared_classifier=W["wcls"] is None,
                          group_size=gs, bytes=os.path.getsize(path), sha256=common.sha256_file(path))

    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        bins = compile_all(srcs, tmp)
        cache = {}
        for name, (_, _, _, _, _, program, ref) in ckpts.items():
            for prompt in PROMPTS:
                key = (program, ref, prompt)
                if key not in cache:
                    cache[key] = run_one(bins, program, os.path.join(a.out, ref), tok_path, prompt, pieces)
                r = dict(checkpoint=name, reference_checkpoint=ref, program=program)
                r.update(cache[key])
                runs.append(r)
                print("%-16s %-6s %-40r %3d+%2d%s %r" % (name, program, prompt, len(r["prompt_tokens"]),
                      len(r["generated_tokens"]), " BOS" if r["stopped_on_bos"] else "",
                      r["stdout"][:60]))

    cc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    libc = " ".join(platform.libc_ver())
    goldens = dict(
        generator="scripts/make-llama2c-fixtures.py", llama2c_commit=commit, cc=cc,
        cflags=" ".join(CFLAGS) + " -lm", libc=libc, machine=platform.machine(),
        steps=STEPS, temperature=0.0,
        tokenizer=dict(file="tokenizer.bin", vocab_size=len(pieces), max_token_length=max_len,
                       sha256=common.sha256_file(tok_path), bos=1, eos=2, first_byte_token=3),
        checkpoints=meta, runs=runs)
    with open(os.path.join(a.out, "goldens.json"), "w") as f:
        json.dump(goldens, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
