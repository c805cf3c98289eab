#!/usr/bin/env python3
"""Speed of ferrite on nomic-embed-text-v1.5 (the f16 GGUF) against llama.cpp's
`llama-embedding` on the same file and against onnxruntime, same texts, same
thread count, engines alternated in every round; medians over the rounds.

    HF_HUB_OFFLINE=1 scripts/refenv python scripts/bench-nomic.py \\
        [--threads 2] [--rounds 3] [--n 256] [--batch-size 32]

Texts: the first N lines of testdata/embed/bench-sentences.txt (the corpus of
scripts/bench-embed.py), each with the `search_document: ` prefix.

  ferrite       `ferrite bench GGUF --texts FILE -t T --batch-size B -r 1 --json`:
                one warm-up pass and one timed pass in a fresh process
                (tokenization included, model load excluded); sentences/s.
  llama.cpp     `llama-embedding -m GGUF -f FILE -t T -c 2048 -b 2048 --pooling mean
                -fa off --embd-output-format array`: all texts of the file, packed into
                batches of up to 2048 tokens (its defaults for this file: n_ctx = n_batch = the trained 2048); sentences/s from
                its own `prompt eval time` (compute only) when printed, else
                (its logger often loses the end of its output) the run's wall
                time minus that of a run on one short text (model load and
                set-up); which one is printed. -fa off and on (its default).
  onnxruntime   HF transformers' NomicBertModel (transformers 5.x, no remote
                code), its weights read from the same GGUF (f16 -> f32), exported
                with torch.onnx.export to $FERRITE_REFERENCE/onnx/
                nomic-embed-text-v1.5.onnx (f32); session ORT_ENABLE_ALL,
                intra_op_num_threads=T; per batch of B (sorted by length):
                bert-base-uncased fast tokenizer, run, mean pooling, L2 norm.
                Checked first: its embeddings of the parity texts agree with
                the llama.cpp goldens (testdata/embed/nomic-v1.5).

The machine is shared (other jobs run at the same time): read ratios from
one round only together with the load average printed.
"""

import argparse
import json
import os
import pathlib
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import common

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODELS = pathlib.Path(os.environ.get("FERRITE_MODELS", ROOT / "models"))
GGUF = MODELS / "nomic-embed-text-v1.5.f16.gguf"
TOKENIZER_DIR = MODELS / "all-MiniLM-L6-v2"  # bert-base-uncased, as the GGUF's vocabulary
CORPUS = ROOT / "testdata" / "embed" / "bench-sentences.txt"
GOLDENS = ROOT / "testdata" / "embed" / "nomic-v1.5"
LLAMA_BIN = common.LLAMA_BIN
ONNX = common.REFERENCE / "onnx" / "nomic-embed-text-v1.5.onnx"
PREFIX = "search_document: "


def gguf_to_hf_state(config):
    """NomicBertModel's state dict from the GGUF (llama.cpp names)."""
    import numpy as np
    import torch
    from gguf import GGUFReader

    r = GGUFReader(str(GGUF))
    t = {x.name: np.array(x.data) for x in r.tensors}

    def f32(name):
        return torch.from_numpy(t[name].astype(np.float32))

    d = config.hidden_size
    sd = {
        "embeddings.word_embeddings.weight": f32("token_embd.weight"),
        "embeddings.token_type_embeddings.weight": f32("token_types.weight"),
        "embeddings.LayerNorm.weight": f32("token_embd_norm.weight"),
        "embeddings.LayerNorm.bias": f32("token_embd_norm.bias"),
    }
    for i in range(config.num_hidden_layers):
        qkv = f32(f"blk.{i}.attn_qkv.weight")
        p = f"layers.{i}."
        sd[p + "self_attn.q_proj.weight"] = qkv[:d]
        sd[p + "self_attn.k_proj.weight"] = qkv[d:2 * d]
        sd[p + "self_attn.v_proj.weight"] = qkv[2 * d:]
        sd[p + "self_attn.o_proj.weight"] = f32(f"blk.{i}.attn_output.weight")
        sd[p + "mlp.up_proj.weight"] = f32(f"blk.{i}.ffn_up.weight")
        sd[p + "mlp.gate_proj.weight"] = f32(f"blk.{i}.ffn_gate.weight")
        sd[p + "mlp.down_proj.weight"] = f32(f"blk.{i}.ffn_down.weight")
        for ours, theirs in (("post_attention_layernorm", "attn_output_norm"),
                             ("post_mlp_layernorm", "layer_output_norm")):
            sd[p + ours + ".weight"] = f32(f"blk.{i}.{theirs}.weight")
            sd[p + ours + ".bias"] = f32(f"blk.{i}.{theirs}.bias")
    return sd


