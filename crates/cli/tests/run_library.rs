//! `ferrite run` is the library's generation loop: `--json-schema`
//! constrains it as the server's `response_format` does, and
//! `ferrite::Generator::complete` gives the text `run` prints.

mod common;

use common::{ferrite, ok};
use ferrite::{GenerateOptions, SamplerOptions, Threads};

const QWEN_PROMPT: &str = "<|im_start|>user\nDescribe a fictional person as JSON with their name, age and hobbies.<|im_end|>\n<|im_start|>assistant\n";

fn schema_file(name: &str, schema: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("ferrite-{}-{name}.json", std::process::id()));
    std::fs::write(&path, schema).unwrap();
    path
}

#[test]
fn json_schema_output_parses_and_matches() {
    let schema = schema_file(
        "person",
        r#"{"type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                           "hobbies": {"type": "array", "items": {"type": "string"}}},
            "required": ["name", "age", "hobbies"]}"#,
    );
    let out = ferrite(
        &[
            "run",
            "qwen2.5-0.5b",
            "-p",
            QWEN_PROMPT,
            "--json-schema",
            schema.to_str().unwrap(),
            "--temp",
            "0",
            "-n",
            "200",
            "--verbose",
        ],
        None,
    );
    std::fs::remove_file(&schema).ok();
    let (stdout, stderr) = ok(&out);
    assert!(stderr.contains("stop: end of generation"), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("the reply parses");
    assert!(v["name"].is_string(), "{v}");
    assert!(v["age"].is_i64(), "{v}");
    assert!(
        v["hobbies"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h.is_string()),
        "{v}"
    );
}

#[test]
fn bad_json_schemas_are_refused_before_loading() {
    let unsupported = schema_file(
        "pattern",
        r#"{"type": "object", "properties": {"a": {"type": "string", "pattern": "^(x)\\1$"}}}"#,
    );
    let not_json = schema_file("notjson", "{type: object");
    for (file, want) in [
        (&unsupported, "pattern"),
        (&not_json, "not JSON"),
        (
            &std::path::PathBuf::from("/nonexistent/schema.json"),
            "/nonexistent/schema.json",
        ),
    ] {
        let out = ferrite(
            &[
                "run",
                "smollm2",
                "-p",
                "x",
                "--json-schema",
                file.to_str().unwrap(),
            ],
            None,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains("--json-schema") && stderr.contains(want),
            "{stderr}"
        );
    }
    std::fs::remove_file(&unsupported).ok();
    std::fs::remove_file(&not_json).ok();
}

/// Issue 44 (items 1 and 2): a `pattern` nested 10,000 groups deep
/// overflowed the stack while compiling (1,000 did on a server's worker
/// thread), and a left-recursive `anyOf` was accepted, then overflowed it
/// while generating (SIGABRT both, on main). Both are now refused before
/// the model loads, with the keyword and the path.
#[test]
fn hostile_json_schemas_are_refused_not_a_crash() {
    let deep = format!("{}a{}", "(".repeat(10_000), ")".repeat(10_000));
    let deep_pattern = schema_file(
        "deep-pattern",
        &format!(
            r#"{{"type": "object", "properties": {{"a": {{"type": "string", "pattern": "{deep}"}}}}}}"#
        ),
    );
    let left_recursive = schema_file(
        "left-recursive",
        r##"{"type":"object","properties":{"v":{"$ref":"#/$defs/a"}},
            "$defs":{"a":{"anyOf":[{"type":"integer"},{"$ref":"#/$defs/a"}]}}}"##,
    );
    let deep_json = schema_file("deep-json", &"[".repeat(100_000));
    for (file, want) in [
        (
            &deep_pattern,
            vec!["'pattern'", "nests groups deeper than 64", "#/properties/a"],
        ),
        (&left_recursive, vec!["left recursion", "#/"]),
        (&deep_json, vec!["not JSON", "recursion limit"]),
    ] {
        let out = ferrite(
            &[
                "run",
                "smollm2",
                "-p",
                "x",
                "-n",
                "4",
                "--json-schema",
                file.to_str().unwrap(),
            ],
            None,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        // An error exit (1), not a signal.
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        for w in want {
            assert!(stderr.contains(w), "{w}: {stderr}");
        }
        std::fs::remove_file(file).ok();
    }
}

#[test]
fn the_library_generator_prints_what_run_prints() {
    let prompt = "The capital of France is";
    let out = ferrite(
        &["run", "smollm2", "-p", prompt, "-n", "24", "--temp", "0"],
        None,
    );
    let (stdout, _) = ok(&out);
    let generator = ferrite::open("smollm2")
        .and_then(|m| m.into_generator())
        .expect("smollm2 loads (scripts/fetch-models.sh)");
    let opts = GenerateOptions {
        max_tokens: Some(24),
        ..Default::default()
    };
    let text = generator
        .complete(prompt, &SamplerOptions::greedy(), &opts, Threads::new(2))
        .unwrap();
    // `run` ends its output with a newline.
    assert_eq!(format!("{text}\n"), stdout);
    // The facade says what a model is when it is the wrong kind.
    let err = ferrite::open("minilm")
        .and_then(|m| m.into_generator())
        .err()
        .expect("an embedding model is not a generator");
    assert!(err.to_string().contains("embedding model"), "{err}");
}

/// `ferrite run --beams 4` prints transformers' `num_beams=4` continuation
/// (the first case of testdata/beam/goldens.json: tiny GPT-2, 12 new
/// tokens), and the beam options are refused without `--beams`.
#[test]
fn beams_print_the_searched_continuation() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let goldens: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("testdata/beam/goldens.json")).unwrap(),
    )
    .unwrap();
    let case = &goldens["models"]["gpt2"]["cases"][0];
    assert_eq!(case["options"]["num_beams"], 4);
    assert_eq!(case["options"]["max_new_tokens"], 12);
    let ids: Vec<u32> = case["new_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let model = root.join("testdata/gpt2/tiny-hf");
    let gen = ferrite::open(model.to_str().unwrap())
        .and_then(|m| m.into_generator())
        .unwrap();
    let prompt_ids: Vec<u32> = case["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let prompt = gen.tokenizer().decode(&prompt_ids, false);
    assert_eq!(gen.tokenizer().encode(&prompt, true, true), prompt_ids);
    let want = gen.tokenizer().decode(&ids, false);
    let out = ferrite(
        &[
            "run",
            model.to_str().unwrap(),
            "-p",
            &prompt,
            "-n",
            "12",
            "--beams",
            "4",
        ],
        None,
    );
    let (stdout, _) = ok(&out);
    assert_eq!(stdout, format!("{want}\n"));

    // Beam options without --beams, sampling options with it: refused.
    for args in [
        &["--no-repeat-ngram", "2"][..],
        &["--beams", "2", "--temp", "0.5"],
        &["--beams", "2", "--seed", "3"],
    ] {
        let mut all = vec!["run", model.to_str().unwrap(), "-p", &prompt];
        all.extend_from_slice(args);
        let out = ferrite(&all, None);
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--beams"), "{args:?}: {stderr}");
    }
}
