//! `ferrite::quantize` against `llama-quantize`: for each input and file
//! type, the output file must be byte-identical to llama.cpp's (whole-file
//! sha256), and on a mismatch the first tensor whose type or bytes differ
//! is named. Goldens: `testdata/quantize/*.json`, made by
//! `scripts/make-quantize-goldens.py`.
//!
//! The F32 inputs are made here, without Python: SmolLM2 (Q4_1) dequantized
//! by ferrite's dequantizers and written by ferrite's GGUF writer, and two
//! random-weight fixtures from the script's counter-based generator. Each
//! input's sha256 must equal the one the script recorded for the file it
//! made with the `gguf` Python package, so both sides quantize the same
//! bytes.

use std::path::{Path, PathBuf};

use ferrite::formats::gguf::{write_gguf, GgufFile, Metadata, TensorToWrite, Value};
use ferrite::quantize::{quantize_file, FileType, QuantizeOptions};
use ferrite_kernels::quant::{dequantize, quantize};
use ferrite_kernels::GgmlType;
use sha2::{Digest, Sha256};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn models_dir() -> PathBuf {
    std::env::var_os("FERRITE_MODELS").map_or_else(|| root().join("models"), PathBuf::from)
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_file(p: &Path) -> String {
    hex(&Sha256::digest(std::fs::read(p).expect("read")))
}

fn golden(name: &str) -> serde_json::Value {
    let p = root()
        .join("testdata/quantize")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run scripts/make-quantize-goldens.py)",
            p.display()
        )
    });
    serde_json::from_str(&text).expect("golden JSON")
}

/// The script's `mix64` (splitmix64's finalizer).
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The script's `weights`: tensor `index` of shape (rows, cols).
fn weights(index: u64, rows: usize, cols: usize, kind: &str) -> Vec<f32> {
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
    let base = (index + 1) << 32;
    (0..rows * cols)
        .map(|i| {
            let h1 = mix64(base.wrapping_add((2 * i as u64).wrapping_mul(GAMMA)));
            let h2 = mix64(base.wrapping_add((2 * i as u64 + 1).wrapping_mul(GAMMA)));
            let mut k = (h1 >> 40) as i64 + (h2 >> 40) as i64 - (1 << 24);
            if h1 & 0xfff == 0 {
                k *= 16;
            }
            let row = i / cols;
            let scale = (2f64.powi(-29) * (1 + row % 5) as f64) as f32;
            let v = k as f32 * scale;
            if kind == "norm" {
                1.0 + v
            } else {
                v
            }
        })
        .collect()
}

struct Tensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

fn write_file(path: &Path, md: &Metadata, tensors: &[Tensor]) {
    let list: Vec<TensorToWrite> = tensors
        .iter()
        .map(|t| TensorToWrite {
            name: &t.name,
            dims: &t.dims,
            ty: t.ty,
            data: &t.data,
        })
        .collect();
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    write_gguf(&mut f, 3, md, &list).expect("write");
}