def hf_model():
    import torch
    from transformers import NomicBertConfig, NomicBertModel

    config = NomicBertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                             num_attention_heads=12, intermediate_size=3072, hidden_act="silu",
                             max_position_embeddings=2048, type_vocab_size=2, layer_norm_eps=1e-12,
                             rope_parameters={"rope_type": "default", "rope_theta": 1000.0})
    config._attn_implementation = "eager"
    model = NomicBertModel(config).eval()
    sd = gguf_to_hf_state(config)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if "pooler" not in m and "position_ids" not in m]
    assert not missing and not unexpected, (missing, unexpected)
    return model


def export_onnx():
    import torch

    model = hf_model()

    class LastHidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    ids = torch.tensor([[101, 7592, 2088, 999, 102], [101, 2307, 102, 0, 0]])
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "sequence"} for n in names + ["last_hidden_state"]}
    ONNX.parent.mkdir(parents=True, exist_ok=True)
    tmp = ONNX.with_name(ONNX.name + f".tmp{os.getpid()}")
    with torch.no_grad():
        try:
            torch.onnx.export(LastHidden(model), (ids, (ids != 0).long(), torch.zeros_like(ids)), str(tmp),
                              input_names=names, output_names=["last_hidden_state"], dynamic_axes=axes,
                              opset_version=17, dynamo=False)
        except Exception as e:
            print(f"note: TorchScript export failed ({e}); dynamo exporter", file=sys.stderr)
            torch.onnx.export(LastHidden(model), (ids, (ids != 0).long(), torch.zeros_like(ids)), str(tmp),
                              input_names=names, output_names=["last_hidden_state"], dynamic_axes=axes,
                              opset_version=17, dynamo=True, external_data=False)
    os.replace(tmp, ONNX)


class Ort:
    def __init__(self, threads):
        import onnxruntime as ort
        from transformers import AutoTokenizer

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.sess = ort.InferenceSession(str(ONNX), so, providers=["CPUExecutionProvider"])
        self.tok = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))

    def embed(self, texts, batch_size):
        import numpy as np

        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), 768), dtype=np.float32)
        for s in range(0, len(texts), batch_size):
            idx = order[s:s + batch_size]
            enc = self.tok([texts[i] for i in idx], padding=True, truncation=True, max_length=2048,
                           return_tensors="np")
            feeds = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
            (h,) = self.sess.run(["last_hidden_state"], feeds)
            m = feeds["attention_mask"][:, :, None].astype(np.float32)
            pooled = (h * m).sum(1) / m.sum(1)
            out[idx] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return out


def check_ort(ort):
    import numpy as np

    texts = json.loads((GOLDENS / "texts.json").read_text(encoding="utf-8"))
    want = np.fromfile(GOLDENS / "embeddings.f32", dtype="<f4").reshape(len(texts), 768)
    keep = [i for i, t in enumerate(texts) if len(t) < 2000][:60]
    got = ort.embed([texts[i] for i in keep], 16)
    cos = (got * want[keep]).sum(1)
    return float(cos.min())


