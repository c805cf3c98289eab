#!/usr/bin/env python3
"""Text-embedding speed of ferrite against onnxruntime and sentence-transformers.

Model: all-MiniLM-L6-v2 (models/all-MiniLM-L6-v2, from scripts/fetch-models.sh
minilm) by default, or another sentence-transformers directory (--model; e.g.
all-mpnet-base-v2, BENCH_EMBED_MODEL=mpnet scripts/bench-embed.sh). Corpus: testdata/embed/bench-sentences.txt, 512 English-ish sentences
of 3 to ~120 words made by this script's own deterministic generator
(`--make-corpus` rewrites it; stdlib only, byte-identical on every run).

Normally run through scripts/bench-embed.sh, which sets up the Python
reference environment, fetches the model and builds ferrite first:

    scripts/bench-embed.sh [--threads 1,2] [--rounds 3] [--n 512] [--batch-size 32] [--json OUT]
    scripts/bench-embed.sh --check           # embedding agreement, no timing
    python3 scripts/bench-embed.py --make-corpus

The three engines, each at every thread count T, on the same first N
sentences of the corpus, batches of B (32):

  ferrite                `ferrite bench MODEL --texts FILE --batch-size B -t T -r REPS
                         --json`: a warm-up pass and REPS timed passes in a fresh
                         process; its own figures are used ("sent_per_s", the
                         mean over the passes, and "single_ms", the median time
                         to embed each of the file's first 64 sentences alone).
  onnxruntime            the transformers model (AutoModel) exported once with
                         torch.onnx.export to
                         $FERRITE_REFERENCE/onnx/<model dir name>.onnx;
                         session with ORT_ENABLE_ALL, intra_op_num_threads=T,
                         inter_op_num_threads=1, sequential execution. The timed
                         pipeline is what a user writes: sort the texts by
                         length, per batch of B tokenize with the Hugging Face
                         fast tokenizer (padding to the longest in the batch,
                         truncation at max_seq_length), run the session, mean
                         pooling over the attention mask and L2 normalisation
                         in numpy, results back in input order. Tokenization is
                         inside the timing.
  sentence-transformers  torch.set_num_threads(T); model.encode(texts,
                         batch_size=B) end to end (it sorts by length itself).

Single-sentence latency for onnxruntime and sentence-transformers is measured
like ferrite's: the first 64 sentences, each embedded alone (a batch of 1,
tokenization included), median milliseconds.

Before any timing the ONNX pipeline is checked against sentence-transformers
on the corpus (cosine of every pair > 0.99999) and every Python engine does a
full warm-up pass at every thread count. Then, in each of ROUNDS rounds and
for each thread count, the engines run one after another (ferrite,
onnxruntime, sentence-transformers), each measurement being REPS passes over
the corpus (after a one-batch warm-up, and a short pause so that the previous
engine's spinning worker threads go to sleep) followed by the single-sentence
latencies. The tables report the medians over the rounds.

The fast tokenizer's own thread pool is switched off (TOKENIZERS_PARALLELISM=
false) so that a run at T threads uses T cores; the tokenizer is the same
`transformers` fast tokenizer for onnxruntime and sentence-transformers.

`--check` embeds the corpus with the three engines (ferrite through `ferrite
embed MODEL FILE`, one JSON array per input line) and prints the smallest
cosine of each pair of engines; exit status 1 when one is below --min-cos, 2
when ferrite could not be run.

A ferrite command that fails (or does not exist yet) is reported, and ferrite
is shown as missing; the other engines are still measured.

`--ort-avx2` replaces onnxruntime by a copy of it made by scripts/ort-avx2.py,
in which the AVX-512 (and AVX-VNNI) tests of its CPU kernels are patched to
fail, so that on an AVX-512 machine it runs the AVX2/FMA3 code an AVX2-only CPU
would: the fair opponent of `FERRITE_KERNELS=avx2`. onnxruntime itself offers
no switch for that. Only the onnxruntime build the patch was written for is
accepted (1.32.0, CPython 3.11, x86-64); the installed package is not touched.
"""

import argparse
import json
import os
import pathlib
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import common

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_MODEL = pathlib.Path(os.environ.get("FERRITE_MODELS", ROOT / "models")) / "all-MiniLM-L6-v2"
DEFAULT_CORPUS = ROOT / "testdata" / "embed" / "bench-sentences.txt"
ONNX_CACHE = common.REFERENCE / "onnx"
CORPUS_SIZE = 512
N_SINGLE = 64  # as `ferrite bench`: the first 64 sentences, one at a time
VERIFY_MIN_COS = 0.99999  # ONNX pipeline vs sentence-transformers
PAUSE_S = 0.5  # between engines

