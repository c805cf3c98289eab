//! Hostile decoder files: every architecture's loader turns absurd or
//! inconsistent metadata (a million layers, zero heads, shapes that do not
//! match, sizes past any real model) into a clear error that names what is
//! wrong, never a panic or a huge allocation. Each case starts from a tiny
//! valid file of that architecture (which loads and runs: the control) and
//! breaks one thing. Tokenizer metadata (arrays of different lengths,
//! special ids out of range) is covered in tokenizer_metadata.rs.

use std::sync::Arc;

use ferrite::formats::gguf::{write_gguf, Array, GgufFile, Metadata, TensorToWrite, Value};
use ferrite::models::decoder::Logits;
use ferrite::models::load_causal_lm;
use ferrite::parallel::Threads;
use ferrite_kernels::GgmlType;

const DIM: u64 = 32;
const HEADS: u64 = 4;
const KV_HEADS: u64 = 2;
const HEAD_DIM: u64 = DIM / HEADS;
const FFN: u64 = 64;
const VOCAB: u64 = 16;
const LAYERS: u64 = 2;
const CTX: u64 = 32;

/// A tensor to write: name, ggml dims.
struct Spec {
    name: String,
    dims: Vec<u64>,
}

/// The tensors of a tiny valid file of `arch`.
fn tensors(arch: &str) -> Vec<Spec> {
    let (q, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
    let mut t = Vec::new();
    let mut add = |name: String, dims: &[u64]| {
        t.push(Spec {
            name,
            dims: dims.to_vec(),
        })
    };
    add("token_embd.weight".into(), &[DIM, VOCAB]);
    add("output_norm.weight".into(), &[DIM]);
    if arch == "gpt2" {
        add("output_norm.bias".into(), &[DIM]);
        add("position_embd.weight".into(), &[DIM, CTX]);
    }
    for l in 0..LAYERS {
        let b = |what: &str| format!("blk.{l}.{what}");
        if arch != "olmo2" {
            add(b("attn_norm.weight"), &[DIM]);
            add(b("ffn_norm.weight"), &[DIM]);
        }
        add(b("attn_output.weight"), &[q, DIM]);
        add(b("ffn_down.weight"), &[FFN, DIM]);
        if arch == "phi3" {
            // Fused Q/K/V and gate/up.
            add(b("attn_qkv.weight"), &[DIM, q + 2 * kv]);
            add(b("ffn_up.weight"), &[DIM, 2 * FFN]);
            continue;
        }
        add(b("ffn_up.weight"), &[DIM, FFN]);
        if arch == "gpt2" {
            add(b("attn_qkv.weight"), &[DIM, q + 2 * kv]);
            add(b("attn_qkv.bias"), &[q + 2 * kv]);
            for what in ["attn_norm", "ffn_norm", "attn_output"] {
                add(b(&format!("{what}.bias")), &[DIM]);
            }
            add(b("ffn_up.bias"), &[FFN]);
            add(b("ffn_down.bias"), &[DIM]);
            continue;
        }
        add(b("attn_q.weight"), &[DIM, q]);
        add(b("attn_k.weight"), &[DIM, kv]);
        add(b("attn_v.weight"), &[DIM, kv]);
        add(b("ffn_gate.weight"), &[DIM, FFN]);
        if arch == "qwen2" {
            add(b("attn_q.bias"), &[q]);
            add(b("attn_k.bias"), &[kv]);
            add(b("attn_v.bias"), &[kv]);
        }
        if arch == "gemma3" {
            add(b("attn_q_norm.weight"), &[HEAD_DIM]);
            add(b("attn_k_norm.weight"), &[HEAD_DIM]);
        }
        if arch == "olmo2" {
            // Q/K norms over the whole projections.
            add(b("attn_q_norm.weight"), &[q]);
            add(b("attn_k_norm.weight"), &[kv]);
        }
        if matches!(arch, "gemma2" | "gemma3" | "olmo2") {
            add(b("post_attention_norm.weight"), &[DIM]);
            add(b("post_ffw_norm.weight"), &[DIM]);
        }
    }
    t
}

/// The metadata of a tiny valid file of `arch`.
fn metadata(arch: &str) -> Metadata {
    edited(arch, &[], &[])
}

/// As [`metadata`], with `{arch}.{key}` keys of `set` replaced or added
/// and those of `drop` left out.
fn edited(arch: &str, set: &[(&str, Value)], drop: &[&str]) -> Metadata {
    let mut md = Metadata::default();
    for (k, v) in set {
        md.insert(format!("{arch}.{k}"), v.clone());
    }
    let mut set = |k: &str, v: Value| {
        if !drop.contains(&k) {
            md.insert(format!("{arch}.{k}"), v);
        }
    };
    set("embedding_length", Value::U32(DIM as u32));
    set("block_count", Value::U32(LAYERS as u32));
    set("feed_forward_length", Value::U32(FFN as u32));
    set("attention.head_count", Value::U32(HEADS as u32));
    set("attention.head_count_kv", Value::U32(KV_HEADS as u32));
    set("context_length", Value::U32(CTX as u32));
    set("attention.layer_norm_rms_epsilon", Value::F32(1e-6));
    set("attention.layer_norm_epsilon", Value::F32(1e-5));
    md.insert("general.architecture".into(), Value::String(arch.into()));
    md
}

/// Deterministic values in about [-0.5, 0.5).
fn values(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5).to_le_bytes()
        })
        .collect()
}

