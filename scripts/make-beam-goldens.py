#!/usr/bin/env python3
"""Goldens for decoder-only beam search (`ferrite run --beams N`).

Runs transformers' `generate(num_beams=N, do_sample=False)` on the tiny
random-weight decoders already in testdata/ (GPT-2, the HF Llama and Qwen2
directories) for the prompts of their greedy goldens, with several search
options, and writes the generated ids to testdata/beam/goldens.json.

One case per model uses as end-of-sequence a token the model's greedy
continuation produces, so that hypotheses finish before `max_length` and
the finished-hypotheses rules (length penalty, early stopping) decide.

Run with the reference venv (scripts need transformers and torch):
    scripts/refenv python scripts/make-beam-goldens.py
"""
import json
import pathlib

import torch
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "beam"

OPTIONS = [
    {"num_beams": 4, "max_new_tokens": 12},
    {"num_beams": 4, "max_new_tokens": 12, "length_penalty": 0.5, "no_repeat_ngram_size": 2},
    {"num_beams": 3, "max_new_tokens": 10, "early_stopping": True},
    {"num_beams": 2, "max_new_tokens": 10, "early_stopping": "never", "length_penalty": 2.0},
]


def models():
    gpt2 = json.loads((ROOT / "testdata/gpt2/goldens.json").read_text())
    yield "gpt2", "testdata/gpt2/tiny-hf", [c["prompt_ids"] for c in gpt2["greedy"]["cases"][:3]]
    hf = json.loads((ROOT / "testdata/hf-decoders/goldens.json").read_text())
    for name in ("tiny-llama", "tiny-qwen2"):
        cases = hf["models"][name]["greedy"]
        yield name, f"testdata/hf-decoders/{name}", [c["prompt_ids"] for c in cases[:2]]


def main():
    torch.manual_seed(0)
    OUT.mkdir(parents=True, exist_ok=True)
    goldens = {"transformers": __import__("transformers").__version__, "torch": torch.__version__, "models": {}}
    for name, directory, prompts in models():
        model = AutoModelForCausalLM.from_pretrained(str(ROOT / directory), dtype=torch.float32,
                                                     attn_implementation="eager")
        model.eval()
        eos = model.generation_config.eos_token_id
        eos = eos[0] if isinstance(eos, list) else eos
        cases = []
        for i, ids in enumerate(prompts):
            x = torch.tensor([ids])
            with torch.no_grad():
                greedy = model.generate(x, do_sample=False, max_new_tokens=12, pad_token_id=eos,
                                        eos_token_id=None, attention_mask=torch.ones_like(x))[0, len(ids):].tolist()
            # A token of the greedy continuation (its third) as end of sequence.
            eos_options = [eos, greedy[2]] if i == 0 else [eos]
            for case_eos in eos_options:
                for opts in OPTIONS:
                    with torch.no_grad():
                        out = model.generate(x, do_sample=False, pad_token_id=case_eos, eos_token_id=case_eos,
                                             attention_mask=torch.ones_like(x), **opts)
                    # One input: the best hypothesis, unpadded.
                    new = out[0, len(ids):].tolist()
                    cases.append({"prompt_ids": ids, "eos": case_eos, "options": opts, "new_ids": new})
        goldens["models"][name] = {"dir": directory, "cases": cases}
        print(name, [len(c["new_ids"]) for c in cases])
    (OUT / "goldens.json").write_text(json.dumps(goldens, indent=1) + "\n")


if __name__ == "__main__":
    main()