ENGINES = ("ferrite", "onnxruntime", "sentence-transformers")
SHORT = {"ferrite": "ferrite", "onnxruntime": "ORT", "sentence-transformers": "torch"}
NAME = {e: e for e in ENGINES}  # the engine names in the tables (--ort-avx2 renames onnxruntime)


# ---------------------------------------------------------------------------
# The corpus: a deterministic generator (stdlib only, no `random` module, so
# the output cannot change with the Python version).


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def unit(self):
        """A float in [0, 1) from the top 53 bits."""
        return (self.next_u64() >> 11) / float(1 << 53)

    def below(self, n):
        return self.next_u64() % n

    def between(self, lo, hi):
        """An integer in [lo, hi]."""
        return lo + self.below(hi - lo + 1)

    def pick(self, items):
        return items[self.below(len(items))]


W = lambda s: s.split()  # noqa: E731 -- word lists written as one string

NAMES = W("Alice Bernard Chen Dmitri Elena Farid Grace Hiroshi Ines Jamal Katarina Luis Maya "
          "Noor Oskar Priya Quentin Rosa Samuel Tamsin Umar Valeria Wen Yusuf Zoe")
PLACES = W("Lisbon Nairobi Osaka Toronto Lyon Denver Krakow Auckland Valparaiso Tallinn Accra "
           "Bergen Hanoi Glasgow Mombasa Seville Winnipeg Tbilisi Perth Montevideo")
ORGS = ["the city council", "the research team", "the school board", "a local charity",
        "the finance department", "the hospital", "our support team", "the museum",
        "the shipping company", "the weather service", "a small bakery", "the orchestra",
        "the engineering group", "the library", "the football club", "the airline"]
NOUNS = W("report budget bridge garden server meeting proposal river kitchen contract window "
          "engine festival harvest battery camera invoice recipe lecture satellite museum "
          "highway printer forest schedule question answer message update customer student "
          "teacher doctor farmer village market storm network dataset survey painting novel "
          "bicycle ticket station harbour laptop backup migration warehouse neighbourhood "
          "experiment patient vaccine telescope algorithm policy election stadium concert "
          "library dashboard password spreadsheet journey river valley mountain coastline "
          "recipe oven sandwich coffee apartment elevator platform manuscript keyboard")
ADJS = W("new old quiet busy careful bright narrow sudden annual expensive reliable broken "
         "modern ancient local remote detailed rough gentle heavy fragile unusual careful "
         "crowded empty green frozen wooden digital official temporary late early huge tiny "
         "noisy pleasant strange familiar difficult simple efficient slow rapid")
ADVS = W("quickly slowly carefully finally suddenly quietly reluctantly eventually "
         "surprisingly briefly gradually twice openly nearly barely")
VERBS_PAST = W("reviewed delayed approved repaired cancelled described measured published "
               "rebuilt ignored shipped tested painted moved found lost replaced signed "
               "updated cleaned visited explained questioned rejected collected doubled "
               "installed photographed translated organised borrowed returned")
VERBS_BASE = W("review delay approve repair cancel describe measure publish rebuild ship test "
               "paint move find replace sign update clean visit explain collect install "
               "translate organise borrow return")
PREPS = W("in near behind after before during under over across beside without through "
          "around against within")
DETS = W("the the the a this that every another our their my")
CONJ = [", and", ", but", "; meanwhile,", " because", " while", " although", ", so",
        " until", " even though", ", which meant that", " as soon as", ", whereas"]
OPENERS = ["Yesterday", "Last week", "In the morning", "According to the minutes",
           "For the second time", "Despite the rain", "As expected", "Without warning",
           "In 1998", "After a long debate", "By the end of March", "On Tuesday",
           "To everyone's surprise", "In practice", "Honestly", "At 7:45 a.m."]
SHORT_SENTENCES = ["Thanks a lot!", "See you tomorrow.", "Where is the station?",
                   "The printer is jammed again.", "It works now.", "Call me later.",
                   "Is the café open on Sundays?", "That was unexpected.",
                   "Please restart the server.", "Nobody answered the phone.",
                   "The cat sleeps.", "We won 3-2!", "Dinner is ready.",
                   "Check the logs first.", "Prices rose 4.5% in May."]
# Words that end a sentence well; a cut landing on another word replaces it by a noun.
GOOD_ENDINGS = set(NOUNS + NAMES + PLACES + ADVS + W("percent million kilometres minutes people"))


def noun_phrase(r):
    np_ = [r.pick(DETS)]
    if r.unit() < 0.55:
        np_.append(r.pick(ADJS))
    np_.append(r.pick(NOUNS))
    if r.unit() < 0.2:
        np_ += ["of", r.pick(["the", "a"]), r.pick(NOUNS)]
    return " ".join(np_)


