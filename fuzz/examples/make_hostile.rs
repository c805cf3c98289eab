//! Writes `testdata/gguf-regressions/`: small GGUF files built byte by byte
//! to hit the classic failure modes of a naive reader (huge counts, size
//! overflows, division by a zero alignment, unbounded recursion, overlapping
//! or out-of-file tensors). `crates/ferrite/tests/gguf_corrupt.rs` replays
//! every file in that directory, as it does any input the fuzzer crashed on.
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml --example make_hostile -- testdata/gguf-regressions
//! ```

use std::path::PathBuf;

use ferrite::formats::gguf::parse_header;

/// A GGUF file under construction, little-endian.
#[derive(Default)]
struct B(Vec<u8>);

impl B {
    fn header(n_tensors: u64, n_kv: u64) -> B {
        let mut b = B::default();
        b.0.extend(b"GGUF");
        b.u32(3).u64(n_tensors).u64(n_kv);
        b
    }
    fn u32(&mut self, v: u32) -> &mut B {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut B {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut B {
        self.u64(s.len() as u64);
        self.0.extend(s.as_bytes());
        self
    }
    /// A tensor info: name, dims, ggml type, offset.
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut B {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    /// Zero padding to 32, then `n` bytes of data.
    fn data(&mut self, n: usize) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.0);
        out.resize(out.len().next_multiple_of(32) + n, 0xa5);
        out
    }
}

const F32: u32 = 0;
const Q4_0: u32 = 2;

fn main() {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .expect("usage: make_hostile OUT_DIR"),
    );
    std::fs::create_dir_all(&dir).expect("create the output directory");
    let mut files: Vec<(&str, Vec<u8>)> = Vec::new();

    files.push(("metadata-count-u64-max.gguf", B::header(0, u64::MAX).0));
    files.push(("tensor-count-u64-max.gguf", B::header(u64::MAX, 0).data(64)));
    let mut b = B::header(0, 1);
    b.str("tokens").u32(9).u32(8).u64(u64::MAX).str("a");
    files.push(("string-array-length-u64-max.gguf", b.0));
    let mut b = B::header(0, 1);
    b.str("scores").u32(9).u32(6).u64(u64::MAX / 4 + 1);
    files.push(("f32-array-byte-size-overflows.gguf", b.0));
    let mut b = B::header(0, 1);
    b.str("name").u32(8).u64(u64::MAX - 3);
    files.push(("string-length-near-u64-max.gguf", b.0));
    let mut b = B::header(0, 1);
    b.str("deep").u32(9);
    for _ in 0..2000 {
        b.u32(9).u64(1);
    }
    b.u32(0).u64(1);
    b.0.push(7);
    files.push(("arrays-nested-2000-deep.gguf", b.0));
    let mut b = B::header(1, 1);
    b.str("general.alignment")
        .u32(4)
        .u32(0)
        .tensor("t", &[32], F32, 0);
    files.push(("alignment-zero.gguf", b.data(128)));
    let mut b = B::header(1, 0);
    b.str("t").u32(u32::MAX).u64(1);
    files.push(("dimension-count-u32-max.gguf", b.data(64)));
    let mut b = B::header(1, 0);
    b.tensor("t", &[1 << 32, 1 << 32, 1 << 32, 1 << 32], F32, 0);
    files.push(("element-count-overflows.gguf", b.data(64)));
    let mut b = B::header(1, 0);
    b.tensor("t", &[1 << 62], F32, 0);
    files.push(("byte-size-overflows.gguf", b.data(64)));
    let mut b = B::header(1, 0);
    b.tensor("t", &[32], F32, u64::MAX - 31);
    files.push(("offset-plus-size-overflows.gguf", b.data(128)));
    let mut b = B::header(2, 0);
    b.tensor("a", &[32, 2], Q4_0, 0)
        .tensor("b", &[32], Q4_0, 32);
    files.push(("overlapping-tensors.gguf", b.data(64)));
    let mut b = B::header(1, 0);
    b.tensor("t", &[33], Q4_0, 0);
    files.push(("row-not-whole-blocks.gguf", b.data(64)));
    let mut b = B::header(2, 0);
    b.tensor("t", &[32], F32, 0).tensor("t", &[32], F32, 128);
    files.push(("duplicate-tensor-name.gguf", b.data(256)));

    for (name, bytes) in files {
        let err = parse_header(&bytes, name).expect_err("a hostile file must be rejected");
        println!("{name}: {} bytes: {err}", bytes.len());
        std::fs::write(dir.join(name), bytes).expect("write file");
    }
}
