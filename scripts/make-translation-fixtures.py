#!/usr/bin/env python3
"""Random-weight translation models (Marian / opus-mt shape) with real
SentencePiece tokenizers, and goldens from HF transformers, so that ferrite's
`translate` path is tested without Python at test time.

Run from anywhere (a few minutes on 2 cores: each tiny model is trained):

    scripts/refenv pip install sentencepiece   # if missing
    scripts/refenv python scripts/make-translation-fixtures.py

Needs the reference venv (scripts/setup-refenv.sh: torch,
transformers, numpy) plus the `sentencepiece` package (pip, as above), which
trains the tokenizers and which MarianTokenizer itself runs on.

What it writes:

  testdata/translation/corpus.en, corpus.hi   (committed by hand, not written
        here: ~125 simple English sentences and their Hindi renderings,
        original text written for this project)
  testdata/translation/tiny-marian/   MarianMTModel as `save_pretrained`
        writes it (config.json, generation_config.json, model.safetensors,
        source.spm, target.spm, vocab.json, tokenizer_config.json,
        special_tokens_map.json). d_model 64, 2+2 layers, 4 heads, FFN 128,
        128 positions, SiLU ("swish"), scaled embeddings, tied shared
        embeddings, final_logits_bias. source.spm is a SentencePiece unigram
        model trained on corpus.en (vocab 300), target.spm on corpus.hi
        (vocab 400); vocab.json is `</s>`, `<unk>`, then every piece of both,
        then `<pad>` last, as opus-mt's are laid out.
  testdata/translation/marian-goldens.json   (layout below)
  testdata/translation/tiny-t5/, tiny-flan/, t5-goldens.json  (also made
        alone by --only-t5; --only-flan makes only tiny-flan and its
        goldens, merged into t5-goldens.json with the "t5" part kept as it
        was; --t5-goldens remakes only the goldens from the saved models
        present): T5ForConditionalGeneration
        as saved (config.json, generation_config.json, model.safetensors,
        tokenizer.json, tokenizer_config.json). tiny-t5: ReLU feed-forward,
        tied embeddings, 4 heads of 16 = d_model 64 (t5-small's layout);
        tiny-flan: gated-GELU ("gelu_new", the tanh form), untied lm_head
        (its own lm_head.weight, no d_model^-0.5 scaling, config.json
        `"tie_word_embeddings": false` as flan-t5's published one; see
        untie_lm_head for how transformers 5 is made to build it), 3 heads
        of 16 in a 64-wide model (heads * d_kv != d_model, as
        flan-t5-small). Both: 2+2
        layers, FFN 128, 32 relative buckets up to 128, trained 300 steps on
        "translate English to Hindi: " + corpus.en -> corpus.hi. The
        tokenizer is a SentencePiece unigram model (vocab 600) trained on
        both corpora with T5's ids (<pad> 0, </s> 1, <unk> 2) plus 8
        <extra_id_N>, saved as tokenizer.json by transformers' T5Tokenizer
        into tiny-t5 and copied from there into tiny-flan.
        t5-goldens.json: {"t5": {...}, "flan": {...}} with the same layout as
        marian-goldens.json (tokenizer.source/decode for "t5" only: 301
        strings, task-prefixed ones included).
  $FERRITE_TRANSLATION/opus-mt-en-hi-random/  (NOT committed; for
        benchmarks) the same class at opus-mt-en-hi's published shape:
        d_model 512, 6+6 layers, 8 heads, FFN 2048, 512 positions, vocab
        61,950 (the tiny tokenizer's pieces, then filler entries).

Weights: every parameter is drawn from a seeded torch.Generator (matrices
and embeddings N(0, std^2), fc2/out_proj N(0, (std/2)^2), biases
N(0, 0.1^2), LayerNorm gains 1 + N(0, 0.1^2), final_logits_bias
N(0, 0.1^2)); std is 0.1 for the tiny model, which is then trained for 300
full-batch Adam steps on the corpus pairs (see `train`): a random tiny model
repeats one token forever and never emits `</s>`, which would leave beam
search's finishing rules untested. The benchmark model keeps random weights
(std 0.05). final_logits_bias is a buffer, not trained: it keeps its random
values, so a loader that ignores it fails the logits test.

Goldens (marian-goldens.json):
  tokenizer.source: [{text, ids}] for >= 200 strings: MarianTokenizer(text)
        input_ids (source.spm pieces mapped through vocab.json, `</s>`
        appended).
  tokenizer.target: [{text, ids}] the same strings as targets
        (text_target=..., target.spm).
  tokenizer.decode: [{ids, text}] MarianTokenizer.decode(ids,
        skip_special_tokens=True, use_source_tokenizer=False) of target
        encodings. (transformers 5 decodes with the SOURCE spm by default
        when the vocabulary is shared, which turns every Hindi piece into
        " ⁇ "; ferrite decodes outputs with target.spm, as transformers 4
        did, and the goldens ask for that explicitly.)
  The tokenizer runs without `sacremoses` (not installed in the venv), so
  no Moses punctuation normalization happens before SentencePiece; ferrite
  does none either.
  encoder: [{ids, hidden}] last_hidden_state (len x d_model, row-major).
  decoder: [{ids, decoder_ids, logits}] logits of every decoder position
        (len x vocab) for a forced decoder input starting with
        decoder_start_token_id.
  generate: [{name, options, outputs: [{ids, out}]}] model.generate
        outputs (without the leading decoder start token) on 24 inputs:
        greedy, beam 4 with the model's generation_config, and beam 4 with
        length_penalty 0.6, no_repeat_ngram_size 2, early_stopping True.
"""

