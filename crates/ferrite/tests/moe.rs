//! Mixture-of-experts decoders (Qwen3-MoE, Qwen2-MoE) on the tiny
//! random-weight fixtures of testdata/hf-moe (made by
//! scripts/make-moe-fixtures.py): logits of every position against HF
//! transformers' float32 forward pass and greedy continuations against
//! `generate`, from the converter's GGUF files and from the HF directories;
//! a token's output independent of what shares its batch; hostile expert
//! metadata and shapes refused with an error naming them.

mod common;

use common::batching::assert_batch_independent;
use common::decoder_goldens::{
    check_greedy_cases, greedy_agreement, load_edited_gguf, max_logit_error_in,
};

use std::path::PathBuf;

use ferrite::formats::gguf::Value;
use ferrite::models::{open_causal_lm, CausalLm};
use serde_json::Value as Json;

fn dir() -> PathBuf {
    common::testdata().join("hf-moe")
}

fn golden() -> Json {
    serde_json::from_str(&std::fs::read_to_string(dir().join("goldens.json")).unwrap()).unwrap()
}

/// [`max_logit_error_in`] for the goldens of testdata/hf-moe.
fn max_logit_error(model: &dyn CausalLm, entry: &Json, tie: f32) -> f32 {
    max_logit_error_in(model, entry, &dir(), tie)
}

/// Bound on |ferrite - HF| for the float32 models (logits about 1.5 in
/// size): both sides compute in f32 with the same weights; what differs is
/// the summation order of each dot product (ferrite: 32 lanes folded, or
/// blocks in order; torch: its own blocking), exp/softmax implementations
/// and the router's probabilities, each a few f32 ulps, carried through
/// two layers. The measured values are printed (see the report); a wrong
/// routing weight, a dropped expert or shared expert moves logits by
/// ~0.1 or more.
const F32_MAX: f32 = 1e-4;

#[test]
fn gguf_files_match_hf() {
    let g = golden();
    let mut checked = 0;
    for (name, m) in g["models"].as_object().unwrap() {
        let Some(path) = m["gguf"].get("f32").and_then(Json::as_str) else {
            continue;
        };
        let (_file, model) = open_causal_lm(&dir().join(path)).unwrap();
        let err = max_logit_error(model.as_ref(), &m["logits"], 0.0);
        eprintln!("{name} f32 GGUF: max |logit - HF| = {err:.2e} (bound {F32_MAX:.0e})");
        assert!(err <= F32_MAX, "{name}: {err}");
        check_greedy_cases(model.as_ref(), &m["greedy"], name);
        checked += 1;
    }
    assert_eq!(checked, 2);
}

/// The HF directories (read into GGUF form by `formats::hf_decoder`,
/// experts stacked as the converter stacks them), including the two the
/// converter's files cannot stand for: top-3 of 5 experts without
/// renormalization (`norm_topk_prob: false` on Qwen3-MoE), and Qwen2-MoE's
/// shared expert.
#[test]
fn hf_directories_match_hf() {
    let g = golden();
    for (name, m) in g["models"].as_object().unwrap() {
        let (_file, model) = open_causal_lm(&dir().join(name)).unwrap();
        let err = max_logit_error(model.as_ref(), &m["logits"], 0.0);
        eprintln!("{name} HF directory: max |logit - HF| = {err:.2e} (bound {F32_MAX:.0e})");
        assert!(err <= F32_MAX, "{name}: {err}");
        check_greedy_cases(model.as_ref(), &m["greedy"], name);
    }
    assert_eq!(g["models"].as_object().unwrap().len(), 3);
}

