#!/usr/bin/env python3
"""A random-weight Qwen3-MoE of realistic shape for speed comparisons with
llama.cpp (not a test fixture; nothing is committed but this script).

    ~/.cache/ferrite-refenv/bin/python scripts/make-moe-bench-model.py [OUT_DIR]

Shape: hidden 1024, 16 layers, 16 query heads and 4 KV heads of 64, 32
experts of width 512, 4 per token, norm_topk_prob, vocabulary 32000
(the tiny fixtures' tokenizer, padded): 0.93 B parameters in all, 0.14 B
active per token. transformers' own initialization (normal, std 0.02),
saved in bfloat16; then llama.cpp's convert_hf_to_gguf.py (--outtype f16)
and llama-quantize Q4_K_M, from $LLAMA_CPP (default
~/.cache/ferrite-reference/llama.cpp, built by
../shared/tools/build-llamacpp.sh). Writes OUT_DIR (default
/tmp/ferrite-moe-bench)/{hf, qwen3moe-bench.f16.gguf,
qwen3moe-bench.q4_k_m.gguf}. About 5 minutes on 2 cores, 6 GB of RAM.
"""

import importlib.util
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("hfdec", ROOT / "scripts" / "make-hf-decoder-fixtures.py")
hfdec = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hfdec)


def main():
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen3MoeConfig, Qwen3MoeForCausalLM

    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/ferrite-moe-bench")
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    raw = hfdec.train_tokenizer("qwen2")
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
    hfdec.save_tokenizer("qwen2", raw, hf)
    f16 = out / "qwen3moe-bench.f16.gguf"
    hfdec.convert(hf, "f16", f16)
    q4 = out / "qwen3moe-bench.q4_k_m.gguf"
    subprocess.run([str(hfdec.LLAMA / "build" / "bin" / "llama-quantize"), str(f16), str(q4), "Q4_K_M"],
                   check=True, capture_output=True)
    hfdec.log(f"wrote {q4} ({q4.stat().st_size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