import json
import os
import pathlib
import shutil
import sys
import tempfile

import numpy as np
import torch

try:
    import sentencepiece as spm
except ImportError:
    sys.exit("needs sentencepiece: scripts/refenv pip install sentencepiece")

from transformers import (
    MarianConfig,
    MarianMTModel,
    MarianTokenizer,
    T5Config,
    T5ForConditionalGeneration,
    T5Tokenizer,
)

import common

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "translation"
BENCH = common.TRANSLATION

MAX_LENGTH = 24


def train_spm(corpus: pathlib.Path, vocab_size: int, dest: pathlib.Path):
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "m")
        spm.SentencePieceTrainer.train(
            input=str(corpus),
            model_prefix=prefix,
            vocab_size=vocab_size,
            model_type="unigram",
            character_coverage=1.0,
            hard_vocab_limit=False,
            num_threads=1,
            seed_sentencepiece_size=100000,
            minloglevel=2,
        )
        shutil.copy(prefix + ".model", dest)


def marian_vocab(source: pathlib.Path, target: pathlib.Path, size=None):
    pieces = ["</s>", "<unk>"]
    seen = set(pieces) | {"<s>", "<pad>"}
    for path in (source, target):
        sp = spm.SentencePieceProcessor(model_file=str(path))
        for i in range(sp.get_piece_size()):
            p = sp.id_to_piece(i)
            if sp.is_control(i) or sp.is_unknown(i) or p in seen:
                continue
            seen.add(p)
            pieces.append(p)
    if size is not None:
        pieces += [f"<filler{i}>" for i in range(size - 1 - len(pieces))]
    pieces.append("<pad>")
    return {p: i for i, p in enumerate(pieces)}


def randomize(model, seed, std):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda x: x[0]):
            if "layer_norm" in name or "layernorm" in name:
                if name.endswith("weight"):
                    p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
                else:
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_positions" in name:
                continue
            elif "shared" in name or "embed" in name:
                p.copy_(std * torch.randn(p.shape, generator=g))
            elif "fc2" in name or "out_proj" in name:
                p.copy_(std / 2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(std * torch.randn(p.shape, generator=g))
        b = 0.1 * torch.randn(model.final_logits_bias.shape, generator=g)
        model.final_logits_bias.copy_(b)


def train(model, tok, en, hi, steps, seed):
    """A few hundred Adam steps on the sentence pairs: the tiny model then
    translates its training sentences (memorized), ends its outputs with
    `</s>` and has peaked, realistic next-token distributions."""
    torch.manual_seed(seed)
    batch = tok(en, text_target=hi, padding=True, return_tensors="pt")
    labels = batch["labels"].masked_fill(batch["labels"] == tok.pad_token_id, -100)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for step in range(steps):
        loss = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels
        ).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    print(f"trained {steps} steps, final loss {loss.item():.3f}")