/// Loads a file of `tensors` and `md`; returns the error text, if any.
fn load(md: &Metadata, tensors: &[Spec]) -> Result<Box<dyn ferrite::models::CausalLm>, String> {
    let data: Vec<Vec<u8>> = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| values(t.dims.iter().product::<u64>() as usize, i as u64))
        .collect();
    let to_write: Vec<TensorToWrite> = tensors
        .iter()
        .zip(&data)
        .map(|(t, d)| TensorToWrite {
            name: &t.name,
            dims: &t.dims,
            ty: GgmlType::F32,
            data: d,
        })
        .collect();
    let mut bytes = Vec::new();
    write_gguf(&mut bytes, 3, md, &to_write).expect("write the test file");
    let file = GgufFile::from_vec("hostile.gguf", bytes).map_err(|e| e.to_string())?;
    load_causal_lm(Arc::new(file)).map_err(|e| e.to_string())
}

const ARCHS: [&str; 8] = [
    "llama", "qwen2", "gemma3", "gpt2", "gemma2", "phi3", "olmo2", "smollm3",
];

#[test]
fn tiny_valid_files_load_and_run() {
    for arch in ARCHS {
        let model = load(&metadata(arch), &tensors(arch)).unwrap_or_else(|e| panic!("{arch}: {e}"));
        let mut st = model.new_state(CTX as usize, Threads::new(2)).unwrap();
        let mut logits = Vec::new();
        model
            .forward(&[1, 5, 9, 3], &mut st, Logits::All, &mut logits)
            .unwrap();
        assert_eq!(logits.len(), 4 * VOCAB as usize);
        assert!(logits.iter().all(|v| v.is_finite()), "{arch}");
        // A context past GPT-2's learned positions is refused up front.
        if arch == "gpt2" {
            match model.new_state(CTX as usize + 1, Threads::new(1)) {
                Ok(_) => panic!("gpt2: a context past the learned positions was accepted"),
                Err(err) => assert!(err.to_string().contains("positions"), "{err}"),
            }
        }
    }
}

/// Asserts that `md` / `tensors` fail to load with a message containing
/// `needle`.
fn refused(arch: &str, md: &Metadata, tensors: &[Spec], needle: &str) {
    match load(md, tensors) {
        Ok(_) => panic!("{arch}: loaded a file that should fail with '{needle}'"),
        Err(e) => assert!(
            e.contains(needle),
            "{arch}: error does not name '{needle}': {e}"
        ),
    }
}