/// The script's `write_fixture`.
fn write_fixture(arch: &str, path: &Path) {
    let (n_layer, n_embd, n_head, n_kv, n_ff, n_vocab, tied) = if arch == "llama" {
        (8u32, 256usize, 4u32, 2usize, 512usize, 320usize, false)
    } else {
        (6, 256, 8, 2, 272, 300, true)
    };
    let head_dim = n_embd / n_head as usize;
    let mut md = Metadata::default();
    let mut put = |k: &str, v: Value| {
        md.insert(k.to_string(), v);
    };
    put("general.architecture", Value::String(arch.into()));
    put(&format!("{arch}.block_count"), Value::U32(n_layer));
    put(&format!("{arch}.context_length"), Value::U32(512));
    put(
        &format!("{arch}.embedding_length"),
        Value::U32(n_embd as u32),
    );
    put(
        &format!("{arch}.feed_forward_length"),
        Value::U32(n_ff as u32),
    );
    put(&format!("{arch}.attention.head_count"), Value::U32(n_head));
    put(
        &format!("{arch}.attention.head_count_kv"),
        Value::U32(n_kv as u32),
    );
    put(
        &format!("{arch}.attention.layer_norm_rms_epsilon"),
        Value::F32(1e-5),
    );
    put(&format!("{arch}.vocab_size"), Value::U32(n_vocab as u32));
    put("general.file_type", Value::U32(0));

    let emb_type = if arch == "qwen2" {
        GgmlType::F16
    } else {
        GgmlType::F32
    };
    let mut specs: Vec<(String, usize, usize, &str, GgmlType)> = vec![
        ("token_embd.weight".into(), n_vocab, n_embd, "w", emb_type),
        (
            "output_norm.weight".into(),
            1,
            n_embd,
            "norm",
            GgmlType::F32,
        ),
    ];
    if !tied {
        specs.push(("output.weight".into(), n_vocab, n_embd, "w", GgmlType::F32));
    }
    let f32t = GgmlType::F32;
    for i in 0..n_layer {
        let p = format!("blk.{i}.");
        specs.push((p.clone() + "attn_norm.weight", 1, n_embd, "norm", f32t));
        specs.push((p.clone() + "attn_q.weight", n_embd, n_embd, "w", f32t));
        specs.push((
            p.clone() + "attn_k.weight",
            n_kv * head_dim,
            n_embd,
            "w",
            f32t,
        ));
        specs.push((
            p.clone() + "attn_v.weight",
            n_kv * head_dim,
            n_embd,
            "w",
            f32t,
        ));
        if arch == "qwen2" {
            specs.push((p.clone() + "attn_q.bias", 1, n_embd, "bias", f32t));
            specs.push((p.clone() + "attn_k.bias", 1, n_kv * head_dim, "bias", f32t));
            specs.push((p.clone() + "attn_v.bias", 1, n_kv * head_dim, "bias", f32t));
        }
        specs.push((p.clone() + "attn_output.weight", n_embd, n_embd, "w", f32t));
        specs.push((p.clone() + "ffn_norm.weight", 1, n_embd, "norm", f32t));
        specs.push((p.clone() + "ffn_gate.weight", n_ff, n_embd, "w", f32t));
        specs.push((p.clone() + "ffn_up.weight", n_ff, n_embd, "w", f32t));
        specs.push((p.clone() + "ffn_down.weight", n_embd, n_ff, "w", f32t));
    }
    let tensors: Vec<Tensor> = specs
        .iter()
        .enumerate()
        .map(|(index, (name, rows, cols, kind, ty))| {
            let x = weights(index as u64, *rows, *cols, kind);
            let mut data = vec![0u8; ty.bytes_for(x.len() as u64).unwrap() as usize];
            quantize(*ty, &x, &mut data).unwrap();
            let dims = if *rows == 1 {
                vec![*cols as u64]
            } else {
                vec![*cols as u64, *rows as u64]
            };
            Tensor {
                name: name.clone(),
                dims,
                ty: *ty,
                data,
            }
        })
        .collect();
    write_file(path, &md, &tensors);
}

/// The script's `write_dequantized`, with ferrite's dequantizers.
fn write_dequantized(src: &Path, path: &Path) {
    let file = GgufFile::open(src).expect("open model");
    let mut md = Metadata::default();
    for (k, v) in file.metadata().iter() {
        let v = if k == "general.file_type" {
            Value::U32(0)
        } else {
            v.clone()
        };
        md.insert(k.to_string(), v);
    }
    let tensors: Vec<Tensor> = file
        .tensors()
        .map(|t| {
            let mut x = vec![0f32; t.info.n_elements() as usize];
            dequantize(t.info.ty, t.data, &mut x).unwrap();
            Tensor {
                name: t.info.name.clone(),
                dims: t.info.dims.clone(),
                ty: GgmlType::F32,
                data: x.iter().flat_map(|v| v.to_le_bytes()).collect(),
            }
        })
        .collect();
    write_file(path, &md, &tensors);
}

