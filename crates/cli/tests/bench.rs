//! `ferrite bench` on SmolLM2: the JSON report and the errors.

use std::process::{Command, Output};

use serde_json::Value as Json;

fn ferrite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .output()
        .expect("run ferrite")
}

#[test]
fn bench_json_reports_positive_rates_and_a_plausible_rss() {
    let out = ferrite(&[
        "bench", "smollm2", "-p", "16", "-n", "4", "-r", "1", "-t", "2", "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim_end().lines().count(), 1, "one line: {stdout}");
    let j: Json = serde_json::from_str(&stdout).expect("valid JSON");
    for key in ["pp_tok_s", "tg_tok_s"] {
        let rate = j[key].as_f64().unwrap_or_else(|| panic!("{key}: {j}"));
        assert!(rate.is_finite() && rate > 0.0, "{key}: {j}");
        assert_eq!(j[format!("{key}_sd")], 0.0, "one repetition: {j}");
    }
    assert_eq!(j["n_prompt"], 16);
    assert_eq!(j["n_gen"], 4);
    assert_eq!(j["reps"], 1);
    assert_eq!(j["threads"], 2);
    assert!(j["model"].as_str().unwrap().ends_with(".gguf"), "{j}");
    assert!(!j["kernels"].as_str().unwrap().is_empty(), "{j}");
    if cfg!(target_os = "linux") {
        // The weights are mapped in (~86 MB) and touched; well under 4 GB.
        let rss = j["peak_rss_bytes"].as_u64().expect("RSS on Linux");
        assert!((50 << 20..4 << 30).contains(&rss), "peak RSS {rss}");
    }
}

/// Issue 4's memory bound: peak RSS at most the file's size plus the KV
/// cache plus 64 MiB. The weights are repacked into heap copies at load
/// time (eight-row groups); the file's pages of repacked rows are released
/// as they are copied, and token embeddings tied to the output matrix are
/// read from its copy, so the copies replace the mapped file rather than
/// add to it.
#[test]
fn bench_peak_rss_stays_within_file_plus_cache_plus_64_mib() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let out = ferrite(&[
        "bench", "smollm2", "-p", "512", "-n", "16", "-r", "1", "--json",
    ]);
    assert!(
        out.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Json = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let file = std::fs::metadata(j["model"].as_str().expect("model path"))
        .expect("model file")
        .len();
    // SmolLM2-135M: 30 layers, K and V of 3 heads x 64 values, f16, for
    // the 512 positions of the context the bench asks for.
    let kv = 30 * 2 * 3 * 64 * 2 * 512;
    let rss = j["peak_rss_bytes"].as_u64().expect("RSS on Linux");
    let bound = file + kv + (64 << 20);
    assert!(
        rss <= bound,
        "peak RSS {} MiB > file {} MiB + KV {} MiB + 64 MiB",
        rss >> 20,
        file >> 20,
        kv >> 20
    );
}

#[test]
fn bench_skips_a_test_given_zero() {
    let out = ferrite(&[
        "bench", "smollm2", "-p", "0", "-n", "2", "-r", "1", "-t", "1", "--json",
    ]);
    assert!(out.status.success());
    let j: Json = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert!(j["pp_tok_s"].is_null(), "{j}");
    assert!(j["tg_tok_s"].as_f64().unwrap() > 0.0, "{j}");
    // SmolLM2 ties its output head to the embedding: every tensor is read
    // per token, so the weights read are the file's tensor bytes.
    let per_token = j["weights_read_per_token_bytes"].as_u64().unwrap();
    assert_eq!(per_token, j["model_size_bytes"].as_u64().unwrap(), "{j}");
    let gb_s = j["tg_weights_gb_s"].as_f64().unwrap();
    let want = j["tg_tok_s"].as_f64().unwrap() * per_token as f64 / 1e9;
    assert!((gb_s - want).abs() <= 1e-9 * want, "{j}");
    assert!(j["tg_cpu_ms_per_token"].as_f64().unwrap() > 0.0, "{j}");
}

#[test]
fn bench_errors_are_one_line_and_nonzero() {
    for args in [
        vec!["bench", "-r", "0"],
        vec!["bench", "no-such-model"],
        vec!["bench", "-p", "100000", "-n", "0", "-r", "1"],
    ] {
        let out = ferrite(&args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("ferrite: "), "{err}");
    }
    // Malformed numbers, and thread counts outside 1..=512 (the rule of
    // every command), are clap's to report (usage and a hint).
    for args in [["bench", "-p", "many"], ["bench", "-t", "0"]] {
        let out = ferrite(&args);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value"));
    }
}

/// `-d DEPTH` (llama-bench's): pp and tg measured after DEPTH tokens
/// already in the cache; the table names the tests as llama-bench does
/// (`pp8 @ d40`), the JSON reports the depth, and a depth that does not
/// fit the model's context is a usage error.
#[test]
fn bench_at_depth_reports_the_depth() {
    let out = ferrite(&[
        "bench", "smollm2", "-p", "8", "-n", "2", "-d", "40", "-r", "1", "-t", "2", "--json",
    ]);
    assert!(
        out.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Json = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(j["n_depth"], 40, "{j}");
    for key in ["pp_tok_s", "tg_tok_s"] {
        let rate = j[key].as_f64().unwrap_or_else(|| panic!("{key}: {j}"));
        assert!(rate.is_finite() && rate > 0.0, "{key}: {j}");
    }
    let out = ferrite(&[
        "bench", "smollm2", "-p", "8", "-n", "2", "-d", "40", "-r", "1", "-t", "2",
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    assert!(table.contains("| pp8 @ d40 |"), "{table}");
    assert!(table.contains("| tg2 @ d40 |"), "{table}");
    let out = ferrite(&["bench", "smollm2", "-p", "8", "-n", "0", "-d", "100000000"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("depth of 100000000"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}
