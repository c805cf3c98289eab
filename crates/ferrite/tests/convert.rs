//! `ferrite::convert` against llama.cpp's `convert_hf_to_gguf.py` (and
//! `llama-quantize` for the quantized targets): for each directory and out
//! type, the file must be byte-identical to the converter's (whole-file
//! sha256); on a mismatch the first metadata key or tensor that differs is
//! named. Goldens: `testdata/convert/goldens.json`, made by
//! `scripts/make-convert-goldens.py`. Also: hostile inputs give an error
//! and leave no file behind.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferrite::convert::{convert_dir, ConvertOptions, Target};
use ferrite::formats::gguf::GgufFile;
use ferrite::open::{open_generator, OpenOptions};
use ferrite::quantize::FileType;
use ferrite::Generator;
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn models_dir() -> PathBuf {
    std::env::var_os("FERRITE_MODELS").map_or_else(|| root().join("models"), PathBuf::from)
}

fn resolve(d: &str) -> PathBuf {
    match d.strip_prefix("$MODELS/") {
        Some(rest) => models_dir().join(rest),
        None => root().join(d),
    }
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn goldens() -> Json {
    let p = root().join("testdata/convert/goldens.json");
    let text = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/make-convert-goldens.py)", p.display()));
    serde_json::from_str(&text).expect("golden JSON")
}

/// A scratch directory of its own for each test.
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferrite-convert-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

fn options(outtype: &str, pre: Option<&str>) -> ConvertOptions {
    ConvertOptions {
        target: Target::from_name(outtype).expect("out type"),
        pre_tokenizer: pre.map(str::to_string),
        force: false,
        threads: 2,
    }
}

/// The first difference between ferrite's file and the converter's summary.
fn first_difference(path: &Path, case: &Json) -> String {
    let f = match GgufFile::open(path) {
        Ok(f) => f,
        Err(e) => return format!("ferrite's file does not open: {e}"),
    };
    let want_keys: Vec<&str> = case["metadata"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m[0].as_str().unwrap())
        .collect();
    let got_keys: Vec<&str> = f.metadata().iter().map(|(k, _)| k).collect();
    for (i, w) in want_keys.iter().enumerate() {
        if got_keys.get(i) != Some(w) {
            return format!(
                "metadata key {i}: converter {w}, ferrite {:?}",
                got_keys.get(i)
            );
        }
    }
    if got_keys.len() != want_keys.len() {
        return format!(
            "ferrite has {} metadata keys, the converter {}",
            got_keys.len(),
            want_keys.len()
        );
    }
    for (i, t) in case["tensors"].as_array().unwrap().iter().enumerate() {
        let Some(g) = f.header().tensors.get(i) else {
            return format!("tensor {i} ({}) missing", t[0]);
        };
        let data = f.tensor(&g.name).map(|v| hex(&Sha256::digest(v.data)));
        if g.name != t[0].as_str().unwrap()
            || g.ty.name() != t[1].as_str().unwrap()
            || data.as_deref() != t[3].as_str()
        {
            return format!(
                "tensor {i}: converter {} {} {}, ferrite {} {} {:?}",
                t[0], t[1], t[2], g.name, g.ty, g.dims
            );
        }
    }
    "same metadata keys and tensors: a metadata value differs".into()
}