def subject(r):
    u = r.unit()
    if u < 0.25:
        return r.pick(NAMES)
    if u < 0.45:
        return r.pick(ORGS)
    if u < 0.55:
        return r.pick(["we", "they", "she", "he", "I", "you"])
    return noun_phrase(r)


def number_phrase(r):
    k = r.below(6)
    if k == 0:
        return f"{r.between(2, 99)} percent"
    if k == 1:
        return f"${r.between(1, 950)}.{r.between(0, 9)} million"
    if k == 2:
        return f"{r.between(3, 480)} kilometres"
    if k == 3:
        return f"{r.between(2, 60)} minutes"
    if k == 4:
        return f"about {r.between(10, 5000)} people"
    return f"version {r.between(1, 12)}.{r.between(0, 20)}"


def clause(r):
    k = r.below(7)
    s = subject(r)
    if k == 0:
        c = f"{s} {r.pick(VERBS_PAST)} {noun_phrase(r)} {r.pick(PREPS)} {noun_phrase(r)}"
    elif k == 1:
        c = f"{s} {r.pick(ADVS)} {r.pick(VERBS_PAST)} {noun_phrase(r)}"
    elif k == 2:
        c = f"{s} {r.pick(['will', 'should', 'might', 'cannot', 'must'])} {r.pick(VERBS_BASE)} {noun_phrase(r)} {r.pick(PREPS)} {r.pick(PLACES)}"
    elif k == 3:
        c = f"{s} said that {noun_phrase(r)} was {r.pick(ADJS)} and {r.pick(ADJS)}"
    elif k == 4:
        c = f"{s} {r.pick(VERBS_PAST)} {noun_phrase(r)} by {number_phrase(r)}"
    elif k == 5:
        c = f"{noun_phrase(r)} {r.pick(PREPS)} {r.pick(PLACES)} was {r.pick(VERBS_PAST)} {r.pick(ADVS)}"
    else:
        c = f"{s} {r.pick(VERBS_PAST)} {noun_phrase(r)}, {noun_phrase(r)} and {noun_phrase(r)}"
    return c


def target_words(r):
    """Words in a sentence: ~8% 3-7, ~80% 8-30 (mostly 10-20), ~12% 31-120."""
    u = r.unit()
    if u < 0.08:
        return r.between(3, 7)
    if u < 0.88:
        x = (r.unit() + r.unit() + r.unit()) / 3  # bell-shaped on [0, 1)
        return 8 + int(23 * x ** 1.6)  # skewed to the short side, median ~15
    return 31 + int(90 * r.unit() ** 1.7)


def sentence(r):
    n = target_words(r)
    if n <= 7 and r.unit() < 0.5:
        return r.pick(SHORT_SENTENCES)
    parts = [r.pick(OPENERS) + ","] if r.unit() < 0.3 else []
    text = " ".join(parts + [clause(r)])
    while len(text.split()) < n:
        text += r.pick(CONJ) + " " + clause(r)
    words = text.split()[:n]
    # Cut at n words; the last one becomes a noun unless it is one already
    # (or a name, a number, an adverb): no dangling "the", "of", "because".
    if len(words) > 1 and words[-1].rstrip(",;").strip("$") not in GOOD_ENDINGS \
            and not any(ch.isdigit() for ch in words[-1]):
        words[-1] = r.pick(NOUNS)
    # "a" before a vowel.
    words = ["an" if w == "a" and i + 1 < len(words) and words[i + 1][:1] in "aeiou" else w
             for i, w in enumerate(words)]
    last = words[-1].rstrip(",;:")
    words[-1] = last + ("?" if r.unit() < 0.08 else "!" if r.unit() < 0.03 else ".")
    words[0] = words[0][:1].upper() + words[0][1:]
    return " ".join(words)


def make_corpus(n=CORPUS_SIZE, seed=0x5EED_E3BE_D000_0001):
    r = SplitMix64(seed)
    return [sentence(r) for _ in range(n)]


def corpus_stats(lines):
    lens = sorted(len(s.split()) for s in lines)
    q = lambda p: lens[min(len(lens) - 1, int(p * len(lens)))]  # noqa: E731
    in_8_30 = sum(8 <= x <= 30 for x in lens)
    return (f"{len(lens)} sentences, words min {lens[0]} / p10 {q(0.1)} / median {q(0.5)} / "
            f"p90 {q(0.9)} / max {lens[-1]}, {in_8_30} of them with 8-30 words")


# ---------------------------------------------------------------------------
# Reference engines (imported lazily: --make-corpus needs no packages).


