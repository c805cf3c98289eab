//! `ferrite inspect` on the three real models, checked against goldens from
//! independent readers (the `gguf` and `safetensors` Python packages):
//! testdata/inspect/*.json, made by scripts/make-inspect-goldens.py.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value as Json;

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// Runs the binary; panics with its stderr unless it succeeds.
fn ferrite(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .output()
        .expect("run ferrite");
    assert!(
        out.status.success(),
        "ferrite {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

fn golden(short_name: &str) -> Json {
    let text =
        std::fs::read_to_string(testdata().join(format!("inspect/{short_name}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A JSON number printed by ferrite, read back as f32 bits.
fn f32_bits(v: &Json) -> u32 {
    (v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")) as f32).to_bits()
}

/// A golden scalar: floats are stored as `{"f32_bits": n}`.
fn same_scalar(ours: &Json, theirs: &Json) -> bool {
    match theirs.get("f32_bits") {
        Some(bits) => u64::from(f32_bits(ours)) == bits.as_u64().unwrap(),
        None => ours == theirs,
    }
}

fn check_tensors(ours: &Json, golden: &Json) {
    let ours = ours["tensors"].as_array().unwrap();
    let theirs = golden["tensors"].as_array().unwrap();
    assert_eq!(ours.len(), theirs.len(), "tensor count");
    for (a, b) in ours.iter().zip(theirs) {
        for field in ["name", "shape", "type", "bytes"] {
            assert_eq!(a[field], b[field], "tensor {}: {field}", b["name"]);
        }
    }
}

fn check_values(model: &str, golden: &Json) {
    let values = golden["values"].as_object().unwrap();
    assert!(!values.is_empty());
    for (name, expected) in values {
        let printed = ferrite(&["inspect", model, "--tensor", name, "--values", "8"]);
        let got: Vec<u32> = printed
            .lines()
            .map(|l| {
                l.parse::<f32>()
                    .unwrap_or_else(|_| panic!("{name}: bad value {l:?}"))
                    .to_bits()
            })
            .collect();
        let want: Vec<u32> = expected
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(got, want, "first values of {name}");
    }
}

fn check_gguf(model: &str) {
    let golden = golden(model);
    let ours: Json = serde_json::from_str(&ferrite(&["inspect", model, "--json"])).unwrap();
    assert_eq!(ours["architecture"], golden["architecture"]);
    assert_eq!(ours["gguf_version"], golden["version"]);
    let metadata = ours["metadata"].as_object().unwrap();
    let expected = golden["metadata"].as_object().unwrap();
    assert_eq!(metadata.len(), expected.len(), "metadata key count");
    for (key, want) in expected {
        let got = metadata
            .get(key)
            .unwrap_or_else(|| panic!("missing key {key}"));
        if want["type"] == "array" {
            let got = got
                .as_array()
                .unwrap_or_else(|| panic!("{key}: not an array"));
            assert_eq!(
                got.len() as u64,
                want["len"].as_u64().unwrap(),
                "{key}: length"
            );
            for (i, w) in want["first"].as_array().unwrap().iter().enumerate() {
                assert!(same_scalar(&got[i], w), "{key}[{i}]: {} vs {w}", got[i]);
            }
        } else {
            assert!(
                same_scalar(got, &want["value"]),
                "{key}: {got} vs {}",
                want["value"]
            );
        }
    }
    check_tensors(&ours, &golden);
    check_values(model, &golden);
}

#[test]
fn inspect_smollm2_matches_gguf_py() {
    check_gguf("smollm2");
}

#[test]
fn inspect_gemma3_matches_gguf_py() {
    check_gguf("gemma3-270m");
}

#[test]
fn inspect_minilm_matches_safetensors() {
    let golden = golden("minilm");
    let ours: Json = serde_json::from_str(&ferrite(&["inspect", "minilm", "--json"])).unwrap();
    assert_eq!(ours["architecture"], golden["architecture"]);
    assert_eq!(ours["format"], "safetensors");
    assert_eq!(ours["tokenizer"]["kind"], "WordPiece");
    assert_eq!(ours["tokenizer"]["size"], 30522);
    check_tensors(&ours, &golden);
    check_values("minilm", &golden);
}

#[test]
fn inspect_text_summary_states_the_facts() {
    let text = ferrite(&["inspect", "smollm2"]);
    assert!(text.contains("architecture  llama"), "{text}");
    assert!(text.contains("tokenizer     gpt2, 49152 tokens"), "{text}");
    assert!(text.contains("chat template yes"), "{text}");
    assert!(text.contains("parameters    134.5 M (134515008)"), "{text}");
    let text = ferrite(&["inspect", "gemma3-270m"]);
    assert!(text.contains("architecture  gemma3"), "{text}");
    assert!(
        text.contains("tokenizer     llama, 262144 tokens"),
        "{text}"
    );
    assert!(text.contains("sliding_window"), "{text}");
}

#[test]
fn inspect_errors_are_one_line_and_nonzero() {
    let dir = std::env::temp_dir().join(format!("ferrite-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.gguf");
    std::fs::write(
        &bad,
        b"GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff",
    )
    .unwrap();
    for args in [
        vec!["inspect", bad.to_str().unwrap()],
        vec!["inspect", "no-such-model"],
        vec!["inspect", "smollm2", "--tensor", "no.such.tensor"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ferrite"))
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("ferrite: "), "{err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn inspect_shows_rope_scaling_and_windows() {
    let dir = testdata().join("hf-decoders");
    let show = |p: &str| ferrite(&["inspect", dir.join(p).to_str().unwrap()]);
    // Directories: the config's RoPE scaling (one level into
    // rope_parameters) and window.
    let text = show("tiny-llama3");
    assert!(text.contains("rope_parameters.rope_type"), "{text}");
    assert!(text.contains("llama3"), "{text}");
    assert!(text.contains("rope_parameters.low_freq_factor"), "{text}");
    let text = show("tiny-mistral");
    assert!(text.contains("sliding_window"), "{text}");
    // Converted GGUF files: their rope.scaling keys.
    let text = show("tiny-llama-yarn.f32.gguf");
    assert!(text.contains("rope.scaling.type"), "{text}");
    assert!(text.contains("yarn"), "{text}");
    // The families' particulars: soft-caps and sliding layers (Gemma 2),
    // per-layer-type RoPE (Gemma 3), LongRoPE and partial rotary (Phi-3),
    // NoPE layers (SmolLM3), from directories and converted files.
    for (path, wanted) in [
        (
            "tiny-gemma2",
            &[
                "attn_logit_softcapping",
                "final_logit_softcapping",
                "layer_types",
            ][..],
        ),
        (
            "tiny-gemma2.f32.gguf",
            &["attn_logit_softcapping", "attention.sliding_window"][..],
        ),
        (
            "tiny-gemma3",
            &[
                "rope_parameters.full_attention.rope_theta",
                "sliding_window",
            ][..],
        ),
        (
            "tiny-phi3",
            &[
                "longrope",
                "rope_parameters.long_factor",
                "rope_parameters.partial_rotary_factor",
            ][..],
        ),
        (
            "tiny-phi3.f32.gguf",
            &["rope.scaling.attn_factor", "rope_factors_long.weight"][..],
        ),
        ("tiny-smollm3", &["no_rope_layers"][..]),
    ] {
        let text = show(path);
        for w in wanted {
            assert!(text.contains(w), "{path}: no {w} in {text}");
        }
    }
}