#[test]
fn absurd_hyper_parameters_are_errors() {
    for arch in ARCHS {
        for (key, value, needle) in [
            ("block_count", Value::U32(1_000_000), "block_count"),
            ("block_count", Value::U64(u64::MAX), "block_count"),
            ("attention.head_count", Value::U32(0), "head_count"),
            ("attention.head_count_kv", Value::U32(0), "head_count_kv"),
            ("attention.head_count_kv", Value::U32(3), "head_count_kv"),
            ("attention.head_count", Value::U32(5), "head_count"),
            ("embedding_length", Value::U32(1 << 30), "embedding_length"),
            ("embedding_length", Value::I32(-32), "embedding_length"),
            ("feed_forward_length", Value::U32(0), "feed_forward_length"),
            (
                "context_length",
                Value::String("big".into()),
                "context_length",
            ),
            (
                "rope.dimension_count",
                Value::U32(HEAD_DIM as u32 + 2),
                "dimension_count",
            ),
            ("rope.scaling.type", Value::String("yarn".into()), "scaling"),
            // Past what tiled attention's score kernel takes (issue 46).
            ("attention.key_length", Value::U32(2048), "key_length"),
        ] {
            // GPT-2 has no RoPE: its keys are ignored there.
            if arch == "gpt2" && key.starts_with("rope.") {
                continue;
            }
            let md = edited(arch, &[(key, value)], &[]);
            refused(arch, &md, &tensors(arch), needle);
        }
        // A missing size.
        let md = edited(arch, &[], &["embedding_length"]);
        refused(arch, &md, &tensors(arch), "embedding_length");
        if arch == "gpt2" {
            continue;
        }
        // RoPE scalings with impossible parameters.
        let yarn = || ("rope.scaling.type", Value::String("yarn".into()));
        let orig = || ("rope.scaling.original_context_length", Value::U32(32));
        for (set, needle) in [
            (
                vec![
                    yarn(),
                    orig(),
                    ("rope.scaling.factor", Value::F32(f32::NAN)),
                ],
                "rope.scaling.factor",
            ),
            (
                vec![yarn(), orig(), ("rope.scaling.factor", Value::F32(-2.0))],
                "rope.scaling.factor",
            ),
            (
                vec![yarn(), ("rope.scaling.factor", Value::F32(4.0))],
                "rope.scaling.original_context_length",
            ),
            (
                vec![
                    yarn(),
                    orig(),
                    ("rope.scaling.factor", Value::F32(4.0)),
                    ("rope.scaling.yarn_beta_fast", Value::F32(0.0)),
                ],
                "beta_fast",
            ),
            (
                vec![("rope.scaling.factor", Value::F32(-4.0))],
                "rope.scaling.factor",
            ),
            (
                vec![("rope.dimension_count", Value::U32(HEAD_DIM as u32 - 1))],
                "rope.dimension_count",
            ),
            (vec![("rope.freq_base", Value::F32(0.0))], "rope.freq_base"),
            (
                vec![("attention.sliding_window", Value::I32(-8))],
                "attention.sliding_window",
            ),
            (
                vec![
                    ("attention.sliding_window", Value::U32(8)),
                    (
                        "attention.sliding_window_pattern",
                        Value::Array(Array::Bool(vec![true; 7])),
                    ),
                ],
                "attention.sliding_window_pattern",
            ),
        ] {
            let md = edited(arch, &set, &[]);
            refused(arch, &md, &tensors(arch), needle);
        }
    }
}