/// The q8_0 file against HF run on its own dequantized weights, with every
/// quantized matrix's input (the experts' included, run by transformers'
/// eager per-expert loop) rounded to q8_0 blocks and keys/values to f16,
/// as ferrite and ggml compute it: the reference does every rounding
/// ferrite does, so the f32 bound applies, and greedy must match.
///
/// On the 40-token sequence the first nine positions agree to ~1e-6, then
/// from position 9 on the logits are ~0.05 apart. Cause (found with the
/// reference): at position 9 the input of layer 1's attention projections
/// has a value exactly on a q8_0 rounding boundary (`x / d = k + 0.5` in
/// the reference's f32), so a last-bit difference in the RMSNorm before it
/// (torch's summation order against ferrite's) decides which way it rounds;
/// every later position attends to that key and value. (No router
/// near-tie there: the k-th/(k+1)-th probability gaps are 0.03 and 0.02;
/// ferrite's results for a prefix are bit-identical to the same rows of
/// the whole sequence.) That sequence and the greedy runs (which go past
/// nine positions) are therefore reported, not asserted. The dense
/// tiny-qwen3 q8_0 file's unexplained gap in hf_decoders.rs may be the same
/// kind of knife edge (not checked).
#[test]
fn q8_0_gguf_matches_its_dequantized_reference() {
    let g = golden();
    let m = &g["models"]["tiny-qwen3-moe"];
    let path = dir().join(m["gguf"]["q8_0"].as_str().unwrap());
    let (_file, model) = open_causal_lm(&path).unwrap();
    let reference = &m["q8_0_reference"];
    let mut short = reference["logits"].clone();
    let all = short["sequences"].as_array().unwrap().clone();
    let (first, rest): (Vec<Json>, Vec<Json>) = all
        .into_iter()
        .partition(|s| s["shape"][0].as_u64().unwrap() <= 9);
    short["sequences"] = Json::Array(first);
    let err = max_logit_error(model.as_ref(), &short, 2.0 * F32_MAX);
    eprintln!("tiny-qwen3-moe q8_0, 1 and 9 tokens: max |logit - reference| = {err:.2e} (bound {F32_MAX:.0e})");
    assert!(err <= F32_MAX, "q8_0: {err}");
    let mut long = reference["logits"].clone();
    long["sequences"] = Json::Array(rest);
    let err = max_logit_error(model.as_ref(), &long, f32::INFINITY);
    eprintln!("tiny-qwen3-moe q8_0, 40 tokens: max |logit - reference| = {err:.2e} (not asserted)");
    let cases = reference["greedy"].as_array().unwrap();
    let same = greedy_agreement(model.as_ref(), &reference["greedy"]);
    eprintln!(
        "tiny-qwen3-moe q8_0: {same} of {} greedy runs as the reference's (not asserted)",
        cases.len()
    );
}

/// Rows of several sequences in one forward pass (so experts run over rows
/// of different sequences gathered together) give each sequence exactly
/// the logits it gets alone, bit for bit; one thread gives two threads'
/// bits; and a prompt decoded token by token (each pass one row: the
/// decoding path, all of a row's experts in one step) gives the bits of
/// the prompt fed as one chunk (rows grouped by expert).
#[test]
fn batched_rows_are_bit_identical_to_alone() {
    for path in [
        "tiny-qwen3-moe.f32.gguf",
        "tiny-qwen3-moe.q8_0.gguf",
        "tiny-qwen2-moe.f32.gguf",
        // Top-3: the order of a row's three expert terms shows in its bits.
        "tiny-qwen3-moe-nonorm",
    ] {
        let (_file, model) = open_causal_lm(&dir().join(path)).unwrap();
        let seqs: [&[u32]; 3] = [&[5, 17, 200, 3, 99, 41, 7], &[300], &[12, 12, 250, 8]];
        assert_batch_independent(model.as_ref(), &seqs, path);
    }
}

/// `path`'s GGUF file rewritten with metadata `set` and the dims of tensor
/// `reshape.0` replaced by `reshape.1` (its bytes cut or padded with
/// zeros to fit), then loaded.
fn load_edited(
    path: &str,
    set: &[(&str, Value)],
    reshape: Option<(&str, Vec<u64>)>,
) -> Result<Box<dyn CausalLm>, String> {
    load_edited_gguf(&dir().join(path), set, |name, dims, data| {
        if let Some((target, new)) = &reshape {
            if name == *target {
                *dims = new.clone();
                data.resize(4 * new.iter().product::<u64>() as usize, 0);
            }
        }
        true
    })
}

fn refused(path: &str, set: &[(&str, Value)], reshape: Option<(&str, Vec<u64>)>, needle: &str) {
    match load_edited(path, set, reshape) {
        Ok(_) => panic!("{path} {needle}: loaded"),
        Err(e) => {
            eprintln!("{needle}: {e}");
            assert!(e.contains(needle), "error {e:?} does not name {needle:?}");
        }
    }
}

