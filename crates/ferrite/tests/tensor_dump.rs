//! The tensor dump (`TensorDump`, `ferrite run/translate/embed --dump`):
//! the files a forward pass writes hold the values computed another way
//! (by the test from the model file's own tensors, by the library's
//! other entry points, by Hugging Face transformers' goldens), and
//! dumping changes no output bit.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferrite::formats::gguf::GgufFile;
use ferrite::models::seq2seq::forward::{StepRow, Workspace};
use ferrite::models::seq2seq::weights::WeightFormat;
use ferrite::parallel::Threads;
use ferrite::serving::{Sampler, Session};
use ferrite::translate::{LoadOptions, TranslateOptions, Translator};
use ferrite::{EmbedOptions, Embedder, GenerateOptions, SamplerOptions, TensorDump};
use ferrite_kernels::quant::dequantize;

/// A fresh, empty directory for one test's dump.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ferrite-dump-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A `.npy` file as (shape, values): format 1.0, little-endian f32, C
/// order, read independently of the writer under test.
fn read_npy(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00", "{}", path.display());
    let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + hlen]).expect("ASCII header");
    assert!(header.contains("'descr': '<f4'"), "{header}");
    assert!(header.contains("'fortran_order': False"), "{header}");
    let shape_at = header.find("'shape': (").expect("a shape") + "'shape': (".len();
    let shape_text = &header[shape_at..shape_at + header[shape_at..].find(')').expect(")")];
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("a dimension"))
        .collect();
    let values: Vec<f32> = bytes[10 + hlen..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect();
    assert_eq!(
        values.len(),
        shape.iter().product::<usize>(),
        "{}",
        path.display()
    );
    (shape, values)
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Asserts `a` and `b` are the same values bit for bit, naming the first
/// that differs.
fn assert_same_bits(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    if let Some(i) = (0..a.len()).find(|&i| a[i].to_bits() != b[i].to_bits()) {
        panic!("{what}: value {i} is {} here, {} there", a[i], b[i]);
    }
}

/// The names of the `.npy` files in `dir`, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("the dump directory")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// Row `row` of a GGUF matrix, dequantized by the kernels crate.
fn gguf_row(file: &GgufFile, name: &str, row: usize) -> Vec<f32> {
    let t = file
        .tensor(name)
        .unwrap_or_else(|| panic!("no tensor {name}"));
    let cols = t.info.dims[0] as usize;
    let ty = t.info.ty;
    let row_bytes = cols / ty.block_size() * ty.type_size();
    let mut out = vec![0f32; cols];
    dequantize(
        ty,
        &t.data[row * row_bytes..(row + 1) * row_bytes],
        &mut out,
    )
    .expect("dequantizes");
    out
}

/// SmolLM2 (Q4_1 GGUF) with a dump: the prompt's pass and two generated
/// tokens' passes. `inp_embd` is the token embedding rows and
/// `attn_norm-0` their RMS norm times the norm weight, both computed here
/// from the file's tensors; `result_output` of each pass is the logits a
/// session without a dump returns, bit for bit; the text is the same.
#[test]
fn smollm2_dump_holds_the_values_computed_another_way() {
    let path = common::real_model("smollm2");
    let generator = ferrite::open(path.to_str().expect("a UTF-8 path"))
        .expect("opens")
        .into_generator()
        .expect("a decoder");
    let tokens = generator
        .tokenizer()
        .encode("The capital of France is", true, true);
    let n = tokens.len();
    let dir = fresh_dir("smollm2");
    let dump = Arc::new(TensorDump::new(&dir, None).expect("dump directory"));

    // Prompt, then two greedy tokens, with and without the dump.
    let run = |dump: Option<Arc<TensorDump>>| {
        let mut s = Session::new(
            generator.model(),
            generator.tokenizer(),
            Some(64),
            Threads::new(2),
        )
        .expect("a session");
        s.set_dump(dump);
        s.set_prompt(&tokens).expect("prefill");
        let prompt_logits = s.logits().to_vec();
        let opts = GenerateOptions {
            max_tokens: Some(2),
            ..Default::default()
        };
        let mut sampler = Sampler::new(SamplerOptions::greedy());
        let mut text = String::new();
        s.generate(&mut sampler, &opts, |t| {
            text.push_str(t);
            true
        })
        .expect("generates");
        (
            prompt_logits,
            s.logits().to_vec(),
            s.tokens().to_vec(),
            text,
        )
    };
    let (plain_prompt, plain_last, plain_tokens, plain_text) = run(None);
    let (dumped_prompt, dumped_last, dumped_tokens, dumped_text) = run(Some(dump.clone()));
    assert_same_bits(&plain_prompt, &dumped_prompt, "prompt logits");
    assert_same_bits(&plain_last, &dumped_last, "last logits");
    assert_eq!(plain_tokens, dumped_tokens);
    assert_eq!(plain_text, dumped_text);
    // The prompt's pass, then one pass per generated token fed back.
    assert_eq!(dump.passes(), 3, "{:?}", files(&dir));

    let file = GgufFile::open(&path).expect("GGUF");
    let n_layers = file
        .metadata()
        .get_u64("llama.block_count")
        .expect("block_count") as usize;
    let eps = file
        .metadata()
        .get_f64("llama.attention.layer_norm_rms_epsilon")
        .expect("eps");
    let dim = file
        .tensor("token_embd.weight")
        .expect("embeddings")
        .info
        .dims[0] as usize;
    let names = files(&dir);
    // Every layer's points in every pass, the head's once per pass.
    for step in 0..3 {
        for l in 0..n_layers {
            for point in [
                "attn_norm",
                "Qcur",
                "Kcur",
                "Vcur",
                "kqv_out",
                "attn_out",
                "ffn_inp",
                "ffn_norm",
                "ffn_out",
                "l_out",
            ] {
                let f = format!("{point}-{l}.step{step}.npy");
                assert!(names.contains(&f), "{f} missing from {names:?}");
            }
        }
        for point in ["inp_embd", "result_norm", "result_output"] {
            assert!(names.contains(&format!("{point}.step{step}.npy")));
        }
    }
    assert_eq!(dump.files_written(), names.len());

    // inp_embd: the embedding rows of the prompt's tokens.
    let (shape, inp) = read_npy(&dir.join("inp_embd.step0.npy"));
    assert_eq!(shape, [n, dim]);
    for (t, &tok) in tokens.iter().enumerate() {
        let want = gguf_row(&file, "token_embd.weight", tok as usize);
        assert_same_bits(
            &inp[t * dim..(t + 1) * dim],
            &want,
            &format!("inp_embd row {t}"),
        );
    }
    // attn_norm-0: x / sqrt(mean(x^2) + eps) * w, in f64 here.
    let w = gguf_row(&file, "blk.0.attn_norm.weight", 0);
    let (shape, normed) = read_npy(&dir.join("attn_norm-0.step0.npy"));
    assert_eq!(shape, [n, dim]);
    let mut worst = 0f64;
    for t in 0..n {
        let x = &inp[t * dim..(t + 1) * dim];
        let mean = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / dim as f64;
        let scale = 1.0 / (mean + eps).sqrt();
        for i in 0..dim {
            let want = f64::from(x[i]) * scale * f64::from(w[i]);
            let got = f64::from(normed[t * dim + i]);
            worst = worst.max((got - want).abs() / want.abs().max(1.0));
        }
    }
    assert!(
        worst < 1e-5,
        "attn_norm-0 differs from the test's RMS norm by {worst:e}"
    );

    // result_output: the prompt's last row is the session's logits, and
    // the next pass's the logits after the first generated token.
    let n_vocab = plain_prompt.len();
    let (shape, out0) = read_npy(&dir.join("result_output.step0.npy"));
    assert_eq!(shape, [1, n_vocab]);
    assert_same_bits(&out0, &plain_prompt, "result_output.step0");
    let (_, out1) = read_npy(&dir.join("result_output.step1.npy"));
    // ... which, fed alone after the prompt, the model gives again.
    let mut state = generator
        .model()
        .new_state(64, Threads::new(1))
        .expect("state");
    let mut logits = Vec::new();
    let all: Vec<u32> = plain_tokens[..n + 1].to_vec();
    generator
        .model()
        .forward(
            &all,
            &mut state,
            ferrite::models::decoder::Logits::Last,
            &mut logits,
        )
        .expect("forward");
    assert_same_bits(&out1, &logits, "result_output.step1");
    // Qcur of the generated token's pass: one row.
    let (shape, _) = read_npy(&dir.join("Qcur-0.step1.npy"));
    assert_eq!(shape[0], 1);
    std::fs::remove_dir_all(&dir).expect("cleans up");
}

/// A filter keeps only the names it matches.
#[test]
fn smollm2_dump_filter_keeps_what_it_matches() {
    let generator = ferrite::open("smollm2")
        .expect("opens")
        .into_generator()
        .expect("a decoder");
    let tokens = generator.tokenizer().encode("Hello", true, true);
    for (filter, want) in [
        ("attn_norm-*", "attn_norm-"),
        ("result", "result_"),
        ("*-3", "-3."),
    ] {
        let dir = fresh_dir("filter");
        let dump = Arc::new(TensorDump::new(&dir, Some(filter)).expect("dump"));
        let mut s = Session::new(
            generator.model(),
            generator.tokenizer(),
            Some(32),
            Threads::new(2),
        )
        .expect("a session");
        s.set_dump(Some(dump));
        s.set_prompt(&tokens).expect("prefill");
        let names = files(&dir);
        assert!(!names.is_empty(), "{filter}");
        for f in &names {
            assert!(f.contains(want), "{filter} kept {f}");
        }
        std::fs::remove_dir_all(&dir).expect("cleans up");
    }
}

fn translation_dir() -> PathBuf {
    common::testdata().join("translation")
}

/// The tiny Marian fixture, greedy, with a dump: the encoder's output is
/// what `Seq2Seq::encode` gives and what transformers gave (goldens); the
/// first decoder step's logits are `Seq2Seq::step`'s for the start token
/// and transformers'; the translation is the same with and without.
#[test]
fn marian_dump_holds_the_values_computed_another_way() {
    let opts = LoadOptions {
        format: WeightFormat::F32,
        threads: 2,
    };
    let tr = Translator::open(&translation_dir().join("tiny-marian"), &opts).expect("loads");
    let text =
        std::fs::read_to_string(translation_dir().join("marian-goldens.json")).expect("goldens");
    let goldens: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let golden = &goldens["decoder"][0];
    let input = common::ids(&golden["ids"]);
    let decoder_ids = common::ids(&golden["decoder_ids"]);
    let hf_logits: Vec<f32> = golden["logits"]
        .as_array()
        .expect("logits")
        .iter()
        .map(|v| v.as_f64().expect("a number") as f32)
        .collect();

    let dir = fresh_dir("marian");
    let dump = Arc::new(TensorDump::new(&dir, None).expect("dump"));
    let search = |dump: Option<Arc<TensorDump>>| TranslateOptions {
        beams: Some(1),
        max_length: Some(4),
        dump,
        ..Default::default()
    };
    let plain = tr
        .generate_ids(std::slice::from_ref(&input), &search(None))
        .expect("translates");
    let dumped = tr
        .generate_ids(std::slice::from_ref(&input), &search(Some(dump.clone())))
        .expect("translates");
    assert_eq!(plain, dumped);
    assert!(dump.passes() >= 2, "an encoder pass and decoder steps");
    let names = files(&dir);
    for f in [
        "enc.inp_embd.step0.npy",
        "enc.kqv_out-0.step0.npy",
        "enc.attn_out-0.step0.npy",
        "enc.ffn_inp-0.step0.npy",
        "enc.ffn_out-0.step0.npy",
        "enc.l_out-0.step0.npy",
        "enc.result_norm.step0.npy",
        "inp_embd.step1.npy",
        "kqv_out-0.step1.npy",
        "cross_inp-0.step1.npy",
        "kqv_out_cross-0.step1.npy",
        "ffn_inp-0.step1.npy",
        "l_out-0.step1.npy",
        "result_norm.step1.npy",
        "result_output.step1.npy",
    ] {
        assert!(names.contains(&f.to_string()), "{f} missing from {names:?}");
    }

    let m = tr.model();
    let threads = Threads::new(2);
    let mut ws = Workspace::default();
    let encoded = m.encode(&[&input], &threads, &mut ws).expect("encodes");
    let (shape, enc) = read_npy(&dir.join("enc.result_norm.step0.npy"));
    assert_eq!(shape, [input.len(), m.dim()]);
    assert_same_bits(&enc, &encoded[0].hidden, "enc.result_norm");
    let hf_hidden: Vec<f32> = goldens["encoder"]
        .as_array()
        .expect("encoder goldens")
        .iter()
        .find(|e| common::ids(&e["ids"]) == input)
        .map(|e| {
            e["hidden"]
                .as_array()
                .expect("hidden")
                .iter()
                .map(|v| v.as_f64().expect("a number") as f32)
                .collect()
        })
        .expect("the same input's encoder golden");
    let worst = max_diff(&enc, &hf_hidden);
    assert!(
        worst < 1e-4,
        "encoder output differs from transformers' by {worst}"
    );

    // The first step feeds the decoder start token, golden position 0.
    let mut cache = m.new_cache();
    let mut logits = Vec::new();
    let mut rows = [StepRow {
        token: decoder_ids[0],
        cache: &mut cache,
        source: &encoded[0],
    }];
    m.step(&mut rows, &threads, &mut ws, &mut logits)
        .expect("steps");
    let n_vocab = m.config.n_vocab;
    let (shape, out) = read_npy(&dir.join("result_output.step1.npy"));
    assert_eq!(shape, [1, n_vocab]);
    assert_same_bits(&out, &logits, "result_output.step1");
    let worst = max_diff(&out, &hf_logits[..n_vocab]);
    assert!(
        worst < 1e-4,
        "first step's logits differ from transformers' by {worst}"
    );
    std::fs::remove_dir_all(&dir).expect("cleans up");
}

/// The tiny BERT fixture: one encoder pass per batch, every layer's
/// points written with one row per token, the vectors unchanged, and the
/// last layer's output is what the pooling read (mean of its rows, before
/// normalization).
#[test]
fn bert_dump_writes_every_layer_and_changes_nothing() {
    let embedder = Embedder::open(&common::testdata().join("embed/bert-tiny")).expect("loads");
    let texts = ["a short text", "another, somewhat longer text to embed"];
    let opts = EmbedOptions {
        normalize: false,
        pooling: Some(ferrite::Pooling::Mean),
        batch_size: 1,
        ..EmbedOptions::default()
    };
    let threads = Threads::new(2);
    let plain = embedder.embed(&texts, &opts, &threads).expect("embeds");
    let dir = fresh_dir("bert");
    let dump = Arc::new(TensorDump::new(&dir, None).expect("dump"));
    let dumped = embedder
        .embed_dumped(&texts, &opts, &threads, &mut |_| {}, dump.clone())
        .expect("embeds");
    for (p, d) in plain.iter().zip(&dumped) {
        assert_same_bits(&p.vector, &d.vector, "embedding");
    }
    // Two batches of one input each, longest first.
    assert_eq!(dump.passes(), 2);
    let names = files(&dir);
    assert!(
        names.contains(&"inp_norm.step0.npy".to_string()),
        "{names:?}"
    );
    let n_layers = names
        .iter()
        .filter(|f| f.starts_with("l_out-") && f.ends_with(".step0.npy"))
        .count();
    assert!(n_layers >= 1, "{names:?}");
    for step in 0..2 {
        for l in 0..n_layers {
            for point in ["kqv_out", "ffn_out", "l_out"] {
                let f = format!("{point}-{l}.step{step}.npy");
                assert!(names.contains(&f), "{f} missing from {names:?}");
            }
        }
    }
    // Step 1 is the shorter text: its last layer's mean is its vector.
    let (shape, last) = read_npy(&dir.join(format!("l_out-{}.step1.npy", n_layers - 1)));
    let dim = shape[1];
    assert_eq!(shape[0], dumped[0].n_tokens);
    let mut mean = vec![0f64; dim];
    for row in last.chunks_exact(dim) {
        for (m, &v) in mean.iter_mut().zip(row) {
            *m += f64::from(v);
        }
    }
    let mean: Vec<f32> = mean.iter().map(|&m| (m / shape[0] as f64) as f32).collect();
    let worst = max_diff(&mean, &dumped[0].vector);
    assert!(
        worst < 1e-5,
        "mean pooling of the dumped output differs by {worst}"
    );
    std::fs::remove_dir_all(&dir).expect("cleans up");
}