def build_marian(dest: pathlib.Path, vocab, shape: dict, seed: int, training=None):
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(vocab),
        activation_function="swish",
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=pad,
        eos_token_id=0,
        bos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        **shape,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    randomize(model, seed, std=0.1 if training is not None else 0.05)
    if training is not None:
        train(model, *training, seed=seed)
    gen = model.generation_config
    # As opus-mt-en-hi's generation_config.json.
    gen.bad_words_ids = [[pad]]
    gen.num_beams = 4
    gen.max_length = shape["max_position_embeddings"]
    gen.renormalize_logits = True
    gen.forced_eos_token_id = 0
    gen.pad_token_id = pad
    gen.decoder_start_token_id = pad
    gen.eos_token_id = 0
    gen.bos_token_id = 0
    model.save_pretrained(dest, safe_serialization=True)
    return model


TEST_STRINGS_EXTRA = [
    "",
    " ",
    "Hello, world!",
    "  leading and trailing spaces  ",
    "many     spaces    inside",
    "tab\tand\nnewline",
    "UPPER CASE and lower case",
    "Numbers: 0 1 2 3 42 3.14159 1,000,000",
    "Punctuation!?.,;:'\"()[]{}-_/\\@#$%^&*+=<>|~`",
    "émigré café naïve",
    "Snowman ☃ and emoji 😀 are unknown.",
    "中文字符不在词表里",
    "Ελληνικά και кириллица",
    "नमस्ते दुनिया!",
    "हिंदी और English mixed",
    "क्षत्रिय ज्ञान श्रृंखला",
    "ॐ ॥ १२३४५",
    "fullwidth ＡＢＣ１２３ and ligature ﬁ",
    "The \u00a0non-breaking space",
    "zero\u200bwidth",
    "a",
    "I",
    ".",
    "...",
    "?!",
    "don't won't can't",
    "e-mail: someone@example.com",
    "https://example.org/path?q=1",
    "The train leaves at 7:45 am.",
    "x" * 60,
    "word " * 30,
]


def tokenizer_goldens(tok, texts):
    source = [{"text": t, "ids": tok(t).input_ids} for t in texts]
    target = [{"text": t, "ids": tok(text_target=t).input_ids} for t in texts]
    decode = [
        {
            "ids": e["ids"],
            "text": tok.decode(e["ids"], skip_special_tokens=True, use_source_tokenizer=False),
        }
        for e in target
    ]
    return {"source": source, "target": target, "decode": decode}


def floats(t):
    return [float(x) for x in t.reshape(-1).tolist()]


def model_goldens(model, tok, texts, gen_inputs):
    start = model.config.decoder_start_token_id
    enc, dec = [], []
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for t in texts:
            ids = tok(t, return_tensors="pt").input_ids
            h = model.get_encoder()(input_ids=ids).last_hidden_state[0]
            enc.append({"ids": ids[0].tolist(), "hidden": floats(h)})
            n = 6
            forced = torch.randint(2, model.config.vocab_size - 1, (1, n - 1), generator=g)
            dids = torch.cat([torch.tensor([[start]]), forced], dim=1)
            logits = model(input_ids=ids, decoder_input_ids=dids).logits[0]
            dec.append(
                {"ids": ids[0].tolist(), "decoder_ids": dids[0].tolist(), "logits": floats(logits)}
            )
    runs = []
    variants = [
        ("greedy", {"num_beams": 1, "do_sample": False, "max_length": MAX_LENGTH}),
        ("beam4", {"num_beams": 4, "do_sample": False, "max_length": MAX_LENGTH}),
        (
            "beam4-lp0.6-nrng2-early",
            {
                "num_beams": 4,
                "do_sample": False,
                "max_length": MAX_LENGTH,
                "length_penalty": 0.6,
                "no_repeat_ngram_size": 2,
                "early_stopping": True,
            },
        ),
    ]
    for name, opts in variants:
        outs = []
        with torch.no_grad():
            for t in gen_inputs:
                ids = tok(t, return_tensors="pt").input_ids
                out = model.generate(input_ids=ids, **opts)[0].tolist()
                assert out[0] == start
                outs.append({"ids": ids[0].tolist(), "out": out[1:]})
        runs.append({"name": name, "options": opts, "outputs": outs})
    return {"encoder": enc, "decoder": dec, "generate": runs}