fn check_cases(tag: &str, filter: impl Fn(&Json) -> bool) {
    let g = goldens();
    let dir = scratch(tag);
    let mut n = 0;
    for case in g["cases"].as_array().unwrap().iter().filter(|c| filter(c)) {
        let src = case["dir"].as_str().unwrap();
        let outtype = case["outtype"].as_str().unwrap();
        let out = dir.join(format!("{n}.gguf"));
        convert_dir(
            &resolve(src),
            &out,
            &options(outtype, case["pre_tokenizer"].as_str()),
        )
        .unwrap_or_else(|e| panic!("{src} {outtype}: {e}"));
        let sha = hex(&Sha256::digest(std::fs::read(&out).unwrap()));
        assert_eq!(
            sha,
            case["sha256"].as_str().unwrap(),
            "{src} --outtype {outtype}: not the converter's file: {}",
            first_difference(&out, case)
        );
        std::fs::remove_file(&out).unwrap();
        n += 1;
    }
    assert!(n > 0, "no cases");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fixtures_byte_identical_to_the_converter() {
    check_cases("fixtures", |c| {
        let d = c["dir"].as_str().unwrap();
        !d.starts_with("$MODELS") && !d.contains("nomic-bert")
    });
}

#[test]
fn nomic_bert_byte_identical_to_the_converter() {
    check_cases("nomic-bert", |c| {
        c["dir"].as_str().unwrap().contains("nomic-bert")
    });
}

/// A nomic-bert layout the converter does not convert gets a clear error
/// naming the key, and no output.
#[test]
fn nomic_bert_unconverted_layouts_refused() {
    let base = scratch("nomic-refused");
    let fixture = root().join("testdata/convert/tiny-nomic-bert");
    let config: Json =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("config.json")).unwrap())
            .unwrap();
    let cases = [
        ("prenorm", serde_json::json!(true), "prenorm"),
        (
            "moe_every_n_layers",
            serde_json::json!(2),
            "mixture of experts",
        ),
        ("n_positions", serde_json::json!(4096), "n_positions"),
        ("activation_function", serde_json::json!("gelu"), "swiglu"),
        ("qkv_proj_bias", serde_json::json!(true), "qkv_proj_bias"),
    ];
    for (i, (key, value, expect)) in cases.into_iter().enumerate() {
        let d = base.join(format!("case{i}"));
        copy_dir(&fixture, &d);
        let mut c = config.clone();
        c[key] = value;
        std::fs::write(d.join("config.json"), c.to_string()).unwrap();
        let out = base.join(format!("case{i}.gguf"));
        let e = convert_dir(&d, &out, &options("f32", Some("gpt-2")))
            .expect_err(key)
            .to_string();
        assert!(e.contains(expect), "{key}: {e}");
        assert!(!out.exists(), "{key}: output left behind");
    }
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn minilm_byte_identical_to_the_converter() {
    check_cases("minilm", |c| {
        c["dir"].as_str().unwrap().starts_with("$MODELS")
    });
}

/// Nothing but `keep` in `dir` (no output, no temporary file).
fn assert_only(dir: &Path, keep: &[&str]) {
    let mut left: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(&n.as_str()))
        .collect();
    left.sort();
    assert!(left.is_empty(), "left behind: {left:?}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn hostile_inputs_fail_cleanly() {
    let base = scratch("hostile");
    let out_dir = base.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("m.gguf");
    let tiny = root().join("testdata/hf-decoders/tiny-qwen3");
    let opts = options("f16", Some("gpt-2"));
    let err = |dir: &Path, out: &Path| -> String {
        match convert_dir(dir, out, &opts) {
            Ok(_) => panic!("{} converted", dir.display()),
            Err(e) => e.to_string(),
        }
    };

    // No config.json.
    let d = base.join("no-config");
    copy_dir(&tiny, &d);
    std::fs::remove_file(d.join("config.json")).unwrap();
    assert!(err(&d, &out).contains("config.json"));
    assert_only(&out_dir, &[]);

    // An architecture the converter does not know.
    let d = base.join("unknown-arch");
    copy_dir(&tiny, &d);
    let cfg = std::fs::read_to_string(d.join("config.json")).unwrap();
    std::fs::write(
        d.join("config.json"),
        cfg.replace("Qwen3ForCausalLM", "FrobnicatorForCausalLM"),
    )
    .unwrap();
    let e = err(&d, &out);
    assert!(e.contains("FrobnicatorForCausalLM"), "{e}");
    assert_only(&out_dir, &[]);

    // A truncated safetensors file.
    let d = base.join("truncated");
    copy_dir(&tiny, &d);
    let st = d.join("model.safetensors");
    let len = std::fs::metadata(&st).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&st)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let e = err(&d, &out);
    assert!(e.contains("safetensors"), "{e}");
    assert_only(&out_dir, &[]);

    // The output inside the input directory, or the input file itself.
    let e = err(&tiny, &tiny.join("model.safetensors"));
    assert!(e.contains("inside the input"), "{e}");
    let e = err(&tiny, &tiny.join("new.gguf"));
    assert!(e.contains("inside the input"), "{e}");
    assert!(!tiny.join("new.gguf").exists());

    // An existing output: refused, then replaced with force.
    std::fs::write(&out, b"precious").unwrap();
    let e = err(&tiny, &out);
    assert!(e.contains("exists"), "{e}");
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");
    let forced = ConvertOptions {
        force: true,
        ..options("f16", Some("gpt-2"))
    };
    convert_dir(&tiny, &out, &forced).expect("with force");
    assert_ne!(std::fs::read(&out).unwrap(), b"precious");
    std::fs::remove_file(&out).unwrap();

    // An unknown pre-tokenizer hash without --pre-tokenizer.
    let e = match convert_dir(&tiny, &out, &options("f16", None)) {
        Ok(_) => panic!("converted without a pre-tokenizer"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("--pre-tokenizer"), "{e}");
    assert_only(&out_dir, &[]);

    // An output directory that does not exist.
    let e = err(&tiny, &base.join("missing/m.gguf"));
    assert!(e.contains("missing"), "{e}");

    // MPNet: the converter has no such architecture.
    let mpnet = base.join("mpnet");
    std::fs::create_dir_all(&mpnet).unwrap();
    std::fs::copy(
        tiny.join("model.safetensors"),
        mpnet.join("model.safetensors"),
    )
    .unwrap();
    std::fs::write(
        mpnet.join("config.json"),
        r#"{"architectures": ["MPNetForMaskedLM"], "model_type": "mpnet"}"#,
    )
    .unwrap();
    let e = err(&mpnet, &out);
    assert!(e.contains("no MPNet"), "{e}");
    assert_only(&out_dir, &[]);

    // Gemma 2 with a SentencePiece tokenizer.model: the converter would
    // write that vocabulary, which ferrite does not read.
    let d = base.join("gemma2-spm");
    copy_dir(&root().join("testdata/hf-decoders/tiny-gemma2"), &d);
    std::fs::write(d.join("tokenizer.model"), b"not read").unwrap();
    let e = err(&d, &out);
    assert!(
        e.contains("tokenizer.model") && e.contains("SentencePiece"),
        "{e}"
    );
    assert_only(&out_dir, &[]);

    // A mixture of experts with one expert fewer than config.json says.
    let d = base.join("moe-missing-expert");
    copy_dir(&root().join("testdata/hf-moe/tiny-qwen3-moe"), &d);
    let cfg = std::fs::read_to_string(d.join("config.json")).unwrap();
    let cfg = cfg.replace("\"num_local_experts\": 8", "\"num_local_experts\": 9");
    assert!(cfg.contains("\"num_local_experts\": 9"));
    std::fs::write(d.join("config.json"), cfg).unwrap();
    let e = err(&d, &out);
    assert!(e.contains("experts"), "{e}");
    assert_only(&out_dir, &[]);

    let _ = std::fs::remove_dir_all(&base);
}

