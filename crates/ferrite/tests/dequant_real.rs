//! Every tensor of both real GGUF files, dequantized by ferrite's scalar
//! reference code, must match the `gguf` Python package bit for bit.
//! Goldens: testdata/dequant/*.tsv, made by scripts/make-dequant-goldens.py.

mod common;

use ferrite::formats::gguf::GgufFile;
use ferrite_kernels::quant::dequantize;
use sha2::{Digest, Sha256};

/// sha256 of the tensor's values as little-endian f32 bytes, decoded a
/// chunk of blocks at a time.
fn dequantized_sha256(ty: ferrite_kernels::GgmlType, data: &[u8]) -> String {
    const BLOCKS_PER_CHUNK: usize = 4096;
    let chunk_bytes = BLOCKS_PER_CHUNK * ty.type_size();
    let mut values = vec![0f32; BLOCKS_PER_CHUNK * ty.block_size()];
    let mut bytes = Vec::with_capacity(values.len() * 4);
    let mut hasher = Sha256::new();
    for chunk in data.chunks(chunk_bytes) {
        let n = chunk.len() / ty.type_size() * ty.block_size();
        dequantize(ty, chunk, &mut values[..n]).unwrap();
        bytes.clear();
        bytes.extend(values[..n].iter().flat_map(|v| v.to_le_bytes()));
        hasher.update(&bytes);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn check_model(short_name: &str) {
    let file = GgufFile::open(common::real_model(short_name)).unwrap();
    let golden_path = common::testdata().join(format!("dequant/{short_name}.tsv"));
    let golden = std::fs::read_to_string(&golden_path).unwrap();
    let mut checked = 0;
    let mut mismatches = Vec::new();
    for line in golden.lines().filter(|l| !l.starts_with('#')) {
        let cols: Vec<&str> = line.split('\t').collect();
        let [name, ty, n, sha] = cols[..] else {
            panic!("bad golden line: {line}")
        };
        let t = file
            .tensor(name)
            .unwrap_or_else(|| panic!("no tensor {name}"));
        assert_eq!(t.info.ty.name(), ty, "{name}: type");
        assert_eq!(t.info.n_elements().to_string(), n, "{name}: element count");
        let got = dequantized_sha256(t.info.ty, t.data);
        if got != sha {
            mismatches.push(format!("{name} ({ty})"));
        }
        checked += 1;
    }
    assert_eq!(
        checked,
        file.header().tensors.len(),
        "every tensor has a golden"
    );
    assert!(
        mismatches.is_empty(),
        "{} of {checked} tensors differ from gguf.quants: {mismatches:?}",
        mismatches.len()
    );
}

#[test]
fn smollm2_every_tensor_matches_gguf_py() {
    check_model("smollm2");
}

#[test]
fn gemma3_every_tensor_matches_gguf_py() {
    check_model("gemma3-270m");
}
