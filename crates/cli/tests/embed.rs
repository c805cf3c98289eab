//! `ferrite embed` end to end: one JSON array per input line, same order,
//! stdin or a file, `.npy` output, options, and one-line errors.

mod common;

use common::{ferrite, ferrite_bytes, ok, testdata};

fn vectors(stdout: &str) -> Vec<Vec<f32>> {
    stdout
        .lines()
        .map(|l| serde_json::from_str::<Vec<f32>>(l).expect("a JSON array per line"))
        .collect()
}

#[test]
fn embeds_stdin_lines_in_order_and_matches_the_library() {
    let input = "first line\n\nthird line, after an empty one\r\nlast, no newline";
    let (stdout, _) = ok(&ferrite(&["embed", "minilm", "-", "-t", "2"], Some(input)));
    let v = vectors(&stdout);
    assert_eq!(v.len(), 4);
    // No input lines, no output.
    let (none, _) = ok(&ferrite(&["embed", "minilm"], Some("")));
    assert!(none.is_empty());
    assert!(v.iter().all(|x| x.len() == 384));
    // Each line alone gives the same vector (bit for bit, through the text
    // form, which round-trips f32 exactly).
    for (i, line) in [
        "first line",
        "",
        "third line, after an empty one",
        "last, no newline",
    ]
    .iter()
    .enumerate()
    {
        let (one, _) = ok(&ferrite(
            &["embed", "minilm", "-t", "1"],
            Some(&format!("{line}\n")),
        ));
        assert_eq!(vectors(&one)[0], v[i], "line {i}");
    }
}

#[test]
fn options_and_npy_output() {
    let file = testdata().join("embed/corpus.txt");
    let file = file.to_str().unwrap();
    let (stdout, stderr) = ok(&ferrite(&["embed", "minilm", file, "--dim", "128"], None));
    let v = vectors(&stdout);
    assert_eq!(v.len(), 134);
    assert!(v.iter().all(|x| x.len() == 128));
    assert!(
        stderr.contains("truncated"),
        "long inputs are reported: {stderr}"
    );

    let dir = std::env::temp_dir().join(format!("ferrite-embed-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let npy = dir.join("out.npy");
    let args = [
        "embed",
        "minilm",
        file,
        "--format",
        "npy",
        "-o",
        npy.to_str().unwrap(),
        "--dim",
        "128",
    ];
    ok(&ferrite(&args, None));
    let bytes = std::fs::read(&npy).unwrap();
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + header_len) % 64, 0);
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
    assert!(
        header.contains("'descr': '<f4'") && header.contains("(134, 128)"),
        "{header}"
    );
    let data: Vec<f32> = bytes[10 + header_len..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(data.len(), 134 * 128);
    assert_eq!(&data[..128], &v[0][..]);
    std::fs::remove_dir_all(&dir).ok();

    let (stdout, _) = ok(&ferrite(
        &["embed", "minilm", "--no-normalize", "--pooling", "cls"],
        Some("x"),
    ));
    let n: f32 = vectors(&stdout)[0]
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt();
    assert!((n - 1.0).abs() > 1e-3);
}

fn fails_with(args: &[&str], stdin: &[u8], needle: &str) {
    let out = ferrite_bytes(args, stdin);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_requests_get_one_line_errors() {
    fails_with(
        &["embed", "minilm"],
        b"ok\n\xff\xfe\n",
        "line 2 is not valid UTF-8",
    );
    let long = "word ".repeat(400);
    fails_with(
        &["embed", "minilm", "--no-truncate"],
        long.as_bytes(),
        "longer than",
    );
    fails_with(&["embed", "minilm", "--dim", "0"], b"x", "--dim");
    fails_with(&["embed", "minilm", "--pooling", "max"], b"x", "--pooling");
    fails_with(&["embed", "minilm", "--format", "npy"], b"x", "--output");
    fails_with(
        &["embed", "smollm2"],
        b"x",
        "not a supported embedding model",
    );
    fails_with(
        &["embed", "minilm", "/nonexistent.txt"],
        b"",
        "/nonexistent.txt",
    );
}

#[test]
fn bench_texts_reports_sentences_per_second() {
    let file = testdata().join("embed/corpus.txt");
    let args = [
        "bench",
        "minilm",
        "--texts",
        file.to_str().unwrap(),
        "-r",
        "1",
        "-t",
        "1",
        "--json",
    ];
    let (stdout, _) = ok(&ferrite(&args, None));
    let j: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(j["sent_per_s"].as_f64().unwrap() > 0.0);
    assert!(j["single_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(j["sentences"].as_u64(), Some(134));
}
