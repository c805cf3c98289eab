//! The before/after guard of refactors: a SHA-256 of the exact bits every
//! model kind computes on a fixed input, compared with the hashes recorded
//! in `testdata/bits/hashes.json` when this test was added (main at
//! e9788fc; the decoders' re-pinned once by issue 46, whose tiled
//! attention sums in a new fixed order). A change that is meant to keep behaviour (a new layer
//! vocabulary, a new entry point, moved kernels) must keep every hash.
//!
//! Covered: decoders (SmolLM2 Q4_1, Gemma 3 Q4_K_M, Qwen2.5 Q4_K_M, GPT-2
//! f32 and Q8_0 GGUF, llama2.c f32 and Q8_0 checkpoints, HF Llama and
//! Qwen2 directories): every position's logits of a fixed prompt, then
//! three greedy single-token steps' logits, and the prompt's token ids;
//! encoders (all-MiniLM-L6-v2, all-mpnet-base-v2, nomic-embed-text-v1.5,
//! the tiny BERT directory and GGUF, the tiny nomic-bert): the vectors of
//! three texts; encoder-decoders (tiny Marian, T5, flan-T5): the encoder's
//! output, the decoder's logits over three forced steps, and beam-4 and
//! greedy outputs.
//!
//! Every kernel set computes the same bits (the book's "The determinism
//! contract", `docs/src/determinism.md`), so the hashes hold on every CPU. `FERRITE_BLESS_BITS=1` rewrites
//! the file instead of comparing: only for a change that is meant to change
//! results, and say so in its commit.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferrite::embed::{EmbedOptions, Embedder};
use ferrite::formats::llama2c;
use ferrite::generate::beam::generate;
use ferrite::models::decoder::Logits;
use ferrite::models::seq2seq::forward::{StepRow, Workspace};
use ferrite::models::seq2seq::weights::WeightFormat;
use ferrite::models::{load_causal_lm, open_causal_lm, CausalLm};
use ferrite::parallel::Threads;
use ferrite::tokenize::Tokenizer;
use ferrite::translate::{LoadOptions, Translator};
use sha2::{Digest, Sha256};

const PROMPT: &str = "The quick brown fox jumps over the lazy dog. Once upon a time,";

/// A running hash of values.
#[derive(Default)]
struct Bits(Sha256);

