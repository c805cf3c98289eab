//! `ferrite translate` end to end on the tiny Marian and flan-t5 fixtures:
//! one output line per input line (blank, 10,000-word and CRLF lines;
//! input that is not UTF-8 refused before any output), training
//! sentences translated as HF translates them, and clear errors for a
//! directory that is not a translation model and for bad options; and
//! `POST /v1/translations` on `ferrite serve`, good and bad requests.

mod serve_common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use serve_common::{Response, Server};

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// Runs `ferrite translate ARGS` with `input` on stdin: (status ok,
/// stdout, stderr).
fn translate(args: &[&str], input: &[u8]) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .arg("translate")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ferrite runs");
    // A run that fails before reading its input closes the pipe early.
    let _ = child.stdin.take().expect("stdin").write_all(input);
    let out = child.wait_with_output().expect("ferrite ends");
    (
        out.status.success(),
        String::from_utf8(out.stdout).expect("UTF-8 output"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn one_line_out_per_line_in() {
    let model = testdata().join("translation/tiny-marian");
    let model = model.to_str().expect("path");
    let long = "word ".repeat(10_000);
    let input = format!(
        "The river is wide and slow in the summer.\n\n{long}\nMy sister reads a book every evening.\n"
    );
    let (ok, out, err) = translate(
        &[model, "--beams", "4", "--max-length", "64"],
        input.as_bytes(),
    );
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    // The model was trained on these pairs (scripts/make-translation-fixtures.py).
    assert_eq!(lines[0], "गर्मियों में नदी चौड़ी और धीमी होती है।");
    assert_eq!(lines[1], "");
    assert_eq!(lines[3], "मेरी बहन हर शाम एक किताब पढ़ती है।");

    // Invalid UTF-8: an error naming the line, before any output.
    let (ok, out, err) = translate(&[model, "--beams", "1"], b"Hello!\n\xff\xfe\nHello!\n");
    assert!(!ok);
    assert!(
        err.contains(
            "line 2 is not valid UTF-8: byte 0xff at offset 0 of the line (7 of the input)"
        ),
        "{err}"
    );
    assert_eq!(out, "");
}

#[test]
fn bad_models_and_options_are_errors() {
    let not_model = testdata().join("gpt2");
    let (ok, _, err) = translate(&[not_model.to_str().expect("path")], b"Hi\n");
    assert!(!ok && err.contains("not a translation model"), "{err}");
    let model = testdata().join("translation/tiny-marian");
    let (ok, _, err) = translate(&[model.to_str().expect("path"), "--weights", "q4"], b"Hi\n");
    assert!(!ok && err.contains("expected f32 or q8_0"), "{err}");
}

/// The same for a T5 model (tiny-flan, task prefix typed on each line):
/// blank, 10,000-word (cut to 512 tokens, with a warning), a CRLF line and
/// a last line without a newline each give exactly one output line; a line
/// that is not UTF-8 is refused before any output.
#[test]
fn t5_one_line_out_per_line_in() {
    let model = testdata().join("translation/tiny-flan");
    let args = [
        model.to_str().expect("path"),
        "--beams",
        "4",
        "--max-length",
        "64",
    ];
    let p = "translate English to Hindi: ";
    let long = "word ".repeat(10_000);
    let head = format!("{p}My sister reads a book every evening.\r\n\n{p}{long}\n").into_bytes();
    let last = format!("{p}The river is wide and slow in the summer.");
    let bytes = [&head[..], last.as_bytes()].concat();
    let (ok, out, err) = translate(&args, &bytes);
    assert!(ok, "{err}");
    assert!(
        err.contains("warning: input 3 is longer than 512 tokens; truncated"),
        "{err}"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[0], "मेरी बहन हर शाम एक किताब पढ़ती है।");
    assert_eq!(lines[1], "");
    assert!(!lines[2].is_empty());
    assert_eq!(lines[3], "गर्मियों में नदी चौड़ी और धीमी होती है।");

    let bad = [&head[..], b"\xc3\x28\xff\n", last.as_bytes()].concat();
    let (ok, out, err) = translate(&args, &bad);
    assert!(
        !ok && err.contains("line 4 is not valid UTF-8: byte 0xc3"),
        "{err}"
    );
    assert_eq!(out, "");
}

/// `POST /v1/translations` on `ferrite serve` with the tiny Marian and a
/// tiny GPT-2 (not a translation model): one translation per input in
/// order (blank and 10,000-word inputs included), and a clear 4xx for
/// invalid UTF-8, bad JSON, a model that does not translate, and every
/// out-of-range field; the server keeps answering afterwards.
#[test]
fn serve_answers_v1_translations() {
    let marian = testdata().join("translation/tiny-marian");
    let gpt2 = testdata().join("gpt2/tiny.f32.gguf");
    let s = Server::start(&[marian.to_str().expect("path"), gpt2.to_str().expect("path")]);
    let sister = "My sister reads a book every evening.";
    let want = "मेरी बहन हर शाम एक किताब पढ़ती है।";
    let long = "word ".repeat(10_000);
    let r = s.post(
        "/v1/translations",
        &json!({"input": [sister, "", long, " ", sister], "beams": 4}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["model"], "tiny-marian");
    let data = v["data"].as_array().expect("data");
    assert_eq!(data.len(), 5, "{v}");
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["index"], i);
        assert_eq!(d["object"], "translation");
    }
    let text = |i: usize| data[i]["translation"].as_str().expect("a string");
    assert_eq!([text(0), text(1), text(3), text(4)], [want, "", "", want]);
    assert!(!text(2).is_empty() && !text(2).contains('\n'));
    // One string in, one translation out.
    let one = s.post(
        "/v1/translations",
        &json!({"model": "tiny-marian", "input": sister, "beams": 1}),
    );
    assert_eq!(one.json()["data"][0]["translation"], want);

    let expect = |r: Response, status: u16, needle: &str| {
        assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&r.body));
        let msg = r.error_message();
        assert!(msg.contains(needle), "'{msg}' lacks '{needle}'");
    };
    let raw = |body: &[u8]| {
        s.request(
            "POST",
            "/v1/translations",
            &[("content-type", "application/json")],
            body,
        )
    };
    expect(
        raw(b"{\"input\": [\"Hi \xff\xfe there\"]}"),
        400,
        "invalid JSON",
    );
    expect(raw(b"{\"input\": \"\\ud800\"}"), 400, "invalid JSON");
    expect(raw(b"{\"input\": [\"Hi\""), 400, "invalid JSON");
    let post = |body: Value| s.post("/v1/translations", &body);
    expect(
        post(json!({"model": "tiny.f32", "input": "Hi"})),
        400,
        "does not serve /v1/translations",
    );
    expect(post(json!({"model": "nope", "input": "Hi"})), 404, "nope");
    expect(post(json!({"input": 5})), 400, "input must be");
    expect(post(json!({"input": []})), 400, "input must be");
    expect(post(json!({"input": ["a", 1]})), 400, "input must be");
    expect(post(json!({})), 400, "input must be");
    expect(post(json!({"input": vec!["a"; 257]})), 400, "input must be");
    expect(post(json!({"input": "Hi", "beams": 0})), 400, "beams");
    expect(post(json!({"input": "Hi", "beams": 17})), 400, "beams");
    expect(
        post(json!({"input": "Hi", "max_length": 1})),
        400,
        "max_length",
    );
    // Still serving.
    let again = s.post("/v1/translations", &json!({"input": [sister]}));
    assert_eq!(again.json()["data"][0]["translation"], want);
}