#[test]
fn tensors_that_do_not_match_the_metadata_are_errors() {
    for arch in ARCHS {
        let md = metadata(arch);
        // More layers than the file has tensors for.
        let more = edited(arch, &[("block_count", Value::U32(3))], &[]);
        refused(arch, &more, &tensors(arch), "blk.2.");
        // Every tensor in turn with a wrong shape, then missing.
        let all = tensors(arch);
        for i in 0..all.len() {
            let mut t = tensors(arch);
            t[i].dims[0] += 1;
            let name = t[i].name.clone();
            refused(arch, &md, &t, &name);
            let mut t = tensors(arch);
            let gone = t.remove(i);
            // Projection biases are optional (loaded where present, as
            // llama.cpp's Llama graph does); a file without one still
            // loads. Weights and LayerNorm biases are required.
            let optional = gone.name.ends_with(".bias") && !gone.name.contains("norm");
            match load(&md, &t) {
                Ok(_) => assert!(optional, "{arch}: loaded without '{}'", gone.name),
                Err(e) => assert!(
                    // (a missing fused QKV falls back to asking for a split one)
                    e.contains(&gone.name)
                        || e.contains("missing tensor") && e.contains(".attn_q."),
                    "{arch}: missing '{}': {e}",
                    gone.name
                ),
            }
        }
    }
}

/// The families' own keys and tensors, broken one at a time: soft-caps,
/// LongRoPE's factors and attention factor, NoPE flags, attention scale.
#[test]
fn family_particulars_that_are_wrong_are_errors() {
    let rope_dims = || ("rope.dimension_count", Value::U32(HEAD_DIM as u32 / 2));
    for (arch, set, needle) in [
        (
            "gemma2",
            vec![("attn_logit_softcapping", Value::F32(-1.0))],
            "attn_logit_softcapping",
        ),
        (
            "gemma2",
            vec![("final_logit_softcapping", Value::F32(f32::NAN))],
            "final_logit_softcapping",
        ),
        (
            "gemma2",
            vec![("attention.scale", Value::F32(0.0))],
            "attention.scale",
        ),
        (
            "gemma2",
            vec![("attention.sliding_window", Value::U32(0x7fff_ffff))],
            "attention.sliding_window",
        ),
        (
            "smollm3",
            vec![("no_rope_layers", Value::Array(Array::Bool(vec![true; 3])))],
            "no_rope_layers",
        ),
        (
            "phi3",
            vec![rope_dims(), ("rope.scaling.attn_factor", Value::F32(-1.0))],
            "rope.scaling.attn_factor",
        ),
        (
            "phi3",
            vec![("rope.scaling.type", Value::String("longrope".into()))],
            "rope.scaling.type",
        ),
    ] {
        let mut t = tensors(arch);
        if arch == "phi3" {
            let pairs = HEAD_DIM / 4;
            t.push(Spec {
                name: "rope_factors_long.weight".into(),
                dims: vec![pairs],
            });
            t.push(Spec {
                name: "rope_factors_short.weight".into(),
                dims: vec![pairs],
            });
        }
        refused(arch, &edited(arch, &set, &[]), &t, needle);
    }
    // LongRoPE factors: of a wrong length, one list without the other, or
    // not positive (the test values are about -0.5..0.5: some negative).
    let md = edited(
        "phi3",
        &[("rope.scaling.original_context_length", Value::U32(16))],
        &[],
    );
    let with = |names: &[(&str, u64)]| {
        let mut t = tensors("phi3");
        for (name, n) in names {
            t.push(Spec {
                name: name.to_string(),
                dims: vec![*n],
            });
        }
        t
    };
    let pairs = HEAD_DIM / 2;
    let (long, short) = ("rope_factors_long.weight", "rope_factors_short.weight");
    refused(
        "phi3",
        &md,
        &with(&[(long, pairs + 1), (short, pairs)]),
        long,
    );
    refused("phi3", &md, &with(&[(short, pairs)]), long);
    refused(
        "phi3",
        &md,
        &with(&[(long, pairs), (short, pairs)]),
        "not positive",
    );
}

#[test]
fn unknown_or_missing_architectures_are_errors() {
    let mut md = Metadata::default();
    md.insert("general.architecture".into(), Value::String("mamba".into()));
    refused("mamba", &md, &tensors("llama"), "not supported");
    refused(
        "none",
        &Metadata::default(),
        &tensors("llama"),
        "general.architecture",
    );
}