impl Bits {
    fn floats(&mut self, v: &[f32]) {
        self.0.update((v.len() as u64).to_le_bytes());
        for x in v {
            self.0.update(x.to_bits().to_le_bytes());
        }
    }
    fn ids(&mut self, v: &[u32]) {
        self.0.update((v.len() as u64).to_le_bytes());
        for x in v {
            self.0.update(x.to_le_bytes());
        }
    }
    fn hex(self) -> String {
        self.0
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

fn hashes_path() -> PathBuf {
    common::testdata().join("bits/hashes.json")
}

fn recorded() -> BTreeMap<String, String> {
    match std::fs::read_to_string(hashes_path()) {
        Ok(s) => serde_json::from_str(&s).expect("hashes.json is a map of names to hashes"),
        Err(_) => BTreeMap::new(),
    }
}

/// Compares `got` with the recorded hash of `name` (or records it).
fn check(name: &str, got: String) {
    if std::env::var_os("FERRITE_BLESS_BITS").is_some() {
        // Tests run in parallel: re-read, insert, write back under a lock.
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _g = LOCK.lock().unwrap();
        let mut all = recorded();
        all.insert(name.to_string(), got);
        std::fs::create_dir_all(hashes_path().parent().unwrap()).unwrap();
        let text = serde_json::to_string_pretty(&all).unwrap();
        std::fs::write(hashes_path(), text + "\n").unwrap();
        return;
    }
    let want = recorded()
        .get(name)
        .cloned()
        .unwrap_or_else(|| panic!("no recorded hash for {name} in {:?}", hashes_path()));
    assert_eq!(got, want, "{name}: the computed bits changed");
}

/// The prompt's ids, every position's logits, then three greedy steps.
fn decoder_bits(model: &dyn CausalLm, tokenizer: &Tokenizer) -> String {
    let mut bits = Bits::default();
    let ids = tokenizer.encode(PROMPT, true, false);
    bits.ids(&ids);
    let mut state = model.new_state(128, Threads::new(2)).expect("a state");
    let mut logits = Vec::new();
    model
        .forward(&ids, &mut state, Logits::All, &mut logits)
        .expect("a forward pass");
    bits.floats(&logits);
    let n_vocab = model.n_vocab();
    for _ in 0..3 {
        let last = &logits[logits.len() - n_vocab..];
        let next = common::argmax(last);
        model
            .forward(&[next], &mut state, Logits::Last, &mut logits)
            .expect("a step");
        bits.floats(&logits);
    }
    bits.hex()
}

fn decoder_at(path: &Path) -> String {
    let (file, model) = open_causal_lm(path).expect("the model opens");
    let tokenizer = Tokenizer::from_gguf(file.metadata()).expect("a tokenizer");
    decoder_bits(model.as_ref(), &tokenizer)
}

#[test]
fn real_decoders() {
    for name in ["smollm2", "gemma3-270m", "qwen2.5-0.5b"] {
        check(name, decoder_at(&common::real_model(name)));
    }
}

#[test]
fn fixture_decoders() {
    let td = common::testdata();
    for (name, path) in [
        ("gpt2-f32", td.join("gpt2/tiny.f32.gguf")),
        ("gpt2-q8_0", td.join("gpt2/tiny.q8_0.gguf")),
        ("hf-tiny-llama", td.join("hf-decoders/tiny-llama")),
        ("hf-tiny-qwen2", td.join("hf-decoders/tiny-qwen2")),
        ("hf-tiny-qwen2-bf16", td.join("hf-decoders/tiny-qwen2-bf16")),
    ] {
        check(name, decoder_at(&path));
    }
    for ckpt in ["v1.bin", "v2-q8.bin"] {
        let dir = td.join("llama2c");
        let file =
            Arc::new(llama2c::open(&dir.join(ckpt), &dir.join("tokenizer.bin")).expect("opens"));
        let tokenizer = Tokenizer::from_gguf(file.metadata()).expect("a tokenizer");
        let model = load_causal_lm(file).expect("loads");
        check(
            &format!("llama2c-{ckpt}"),
            decoder_bits(model.as_ref(), &tokenizer),
        );
    }
}

fn encoder_bits(path: &Path) -> String {
    let embedder = Embedder::open(path).expect("the model opens");
    let texts = [
        "A man is playing a guitar.",
        "search_query: what is the capital of France?",
        "Rust is a systems programming language focused on safety, speed and concurrency.",
    ];
    let out = embedder
        .embed(&texts, &EmbedOptions::default(), &Threads::new(2))
        .expect("embeds");
    let mut bits = Bits::default();
    for e in out {
        bits.floats(&e.vector);
    }
    bits.hex()
}

#[test]
fn encoders() {
    for name in ["minilm", "mpnet", "nomic-embed-v1.5"] {
        check(name, encoder_bits(&common::real_model(name)));
    }
    let td = common::testdata().join("embed");
    for (name, path) in [
        ("bert-tiny-dir", td.join("bert-tiny")),
        ("bert-tiny-gguf", td.join("bert-tiny/bert-tiny.f32.gguf")),
        ("nomic-tiny-dir", td.join("nomic-tiny")),
        ("nomic-tiny-gguf", td.join("nomic-tiny/nomic-tiny.f32.gguf")),
    ] {
        check(name, encoder_bits(&path));
    }
}

fn seq2seq_bits(dir: &Path, format: WeightFormat) -> String {
    let opts = LoadOptions {
        format,
        ..LoadOptions::default()
    };
    let tr = Translator::open(dir, &opts).expect("the model opens");
    let m = tr.model();
    let threads = Threads::new(2);
    let mut ws = Workspace::default();
    let mut bits = Bits::default();
    let inputs: Vec<Vec<u32>> = ["Hello, world.", "The cat sat on the mat near the door."]
        .iter()
        .map(|t| tr.encode(t).expect("encodes"))
        .collect();
    for input in &inputs {
        bits.ids(input);
        let src = m.encode(&[input], &threads, &mut ws).expect("encodes");
        bits.floats(&src[0].hidden);
        let mut cache = m.new_cache();
        let mut logits = Vec::new();
        let mut token = m.config.decoder_start;
        for _ in 0..3 {
            let mut rows = [StepRow {
                token,
                cache: &mut cache,
                source: &src[0],
            }];
            m.step(&mut rows, &threads, &mut ws, &mut logits)
                .expect("steps");
            bits.floats(&logits);
            token = common::argmax(&logits);
        }
    }
    let seqs: Vec<&[u32]> = inputs.iter().map(|v| &v[..]).collect();
    for beams in [4, 1] {
        let mut opts = tr.defaults().clone();
        opts.num_beams = beams;
        opts.max_length = 12;
        let src = m.encode(&seqs, &threads, &mut ws).expect("encodes");
        for out in generate(m, &src, &opts, &threads, &mut ws).expect("generates") {
            bits.ids(&out);
        }
    }
    bits.hex()
}

#[test]
fn encoder_decoders() {
    let td = common::testdata().join("translation");
    for name in ["tiny-marian", "tiny-t5", "tiny-flan"] {
        check(name, seq2seq_bits(&td.join(name), WeightFormat::F32));
        // Matrices quantized at load (`--weights q8_0`).
        let q8 = format!("{name}-q8_0");
        check(&q8, seq2seq_bits(&td.join(name), WeightFormat::Q8_0));
    }
}
