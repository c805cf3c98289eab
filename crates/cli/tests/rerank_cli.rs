//! `ferrite rerank` end to end on the random-weight cross-encoder fixture
//! (`testdata/rerank/`, `scripts/make-rerank-fixtures.py`): JSON sorted by
//! score with CrossEncoder's scores (within 1e-5 of its goldens), text
//! output, `--top-n`, `--raw-scores`, files and stdin, and one-line errors.

mod common;

use common::{ferrite, ok, testdata};
use serde_json::Value;

fn fixture(name: &str) -> String {
    testdata().join("rerank").join(name).display().to_string()
}

/// The goldens of pairs 0 and 1 (both with this query): activated and raw.
const QUERY: &str = "how many people live in berlin?";

fn golden(key: &str, i: usize) -> f32 {
    let path = testdata().join("rerank/bert-ce-1/goldens.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(v["pairs"][i][0], QUERY);
    v[key][i][0].as_f64().unwrap() as f32
}

fn documents() -> (String, String) {
    let path = testdata().join("rerank/bert-ce-1/goldens.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    (
        v["pairs"][0][1].as_str().unwrap().into(),
        v["pairs"][1][1].as_str().unwrap().into(),
    )
}

fn results(stdout: &str) -> Vec<(usize, f32)> {
    let v: Value = serde_json::from_str(stdout).expect("one JSON object");
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["index"].as_u64().unwrap() as usize,
                r["score"].as_f64().unwrap() as f32,
            )
        })
        .collect()
}

#[test]
fn json_is_sorted_and_matches_cross_encoder() {
    let (a, b) = documents();
    let input = format!("{a}\n{b}\n");
    let model = fixture("bert-ce-1");
    for (flag, key) in [(None, "scores"), (Some("--raw-scores"), "raw")] {
        let mut args = vec!["rerank", &model, "--query", QUERY, "--format", "json"];
        args.extend(flag);
        let (stdout, _) = ok(&ferrite(&args, Some(&input)));
        let got = results(&stdout);
        assert_eq!(got.len(), 2);
        assert!(got[0].1 >= got[1].1, "sorted: {got:?}");
        for (index, score) in got {
            let want = golden(key, index);
            assert!(
                (score - want).abs() <= 1e-5,
                "{key} {index}: {score} vs {want}"
            );
        }
    }
}

#[test]
fn top_n_ties_text_and_files() {
    let (a, b) = documents();
    let dir = std::env::temp_dir().join(format!("ferrite-rerank-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (f1, f2) = (dir.join("one.txt"), dir.join("two.txt"));
    std::fs::write(&f1, format!("{a}\n{b}\n")).unwrap();
    std::fs::write(&f2, format!("{a}\r\n")).unwrap();
    let model = fixture("bert-ce-1");
    let (f1s, f2s) = (f1.display().to_string(), f2.display().to_string());
    let all = [
        "rerank", &model, "-q", QUERY, "--format", "json", &f1s, &f2s,
    ];
    let (stdout, _) = ok(&ferrite(&all, None));
    let got = results(&stdout);
    // Document 2 is document 0 again: the same score, after it.
    let pos = |i: usize| got.iter().position(|r| r.0 == i).unwrap();
    assert_eq!(got[pos(0)].1.to_bits(), got[pos(2)].1.to_bits());
    assert_eq!(pos(2), pos(0) + 1);
    let mut top = all.to_vec();
    top.extend(["--top-n", "1"]);
    let (stdout, _) = ok(&ferrite(&top, None));
    assert_eq!(results(&stdout), got[..1]);
    // Text: score, index and document, tab-separated, best first.
    let text = ["rerank", &model, "-q", QUERY, &f1s];
    let (stdout, _) = ok(&ferrite(&text, None));
    let lines: Vec<Vec<&str>> = stdout.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(lines.len(), 2);
    let best = &lines[0];
    assert_eq!(
        best[2],
        if best[1] == "0" {
            a.as_str()
        } else {
            b.as_str()
        }
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn errors_are_one_line() {
    let model = fixture("bert-ce-1");
    let cases: [(&[&str], &str); 4] = [
        (&["rerank", &model, "-q", "  "], "--query is empty"),
        (
            &["rerank", &model, "-q", "x", "--format", "csv"],
            "--format 'csv'",
        ),
        (&["rerank", &fixture("bert-ce-3"), "-q", "x"], "3 labels"),
        (&["rerank", "minilm", "-q", "x"], "not a cross-encoder"),
    ];
    for (args, want) in cases {
        let out = ferrite(args, Some("a document\n"));
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    }
}
