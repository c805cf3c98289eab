//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// Path of a real model fetched by `scripts/fetch-models.sh`. Panics with
/// instructions if it is missing: tests on real models never skip silently.
pub fn real_model(short_name: &str) -> PathBuf {
    ferrite::model_path::resolve(short_name).unwrap_or_else(|e| {
        panic!("{e}\n(the test suite needs the real models: run scripts/fetch-models.sh)")
    })
}

/// Token ids stored as a JSON array.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

/// The index of the largest logit (the first of equal ones), as greedy
/// sampling picks it.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Every position's logits of `tokens` (row after row), from an empty
/// cache of 128 positions, with two threads.
pub fn all_logits(model: &dyn ferrite::models::CausalLm, tokens: &[u32]) -> Vec<f32> {
    let threads = ferrite::parallel::Threads::new(2);
    let mut st = model.new_state(128, threads).expect("a state");
    let mut out = Vec::new();
    model
        .forward(
            tokens,
            &mut st,
            ferrite::models::decoder::Logits::All,
            &mut out,
        )
        .expect("a forward pass");
    out
}

/// The repository's testdata directory.
pub fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// Where each part of a GGUF file's header lies, found by a walker written
/// independently of the reader under test (so that tests can mutate a real
/// file at computed positions). Only for valid files: panics on anything
/// malformed.
#[derive(Clone, Debug)]
pub struct GgufLayout {
    /// Absolute position of the tensor count (the metadata count follows at +8).
    pub n_tensors_pos: usize,
    pub n_kv_pos: usize,
    pub kvs: Vec<KvLayout>,
    pub tensors: Vec<TensorInfoLayout>,
    /// First byte after the last tensor info.
    pub header_end: usize,
    pub alignment: usize,
    /// `header_end` rounded up to `alignment`.
    pub data_offset: usize,
}

/// One metadata pair: `start` is its key length, `end` the next pair.
#[derive(Clone, Debug)]
pub struct KvLayout {
    pub key: String,
    pub start: usize,
    pub type_pos: usize,
    pub value_pos: usize,
    pub end: usize,
    pub value_type: u32,
}

/// One tensor info: `start` is its name length, `end` the next info.
#[derive(Clone, Debug)]
pub struct TensorInfoLayout {
    pub name: String,
    pub start: usize,
    pub n_dims_pos: usize,
    /// Position of `dims[0]`; `dims[i]` is at `dims_pos + 8 * i`.
    pub dims_pos: usize,
    pub dims: Vec<u64>,
    pub type_pos: usize,
    pub ty: u32,
    pub offset_pos: usize,
    /// Offset within the data section, as stored.
    pub offset: u64,
    pub end: usize,
}

impl GgufLayout {
    pub fn kv(&self, key: &str) -> &KvLayout {
        self.kvs
            .iter()
            .find(|kv| kv.key == key)
            .unwrap_or_else(|| panic!("no metadata key {key}"))
    }

    pub fn tensor(&self, name: &str) -> &TensorInfoLayout {
        self.tensors
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no tensor {name}"))
    }

    /// Every position where one part of the header ends and the next
    /// begins, plus the start of each field inside each metadata pair.
    pub fn boundaries(&self) -> Vec<usize> {
        let mut b = vec![0, 4, self.n_tensors_pos, self.n_kv_pos, self.n_kv_pos + 8];
        for kv in &self.kvs {
            b.extend([kv.start, kv.start + 8, kv.type_pos, kv.value_pos, kv.end]);
        }
        for t in &self.tensors {
            b.extend([
                t.start,
                t.start + 8,
                t.n_dims_pos,
                t.dims_pos,
                t.type_pos,
                t.offset_pos,
            ]);
            b.extend((1..t.dims.len()).map(|d| t.dims_pos + 8 * d));
            b.push(t.end);
        }
        b.extend([self.header_end, self.data_offset]);
        b.sort_unstable();
        b.dedup();
        b
    }
}