/// `--weights TYPE` on a directory runs the tensors `ferrite convert
/// --outtype TYPE` writes: the logits of every position are the same bits
/// as the converted file's, and the same tokens come out of the same text
/// (the directory keeps its tokenizer.json; the file has the converter's
/// vocabulary). Also checked: the tensors themselves are the file's.
#[test]
fn quantize_on_load_runs_the_converted_file() {
    let dir = scratch("on-load");
    let cases = [
        ("testdata/hf-decoders/tiny-llama3", "Q4_K_M"),
        ("testdata/hf-decoders/tiny-qwen2-bf16", "Q8_0"),
        ("testdata/hf-decoders/tiny-qwen3", "Q4_0"),
        ("testdata/gpt2/tiny-hf", "Q5_1"),
        ("testdata/hf-gpt-oss/tiny-gpt-oss", "Q4_K_M"),
    ];
    for (src, ty) in cases {
        let ft = FileType::from_name(ty).unwrap();
        let hf = open_generator(
            &resolve(src),
            &OpenOptions {
                decoder_weights: Some(ft),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{src} --weights {ty}: {e}"));
        let out = dir.join(format!("{ty}.gguf"));
        convert_dir(&resolve(src), &out, &options(ty, Some("gpt-2"))).unwrap();
        let file = Arc::new(GgufFile::open(&out).unwrap());
        for t in &file.header().tensors {
            let a = file.tensor(&t.name).unwrap();
            let b = hf
                .file()
                .tensor(&t.name)
                .unwrap_or_else(|| panic!("{src}: no {} at load", t.name));
            assert_eq!(a.info.ty, b.info.ty, "{src} {ty}: {}", t.name);
            assert!(a.data == b.data, "{src} {ty}: {} bytes differ", t.name);
        }
        let gguf = Generator::from_gguf(file, &out).unwrap();
        let text = "Once upon a time, in a village by the sea,";
        let ids_hf = hf.tokenizer().encode(text, true, true);
        let ids_file = gguf.tokenizer().encode(text, true, true);
        assert_eq!(ids_hf, ids_file, "{src}: tokens");
        let a = common::all_logits(hf.model(), &ids_hf);
        let b = common::all_logits(gguf.model(), &ids_file);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(!a.is_empty());
        assert_eq!(bits(&a), bits(&b), "{src} --weights {ty}: logits differ");
        std::fs::remove_file(&out).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// gpt-oss: the converter's own files, committed by
/// `scripts/make-gpt-oss-fixtures.py` (`convert_hf_to_gguf.py --outtype
/// f32|q8_0` on the float32 fixture), byte for byte: the fused experts
/// split into gate and up and transposed, the sinks renamed. The
/// fixture's tokenizer hash is unknown to the converter: its wrapper
/// (`make-hf-decoder-fixtures.py`) names the pre-tokenizer gpt-2.
#[test]
fn gpt_oss_byte_identical_to_the_converter() {
    let dir = scratch("gpt-oss");
    let src = root().join("testdata/hf-gpt-oss/tiny-gpt-oss");
    for outtype in ["f32", "q8_0"] {
        let want = root().join(format!("testdata/hf-gpt-oss/tiny-gpt-oss.{outtype}.gguf"));
        let out = dir.join(format!("{outtype}.gguf"));
        convert_dir(&src, &out, &options(outtype, Some("gpt-2")))
            .unwrap_or_else(|e| panic!("gpt-oss {outtype}: {e}"));
        let got = std::fs::read(&out).unwrap();
        let want_bytes = std::fs::read(&want).unwrap();
        if got != want_bytes {
            panic!(
                "gpt-oss --outtype {outtype}: not the converter's file: {}",
                gguf_difference(&out, &want)
            );
        }
        std::fs::remove_file(&out).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The first metadata key or tensor that differs between two GGUF files.
fn gguf_difference(got: &Path, want: &Path) -> String {
    let (g, w) = match (GgufFile::open(got), GgufFile::open(want)) {
        (Ok(g), Ok(w)) => (g, w),
        (Err(e), _) | (_, Err(e)) => return format!("does not open: {e}"),
    };
    let gm: Vec<_> = g.metadata().iter().collect();
    let wm: Vec<_> = w.metadata().iter().collect();
    for i in 0..gm.len().max(wm.len()) {
        let (a, b) = (gm.get(i), wm.get(i));
        if a.map(|x| format!("{x:?}")) != b.map(|x| format!("{x:?}")) {
            let show = |x: Option<&(&str, &ferrite::formats::gguf::Value)>| {
                x.map(|(k, v)| {
                    let s = format!("{k} = {v:?}");
                    s.chars().take(200).collect::<String>()
                })
            };
            return format!(
                "metadata {i}: ferrite {:?}, converter {:?}",
                show(a),
                show(b)
            );
        }
    }
    for i in 0..g.header().tensors.len().max(w.header().tensors.len()) {
        let (a, b) = (g.header().tensors.get(i), w.header().tensors.get(i));
        let desc = |f: &GgufFile, t: Option<&ferrite::formats::gguf::TensorInfo>| {
            t.map(|t| {
                let sha = f.tensor(&t.name).map(|v| hex(&Sha256::digest(v.data)));
                format!("{} {} {:?} {sha:?}", t.name, t.ty, t.dims)
            })
        };
        let (da, db) = (desc(&g, a), desc(&w, b));
        if da != db {
            return format!("tensor {i}: ferrite {da:?}, converter {db:?}");
        }
    }
    "same metadata and tensors: the layout differs".into()
}

/// gpt-oss as OpenAI publishes it (experts MXFP4: `_blocks` / `_scales`,
/// `quantization_config` mxfp4): `ferrite convert --outtype f32|q8_0` is
/// `convert_hf_to_gguf.py`'s file byte for byte (its sha256, recorded by
/// `scripts/make-gpt-oss-fixtures.py`, which does not commit the files):
/// the experts kept MXFP4, repacked into ggml's block layout (nibbles
/// reordered, the scale byte first), split into gate and up, written
/// before every other tensor; `general.file_type` MOSTLY_MXFP4_MOE (38)
/// for f32.
#[test]
fn gpt_oss_mxfp4_byte_identical_to_the_converter() {
    let g: Json = serde_json::from_str(
        &std::fs::read_to_string(root().join("testdata/hf-gpt-oss/goldens.json")).unwrap(),
    )
    .unwrap();
    let conv = &g["models"]["tiny-gpt-oss-mxfp4"]["converter"];
    let dir = scratch("gpt-oss-mxfp4");
    let src = root().join("testdata/hf-gpt-oss/tiny-gpt-oss-mxfp4");
    for outtype in ["f32", "q8_0"] {
        let case = &conv[outtype];
        let out = dir.join(format!("{outtype}.gguf"));
        convert_dir(&src, &out, &options(outtype, Some("gpt-2")))
            .unwrap_or_else(|e| panic!("gpt-oss MXFP4 {outtype}: {e}"));
        let sha = hex(&Sha256::digest(std::fs::read(&out).unwrap()));
        let f = GgufFile::open(&out).unwrap();
        assert_eq!(
            f.header().tensors[0].ty,
            ferrite_kernels::GgmlType::Mxfp4,
            "{outtype}"
        );
        assert_eq!(
            sha,
            case["sha256"].as_str().unwrap(),
            "gpt-oss MXFP4 --outtype {outtype}: not the converter's file: {}",
            first_difference(&out, case)
        );
        std::fs::remove_file(&out).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