#[test]
fn hostile_expert_metadata_and_shapes_are_errors() {
    let q3 = "tiny-qwen3-moe.f32.gguf";
    // The control: an unedited rewrite loads.
    load_edited(q3, &[], None).unwrap();
    refused(
        q3,
        &[("qwen3moe.expert_count", Value::U32(0))],
        None,
        "qwen3moe.expert_count",
    );
    refused(
        q3,
        &[("qwen3moe.expert_used_count", Value::U32(9))],
        None,
        "qwen3moe.expert_used_count",
    );
    refused(
        q3,
        &[("qwen3moe.expert_used_count", Value::U32(0))],
        None,
        "qwen3moe.expert_used_count",
    );
    refused(
        q3,
        &[("qwen3moe.expert_feed_forward_length", Value::U32(0))],
        None,
        "qwen3moe.expert_feed_forward_length",
    );
    refused(
        q3,
        &[("qwen3moe.expert_weights_norm", Value::String("yes".into()))],
        None,
        "qwen3moe.expert_weights_norm",
    );
    // An expert count the tensors do not have, and expert tensors of the
    // wrong shape: the error names the tensor.
    refused(
        q3,
        &[("qwen3moe.expert_count", Value::U32(7))],
        None,
        "blk.0.ffn_gate_inp.weight",
    );
    refused(
        q3,
        &[],
        Some(("blk.1.ffn_up_exps.weight", vec![64, 32, 7])),
        "blk.1.ffn_up_exps.weight",
    );
    refused(
        q3,
        &[],
        Some(("blk.0.ffn_down_exps.weight", vec![32, 48, 8])),
        "blk.0.ffn_down_exps.weight",
    );
    refused(
        q3,
        &[],
        Some(("blk.0.ffn_gate_exps.weight", vec![64, 32])),
        "blk.0.ffn_gate_exps.weight",
    );
    let q2 = "tiny-qwen2-moe.f32.gguf";
    load_edited(q2, &[], None).unwrap();
    refused(
        q2,
        &[("qwen2moe.expert_shared_feed_forward_length", Value::U32(40))],
        None,
        "blk.0.ffn_gate_shexp.weight",
    );
}

/// Damaged MoE fields of config.json: an error naming the field.
#[test]
fn hostile_hf_configs_are_errors() {
    let src = dir().join("tiny-qwen3-moe");
    let config: Json =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    let tmp = std::env::temp_dir().join(format!("ferrite-moe-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, tmp.join(f.file_name().unwrap())).unwrap();
    }
    let cases: [(&str, Json, &str); 6] = [
        ("num_local_experts", Json::from(0), "'num_local_experts'"),
        (
            "num_experts_per_tok",
            Json::from(9),
            "'num_experts_per_tok'",
        ),
        (
            "num_experts_per_tok",
            Json::from(0),
            "'num_experts_per_tok'",
        ),
        (
            "decoder_sparse_step",
            Json::from(2),
            "'decoder_sparse_step'",
        ),
        (
            "mlp_only_layers",
            serde_json::json!([1]),
            "'mlp_only_layers'",
        ),
        (
            "moe_intermediate_size",
            Json::from(16),
            "blk.0.ffn_gate_exps.weight",
        ),
    ];
    for (key, value, needle) in cases {
        let mut c = config.clone();
        c[key] = value;
        std::fs::write(tmp.join("config.json"), c.to_string()).unwrap();
        match open_causal_lm(&tmp) {
            Ok(_) => panic!("{key}: loaded"),
            Err(e) => {
                let e = e.to_string();
                eprintln!("{key}: {e}");
                assert!(e.contains(needle), "{key}: {e:?} does not name {needle}");
            }
        }
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// `ferrite inspect` lists the experts and experts per token (its
/// hyper-parameter table): the GGUF keys and the config.json fields.
#[test]
fn inspect_shows_experts_and_top_k() {
    let r = ferrite::inspect::inspect(&dir().join("tiny-qwen3-moe.f32.gguf")).unwrap();
    assert_eq!(r.hyperparameters["expert_count"], Json::from(8));
    assert_eq!(r.hyperparameters["expert_used_count"], Json::from(2));
    assert_eq!(
        r.hyperparameters["expert_feed_forward_length"],
        Json::from(32)
    );
    let r = ferrite::inspect::inspect(&dir().join("tiny-qwen2-moe")).unwrap();
    assert_eq!(r.hyperparameters["num_experts"], Json::from(6));
    assert_eq!(r.hyperparameters["num_experts_per_tok"], Json::from(2));
    assert_eq!(
        r.hyperparameters["shared_expert_intermediate_size"],
        Json::from(48)
    );
    assert_eq!(r.hyperparameters["norm_topk_prob"], Json::from(false));
}
