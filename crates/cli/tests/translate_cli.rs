//! `ferrite translate` end to end on the tiny Marian fixture: one output
//! line per input line (blank and invalid UTF-8 lines included, the latter
//! reported with a non-zero exit), training sentences translated as HF
//! translates them, and clear errors for a directory that is not a
//! translation model and for bad options.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

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

    // Invalid UTF-8: reported, a blank line in its place, exit status 1.
    let (ok, out, err) = translate(&[model, "--beams", "1"], b"Hello!\n\xff\xfe\nHello!\n");
    assert!(!ok);
    assert!(err.contains("line 2 is not valid UTF-8"), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[1], "");
    assert_eq!(lines[0], lines[2]);
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

/// One HTTP/1.1 POST of a JSON body; returns the response (head and body).
fn post(port: u16, path: &str, body: &str) -> String {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connects");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("request sent");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response read");
    out
}

#[test]
fn serve_answers_v1_translations() {
    use std::io::{BufRead, BufReader};
    let model = testdata().join("translation/tiny-marian");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["serve", model.to_str().expect("path"), "--port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ferrite serve runs");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut port = None;
    for line in lines.by_ref() {
        let line = line.expect("a line");
        if let Some(addr) = line.strip_prefix("ferrite: listening on http://") {
            port = addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
        }
        if line.starts_with("ferrite: ready") {
            break;
        }
    }
    let port = port.expect("a port");
    let ok = post(
        port,
        "/v1/translations",
        r#"{"input": ["My sister reads a book every evening.", ""], "beams": 4}"#,
    );
    let bad = post(port, "/v1/translations", r#"{"input": 5}"#);
    child.kill().expect("stops");
    let _ = child.wait();
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(
        ok.contains(r#""translation":"मेरी बहन हर शाम एक किताब पढ़ती है।""#),
        "{ok}"
    );
    assert!(
        ok.contains(r#""index":1,"object":"translation","translation":"""#),
        "{ok}"
    );
    assert!(
        bad.starts_with("HTTP/1.1 400") && bad.contains("input must be"),
        "{bad}"
    );
}