def export_onnx(model_dir, out):
    """The transformers model (AutoModel) of the safetensors dir -> ONNX
    (last_hidden_state), cached. BERT takes token_type_ids, MPNet does not."""
    import torch
    from transformers import AutoModel

    out.parent.mkdir(parents=True, exist_ok=True)
    # Eager attention and the TorchScript exporter give the graph onnxruntime
    # runs fastest here (sdpa / the dynamo exporter: same results, slower).
    model = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    with_types = model.config.model_type == "bert"

    class LastHidden(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kw = {"token_type_ids": token_type_ids} if with_types else {}
            return self.bert(input_ids=input_ids, attention_mask=attention_mask, **kw).last_hidden_state

    ids = torch.tensor([[101, 7592, 2088, 999, 102], [101, 2307, 102, 0, 0]])
    mask = (ids != 0).long()
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if with_types else [])
    axes = {n: {0: "batch", 1: "sequence"} for n in names + ["last_hidden_state"]}
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    common = dict(input_names=names, output_names=["last_hidden_state"], dynamic_axes=axes,
                  opset_version=17)
    inputs = (ids, mask, torch.zeros_like(ids)) if with_types else (ids, mask)
    import warnings
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(LastHidden(model), inputs, str(tmp), dynamo=False, **common)
            how = "torch.onnx.export (TorchScript exporter), opset 17, eager attention"
        except Exception as e:  # the TorchScript exporter may be gone in a later torch
            print(f"note: TorchScript ONNX export failed ({e}); using the dynamo exporter", file=sys.stderr)
            torch.onnx.export(LastHidden(model), inputs, str(tmp), dynamo=True, external_data=False,
                              **common)
            how = "torch.onnx.export (dynamo exporter), opset 17, eager attention"
    os.replace(tmp, out)
    return how


class OrtEngine:
    """The onnxruntime pipeline, one session per thread count."""

    def __init__(self, onnx_path, model_dir, max_len):
        import onnxruntime as ort
        from transformers import AutoTokenizer

        self.ort = ort
        self.path = str(onnx_path)
        self.tok = AutoTokenizer.from_pretrained(str(model_dir))
        assert self.tok.is_fast, "expected the Hugging Face fast tokenizer"
        self.max_len = max_len
        self.sessions = {}

    def session(self, threads):
        if threads not in self.sessions:
            ort = self.ort
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            self.sessions[threads] = ort.InferenceSession(self.path, so, providers=["CPUExecutionProvider"])
        return self.sessions[threads]

    def embed(self, texts, threads, batch_size):
        import numpy as np

        sess = self.session(threads)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = None
        for start in range(0, len(texts), batch_size):
            idx = order[start:start + batch_size]
            enc = self.tok([texts[i] for i in idx], padding=True, truncation=True,
                           max_length=self.max_len, return_tensors="np")
            wanted = [i.name for i in sess.get_inputs()]
            feeds = {k: enc[k].astype(np.int64) if k in enc else np.zeros_like(enc["input_ids"], dtype=np.int64)
                     for k in wanted}
            (hidden,) = sess.run(["last_hidden_state"], feeds)
            mask = feeds["attention_mask"][:, :, None].astype(np.float32)
            pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            if out is None:
                out = np.empty((len(texts), pooled.shape[1]), dtype=np.float32)
            out[idx] = pooled
        return out


class StEngine:
    def __init__(self, model_dir):
        import torch
        from sentence_transformers import SentenceTransformer

        self.torch = torch
        self.model = SentenceTransformer(str(model_dir), device="cpu")
        self.max_len = self.model.max_seq_length

    def embed(self, texts, threads, batch_size):
        self.torch.set_num_threads(threads)
        return self.model.encode(texts, batch_size=batch_size, show_progress_bar=False,
                                 convert_to_numpy=True)


def min_cosine(a, b):
    """(smallest cosine over rows, its row, mean cosine)."""
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    i = int(np.argmin(cos))
    return float(cos[i]), i, float(cos.mean())


# ---------------------------------------------------------------------------
# ferrite, as a subprocess.


def tail(text, n=15):
    lines = (text or "").strip().splitlines()
    return "\n".join(("    " + line) for line in lines[-n:]) or "    (no output)"