T5_PREFIX = "translate English to Hindi: "


def t5_tokenizer(dest: pathlib.Path, corpus_files):
    """A T5-layout Unigram tokenizer (<pad> 0, </s> 1, <unk> 2, pieces, 8
    <extra_id_N>) from a SentencePiece model trained on `corpus_files`,
    saved as tokenizer.json by transformers' T5Tokenizer."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    with tempfile.TemporaryDirectory() as tmp:
        text = pathlib.Path(tmp) / "all.txt"
        text.write_text("".join(f.read_text() for f in corpus_files))
        prefix = os.path.join(tmp, "t5")
        spm.SentencePieceTrainer.train(
            input=str(text),
            model_prefix=prefix,
            vocab_size=600,
            model_type="unigram",
            character_coverage=1.0,
            hard_vocab_limit=False,
            num_threads=1,
            pad_id=0,
            eos_id=1,
            unk_id=2,
            bos_id=-1,
            minloglevel=2,
        )
        proto = pb.ModelProto()
        proto.ParseFromString(open(prefix + ".model", "rb").read())
    vocab = [(p.piece, p.score) for p in proto.pieces]
    tok = T5Tokenizer(
        vocab=vocab,
        _spm_precompiled_charsmap=proto.normalizer_spec.precompiled_charsmap,
        extra_ids=8,
    )
    tok.save_pretrained(dest)
    return T5Tokenizer.from_pretrained(dest)


def untie_lm_head(model, seed):
    """Gives a T5 model its own output matrix, as flan-t5 (T5 v1.1) has.

    transformers 5's T5Config always sets tie_word_embeddings=True and keeps
    the flag it was given only as scale_decoder_outputs (whether the last
    hidden state is scaled by d_model^-0.5), so T5ForConditionalGeneration
    built from a `tie_word_embeddings=False` config still shares `shared`
    as its lm_head. Loading a checkpoint whose lm_head.weight differs from
    shared.weight unties them (modeling_utils.tie_weights), which is how a
    published flan-t5 loads; here the head is replaced by its own
    parameter, drawn N(0, 1) as transformers 4 drew an untied T5 head, and
    removed from the model's tied-weights map so save_pretrained writes it."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(model.lm_head.weight.shape, generator=g)
    model.lm_head.weight = torch.nn.Parameter(w)
    model.all_tied_weights_keys.pop("lm_head.weight", None)
    assert model.lm_head.weight is not model.shared.weight


def build_t5(dest, tok, en, hi, variant, seed):
    gated = variant == "flan"
    config = T5Config(
        vocab_size=len(tok),
        d_model=64,
        d_kv=16,
        # flan-t5-small's heads * d_kv differs from d_model; so does this one's.
        num_heads=3 if gated else 4,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        feed_forward_proj="gated-gelu" if gated else "relu",
        tie_word_embeddings=not gated,
        dropout_rate=0.0,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(config).eval()
    if gated:
        assert config.dense_act_fn == "gelu_new" and not config.scale_decoder_outputs
        untie_lm_head(model, seed)
    train(model, tok, [T5_PREFIX + e for e in en], hi, 300, seed=seed)
    model.save_pretrained(dest, safe_serialization=True)
    tok.save_pretrained(dest)
    if gated:
        # config.json as flan-t5's published one: untied, no
        # transformers-5-only scale_decoder_outputs key.
        path = dest / "config.json"
        cfg = json.loads(path.read_text())
        cfg["tie_word_embeddings"] = False
        cfg.pop("scale_decoder_outputs", None)
        path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    loaded = T5ForConditionalGeneration.from_pretrained(dest, attn_implementation="eager").eval()
    if gated:
        assert loaded.lm_head.weight is not loaded.shared.weight
        assert not loaded.config.scale_decoder_outputs
        assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)
        check_resaved_flan(dest, loaded)
    return loaded


