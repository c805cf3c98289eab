//! ferrite's scalar (de)quantizers against goldens from the independent
//! reference (the `gguf` Python package's numpy code), made by
//! `scripts/make-quant-goldens.py` into `testdata/quant/`; the k-quant
//! quantizers (which gguf-py lacks) against ggml's C reference quantizers,
//! made by `scripts/make-kquant-goldens.py`. Dequantized
//! values must match bit for bit, quantized blocks byte for byte.

use std::path::{Path, PathBuf};

use ferrite_kernels::quant::{dequantize, quantize, GgmlType};

fn golden(path: &str) -> Vec<u8> {
    let p: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/quant")
        .join(path);
    std::fs::read(&p)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/make-quant-goldens.py)", p.display()))
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn check_dequant(name: &str) {
    let t = GgmlType::from_name(name).expect("known type");
    let blocks = golden(&format!("dequant/{name}.blocks"));
    let expected = f32s(&golden(&format!("dequant/{name}.f32")));
    assert!(!expected.is_empty());
    let mut got = vec![0.0f32; expected.len()];
    dequantize(t, &blocks, &mut got).expect("dequantize");
    let bad: Vec<usize> = (0..got.len())
        .filter(|&i| got[i].to_bits() != expected[i].to_bits())
        .collect();
    if let Some(&i) = bad.first() {
        panic!(
            "{name}: {} of {} values differ; first at {i} (block {}): got {:e} ({:#010x}), want {:e} ({:#010x})",
            bad.len(),
            got.len(),
            i / t.block_size(),
            got[i],
            got[i].to_bits(),
            expected[i],
            expected[i].to_bits()
        );
    }
}

/// Places where gguf-py's output legitimately differs from ggml's C
/// reference, which ferrite follows: (type, block, byte in block, gguf-py's
/// byte, ggml's byte).
///
/// Q4_1 / Q5_1 block 1 alternates +0.0 and -0.0. Its minimum `m` (bytes
/// 2..4, f16) is -0.0 in gguf-py, because numpy's `min()` returns -0.0, but
/// +0.0 in ggml: `quantize_row_q4_1_ref` starts from FLT_MAX and replaces
/// the minimum only when `v < min`, so the first zero (+0.0) stays. The
/// high byte of m is therefore 0x80 in the golden and 0x00 in ggml (checked
/// against ggml's C code compiled from ggml-org/ggml).
const KNOWN_DIFFERENCES: &[(&str, usize, usize, u8, u8)] =
    &[("Q4_1", 1, 3, 0x80, 0x00), ("Q5_1", 1, 3, 0x80, 0x00)];

fn check_quant(name: &str) {
    let t = GgmlType::from_name(name).expect("known type");
    let input = f32s(&golden(&format!("quant/{name}.f32")));
    let mut expected = golden(&format!("quant/{name}.blocks"));
    for &(ty, block, byte, gguf, ggml) in KNOWN_DIFFERENCES.iter().filter(|d| d.0 == name) {
        let i = block * t.type_size() + byte;
        assert_eq!(
            expected[i], gguf,
            "{ty}: golden no longer has the known difference at block {block}"
        );
        expected[i] = ggml;
    }
    let mut got = vec![0u8; expected.len()];
    quantize(t, &input, &mut got).expect("quantize");
    let ts = t.type_size();
    let bad: Vec<usize> = (0..got.len() / ts)
        .filter(|&b| got[b * ts..][..ts] != expected[b * ts..][..ts])
        .collect();
    if let Some(&b) = bad.first() {
        panic!(
            "{name}: {} of {} blocks differ; first is block {b}:\n got  {:02x?}\n want {:02x?}\n input {:?}",
            bad.len(),
            got.len() / ts,
            &got[b * ts..][..ts],
            &expected[b * ts..][..ts],
            &input[b * t.block_size()..][..t.block_size()]
        );
    }
}

macro_rules! golden_tests {
    ($kind:ident: $($test:ident => $name:literal),* $(,)?) => {
        $(#[test] fn $test() { $kind($name) })*
    };
}

golden_tests! { check_dequant:
    dequant_f32 => "F32",
    dequant_f16 => "F16",
    dequant_bf16 => "BF16",
    dequant_q4_0 => "Q4_0",
    dequant_q4_1 => "Q4_1",
    dequant_q5_0 => "Q5_0",
    dequant_q5_1 => "Q5_1",
    dequant_q8_0 => "Q8_0",
    dequant_q8_1 => "Q8_1",
    dequant_q2_k => "Q2_K",
    dequant_q3_k => "Q3_K",
    dequant_q4_k => "Q4_K",
    dequant_q5_k => "Q5_K",
    dequant_q6_k => "Q6_K",
    dequant_q8_k => "Q8_K",
    dequant_mxfp4 => "MXFP4",
    dequant_iq4_nl => "IQ4_NL",
    dequant_iq4_xs => "IQ4_XS",
}

golden_tests! { check_quant:
    quant_f16 => "F16",
    quant_bf16 => "BF16",
    quant_q4_0 => "Q4_0",
    quant_q4_1 => "Q4_1",
    quant_q5_0 => "Q5_0",
    quant_q5_1 => "Q5_1",
    quant_q8_0 => "Q8_0",
    quant_q8_1 => "Q8_1",
    quant_q8_k => "Q8_K",
    quant_mxfp4 => "MXFP4",
    // From ggml's C reference itself (scripts/make-kquant-goldens.py).
    quant_q2_k => "Q2_K",
    quant_q3_k => "Q3_K",
    quant_q4_k => "Q4_K",
    quant_q5_k => "Q5_K",
    quant_q6_k => "Q6_K",
}
