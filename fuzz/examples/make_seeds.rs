//! Writes the seed corpus in `fuzz/seeds/gguf_header/`: a few small, valid GGUF files
//! made with ferrite's own writer. Two of them carry the small metadata of
//! the real models (their vocabularies cut to a few entries) and one tiny
//! tensor of each type those models use, so the fuzzer starts from the
//! shapes real files have.
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml --example make_seeds -- \
//!     fuzz/seeds/gguf_header models/SmolLM2-135M-Instruct.Q4_1.gguf models/gemma-3-270m-q4_k_m.gguf
//! ```

use std::path::{Path, PathBuf};

use ferrite::formats::gguf::{parse_header, write_gguf, Array, Metadata, TensorToWrite, Value};
use ferrite_kernels::GgmlType;

/// Vocabulary arrays are cut to this many entries.
const KEEP: usize = 24;

fn main() {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let Some((out_dir, models)) = args.split_first() else {
        eprintln!("usage: make_seeds OUT_DIR [MODEL.gguf ...]");
        std::process::exit(2);
    };
    std::fs::create_dir_all(out_dir).expect("create the output directory");

    save(
        out_dir,
        "empty-v3.gguf",
        &build(3, &Metadata::default(), &[]),
    );
    save(
        out_dir,
        "scalars-v2.gguf",
        &build(
            2,
            &every_value_type(),
            &tiny_tensors(&[GgmlType::F32, GgmlType::F16]),
        ),
    );
    let mut aligned = Metadata::default();
    aligned.insert("general.alignment".into(), Value::U32(64));
    aligned.insert("general.architecture".into(), Value::String("llama".into()));
    save(
        out_dir,
        "aligned64-v3.gguf",
        &build(
            3,
            &aligned,
            &tiny_tensors(&[GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q6K]),
        ),
    );

    for model in models {
        let (metadata, types) = shrunk_header(model);
        let stem = model
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        save(
            out_dir,
            &format!("{stem}-shrunk.gguf"),
            &build(3, &metadata, &tiny_tensors(&types)),
        );
    }
}

fn save(dir: &Path, name: &str, bytes: &[u8]) {
    // Every seed must be valid: the fuzzer learns most from near-misses.
    parse_header(bytes, name).unwrap_or_else(|e| panic!("seed {name} does not parse: {e}"));
    std::fs::write(dir.join(name), bytes).expect("write seed");
    println!("{name}: {} bytes", bytes.len());
}

/// One small tensor per type: two rows of one block each.
fn tiny_tensors(types: &[GgmlType]) -> Vec<(String, Vec<u64>, GgmlType, Vec<u8>)> {
    types
        .iter()
        .enumerate()
        .map(|(i, &ty)| {
            let dims = vec![ty.block_size() as u64, 2];
            let n_bytes = ty.bytes_for(dims.iter().product()).expect("tiny size") as usize;
            let data = (0..n_bytes).map(|b| (b * 7 + i) as u8).collect();
            (
                format!("blk.{i}.{}.weight", ty.name().to_lowercase()),
                dims,
                ty,
                data,
            )
        })
        .collect()
}

fn build(
    version: u32,
    metadata: &Metadata,
    tensors: &[(String, Vec<u64>, GgmlType, Vec<u8>)],
) -> Vec<u8> {
    let views: Vec<TensorToWrite> = tensors
        .iter()
        .map(|(name, dims, ty, data)| TensorToWrite {
            name,
            dims,
            ty: *ty,
            data,
        })
        .collect();
    let mut out = Vec::new();
    write_gguf(&mut out, version, metadata, &views).expect("write seed");
    out
}

fn every_value_type() -> Metadata {
    let mut m = Metadata::default();
    let pairs = [
        ("t.u8", Value::U8(7)),
        ("t.i8", Value::I8(-7)),
        ("t.u16", Value::U16(700)),
        ("t.i16", Value::I16(-700)),
        ("t.u32", Value::U32(70_000)),
        ("t.i32", Value::I32(-70_000)),
        ("t.f32", Value::F32(0.5)),
        ("t.bool", Value::Bool(true)),
        ("t.string", Value::String("héllo".into())),
        ("t.u64", Value::U64(1 << 40)),
        ("t.i64", Value::I64(-(1 << 40))),
        ("t.f64", Value::F64(-0.25)),
        ("t.arr.bool", Value::Array(Array::Bool(vec![true, false]))),
        (
            "t.arr.str",
            Value::Array(Array::String(vec!["a".into(), "".into(), "ccc".into()])),
        ),
        ("t.arr.f32", Value::Array(Array::F32(vec![1.0, 2.0]))),
        ("t.arr.empty", Value::Array(Array::U64(vec![]))),
        (
            "t.arr.nested",
            Value::Array(Array::Array(vec![
                Array::I16(vec![1, 2]),
                Array::Array(vec![Array::U8(vec![3])]),
            ])),
        ),
    ];
    for (k, v) in pairs {
        m.insert(k.into(), v);
    }
    m
}

/// The real file's metadata with vocabulary-sized arrays cut to [`KEEP`]
/// entries, and the distinct tensor types it uses.
fn shrunk_header(path: &Path) -> (Metadata, Vec<GgmlType>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header = parse_header(&bytes, &path.display().to_string()).expect("real model parses");
    let mut metadata = Metadata::default();
    for (key, value) in header.metadata.iter() {
        let value = match value {
            Value::Array(a) if a.len() > KEEP => Value::Array(shrink(a)),
            v => v.clone(),
        };
        metadata.insert(key.to_owned(), value);
    }
    let mut types: Vec<GgmlType> = header.tensors.iter().map(|t| t.ty).collect();
    types.sort();
    types.dedup();
    (metadata, types)
}

fn shrink(a: &Array) -> Array {
    match a {
        Array::String(v) => Array::String(v[..KEEP].to_vec()),
        Array::F32(v) => Array::F32(v[..KEEP].to_vec()),
        Array::I32(v) => Array::I32(v[..KEEP].to_vec()),
        Array::U32(v) => Array::U32(v[..KEEP].to_vec()),
        other => other.clone(),
    }
}