def run_ferrite(cmd, timeout):
    """(stdout, None) or (None, error message)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return None, f"no such program: {cmd[0]}"
    except OSError as e:
        return None, f"cannot run {cmd[0]}: {e}"
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    if p.returncode != 0:
        return None, f"exit status {p.returncode}; stderr:\n{tail(p.stderr)}"
    return p.stdout, None


def ferrite_bench(ferrite, model_dir, texts_file, batch_size, threads, reps, timeout, products=()):
    cmd = [ferrite, "bench", str(model_dir), "--texts", str(texts_file), "--batch-size",
           str(batch_size), "-t", str(threads), "-r", str(reps), "--json"] + list(products)
    out, err = run_ferrite(cmd, timeout)
    if err:
        return cmd, None, err
    try:
        r = json.loads(out)
    except json.JSONDecodeError:
        # Tolerate stray lines: take the last line that is a JSON object.
        r = None
        for line in reversed(out.strip().splitlines()):
            try:
                r = json.loads(line)
                break
            except json.JSONDecodeError:
                continue
    if not isinstance(r, dict):
        return cmd, None, f"stdout is not one JSON object:\n{tail(out)}"
    missing = [k for k in ("sent_per_s", "single_ms") if not isinstance(r.get(k), (int, float))]
    if missing:
        return cmd, None, f"JSON lacks numeric {', '.join(missing)}: {json.dumps(r)[:500]}"
    return cmd, r, None


def ferrite_embed(ferrite, model_dir, texts_file, n, timeout):
    cmd = [ferrite, "embed", str(model_dir), str(texts_file)]
    out, err = run_ferrite(cmd, timeout)
    if err:
        return cmd, None, err
    rows = []
    for k, line in enumerate(out.splitlines()):
        if not line.strip():
            continue
        try:
            v = json.loads(line)
        except json.JSONDecodeError:
            return cmd, None, f"line {k + 1} of stdout is not JSON: {line[:200]!r}"
        if not isinstance(v, list) or not v or not all(isinstance(x, (int, float)) for x in v):
            return cmd, None, f"line {k + 1} of stdout is not a JSON array of numbers: {line[:200]!r}"
        rows.append(v)
    if len(rows) != n:
        return cmd, None, f"{len(rows)} embeddings for {n} input lines"
    if len({len(v) for v in rows}) != 1:
        return cmd, None, "embeddings of different lengths"
    return cmd, rows, None


# ---------------------------------------------------------------------------


def versions(ferrite):
    import numpy
    import onnxruntime
    import sentence_transformers
    import tokenizers
    import torch
    import transformers

    v = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sentence-transformers": sentence_transformers.__version__,
        "onnxruntime": onnxruntime.__version__,
        "tokenizers": tokenizers.__version__,
        "numpy": numpy.__version__,
    }
    fv = "missing"
    if ferrite:
        out, err = run_ferrite([ferrite, "--version"], 60)
        fv = out.strip() if out else f"missing ({err.splitlines()[0]})"
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        fv += f" (git {head}{', uncommitted changes' if dirty else ''})"
    except (OSError, subprocess.CalledProcessError):
        pass
    v["ferrite"] = fv
    return v


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def time_passes(embed, texts, threads, batch_size, reps):
    """Sentences per second of each of `reps` passes over `texts`."""
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        embed(texts, threads, batch_size)
        rates.append(len(texts) / (time.perf_counter() - t0))
    return rates


def time_single(embed, texts, threads):
    """Median milliseconds to embed each text alone."""
    ms = []
    for s in texts:
        t0 = time.perf_counter()
        embed([s], threads, 1)
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def fmt(x, spec):
    return "—" if x is None else format(x, spec)


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def load_corpus(path, n):
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if any(not s.strip() for s in lines):
        sys.exit(f"{path}: empty lines")
    if n > len(lines):
        sys.exit(f"--n {n}: {path} has only {len(lines)} sentences")
    return lines[:n]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of all engines (default 3)")
    ap.add_argument("--reps", type=int, default=1,
                    help="timed passes over the corpus per measurement (ferrite -r; default 1)")
    ap.add_argument("--n", type=int, default=CORPUS_SIZE, help="sentences used, the first N of the corpus (default 512)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--json", metavar="OUT", help="write all raw figures to OUT")
    ap.add_argument("--check", action="store_true", help="compare the embeddings of the three engines, no timing")
    ap.add_argument("--min-cos", type=float, default=0.9999, help="--check: smallest acceptable cosine (default 0.9999)")
    ap.add_argument("--make-corpus", action="store_true", help="(re)write the corpus file and exit")
    ap.add_argument("--corpus", type=pathlib.Path, default=DEFAULT_CORPUS)
    ap.add_argument("--model", type=pathlib.Path, default=DEFAULT_MODEL)
    ap.add_argument("--onnx", type=pathlib.Path, default=None,
                    help="cached ONNX export, made if missing (default $FERRITE_REFERENCE/onnx/MODEL.onnx)")
    ap.add_argument("--ferrite", default=str(ROOT / "target" / "release" / "ferrite"),
                    help="the ferrite binary ('' to leave ferrite out)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds allowed per ferrite command")
    ap.add_argument("--bf16", action="store_true",
                    help="time ferrite with --bf16 (bf16 products, AVX512-BF16 only; not the f32 results)")
    ap.add_argument("--int8", action="store_true",
                    help="time ferrite with --int8 (int8 products, any CPU; not the f32 results)")
    ap.add_argument("--ort-avx2", action="store_true",
                    help="use a copy of onnxruntime patched to take its AVX2/FMA3 kernels on an AVX-512 CPU "
                         "(scripts/ort-avx2.py; onnxruntime 1.32.0 x86-64 only), to compare with "
                         "FERRITE_KERNELS=avx2")
    a = ap.parse_args()
    if a.bf16 and a.int8:
        ap.error("--bf16 and --int8 exclude each other")
    if a.onnx is None:
        a.onnx = ONNX_CACHE / f"{a.model.name}.onnx"
    try:
        a.thread_list = [int(t) for t in a.threads.split(",") if t.strip()]
    except ValueError:
        ap.error(f"--threads {a.threads!r}: expected e.g. 1,2")
    if not a.thread_list or min(a.thread_list) < 1 or a.rounds < 1 or a.reps < 1 or a.n < 1 or a.batch_size < 1:
        ap.error("--threads, --rounds, --reps, --n and --batch-size must be positive")
    return a


def use_ort_avx2():
    """Put the patched AVX2 copy of onnxruntime (scripts/ort-avx2.py) first on sys.path; its directory."""
    import importlib.util

    if "onnxruntime" in sys.modules:
        sys.exit("--ort-avx2: onnxruntime was imported before the copy could be put on sys.path")
    spec = importlib.util.spec_from_file_location("ort_avx2", ROOT / "scripts" / "ort-avx2.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    dest = mod.make_copy(mod.CACHE)
    sys.path.insert(0, str(dest))
    import onnxruntime

    if not pathlib.Path(onnxruntime.__file__).resolve().is_relative_to(dest.resolve()):
        sys.exit(f"--ort-avx2: onnxruntime was imported from {onnxruntime.__file__}, not from the copy in {dest}")
    SHORT["onnxruntime"] = "ORT-avx2"
    NAME["onnxruntime"] = "onnxruntime (AVX2 copy)"
    return dest


def main():
    a = parse_args()
    ort_copy = use_ort_avx2() if a.ort_avx2 else None

    if a.make_corpus:
        lines = make_corpus()
        a.corpus.parent.mkdir(parents=True, exist_ok=True)
        a.corpus.write_text("".join(s + "\n" for s in lines), encoding="utf-8")
        print(f"wrote {a.corpus}: {corpus_stats(lines)}; sha256 {common.sha256_file(a.corpus)}")
        return 0

    # One core per requested thread: no hidden tokenizer thread pool.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    if not (a.model / "model.safetensors").is_file():
        sys.exit(f"no model in {a.model} (run scripts/fetch-models.sh minilm or mpnet)")
    if not a.corpus.is_file():
        if a.corpus != DEFAULT_CORPUS:
            sys.exit(f"no corpus file {a.corpus}")
        print(f"note: {a.corpus} missing; writing it with the built-in generator")
        a.corpus.parent.mkdir(parents=True, exist_ok=True)
        a.corpus.write_text("".join(s + "\n" for s in make_corpus()), encoding="utf-8")
    texts = load_corpus(a.corpus, a.n)
    single_texts = texts[:N_SINGLE]

    wrapper = os.environ.get("BENCH_EMBED_CMDLINE")
    if wrapper:
        print(f"command: {wrapper}")
    print(f"python:  {shlex.join([sys.executable] + sys.argv)}")
    vers = versions(a.ferrite)
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    print(f"CPU: {cpu_name()}, {os.cpu_count()} logical cores; load average now "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if ort_copy:
        print(f"onnxruntime: the copy in {ort_copy} (scripts/ort-avx2.py): its MLAS AVX-512 and AVX-VNNI "
              "tests are patched out, so it runs its AVX2/FMA3 kernels")
    print(f"model: {a.model}")
    print(f"corpus: {a.corpus} (sha256 {common.sha256_file(a.corpus)[:16]}…), first {len(texts)}: {corpus_stats(texts)}")

    import numpy as np

    st = StEngine(a.model)
    max_len = st.max_len
    if not a.onnx.is_file():
        print(f"exporting the ONNX model to {a.onnx} …", flush=True)
        how = export_onnx(a.model, a.onnx)
        print(f"  {how}")
    ortx = OrtEngine(a.onnx, a.model, max_len)
    n_tok = [len(x) for x in ortx.tok(texts, truncation=True, max_length=max_len)["input_ids"]]
    print(f"tokens per sentence (with [CLS]/[SEP]): min {min(n_tok)}, median {int(statistics.median(n_tok))}, "
          f"max {max(n_tok)}, total {sum(n_tok)}; max_seq_length {max_len}"
          + (f" ({sum(t >= max_len for t in n_tok)} truncated)" if max(n_tok) >= max_len else ""))

    tmpdir = tempfile.TemporaryDirectory(prefix="bench-embed-")
    texts_file = pathlib.Path(tmpdir.name) / "texts.txt"
    texts_file.write_text("".join(s + "\n" for s in texts), encoding="utf-8")
    if len(texts) == CORPUS_SIZE and a.corpus.read_text(encoding="utf-8") == texts_file.read_text(encoding="utf-8"):
        texts_file = a.corpus  # the whole corpus: give ferrite the file itself

    t_check = max(a.thread_list)
    ref = st.embed(texts, t_check, a.batch_size)
    onnx_emb = ortx.embed(texts, t_check, a.batch_size)
    c_ort, i_ort, m_ort = min_cosine(onnx_emb, ref)
    print(f"ONNX pipeline vs sentence-transformers on {len(texts)} sentences: min cosine {c_ort:.9f} "
          f"(1 − min {1 - c_ort:.1e}, sentence {i_ort}), mean {m_ort:.9f}")
    if c_ort <= VERIFY_MIN_COS:
        sys.exit(f"the ONNX pipeline disagrees with sentence-transformers (min cosine {c_ort} <= {VERIFY_MIN_COS}); "
                 f"delete {a.onnx} to re-export")

    if a.check:
        return check(a, texts, texts_file, ref, onnx_emb, t_check)

    engines = {"onnxruntime": ortx.embed, "sentence-transformers": st.embed}
    ferrite_error = None if a.ferrite else "left out (--ferrite '')"

    print("\nwarm-up: one pass over the corpus and 8 single sentences per Python engine and thread count …",
          flush=True)
    for t in a.thread_list:
        for embed in engines.values():
            embed(texts, t, a.batch_size)
            time_single(embed, single_texts[:8], t)

    print(f"timing: {a.rounds} rounds x threads {a.thread_list}; per measurement {a.reps} pass(es) over "
          f"{len(texts)} sentences, batch size {a.batch_size}, then {len(single_texts)} single sentences\n", flush=True)
    runs = {(e, t): [] for e in ENGINES for t in a.thread_list}
    ferrite_cmds = {}
    for rnd in range(1, a.rounds + 1):
        for t in a.thread_list:
            line = []
            for e in ENGINES:
                time.sleep(PAUSE_S)
                if e == "ferrite":
                    if ferrite_error:
                        line.append("ferrite missing")
                        continue
                    products = ["--bf16"] * a.bf16 + ["--int8"] * a.int8
                    cmd, r, err = ferrite_bench(a.ferrite, a.model, texts_file, a.batch_size, t, a.reps, a.timeout,
                                                 products)
                    ferrite_cmds[t] = shlex.join(cmd)
                    if err:
                        ferrite_error = f"`{shlex.join(cmd)}` failed: {err}"
                        print(f"ferrite: {ferrite_error}\nferrite: reported as missing from now on", flush=True)
                        line.append("ferrite missing")
                        continue
                    rec = {"sent_per_s": float(r["sent_per_s"]), "single_ms": float(r["single_ms"]),
                           "sent_per_s_runs": r.get("sent_per_s_runs"), "raw": r}
                else:
                    embed = engines[e]
                    embed(texts[:a.batch_size], t, a.batch_size)  # re-warm after the other engines
                    rates = time_passes(embed, texts, t, a.batch_size, a.reps)
                    single = time_single(embed, single_texts, t)
                    rec = {"sent_per_s": statistics.mean(rates), "single_ms": single, "sent_per_s_runs": rates}
                rec["loadavg_1min_after"] = os.getloadavg()[0]  # to spot rounds disturbed by other work
                runs[(e, t)].append(rec)
                line.append(f"{SHORT[e]} {rec['sent_per_s']:.1f} sent/s, {rec['single_ms']:.2f} ms")
            print(f"round {rnd}, {t} thread(s): " + " | ".join(line), flush=True)

    summary = report(a, runs, texts, ferrite_error, ferrite_cmds)
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"(other processes on these {os.cpu_count()} cores disturb the figures; see the per-round values)")

    if a.json:
        doc = {
            "command": wrapper, "python_command": [sys.executable] + sys.argv, "versions": vers,
            "cpu": cpu_name(), "logical_cores": os.cpu_count(), "model": str(a.model),
            "onnx": str(a.onnx), "ort_avx2_copy": str(ort_copy) if ort_copy else None, "corpus": str(a.corpus), "corpus_sha256": common.sha256_file(a.corpus),
            "n_sentences": len(texts), "n_single": len(single_texts), "batch_size": a.batch_size,
            "rounds": a.rounds, "reps": a.reps, "threads": a.thread_list, "tokens": n_tok,
            "onnx_vs_st_min_cosine": c_ort, "ferrite_error": ferrite_error, "ferrite_commands": ferrite_cmds,
            "runs": {f"{e}@{t}": v for (e, t), v in runs.items()}, "summary": summary,
        }
        pathlib.Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"\nraw figures: {a.json}")
    return 0


def report(a, runs, texts, ferrite_error, ferrite_cmds):
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    print(f"\n## {a.model.name}, {len(texts)} sentences, batch size {a.batch_size}; "
          f"medians of {a.rounds} round(s)")
    print("\nsent/s: whole pipeline, text in, normalised embeddings out (tokenization included for every engine: "
          "ORT = HF fast tokenizer + sort by length + ORT session + numpy mean pooling/normalisation, "
          "torch = SentenceTransformer.encode, ferrite = `ferrite bench`'s own figure).")
    print(f"single ms: median time to embed one sentence alone, over the first {min(N_SINGLE, len(texts))} sentences.")
    print("ratios > 1 mean ferrite is faster: throughput ferrite/other, latency other_ms/ferrite_ms.")
    if ferrite_error:
        print(f"\nferrite: MISSING — {ferrite_error}")
    summary = {}
    for t in a.thread_list:
        s = {}
        for e in ENGINES:
            rs = runs[(e, t)]
            s[e] = {"sent_per_s": med([r["sent_per_s"] for r in rs]),
                    "single_ms": med([r["single_ms"] for r in rs]),
                    "sent_per_s_rounds": [r["sent_per_s"] for r in rs]}
        summary[str(t)] = s
        f = s["ferrite"]
        print(f"\n### {t} thread{'s' if t > 1 else ''}\n")
        print("| engine | sent/s | single-sentence ms | ferrite/engine sent/s | engine ms / ferrite ms | sent/s per round |")
        print("|---|---:|---:|---:|---:|---|")
        for e in ENGINES:
            x = s[e]
            thr = "—" if e == "ferrite" else fmt(ratio(f["sent_per_s"], x["sent_per_s"]), ".3f")
            lat = "—" if e == "ferrite" else fmt(ratio(x["single_ms"], f["single_ms"]), ".3f")
            rounds = ", ".join(f"{v:.1f}" for v in x["sent_per_s_rounds"]) or "missing"
            print(f"| {NAME[e]} | {fmt(x['sent_per_s'], '.1f')} | {fmt(x['single_ms'], '.2f')} | {thr} | {lat} | {rounds} |")
        if t in ferrite_cmds and runs[("ferrite", t)]:
            print(f"\nferrite command: `{ferrite_cmds[t]}`")
    return summary


def check(a, texts, texts_file, ref, onnx_emb, threads):
    print(f"\n--check: {len(texts)} sentences (onnxruntime and sentence-transformers at {threads} thread(s), "
          "ferrite at its default)")
    status = 0
    results = [(NAME["onnxruntime"], "sentence-transformers", min_cosine(onnx_emb, ref))]
    fe = None
    if a.ferrite:
        cmd, rows, err = ferrite_embed(a.ferrite, a.model, texts_file, len(texts), a.timeout)
        if err:
            print(f"ferrite: MISSING — `{shlex.join(cmd)}` failed: {err}")
        else:
            import numpy as np

            fe = np.asarray(rows, dtype=np.float64)
            norms = np.linalg.norm(fe, axis=1)
            print(f"ferrite: `{shlex.join(cmd)}`: {fe.shape[0]} x {fe.shape[1]}, "
                  f"norms {norms.min():.6f} … {norms.max():.6f}")
            if fe.shape[1] != ref.shape[1]:
                print(f"ferrite: dimension {fe.shape[1]}, expected {ref.shape[1]}")
                return 1
            results.insert(0, ("ferrite", "sentence-transformers", min_cosine(fe, ref)))
            results.insert(1, ("ferrite", NAME["onnxruntime"], min_cosine(fe, onnx_emb)))
    else:
        print("ferrite: left out (--ferrite '')")
    print(f"\n| pair | min cosine | 1 − min cosine | worst sentence | mean cosine | ≥ {a.min_cos} |")
    print("|---|---:|---:|---:|---:|---|")
    for x, y, (c, i, m) in results:
        ok = c >= a.min_cos
        status |= 0 if ok else 1
        print(f"| {x} vs {y} | {c:.9f} | {1 - c:.1e} | {i} ({len(texts[i].split())} words) | {m:.9f} | {'yes' if ok else 'NO'} |")
    if fe is None:
        return status or 2
    return status


if __name__ == "__main__":
    sys.exit(main())
