#!/usr/bin/env python3
"""A random-weight Qwen3-MoE of realistic shape for speed comparisons with
llama.cpp (not a test fixture; nothing is committed but this script), or
with `--dense-llama3` a dense Llama-3-shaped one (issue 29's spot check of
the dense families).

    scripts/refenv python scripts/make-moe-bench-model.py [--dense-llama3] [OUT_DIR]

Shape: hidden 1024, 16 layers, 16 query heads and 4 KV heads of 64, 32
experts of width 512, 4 per token, norm_topk_prob, vocabulary 32000
(the tiny fixtures' tokenizer, padded): 0.93 B parameters in all, 0.14 B
active per token. transformers' own initialization (normal, std 0.02),
saved in bfloat16; then llama.cpp's convert_hf_to_gguf.py (--outtype f16)
and llama-quantize Q4_K_M, from $FERRITE_LLAMACPP
(scripts/env.sh, built by scripts/build-llamacpp.sh). Writes OUT_DIR (default
ferrite-moe-bench in the temporary directory)/{hf, qwen3moe-bench.f16.gguf,
qwen3moe-bench.q4_k_m.gguf}. About 5 minutes on 2 cores, 6 GB of RAM.

`--dense-llama3`: hidden 1024, 24 layers, 16 query heads and 8 KV heads of
64, SwiGLU width 4096, `llama3` RoPE scaling as Llama 3.2's (factor 32,
low/high frequency factors 1 and 4, original context 8192), theta 500000,
vocabulary 32000 (the fixtures' Llama-3-style tokenizer, padded), untied
output: 0.44 B parameters. Writes OUT_DIR (default
ferrite-llama3-bench in the temporary directory)/{hf, llama3-bench.f16.gguf,
llama3-bench.q4_k_m.gguf}.
"""

import importlib.util
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("hfdec", ROOT / "scripts" / "make-hf-decoder-fixtures.py")
hfdec = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hfdec)


def main():
    import torch
    from transformers import (LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen3MoeConfig,
                              Qwen3MoeForCausalLM)

    args = sys.argv[1:]
    dense = "--dense-llama3" in args
    args = [a for a in args if a != "--dense-llama3"]
    name = "llama3-bench" if dense else "qwen3moe-bench"
    default = pathlib.Path(tempfile.gettempdir()) / ("ferrite-llama3-bench" if dense else "ferrite-moe-bench")
    out = pathlib.Path(args[0]) if args else default
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    if dense:
        kind = "llama"
        raw = hfdec.train_tokenizer(kind)
        tok = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
        config = LlamaConfig(
            vocab_size=32000, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
            num_key_value_heads=8, head_dim=64, intermediate_size=4096, max_position_embeddings=131072,
            tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192},
        )
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    else:
        kind = "qwen2"
        raw = hfdec.train_tokenizer(kind)
        tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>")
        config = Qwen3MoeConfig(
            vocab_size=32000, hidden_size=1024, num_hidden_layers=16, num_attention_heads=16,
            num_key_value_heads=4, head_dim=64, num_experts=32, num_experts_per_tok=4,
            moe_intermediate_size=512, intermediate_size=2048, norm_topk_prob=True,
            max_position_embeddings=4096, tie_word_embeddings=False, eos_token_id=tok.eos_token_id,
            rope_theta=1000000.0, decoder_sparse_step=1, mlp_only_layers=[],
        )
        model = Qwen3MoeForCausalLM(config).to(torch.bfloat16)
    n = sum(p.numel() for p in model.parameters())
    hfdec.log(f"{n / 1e9:.2f} B parameters")
    hf = out / "hf"
    model.save_pretrained(str(hf))
    del model
    hfdec.save_tokenizer(kind, raw, hf)
    f16 = out / f"{name}.f16.gguf"
    hfdec.convert(hf, "f16", f16)
    q4 = out / f"{name}.q4_k_m.gguf"
    subprocess.run([str(hfdec.LLAMA / "build" / "bin" / "llama-quantize"), str(f16), str(q4), "Q4_K_M"],
                   check=True, capture_output=True)
    hfdec.log(f"wrote {q4} ({q4.stat().st_size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