/// Walks a valid GGUF header (see [`GgufLayout`]).
pub fn gguf_layout(bytes: &[u8]) -> GgufLayout {
    let mut w = Walker { bytes, pos: 0 };
    assert_eq!(w.take(4), b"GGUF", "not a GGUF file");
    let version = w.u32();
    assert!(version == 2 || version == 3, "version {version}");
    let n_tensors_pos = w.pos;
    let n_tensors = w.u64();
    let n_kv_pos = w.pos;
    let n_kv = w.u64();
    let mut alignment = 32;
    let mut kvs = Vec::new();
    for _ in 0..n_kv {
        let start = w.pos;
        let key = w.string();
        let type_pos = w.pos;
        let value_type = w.u32();
        let value_pos = w.pos;
        if key == "general.alignment" {
            assert_eq!(value_type, 4, "alignment type");
            alignment = w.u32() as usize;
            w.pos = value_pos;
        }
        w.skip_value(value_type);
        kvs.push(KvLayout {
            key,
            start,
            type_pos,
            value_pos,
            end: w.pos,
            value_type,
        });
    }
    let mut tensors = Vec::new();
    for _ in 0..n_tensors {
        let start = w.pos;
        let name = w.string();
        let n_dims_pos = w.pos;
        let n_dims = w.u32();
        let dims_pos = w.pos;
        let dims = (0..n_dims).map(|_| w.u64()).collect();
        let type_pos = w.pos;
        let ty = w.u32();
        let offset_pos = w.pos;
        let offset = w.u64();
        tensors.push(TensorInfoLayout {
            name,
            start,
            n_dims_pos,
            dims_pos,
            dims,
            type_pos,
            ty,
            offset_pos,
            offset,
            end: w.pos,
        });
    }
    let header_end = w.pos;
    GgufLayout {
        n_tensors_pos,
        n_kv_pos,
        kvs,
        tensors,
        header_end,
        alignment,
        data_offset: header_end.next_multiple_of(alignment),
    }
}

/// Position of element `index` of the string array whose value starts at
/// `value_pos` (its element type, then its count, then the strings).
pub fn gguf_string_element_pos(bytes: &[u8], value_pos: usize, index: usize) -> usize {
    let mut w = Walker {
        bytes,
        pos: value_pos,
    };
    assert_eq!(w.u32(), 8, "not an array of strings");
    let n = w.u64();
    assert!((index as u64) < n, "index {index} past {n} strings");
    for _ in 0..index {
        w.string();
    }
    w.pos
}

struct Walker<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Walker<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let bytes: &'a [u8] = self.bytes;
        let s = &bytes[self.pos..self.pos + n];
        self.pos += n;
        s
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }

    fn string(&mut self) -> String {
        let n = self.u64() as usize;
        String::from_utf8(self.take(n).to_vec()).expect("UTF-8 string")
    }

    fn skip_value(&mut self, ty: u32) {
        match ty {
            0 | 1 | 7 => self.pos += 1,
            2 | 3 => self.pos += 2,
            4..=6 => self.pos += 4,
            10..=12 => self.pos += 8,
            8 => {
                let n = self.u64() as usize;
                self.pos += n;
            }
            9 => {
                let elem = self.u32();
                let n = self.u64();
                for _ in 0..n {
                    self.skip_value(elem);
                }
            }
            _ => panic!("value type {ty}"),
        }
    }
}

pub mod batching;
pub mod decoder_goldens;
pub mod embed;
pub mod parity;

/// A command running `exe` (a test binary), through `FERRITE_TEST_RUNNER`
/// if set: the emulator of a cross-built binary (`scripts/test-arm.sh`
/// sets it to `qemu-aarch64 ...`), which a child process would otherwise
/// not run under.
pub fn child_command(exe: &std::path::Path) -> std::process::Command {
    let runner = std::env::var("FERRITE_TEST_RUNNER").unwrap_or_default();
    let mut words = runner.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut c = std::process::Command::new(program);
            c.args(words).arg(exe);
            c
        }
        None => std::process::Command::new(exe),
    }
}