/// Quantizes `input` for every golden output whose key is in `keys` (all
/// when empty) and compares.
fn check(name: &str, input: &Path, keys: &[&str]) {
    let g = golden(name);
    assert_eq!(
        sha256_file(input),
        g["input_sha256"].as_str().unwrap(),
        "{name}: the F32 input made here differs from the script's"
    );
    let names: Vec<&str> = g["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let outputs = g["outputs"].as_object().unwrap();
    let dir = input.parent().unwrap();
    let mut checked = 0;
    for (key, want) in outputs {
        if !keys.is_empty() && !keys.contains(&key.as_str()) {
            continue;
        }
        let (pure, ftype) = match key.strip_prefix("pure-") {
            Some(t) => (true, t),
            None => (false, key.as_str()),
        };
        let opts = QuantizeOptions {
            ftype: FileType::from_name(ftype).expect("file type"),
            pure,
            allow_requantize: false,
            threads: 2,
        };
        let out = dir.join(format!("{name}.{key}.gguf"));
        quantize_file(input, &out, &opts, &mut |_, _, _| {})
            .unwrap_or_else(|e| panic!("{name} {key}: {e}"));
        let got = GgufFile::open(&out).expect("open output");
        let types = want["types"].as_array().unwrap();
        let hashes = want["tensor_sha256"].as_array().unwrap();
        let got_names: Vec<&str> = got.tensors().map(|t| t.info.name.as_str()).collect();
        assert_eq!(got_names, names, "{name} {key}: tensor names/order");
        for ((t, ty), h) in got.tensors().zip(types).zip(hashes) {
            assert_eq!(
                t.info.ty.name(),
                ty.as_str().unwrap(),
                "{name} {key}: type of {}",
                t.info.name
            );
            assert_eq!(
                &hex(&Sha256::digest(t.data))[..12],
                h.as_str().unwrap(),
                "{name} {key}: bytes of {} ({})",
                t.info.name,
                t.info.ty
            );
        }
        drop(got);
        assert_eq!(
            sha256_file(&out),
            want["sha256"].as_str().unwrap(),
            "{name} {key}: the tensors match but the file does not (metadata or layout)"
        );
        std::fs::remove_file(&out).unwrap();
        checked += 1;
    }
    assert!(checked > 0 && (keys.is_empty() || checked == keys.len()));
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferrite-quantize-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn fixture_llama_every_file_type_matches_llama_quantize() {
    let dir = temp_dir("llama");
    let input = dir.join("fixture-llama.f32.gguf");
    write_fixture("llama", &input);
    check("fixture-llama", &input, &[]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fixture_qwen2_every_file_type_matches_llama_quantize() {
    let dir = temp_dir("qwen2");
    let input = dir.join("fixture-qwen2.f32.gguf");
    write_fixture("qwen2", &input);
    check("fixture-qwen2", &input, &[]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn smollm2_matches_llama_quantize() {
    let model = models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        model.exists(),
        "{} is missing: run scripts/fetch-models.sh",
        model.display()
    );
    let dir = temp_dir("smollm2");
    let input = dir.join("smollm2.f32.gguf");
    write_dequantized(&model, &input);
    // FERRITE_QUANTIZE_ALL=1 checks every file type (about a minute more).
    let all = std::env::var_os("FERRITE_QUANTIZE_ALL").is_some();
    check("smollm2", &input, if all { &[] } else { SMOLLM2_KEYS });
    std::fs::remove_dir_all(&dir).unwrap();
}

/// gpt-oss's MXFP4_MOE (expert stacks MXFP4, every other matrix Q8_0):
/// the whole file must equal the one `llama-quantize` made from the same
/// F32 input (scripts/make-gpt-oss-fixtures.py), metadata and layout
/// included. On a mismatch the first tensor whose type or bytes differ is
/// named.
#[test]
fn gpt_oss_mxfp4_moe_matches_llama_quantize() {
    let fixtures = root().join("testdata/hf-gpt-oss");
    let input = fixtures.join("tiny-gpt-oss.f32.gguf");
    let want_path = fixtures.join("tiny-gpt-oss.mxfp4.gguf");
    let opts = QuantizeOptions {
        ftype: FileType::from_name("mxfp4_moe").expect("MXFP4_MOE"),
        pure: false,
        allow_requantize: false,
        threads: 2,
    };
    let file = GgufFile::open(&input).expect("open input");
    let got = ferrite::quantize::quantize_to_vec(&file, &opts, "mem", &mut |_, _, _| {})
        .expect("quantize");
    let want_bytes = std::fs::read(&want_path).expect("read golden");
    if got != want_bytes {
        let dir = temp_dir("gpt-oss");
        let out = dir.join("got.gguf");
        std::fs::write(&out, &got).unwrap();
        let (g, w) = (
            GgufFile::open(&out).unwrap(),
            GgufFile::open(&want_path).unwrap(),
        );
        let got_names: Vec<&str> = g.tensors().map(|t| t.info.name.as_str()).collect();
        let want_names: Vec<&str> = w.tensors().map(|t| t.info.name.as_str()).collect();
        assert_eq!(got_names, want_names, "tensor names/order");
        for (a, b) in g.tensors().zip(w.tensors()) {
            assert_eq!(a.info.ty, b.info.ty, "type of {}", a.info.name);
            assert!(a.data == b.data, "bytes of {} ({})", a.info.name, a.info.ty);
        }
        panic!("the tensors match but the file does not (metadata or layout)");
    }
    // The mix really has both kinds (a rule that sent everything to one
    // type could not pass the comparison, but say what was compared).
    let w = GgufFile::open(&want_path).unwrap();
    let count = |ty| w.tensors().filter(|t| t.info.ty == ty).count();
    assert!(count(GgmlType::Mxfp4) > 0 && count(GgmlType::Q8_0) > 0);
}

/// `--pure` MXFP4_MOE: every matrix llama-quantize may touch becomes
/// MXFP4 (no Q8_0 for attention, embeddings or output), each tensor's bytes
/// those of the MXFP4 row quantizer; norms, routers, biases and sinks stay
/// F32.
#[test]
fn gpt_oss_pure_mxfp4() {
    let input = root().join("testdata/hf-gpt-oss/tiny-gpt-oss.f32.gguf");
    let opts = QuantizeOptions {
        ftype: FileType::from_name("MXFP4_MOE").unwrap(),
        pure: true,
        allow_requantize: false,
        threads: 2,
    };
    let src = GgufFile::open(&input).unwrap();
    let dir = temp_dir("gpt-oss-pure");
    let out = dir.join("pure.gguf");
    quantize_file(&input, &out, &opts, &mut |_, _, _| {}).unwrap();
    let got = GgufFile::open(&out).unwrap();
    let mut mxfp4 = 0;
    for t in got.tensors() {
        let name = &t.info.name;
        let s = src.tensor(name).unwrap();
        let matrix = t.info.dims.iter().filter(|&&d| d > 1).count() >= 2
            && name.ends_with(".weight")
            && !name.contains("_norm")
            && !name.contains("ffn_gate_inp");
        if !matrix {
            assert_eq!(t.info.ty, GgmlType::F32, "{name}");
            assert!(t.data == s.data, "{name}");
            continue;
        }
        assert_eq!(t.info.ty, GgmlType::Mxfp4, "{name}");
        let x: Vec<f32> = s
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let mut want = vec![0u8; t.data.len()];
        quantize(GgmlType::Mxfp4, &x, &mut want).unwrap();
        assert!(t.data == want.as_slice(), "{name}");
        mxfp4 += 1;
    }
    assert!(got.tensors().any(|t| t.info.name == "output.weight"));
    assert!(mxfp4 > 3, "{mxfp4} MXFP4 tensors");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The file types checked on SmolLM2 (the fixtures check every one).
const SMOLLM2_KEYS: &[&str] = &["Q4_K_M", "Q8_0", "Q6_K", "Q3_K_M", "pure-Q4_K", "IQ4_XS"];

/// Files in `dir` (to check that nothing is left behind).
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn q4_k_m() -> QuantizeOptions {
    QuantizeOptions {
        ftype: FileType::from_name("Q4_K_M").unwrap(),
        pure: false,
        allow_requantize: false,
        threads: 2,
    }
}

#[test]
fn bad_inputs_are_clear_errors_and_leave_no_output() {
    let dir = temp_dir("hostile");
    let input = dir.join("in.gguf");
    write_fixture("llama", &input);
    let full = std::fs::read(&input).unwrap();
    let before = listing(&dir);
    let run = |i: &Path, o: &Path, opts: &QuantizeOptions| {
        quantize_file(i, o, opts, &mut |_, _, _| {})
            .map(|_| ())
            .map_err(|e| e.to_string())
    };

    // The output is the input (also spelled differently): refused, input intact.
    for out in [input.clone(), dir.join(".").join("in.gguf")] {
        let e = run(&input, &out, &q4_k_m()).unwrap_err();
        assert!(e.contains("is the input file"), "{e}");
    }
    assert_eq!(std::fs::read(&input).unwrap(), full);

    // A truncated input (tensor data cut off, and the header cut off).
    let out = dir.join("out.gguf");
    for cut in [full.len() / 2, 100] {
        let short = dir.join("short.gguf");
        std::fs::write(&short, &full[..cut]).unwrap();
        let e = run(&short, &out, &q4_k_m()).unwrap_err();
        assert!(e.contains("short.gguf"), "{e}");
        std::fs::remove_file(&short).unwrap();
    }
    assert_eq!(listing(&dir), before);

    // An output directory that does not exist.
    let e = run(&input, &dir.join("no/such/dir/out.gguf"), &q4_k_m()).unwrap_err();
    assert!(e.contains("out.gguf"), "{e}");

    // An already quantized input needs --allow-requantize; nothing written.
    let q = dir.join("q8.gguf");
    let mut q8 = q4_k_m();
    q8.ftype = FileType::from_name("Q8_0").unwrap();
    run(&input, &q, &q8).unwrap();
    let e = run(&q, &out, &q4_k_m()).unwrap_err();
    assert!(e.contains("--allow-requantize"), "{e}");
    assert!(!out.exists());
    let mut again = q4_k_m();
    again.allow_requantize = true;
    run(&q, &out, &again).unwrap();
    assert!(out.exists());

    // Unknown file type names.
    for name in ["Q4_K_X", "IQ2_XXS", "", "q4"] {
        assert!(FileType::from_name(name).is_none(), "{name}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