def check_resaved_flan(dest, model):
    """A flan-t5 saved again by transformers 5 has config.json
    `"tie_word_embeddings": true, "scale_decoder_outputs": false` and its
    own lm_head.weight; transformers loads that as the same untied,
    unscaled model (ferrite's test loads this layout too)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for f in dest.iterdir():
            shutil.copy(f, tmp / f.name)
        cfg = json.loads((tmp / "config.json").read_text())
        cfg["tie_word_embeddings"] = True
        cfg["scale_decoder_outputs"] = False
        (tmp / "config.json").write_text(json.dumps(cfg))
        again = T5ForConditionalGeneration.from_pretrained(tmp, attn_implementation="eager").eval()
        ids = torch.tensor([[5, 9, 17, 1]])
        dids = torch.tensor([[0, 7, 11]])
        with torch.no_grad():
            a = model(input_ids=ids, decoder_input_ids=dids).logits
            b = again(input_ids=ids, decoder_input_ids=dids).logits
        assert torch.equal(a, b), "transformers-5 re-saved flan layout loads differently"


T5_VARIANTS = (("t5", 3), ("flan", 4))


def t5_fixtures(en, hi, build, goldens_for):
    """tiny-t5 (ReLU, tied, T5 style) and tiny-flan (gated-GELU,
    untied, 3 heads of 16 in a 64-wide model) with t5-goldens.json.
    `build`: the variants to make (tiny-flan takes tiny-t5's tokenizer, so
    tiny-t5 must exist or be built too); `goldens_for`: the variants whose
    goldens are remade from their saved directories (those whose
    model.safetensors exists); other variants' goldens already in
    t5-goldens.json are kept unchanged."""
    path = OUT / "t5-goldens.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    goldens = {}
    for variant, seed in T5_VARIANTS:
        dest = OUT / f"tiny-{variant}"
        if variant in build:
            if dest.exists():
                shutil.rmtree(dest)
            dest.mkdir()
            if variant == "t5":
                tok = t5_tokenizer(dest, [OUT / "corpus.en", OUT / "corpus.hi"])
            else:
                tok = T5Tokenizer.from_pretrained(OUT / "tiny-t5")
            build_t5(dest, tok, en, hi, variant, seed)
        if variant not in goldens_for:
            if variant in old:
                goldens[variant] = old[variant]
            continue
        if not (dest / "model.safetensors").exists():
            continue
        tok = T5Tokenizer.from_pretrained(dest)
        model = T5ForConditionalGeneration.from_pretrained(dest, attn_implementation="eager").eval()
        g = {}
        if variant == "t5":
            texts = en + hi + TEST_STRINGS_EXTRA + [T5_PREFIX + e for e in en[:20]]
            g["tokenizer"] = {
                "source": [{"text": t, "ids": tok(t).input_ids} for t in texts],
                "decode": [
                    {"ids": tok(t).input_ids, "text": tok.decode(tok(t).input_ids, skip_special_tokens=True)}
                    for t in texts
                ],
            }
        probe = [T5_PREFIX + en[0], T5_PREFIX + en[5], hi[3], "Snowman ☃ here."]
        gen_inputs = [T5_PREFIX + e for e in en[:16]] + [
            T5_PREFIX + "Hello!",
            T5_PREFIX + "The price of mangoes went up.",
            T5_PREFIX + "Please write slowly.",
            "?",
            hi[0],
            T5_PREFIX + "Numbers 12 and 250.",
            T5_PREFIX + "word " * 12,
            T5_PREFIX + "The river, the road and the bridge are old.",
        ]
        g.update(model_goldens(model, tok, probe, gen_inputs))
        goldens[variant] = g
    goldens["config"] = {"max_length": MAX_LENGTH, "prefix": T5_PREFIX}
    path.write_text(json.dumps(goldens, ensure_ascii=False))
    print("wrote", path, "with", [v for v, _ in T5_VARIANTS if v in goldens])


def main():
    torch.set_num_threads(2)
    every = {v for v, _ in T5_VARIANTS}
    t5_runs = {
        "--only-t5": (every, every),
        "--only-flan": ({"flan"}, {"flan"}),
        "--t5-goldens": (set(), every),
    }
    for flag, (build, goldens_for) in t5_runs.items():
        if flag in sys.argv:
            en = (OUT / "corpus.en").read_text().splitlines()
            hi = (OUT / "corpus.hi").read_text().splitlines()
            t5_fixtures(en, hi, build, goldens_for)
            return
    OUT.mkdir(parents=True, exist_ok=True)
    en = (OUT / "corpus.en").read_text().splitlines()
    hi = (OUT / "corpus.hi").read_text().splitlines()

    tiny = OUT / "tiny-marian"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        train_spm(OUT / "corpus.en", 300, tmp / "source.spm")
        train_spm(OUT / "corpus.hi", 400, tmp / "target.spm")
        vocab = marian_vocab(tmp / "source.spm", tmp / "target.spm")
        (tmp / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1))
        tok = MarianTokenizer(
            str(tmp / "source.spm"),
            str(tmp / "target.spm"),
            str(tmp / "vocab.json"),
            source_lang="en",
            target_lang="hi",
        )
        if tiny.exists():
            shutil.rmtree(tiny)
        tiny.mkdir()
        tok.save_pretrained(tiny)
        shape = dict(
            d_model=64,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            max_position_embeddings=128,
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
        )
        model = build_marian(tiny, vocab, shape, seed=1, training=(tok, en, hi, 300))

        # Reload both from disk so the goldens are of the saved files.
        tok = MarianTokenizer.from_pretrained(tiny)
        model = MarianMTModel.from_pretrained(tiny, attn_implementation="eager").eval()

        texts = en + hi + TEST_STRINGS_EXTRA
        goldens = {"tokenizer": tokenizer_goldens(tok, texts)}
        probe = [en[0], en[5], "Where is the station?", hi[3], "Snowman ☃ here."]
        gen_inputs = en[:16] + [
            "Hello!",
            "The price of mangoes went up.",
            "Please write slowly.",
            "?",
            hi[0],
            "Numbers 12 and 250.",
            "word " * 12,
            "The river, the road and the bridge are old.",
        ]
        goldens.update(model_goldens(model, tok, probe, gen_inputs))
        goldens["config"] = {"max_length": MAX_LENGTH}
        (OUT / "marian-goldens.json").write_text(json.dumps(goldens, ensure_ascii=False))

        # opus-mt-en-hi's shape, for benchmarks only (not committed).
        big = BENCH / "opus-mt-en-hi-random"
        if "--no-bench" not in sys.argv:
            if big.exists():
                shutil.rmtree(big)
            big.mkdir(parents=True)
            vocab_big = marian_vocab(tmp / "source.spm", tmp / "target.spm", size=61950)
            (tmp / "vocab-big.json").write_text(json.dumps(vocab_big, ensure_ascii=False))
            tok_big = MarianTokenizer(
                str(tmp / "source.spm"),
                str(tmp / "target.spm"),
                str(tmp / "vocab-big.json"),
                source_lang="en",
                target_lang="hi",
            )
            tok_big.save_pretrained(big)
            shape_big = dict(
                d_model=512,
                encoder_layers=6,
                decoder_layers=6,
                encoder_attention_heads=8,
                decoder_attention_heads=8,
                encoder_ffn_dim=2048,
                decoder_ffn_dim=2048,
                max_position_embeddings=512,
            )
            build_marian(big, vocab_big, shape_big, seed=2)
            print("wrote", big)
    print("wrote", tiny, OUT / "marian-goldens.json")
    t5_fixtures(en, hi, every, every)


if __name__ == "__main__":
    main()