def ferrite_run(ferrite, texts_file, threads, batch, bf16=False):
    cmd = [ferrite, "bench", str(GGUF), "--texts", str(texts_file), "-t", str(threads),
           "--batch-size", str(batch), "-r", "1", "--json"] + (["--bf16"] if bf16 else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["sent_per_s"]


def llama_wall(cmd):
    start = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if run.returncode != 0:
        raise RuntimeError(run.stderr[-2000:])
    return wall, run.stderr + run.stdout


def llama_run(texts_file, one_file, n, threads, fa):
    """Sentences/s of llama-embedding: from its `prompt eval time` when
    printed, else (its logger often loses the end of the output) from the
    wall time of the run minus that of a run on one short text (model load,
    set-up), both measured now."""
    def cmd(f):
        return [str(LLAMA_BIN / "llama-embedding"), "-m", str(GGUF), "-f", str(f), "-t", str(threads),
                "-c", "2048", "-b", "2048", "--pooling", "mean", "-fa", fa, "--embd-output-format", "array",
                "--no-warmup"]
    wall, out = llama_wall(cmd(texts_file))
    m = re.search(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", out)
    if m:
        return n / (float(m.group(1)) / 1e3), "prompt eval time"
    base, _ = llama_wall(cmd(one_file))
    return n / max(wall - base, 1e-9), "wall minus one-text run"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--ferrite", default=str(ROOT / "target" / "release" / "ferrite"))
    ap.add_argument("--bf16", action="store_true",
                    help="time ferrite with --bf16 (bf16 products, AVX512-BF16 only; not the f32 results)")
    a = ap.parse_args()
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import onnxruntime
    import torch
    import transformers

    lines = CORPUS.read_text(encoding="utf-8").splitlines()[: a.n]
    texts = [PREFIX + t for t in lines]
    tmp = tempfile.TemporaryDirectory(prefix="bench-nomic-")
    texts_file = pathlib.Path(tmp.name) / "texts.txt"
    texts_file.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    one_file = pathlib.Path(tmp.name) / "one.txt"
    one_file.write_text(PREFIX + "hello\n", encoding="utf-8")
    print(f"python: {shlex.join([sys.executable] + sys.argv)}")
    print(f"model: {GGUF}; {len(texts)} texts ('{PREFIX}' + the first {a.n} of {CORPUS.name}); "
          f"threads {a.threads}; batch {a.batch_size}; {a.rounds} rounds")
    print(f"versions: python {platform.python_version()}, onnxruntime {onnxruntime.__version__}, "
          f"torch {torch.__version__}, transformers {transformers.__version__}; llama.cpp "
          + subprocess.run([str(LLAMA_BIN / "llama-embedding"), "--version"], capture_output=True,
                           text=True).stderr.strip().splitlines()[0])
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} logical cores")

    onnx_note = ""
    try:
        if not ONNX.is_file():
            print(f"exporting {ONNX} …", flush=True)
            export_onnx()
        ort = Ort(a.threads)
        c = check_ort(ort)
        onnx_note = f"onnxruntime vs llama.cpp goldens: min cosine {c:.6f} over 60 texts"
        print(onnx_note, flush=True)
    except Exception as e:  # say so, measure the rest
        ort = None
        print(f"onnxruntime: could not build the ONNX model: {e}")

    figures = {"ferrite": [], "llama.cpp -fa off": [], "llama.cpp -fa on": [], "onnxruntime": []}
    hows = set()
    for r in range(a.rounds):
        load = os.getloadavg()[0]
        figures["ferrite"].append(ferrite_run(a.ferrite, texts_file, a.threads, a.batch_size, a.bf16))
        time.sleep(0.5)
        for fa in ("off", "on"):
            speed, how = llama_run(texts_file, one_file, len(texts), a.threads, fa)
            figures[f"llama.cpp -fa {fa}"].append(speed)
            hows.add(how)
            time.sleep(0.5)
        if ort is not None:
            time.sleep(0.5)
            ort.embed(texts[: a.batch_size], a.batch_size)
            start = time.perf_counter()
            ort.embed(texts, a.batch_size)
            figures["onnxruntime"].append(len(texts) / (time.perf_counter() - start))
        print(f"round {r + 1} (load average {load:.1f}): "
              + ", ".join(f"{k} {v[-1]:.1f}" for k, v in figures.items() if v), flush=True)

    print(f"\n| engine | sentences/s (median of {a.rounds}) | ferrite / engine |\n|---|---:|---:|")
    fm = statistics.median(figures["ferrite"])
    for k, v in figures.items():
        if v:
            m = statistics.median(v)
            print(f"| {k} | {m:.1f} | {fm / m:.2f}x |")
    print(f"llama.cpp timing from: {', '.join(sorted(hows))}")
    print(json.dumps({k: v for k, v in figures.items()}))


if __name__ == "__main__":
    main()
