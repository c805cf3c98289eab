//! `ferrite perplexity` end to end: llama-perplexity's output lines, the
//! KL-divergence round trip through a base file, and clear errors for
//! texts too short, hostile base files and contradicting flags. (The
//! figures themselves are checked against llama.cpp in the library's
//! tests/perplexity.rs.)

mod common;

use std::path::PathBuf;

fn text() -> String {
    common::testdata()
        .join("perplexity/text.txt")
        .display()
        .to_string()
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("ferrite-cli-ppl-{}-{name}", std::process::id()))
}

/// `ferrite perplexity smollm2 ARGS`.
fn smollm2(args: &[&str]) -> std::process::Output {
    let all: Vec<&str> = ["perplexity", "smollm2"]
        .iter()
        .chain(args)
        .copied()
        .collect();
    common::ferrite(&all, None)
}

/// The error of `ferrite perplexity smollm2 ARGS`, which must fail.
fn fails(args: &[&str]) -> String {
    let out = smollm2(args);
    assert_eq!(out.status.code(), Some(1), "{args:?} should fail: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn prints_each_chunk_and_the_final_estimate() {
    let text = text();
    let out = smollm2(&["-f", &text, "-c", "64", "--chunks", "3", "-t", "2"]);
    let (stdout, _) = common::ok(&out);
    let re_chunk = |i: usize| format!("[{i}]");
    for i in 1..=3 {
        assert!(stdout.contains(&re_chunk(i)), "{stdout}");
    }
    assert!(!stdout.contains("[4]"), "--chunks 3 scored more: {stdout}");
    let last = stdout.lines().last().unwrap();
    assert!(last.starts_with("Final estimate: PPL = "), "{stdout}");
    let ppl: f64 = last["Final estimate: PPL = ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let chunk3: f64 = stdout
        .split("[3]")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        format!("{ppl:.4}"),
        format!("{chunk3:.4}"),
        "the final estimate is the last running value"
    );
    assert!(ppl > 1.0 && ppl < 1000.0, "{ppl}");
}

#[test]
fn kl_divergence_round_trip_through_a_base_file() {
    let text = text();
    let base = tmp("base.kld");
    let b = base.display().to_string();
    let out = smollm2(&[
        "-f",
        &text,
        "-c",
        "64",
        "--chunks",
        "4",
        "--kl-divergence-base",
        &b,
    ]);
    common::ok(&out);
    // 20-byte header, 4 x 64 tokens, 4 x 31 rows of (49152 + 4) u16 (124
    // positions: llama-perplexity prints its statistics from 100 on).
    assert_eq!(
        std::fs::metadata(&base).unwrap().len(),
        20 + 4 * 256 + 4 * 31 * (49152 + 4) * 2
    );
    let out = smollm2(&["--kl-divergence-base", &b, "--kl-divergence"]);
    let (stdout, _) = common::ok(&out);
    let _ = std::fs::remove_file(&base);
    assert!(stdout.starts_with("chunk             PPL"), "{stdout}");
    assert!(stdout.contains("Mean    KLD:"), "{stdout}");
    // The model against its own logits: nothing differs but the base's
    // 16-bit rounding.
    let same_top = stdout
        .lines()
        .find(|l| l.starts_with("Same top p:"))
        .unwrap();
    assert!(same_top.contains("100.000"), "{same_top}");
    let mean = stdout
        .lines()
        .find(|l| l.starts_with("Mean    KLD:"))
        .unwrap();
    let v: f64 = mean["Mean    KLD:".len()..]
        .split('±')
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(v.abs() < 1e-5, "{mean}");
}

#[test]
fn hostile_inputs_get_clear_errors() {
    let text = text();
    // Fewer tokens than two contexts.
    let e = fails(&["-f", &text, "-c", "4096"]);
    assert!(e.contains("needs at least 8192"), "{e}");
    let e = fails(&["-f", &text, "-c", "2"]);
    assert!(e.contains("too short"), "{e}");
    // Not a base file, a truncated one, and one for another vocabulary.
    let junk = tmp("junk.kld");
    std::fs::write(&junk, b"this is not a base file at all").unwrap();
    let j = junk.display().to_string();
    let kld = || fails(&["--kl-divergence-base", &j, "--kl-divergence"]);
    let e = kld();
    assert!(e.contains("not a KL-divergence base file"), "{e}");
    let mut head = b"_logits_".to_vec();
    for v in [64u32, 1000, 1] {
        head.extend_from_slice(&v.to_le_bytes());
    }
    head.extend(std::iter::repeat_n(0u8, 4 * 64 + 31 * 1004 * 2));
    std::fs::write(&junk, &head).unwrap();
    let e = kld();
    assert!(
        e.contains("1000 tokens") && e.contains("cannot be compared"),
        "{e}"
    );
    std::fs::write(&junk, &head[..head.len() - 7]).unwrap();
    let e = kld();
    assert!(e.contains("needs"), "{e}");
    let _ = std::fs::remove_file(&junk);
    // Contradicting or missing flags.
    let e = fails(&["-f", &text, "--kl-divergence-base", &j, "--kl-divergence"]);
    assert!(e.contains("leave out -f"), "{e}");
    let out = common::ferrite(&["perplexity", "smollm2"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("-f TEXT"));
}
