//! Corrupted GGUF files: every one must give an `Err` that names the file
//! and the field at fault; none may panic.
//!
//! The cases are a table ([`CASES`]). Most mutate the two real model files at
//! positions computed by an independent header walker
//! (`common::gguf_layout`); the rest mutate a small valid file written with
//! `write_gguf` from SmolLM2's metadata, or are files built whole. Real files
//! are held in memory once and patched in place (and restored) per case, so
//! the suite stays fast. Truncation sweeps cut the real files at every byte
//! of their first few KB and at the section boundaries, and the small file at
//! every byte. `testdata/gguf-regressions/` (inputs the fuzzer in `fuzz/`
//! crashed on, and hand-built hostile files) is replayed file by file.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard, OnceLock};

use common::{gguf_layout, gguf_string_element_pos, GgufLayout};
use ferrite::formats::gguf::{
    parse_header, write_gguf, Array, GgufFile, GgufHeader, Metadata, TensorToWrite, Value,
    MAX_ARRAY_NESTING,
};
use ferrite::formats::FormatError;
use ferrite_kernels::GgmlType;

/// The file a case starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Base {
    Smollm2,
    Gemma3,
    /// [`small_file`]: SmolLM2's metadata (vocabulary cut short), an explicit
    /// `general.alignment`, a bool array, a nested array and four tiny tensors.
    Small,
}

/// What a case does to its base.
enum Mutation {
    /// Keep only the first `n` bytes.
    Truncate(usize),
    /// Overwrite bytes at these positions; the length stays the same.
    Patch(Vec<(usize, Vec<u8>)>),
    /// A whole file made for the case (the base is not used).
    Build(Vec<u8>),
}

/// The base file and where its parts lie.
struct Ctx<'a> {
    bytes: &'a [u8],
    l: &'a GgufLayout,
}

impl Ctx<'_> {
    /// Bytes of the data section.
    fn data_len(&self) -> u64 {
        (self.bytes.len() - self.l.data_offset) as u64
    }

    /// Bytes left after position `pos`.
    fn left_after(&self, pos: usize) -> u64 {
        (self.bytes.len() - pos) as u64
    }

    fn kv_value(&self, key: &str) -> usize {
        self.l.kv(key).value_pos
    }

    fn kv_type(&self, key: &str) -> usize {
        self.l.kv(key).type_pos
    }

    /// Position of the first byte of `key`'s name (after its length).
    fn key_text(&self, key: &str) -> usize {
        self.l.kv(key).start + 8
    }

    /// An array's count field.
    fn array_len(&self, key: &str) -> usize {
        self.kv_value(key) + 4
    }

    fn string_element(&self, key: &str, index: usize) -> usize {
        gguf_string_element_pos(self.bytes, self.kv_value(key), index)
    }

    fn tensor_dim(&self, name: &str, d: usize) -> usize {
        self.l.tensor(name).dims_pos + 8 * d
    }

    /// Renames `from` to `to`, a key of the same length, in place.
    fn rename_key(&self, from: &str, to: &str) -> (usize, Vec<u8>) {
        assert_eq!(from.len(), to.len(), "rename {from} -> {to}");
        (self.key_text(from), to.as_bytes().to_vec())
    }

    fn rename_tensor(&self, from: &str, to: &str) -> (usize, Vec<u8>) {
        assert_eq!(from.len(), to.len(), "rename {from} -> {to}");
        (self.l.tensor(from).start + 8, to.as_bytes().to_vec())
    }
}

/// One corrupted file and the error it must give.
struct Case {
    name: &'static str,
    base: Base,
    mutate: fn(&Ctx) -> Mutation,
    /// Must occur in the error's `field`...
    field: &'static str,
    /// ...and this in its `problem`.
    problem: &'static str,
}

fn le32(v: u32) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

fn le64(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

fn patch(pos: usize, bytes: Vec<u8>) -> Mutation {
    Mutation::Patch(vec![(pos, bytes)])
}

use Base::{Gemma3, Small, Smollm2};

#[rustfmt::skip]
const CASES: &[Case] = &[
    // ---- magic and version ----
    Case { name: "zero-length file", base: Small, mutate: |_| Mutation::Build(Vec::new()),
        field: "magic", problem: "needs 4 bytes" },
    Case { name: "magic only", base: Small, mutate: |_| Mutation::Build(b"GGUF".to_vec()),
        field: "version", problem: "needs 4 bytes" },
    Case { name: "wrong magic", base: Smollm2, mutate: |_| patch(0, b"GGML".to_vec()),
        field: "magic", problem: "not a GGUF file" },
    Case { name: "lowercase magic", base: Gemma3, mutate: |_| patch(0, b"gguf".to_vec()),
        field: "magic", problem: "not a GGUF file" },
    Case { name: "version 1", base: Smollm2, mutate: |_| patch(4, le32(1)),
        field: "version", problem: "version 1 is not supported" },
    Case { name: "version 0", base: Gemma3, mutate: |_| patch(4, le32(0)),
        field: "version", problem: "unsupported GGUF version 0" },
    Case { name: "version 4", base: Smollm2, mutate: |_| patch(4, le32(4)),
        field: "version", problem: "unsupported GGUF version 4" },
    Case { name: "big-endian version 3", base: Smollm2, mutate: |_| patch(4, 3u32.to_be_bytes().to_vec()),
        field: "version", problem: "big-endian" },
    Case { name: "big-endian version 2", base: Gemma3, mutate: |_| patch(4, 2u32.to_be_bytes().to_vec()),
        field: "version", problem: "big-endian" },
    Case { name: "truncated in version", base: Gemma3, mutate: |_| Mutation::Truncate(6),
        field: "version", problem: "needs 4 bytes" },

    // ---- counts ----
    Case { name: "tensor count u64::MAX", base: Smollm2, mutate: |c| patch(c.l.n_tensors_pos, le64(u64::MAX)),
        field: "tensor count", problem: "cannot fit" },
    Case { name: "tensor count just past the file", base: Gemma3,
        mutate: |c| patch(c.l.n_tensors_pos, le64(c.left_after(24) / 32 + 1)),
        field: "tensor count", problem: "cannot fit" },
    Case { name: "metadata count u64::MAX", base: Smollm2, mutate: |c| patch(c.l.n_kv_pos, le64(u64::MAX)),
        field: "metadata count", problem: "cannot fit" },
    Case { name: "metadata count just past the file", base: Gemma3,
        mutate: |c| patch(c.l.n_kv_pos, le64(c.left_after(24) / 13 + 1)),
        field: "metadata count", problem: "cannot fit" },
    Case { name: "metadata count one too many", base: Smollm2,
        mutate: |c| patch(c.l.n_kv_pos, le64(c.l.kvs.len() as u64 + 1)),
        field: "tensor 0: name", problem: "but the file ends" },
    Case { name: "metadata count one too few", base: Smollm2,
        mutate: |c| patch(c.l.n_kv_pos, le64(c.l.kvs.len() as u64 - 1)),
        field: "tensor 'general.quantization_version': shape", problem: "element count overflows" },
    Case { name: "tensor count one too many", base: Smollm2,
        mutate: |c| patch(c.l.n_tensors_pos, le64(c.l.tensors.len() as u64 + 1)),
        field: "tensor 272: name", problem: "but the file ends" },

    // ---- keys and string values ----
    Case { name: "key length u64::MAX", base: Smollm2, mutate: |c| patch(c.l.kvs[0].start, le64(u64::MAX)),
        field: "metadata entry 0: key", problem: "needs 18446744073709551615 bytes" },
    Case { name: "key length just past the file", base: Gemma3,
        mutate: |c| patch(c.l.kvs[3].start, le64(c.left_after(c.l.kvs[3].start + 8) + 1)),
        field: "metadata entry 3: key", problem: "but the file ends" },
    Case { name: "key not UTF-8", base: Smollm2, mutate: |c| patch(c.key_text("general.name"), vec![0xff]),
        field: "metadata entry 2: key", problem: "not valid UTF-8" },
    Case { name: "key with overlong UTF-8", base: Gemma3, mutate: |c| patch(c.key_text("general.license") + 3, vec![0xc0, 0x80]),
        field: "metadata entry 5: key", problem: "not valid UTF-8" },
    Case { name: "string value not UTF-8", base: Smollm2, mutate: |c| patch(c.kv_value("general.name") + 8, vec![0xfe]),
        field: "metadata key 'general.name': value", problem: "not valid UTF-8" },
    Case { name: "string value length u64::MAX", base: Smollm2, mutate: |c| patch(c.kv_value("general.name"), le64(u64::MAX)),
        field: "metadata key 'general.name': value", problem: "needs 18446744073709551615 bytes" },
    Case { name: "string value length just past the file", base: Gemma3,
        mutate: |c| { let p = c.kv_value("general.name"); patch(p, le64(c.left_after(p + 8) + 1)) },
        field: "metadata key 'general.name': value", problem: "but the file ends" },
    Case { name: "token string not UTF-8", base: Gemma3,
        mutate: |c| patch(c.string_element("tokenizer.ggml.tokens", 5) + 8, vec![0xed, 0xa0, 0x80]),
        field: "'tokenizer.ggml.tokens': value: element 5", problem: "not valid UTF-8" },
    Case { name: "token string length u64::MAX", base: Smollm2,
        mutate: |c| patch(c.string_element("tokenizer.ggml.tokens", 0), le64(u64::MAX)),
        field: "'tokenizer.ggml.tokens': value: element 0", problem: "needs 18446744073709551615 bytes" },
    Case { name: "last merge string runs past the file", base: Smollm2,
        mutate: |c| { let p = c.string_element("tokenizer.ggml.merges", 48899); patch(p, le64(c.left_after(p + 8) + 1)) },
        field: "'tokenizer.ggml.merges': value: element 48899", problem: "but the file ends" },
    Case { name: "duplicate key", base: Smollm2, mutate: |c| Mutation::Patch(vec![c.rename_key("general.type", "general.name")]),
        field: "metadata key 'general.name'", problem: "duplicate key" },
    Case { name: "duplicate key (bool)", base: Gemma3,
        mutate: |c| Mutation::Patch(vec![c.rename_key("tokenizer.ggml.add_sep_token", "tokenizer.ggml.add_bos_token")]),
        field: "metadata key 'tokenizer.ggml.add_bos_token'", problem: "duplicate key" },

    // ---- value types ----
    Case { name: "value type id 13", base: Smollm2, mutate: |c| patch(c.kv_type("llama.block_count"), le32(13)),
        field: "metadata key 'llama.block_count': value type", problem: "unknown value type id 13" },
    Case { name: "value type id u32::MAX", base: Gemma3, mutate: |c| patch(c.kv_type("general.file_type"), le32(u32::MAX)),
        field: "metadata key 'general.file_type': value type", problem: "unknown value type id 4294967295" },
    Case { name: "u32 read as a string", base: Smollm2, mutate: |c| patch(c.kv_type("llama.context_length"), le32(8)),
        field: "metadata key 'llama.context_length': value", problem: "but the file ends" },
    Case { name: "array element type id 13", base: Smollm2, mutate: |c| patch(c.kv_value("general.languages"), le32(13)),
        field: "metadata key 'general.languages': value", problem: "unknown array element type id 13" },
    Case { name: "bool byte 2", base: Smollm2, mutate: |c| patch(c.kv_value("tokenizer.ggml.add_bos_token"), vec![2]),
        field: "metadata key 'tokenizer.ggml.add_bos_token': value", problem: "bool byte is 2" },
    Case { name: "bool byte 0xff", base: Gemma3, mutate: |c| patch(c.kv_value("tokenizer.ggml.add_sep_token"), vec![0xff]),
        field: "metadata key 'tokenizer.ggml.add_sep_token': value", problem: "bool byte is 255" },
    Case { name: "bool array element byte 2", base: Small, mutate: |c| patch(c.kv_value("test.flags") + 12 + 1, vec![2]),
        field: "metadata key 'test.flags': value: element 1", problem: "bool byte is 2" },

    // ---- arrays ----
    Case { name: "string array length u64::MAX", base: Smollm2, mutate: |c| patch(c.array_len("tokenizer.ggml.tokens"), le64(u64::MAX)),
        field: "metadata key 'tokenizer.ggml.tokens': value: array length", problem: "cannot fit" },
    Case { name: "string array length just past the file", base: Gemma3,
        mutate: |c| { let p = c.array_len("tokenizer.ggml.tokens"); patch(p, le64(c.left_after(p + 8) / 8 + 1)) },
        field: "metadata key 'tokenizer.ggml.tokens': value: array length", problem: "cannot fit" },
    Case { name: "f32 array length whose byte size overflows", base: Gemma3,
        mutate: |c| patch(c.array_len("tokenizer.ggml.scores"), le64(u64::MAX / 4 + 1)),
        field: "metadata key 'tokenizer.ggml.scores': value: array length", problem: "cannot fit" },
    Case { name: "i32 array length just past the file", base: Smollm2,
        mutate: |c| { let p = c.array_len("tokenizer.ggml.token_type"); patch(p, le64(c.left_after(p + 8) / 4 + 1)) },
        field: "metadata key 'tokenizer.ggml.token_type': value: array length", problem: "cannot fit" },
    Case { name: "nested array element type id 13", base: Small, mutate: |c| patch(c.kv_value("test.nested") + 12, le32(13)),
        field: "metadata key 'test.nested': value: element 0", problem: "unknown array element type id 13" },
    Case { name: "arrays nested one deeper than allowed", base: Small,
        mutate: |_| Mutation::Build(file_with_nested_arrays(MAX_ARRAY_NESTING + 1)),
        field: "metadata key 'deep': value: element 0", problem: "nested deeper than 8" },
    Case { name: "arrays nested 100000 deep", base: Small, mutate: |_| Mutation::Build(nesting_bomb(100_000)),
        field: "metadata key 'deep': value", problem: "nested deeper than 8" },

    // ---- general.alignment ----
    Case { name: "alignment 0", base: Smollm2,
        mutate: |c| Mutation::Patch(vec![c.rename_key("llama.block_count", "general.alignment"), (c.kv_value("llama.block_count"), le32(0))]),
        field: "metadata key 'general.alignment'", problem: "alignment 0 is not a non-zero power of two" },
    Case { name: "alignment 3", base: Gemma3,
        mutate: |c| Mutation::Patch(vec![c.rename_key("general.file_type", "general.alignment"), (c.kv_value("general.file_type"), le32(3))]),
        field: "metadata key 'general.alignment'", problem: "alignment 3 is not a non-zero power of two" },
    Case { name: "alignment 30 (block count renamed)", base: Smollm2,
        mutate: |c| Mutation::Patch(vec![c.rename_key("llama.block_count", "general.alignment")]),
        field: "metadata key 'general.alignment'", problem: "alignment 30 is not" },
    Case { name: "alignment u32::MAX", base: Small, mutate: |c| patch(c.kv_value("general.alignment"), le32(u32::MAX)),
        field: "metadata key 'general.alignment'", problem: "not a non-zero power of two" },
    Case { name: "alignment is an array", base: Smollm2,
        mutate: |c| Mutation::Patch(vec![c.rename_key("general.languages", "general.alignment")]),
        field: "metadata key 'general.alignment'", problem: "must be a u32, found array" },
    Case { name: "alignment is an i32", base: Small, mutate: |c| patch(c.kv_type("general.alignment"), le32(5)),
        field: "metadata key 'general.alignment'", problem: "must be a u32, found i32" },
    Case { name: "alignment is an f32", base: Small, mutate: |c| patch(c.kv_type("general.alignment"), le32(6)),
        field: "metadata key 'general.alignment'", problem: "must be a u32, found f32" },
    Case { name: "alignment 2^20: tensor offsets no longer aligned", base: Smollm2,
        mutate: |c| Mutation::Patch(vec![c.rename_key("llama.block_count", "general.alignment"), (c.kv_value("llama.block_count"), le32(1 << 20))]),
        field: "tensor 'blk.0.attn_norm.weight': offset", problem: "not a multiple of the alignment 1048576" },
    Case { name: "alignment 2^31: offsets no longer aligned", base: Smollm2,
        mutate: |c| Mutation::Patch(vec![c.rename_key("llama.block_count", "general.alignment"), (c.kv_value("llama.block_count"), le32(1 << 31))]),
        field: "offset", problem: "not a multiple of the alignment 2147483648" },
    Case { name: "alignment 2^31: data section past the end", base: Small,
        mutate: |c| Mutation::Patch(vec![(c.l.n_tensors_pos, le64(1)), (c.kv_value("general.alignment"), le32(1 << 31))]),
        field: "data section", problem: "before its data section at 2147483648" },

    // ---- tensor infos ----
    Case { name: "tensor name length u64::MAX", base: Smollm2, mutate: |c| patch(c.l.tensors[0].start, le64(u64::MAX)),
        field: "tensor 0: name", problem: "needs 18446744073709551615 bytes" },
    Case { name: "tensor name length just past the file", base: Gemma3,
        mutate: |c| { let p = c.l.tensors[100].start; patch(p, le64(c.left_after(p + 8) + 1)) },
        field: "tensor 100: name", problem: "but the file ends" },
    Case { name: "tensor name not UTF-8", base: Smollm2, mutate: |c| patch(c.l.tensors[3].start + 8, vec![0x80]),
        field: "tensor 3: name", problem: "not valid UTF-8" },
    Case { name: "duplicate tensor name", base: Smollm2,
        mutate: |c| Mutation::Patch(vec![c.rename_tensor("blk.0.attn_k.weight", "blk.0.attn_q.weight")]),
        field: "tensor 'blk.0.attn_q.weight'", problem: "duplicate tensor name" },
    Case { name: "duplicate tensor name (gemma)", base: Gemma3,
        mutate: |c| Mutation::Patch(vec![c.rename_tensor("blk.7.attn_v.weight", "blk.7.attn_k.weight")]),
        field: "tensor 'blk.7.attn_k.weight'", problem: "duplicate tensor name" },
    Case { name: "n_dims 0", base: Smollm2, mutate: |c| patch(c.l.tensor("token_embd.weight").n_dims_pos, le32(0)),
        field: "tensor 'token_embd.weight': dimension count", problem: "0 is not in 1..=4" },
    Case { name: "n_dims 5", base: Gemma3, mutate: |c| patch(c.l.tensor("token_embd.weight").n_dims_pos, le32(5)),
        field: "tensor 'token_embd.weight': dimension count", problem: "5 is not in 1..=4" },
    Case { name: "n_dims u32::MAX", base: Small, mutate: |c| patch(c.l.tensors[0].n_dims_pos, le32(u32::MAX)),
        field: "tensor 'a.f32': dimension count", problem: "4294967295 is not in 1..=4" },
    Case { name: "dimension 1 is zero", base: Smollm2, mutate: |c| patch(c.tensor_dim("token_embd.weight", 1), le64(0)),
        field: "tensor 'token_embd.weight': dimension 1", problem: "is zero" },
    Case { name: "dimension 0 is zero", base: Gemma3, mutate: |c| patch(c.tensor_dim("blk.0.attn_k.weight", 0), le64(0)),
        field: "tensor 'blk.0.attn_k.weight': dimension 0", problem: "is zero" },
    Case { name: "element count overflows u64", base: Smollm2, mutate: |c| patch(c.tensor_dim("token_embd.weight", 1), le64(1 << 62)),
        field: "tensor 'token_embd.weight': shape", problem: "element count overflows" },
    Case { name: "dimension u64::MAX", base: Gemma3, mutate: |c| patch(c.tensor_dim("blk.0.attn_k.weight", 1), le64(u64::MAX)),
        field: "tensor 'blk.0.attn_k.weight': shape", problem: "element count overflows" },
    Case { name: "element count above i64::MAX", base: Smollm2, mutate: |c| patch(c.tensor_dim("token_embd.weight", 1), le64(1 << 54)),
        field: "tensor 'token_embd.weight': shape", problem: "element count overflows" },
    Case { name: "byte size overflows", base: Smollm2, mutate: |c| patch(c.tensor_dim("output_norm.weight", 0), le64(1 << 62)),
        field: "tensor 'output_norm.weight': shape", problem: "byte size overflows" },
    Case { name: "4-d shape overflowing in the last dimension", base: Small,
        mutate: |c| { let t = &c.l.tensors[0]; Mutation::Build(with_tensor_dims(c.bytes, t, &[8, 2, 1 << 31, 1 << 31])) },
        field: "tensor 'a.f32': shape", problem: "element count overflows" },
    Case { name: "huge shape that does not overflow", base: Gemma3, mutate: |c| patch(c.tensor_dim("output_norm.weight", 0), le64(1 << 40)),
        field: "tensor 'output_norm.weight': offset", problem: "outside the data section" },
    Case { name: "ggml type u32::MAX", base: Smollm2, mutate: |c| patch(c.l.tensors[0].type_pos, le32(u32::MAX)),
        field: "tensor 'token_embd.weight': type", problem: "unknown ggml type id 4294967295" },
    Case { name: "ggml type 42 (one past the last)", base: Gemma3, mutate: |c| patch(c.l.tensors[4].type_pos, le32(42)),
        field: ": type", problem: "unknown ggml type id 42" },
    Case { name: "retired ggml type 4", base: Smollm2, mutate: |c| patch(c.l.tensors[2].type_pos, le32(4)),
        field: "tensor 'blk.0.ffn_down.weight': type", problem: "unknown ggml type id 4" },
    Case { name: "retired ggml type 5", base: Gemma3, mutate: |c| patch(c.l.tensors[2].type_pos, le32(5)),
        field: "tensor 'blk.0.attn_k.weight': type", problem: "unknown ggml type id 5" },
    Case { name: "retired ggml type 36", base: Small, mutate: |c| patch(c.l.tensors[1].type_pos, le32(36)),
        field: "tensor 'b.q4_0': type", problem: "unknown ggml type id 36" },
    Case { name: "row length not a multiple of the block size", base: Smollm2, mutate: |c| patch(c.l.tensor("output_norm.weight").type_pos, le32(12)),
        field: "tensor 'output_norm.weight': shape", problem: "row length 576 is not a multiple of the Q4_K block size 256" },
    Case { name: "row length 650 of Q5_0", base: Gemma3, mutate: |c| patch(c.tensor_dim("blk.0.attn_k.weight", 0), le64(650)),
        field: "tensor 'blk.0.attn_k.weight': shape", problem: "row length 650 is not a multiple of the Q5_0 block size 32" },
    Case { name: "tensor offset not aligned", base: Smollm2,
        mutate: |c| { let t = &c.l.tensors[5]; patch(t.offset_pos, le64(t.offset + 1)) },
        field: "offset", problem: "is not a multiple of the alignment 32" },
    Case { name: "tensor offset off by 16", base: Gemma3,
        mutate: |c| { let t = &c.l.tensors[9]; patch(t.offset_pos, le64(t.offset + 16)) },
        field: "offset", problem: "is not a multiple of the alignment 32" },
    Case { name: "tensor wholly beyond the data section", base: Smollm2,
        mutate: |c| { let t = c.l.tensors.last().unwrap(); patch(t.offset_pos, le64(c.data_len().next_multiple_of(32) + 32 * 1000)) },
        field: "tensor 'output_norm.weight': offset", problem: "lies outside the data section" },
    Case { name: "tensor running past the data section", base: Gemma3,
        mutate: |c| { let t = c.l.tensors.last().unwrap(); patch(t.offset_pos, le64((c.data_len() - 32) / 32 * 32)) },
        field: "tensor 'blk.17.post_ffw_norm.weight': offset", problem: "lies outside the data section" },
    Case { name: "tensor offset near u64::MAX", base: Smollm2,
        mutate: |c| patch(c.l.tensors[7].offset_pos, le64(u64::MAX / 32 * 32)),
        field: "offset", problem: "lies outside the data section" },
    Case { name: "tensors at the same offset", base: Smollm2,
        mutate: |c| patch(c.l.tensors[2].offset_pos, le64(c.l.tensors[1].offset)),
        field: "tensor 'blk.0.ffn_down.weight': offset", problem: "overlaps tensor 'blk.0.attn_norm.weight'" },
    Case { name: "tensor starting inside another", base: Gemma3,
        mutate: |c| patch(c.l.tensors[3].offset_pos, le64(c.l.tensors[2].offset + 32 * 100)),
        field: "offset", problem: "overlaps tensor" },
    Case { name: "last tensor overlapping the first", base: Small,
        mutate: |c| patch(c.l.tensors.last().unwrap().offset_pos, le64(0)),
        field: "offset", problem: "overlaps tensor" },

    // ---- truncation at chosen points (the sweeps below cover every boundary) ----
    Case { name: "truncated in the metadata count", base: Smollm2, mutate: |_| Mutation::Truncate(20),
        field: "metadata count", problem: "needs 8 bytes" },
    Case { name: "truncated before the claimed pairs could fit", base: Smollm2, mutate: |c| Mutation::Truncate(c.l.kvs[3].start + 10),
        field: "metadata count", problem: "33 items cannot fit in the 155 bytes left" },
    Case { name: "truncated inside a key", base: Smollm2, mutate: |c| Mutation::Truncate(c.l.kvs[27].start + 10),
        field: "metadata entry 27: key", problem: "but the file ends" },
    Case { name: "truncated inside the vocabulary", base: Gemma3, mutate: |c| Mutation::Truncate(c.string_element("tokenizer.ggml.tokens", 200_000) + 3),
        field: "'tokenizer.ggml.tokens': value: element 200000", problem: "but the file ends" },
    Case { name: "truncated inside a dimension", base: Gemma3, mutate: |c| Mutation::Truncate(c.tensor_dim("token_embd.weight", 1) + 5),
        field: "tensor 'token_embd.weight': dimension 1", problem: "needs 8 bytes" },
    Case { name: "truncated in the padding", base: Gemma3, mutate: |c| Mutation::Truncate(c.l.header_end + 4),
        field: "data section", problem: "before its data section" },
    Case { name: "truncated at the data section", base: Smollm2, mutate: |c| Mutation::Truncate(c.l.data_offset),
        field: "tensor 'token_embd.weight': offset", problem: "lies outside the data section of 0 bytes" },
    Case { name: "last byte missing", base: Smollm2, mutate: |c| Mutation::Truncate(c.bytes.len() - 1),
        field: "tensor 'output_norm.weight': offset", problem: "lies outside the data section" },
    Case { name: "last byte missing (small)", base: Small, mutate: |c| Mutation::Truncate(c.bytes.len() - 1),
        field: "offset", problem: "lies outside the data section" },
];

/// A real model held in memory, with its layout.
struct Real {
    bytes: Vec<u8>,
    layout: GgufLayout,
}

/// The real model `short_name`, loaded once and shared by the tests here
/// (they patch it in place under the lock and restore it).
fn real(short_name: &'static str) -> MutexGuard<'static, Real> {
    static SMOLLM2: OnceLock<Mutex<Real>> = OnceLock::new();
    static GEMMA3: OnceLock<Mutex<Real>> = OnceLock::new();
    let cell = match short_name {
        "smollm2" => &SMOLLM2,
        "gemma3-270m" => &GEMMA3,
        other => panic!("no real model {other}"),
    };
    let m = cell.get_or_init(|| {
        let path = common::real_model(short_name);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let layout = gguf_layout(&bytes);
        Mutex::new(Real { bytes, layout })
    });
    // A test that failed while holding the lock has restored the bytes.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Parses, turning a panic into a message.
fn parse(bytes: &[u8], source: &str) -> Result<Result<GgufHeader, FormatError>, String> {
    catch_unwind(AssertUnwindSafe(|| parse_header(bytes, source))).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

/// Checks one case's outcome; returns what was wrong, if anything.
fn judge(
    case: &Case,
    source: &str,
    outcome: Result<Result<GgufHeader, FormatError>, String>,
) -> Option<String> {
    let err = match outcome {
        Err(panic) => return Some(format!("panicked: {panic}")),
        Ok(Ok(_)) => return Some("parsed without error".into()),
        Ok(Err(e)) => e,
    };
    let shown = err.to_string();
    if err.source != source || !shown.starts_with(source) {
        return Some(format!("error does not name the file: {shown}"));
    }
    if !err.field.contains(case.field) || !err.problem.contains(case.problem) {
        return Some(format!(
            "expected field ~ {:?} and problem ~ {:?}, got: {shown}",
            case.field, case.problem
        ));
    }
    None
}

/// Runs every case on `base`; returns the number run and the failures.
fn run_cases(
    base: Base,
    label: &str,
    bytes: &mut [u8],
    layout: &GgufLayout,
) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    let mut n = 0;
    for case in CASES.iter().filter(|c| c.base == base) {
        n += 1;
        let source = format!("{label} [{}]", case.name);
        let mutation = (case.mutate)(&Ctx { bytes, l: layout });
        let outcome = match mutation {
            Mutation::Truncate(len) => parse(&bytes[..len], &source),
            Mutation::Build(file) => {
                let outcome = parse(&file, &source);
                // The owned-bytes entry point must agree with parse_header.
                if let Ok(Err(e)) = &outcome {
                    let again = GgufFile::from_vec(&source, file).err();
                    if again.as_ref() != Some(e) {
                        failures.push(format!("{source}: from_vec disagrees: {again:?}"));
                    }
                }
                outcome
            }
            Mutation::Patch(patches) => {
                let saved: Vec<(usize, Vec<u8>)> = patches
                    .iter()
                    .map(|(at, new)| (*at, bytes[*at..at + new.len()].to_vec()))
                    .collect();
                for (at, new) in &patches {
                    bytes[*at..at + new.len()].copy_from_slice(new);
                }
                let outcome = parse(bytes, &source);
                for (at, old) in saved.iter().rev() {
                    bytes[*at..at + old.len()].copy_from_slice(old);
                }
                outcome
            }
        };
        if let Some(problem) = judge(case, &source, outcome) {
            failures.push(format!("{source}: {problem}"));
        }
    }
    (n, failures)
}

fn assert_cases_pass(base: Base, label: &str, bytes: &mut [u8], layout: &GgufLayout) {
    // Every case must start from a valid file.
    parse_header(bytes, label).unwrap_or_else(|e| panic!("the base file does not parse: {e}"));
    let (n, failures) = run_cases(base, label, bytes, layout);
    assert!(n > 0, "no cases for {base:?}");
    assert!(
        failures.is_empty(),
        "{} of {n} corrupted {label} files misbehaved:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The patches were undone.
    parse_header(bytes, label).unwrap_or_else(|e| panic!("the base file was not restored: {e}"));
}

#[test]
fn corrupted_smollm2_files_are_rejected() {
    let mut r = real("smollm2");
    let Real { bytes, layout } = &mut *r;
    assert_cases_pass(Smollm2, "smollm2", bytes, layout);
}

#[test]
fn corrupted_gemma3_files_are_rejected() {
    let mut r = real("gemma3-270m");
    let Real { bytes, layout } = &mut *r;
    assert_cases_pass(Gemma3, "gemma3", bytes, layout);
}

#[test]
fn corrupted_small_files_are_rejected() {
    let mut bytes = small_file();
    let layout = gguf_layout(&bytes);
    assert_cases_pass(Small, "small", &mut bytes, &layout);
}

#[test]
fn case_table_is_large_and_distinct() {
    assert!(CASES.len() >= 40, "only {} cases", CASES.len());
    let mut names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(names.len(), before, "case names repeat");
}

/// Truncation can only ever cause "the file ends here" errors.
fn is_truncation_error(e: &FormatError) -> bool {
    [
        "but the file ends after",
        "cannot fit in the",
        "before its data section",
        "outside the data section",
    ]
    .iter()
    .any(|p| e.problem.contains(p))
}

/// Cuts `bytes` at each of `points`; every prefix must be rejected as
/// truncated, without a panic. Returns the number of cuts.
fn sweep(label: &str, bytes: &[u8], points: impl IntoIterator<Item = usize>) -> usize {
    let mut points: Vec<usize> = points.into_iter().filter(|&n| n < bytes.len()).collect();
    points.sort_unstable();
    points.dedup();
    let mut failures = Vec::new();
    for &n in &points {
        let source = format!("{label} cut at {n}");
        match parse(&bytes[..n], &source) {
            Err(panic) => failures.push(format!("{source}: panicked: {panic}")),
            Ok(Ok(_)) => failures.push(format!("{source}: parsed without error")),
            Ok(Err(e)) if e.source != source || !is_truncation_error(&e) => {
                failures.push(format!("{source}: unexpected error: {e}"))
            }
            Ok(Err(_)) => {}
        }
    }
    assert!(
        failures.is_empty(),
        "{} cuts misbehaved:\n{}",
        failures.len(),
        failures.join("\n")
    );
    points.len()
}

/// Where a real file is cut: every byte of its first 4 KB; the start, type
/// and value of every metadata pair; every field of the first and last
/// tensor info, and the start of every `tensor_stride`-th one; the end of
/// the header and of the padding; the start and last byte of the data of
/// the first two tensors and the last; the file's last byte. (Each cut past
/// the vocabulary re-parses it, ~20 ms for gemma3's 262k tokens, so gemma3's
/// tensor infos are sampled; the small file is cut at every byte.)
fn real_cut_points(bytes: &[u8], l: &GgufLayout, tensor_stride: usize) -> Vec<usize> {
    let mut points: Vec<usize> = (0..4096).collect();
    points.extend([l.n_tensors_pos, l.n_kv_pos, l.n_kv_pos + 8]);
    for kv in &l.kvs {
        points.extend([kv.start, kv.type_pos, kv.value_pos]);
    }
    let n = l.tensors.len();
    for (i, t) in l.tensors.iter().enumerate() {
        if i == 0 || i == n - 1 {
            points.extend([
                t.start + 8,
                t.n_dims_pos,
                t.dims_pos,
                t.type_pos,
                t.offset_pos,
            ]);
            points.extend((1..t.dims.len()).map(|d| t.dims_pos + 8 * d));
        }
        if i == n - 1 || i % tensor_stride == 0 {
            points.push(t.start);
        }
    }
    points.extend([
        l.header_end,
        l.header_end + 1,
        l.data_offset,
        l.data_offset + 1,
    ]);
    for t in [&l.tensors[0], &l.tensors[1], &l.tensors[n - 1]] {
        let start = l.data_offset + t.offset as usize;
        let size = GgmlType::from_id(t.ty)
            .unwrap()
            .bytes_for(t.dims.iter().product())
            .unwrap();
        points.extend([start, start + size as usize - 1]);
    }
    points.push(bytes.len() - 1);
    points
}

#[test]
fn truncated_smollm2_is_rejected_at_every_cut() {
    let r = real("smollm2");
    let n = sweep("smollm2", &r.bytes, real_cut_points(&r.bytes, &r.layout, 1));
    assert!(n > 4096 + r.layout.kvs.len(), "{n} cuts");
}

#[test]
fn truncated_gemma3_is_rejected_at_every_cut() {
    let r = real("gemma3-270m");
    let n = sweep("gemma3", &r.bytes, real_cut_points(&r.bytes, &r.layout, 32));
    assert!(n > 4096 + r.layout.kvs.len(), "{n} cuts");
}

#[test]
fn truncated_small_files_are_rejected_at_every_byte() {
    let v3 = small_file();
    sweep("small v3", &v3, 0..v3.len());
    let mut v2 = v3.clone();
    v2[4..8].copy_from_slice(&2u32.to_le_bytes());
    parse_header(&v2, "small v2").expect("v2 variant parses");
    sweep("small v2", &v2, 0..v2.len());
    // A file without tensors needs no padding after its header.
    let nested = file_with_nested_arrays(MAX_ARRAY_NESTING);
    sweep("nested", &nested, 0..gguf_layout(&nested).header_end);
}

/// The deepest nesting accepted is MAX_ARRAY_NESTING arrays; the cases above
/// reject one more.
#[test]
fn nesting_limit_is_exact() {
    let ok = file_with_nested_arrays(MAX_ARRAY_NESTING);
    parse_header(&ok, "nested").expect("nesting at the limit parses");
}

/// Every id ggml has retired (or never used) is rejected as a tensor type.
#[test]
fn retired_ggml_ids_are_rejected() {
    let mut bytes = small_file();
    let pos = gguf_layout(&bytes).tensors[0].type_pos;
    for id in [4u32, 5, 31, 32, 33, 36, 37, 38] {
        bytes[pos..pos + 4].copy_from_slice(&id.to_le_bytes());
        let err = parse_header(&bytes, "small").expect_err("retired id accepted");
        assert_eq!(err.field, "tensor 'a.f32': type", "{err}");
        assert_eq!(err.problem, format!("unknown ggml type id {id}"), "{err}");
    }
}

/// Errors from the memory-mapped entry point name the path.
#[test]
fn open_names_the_path_of_a_corrupt_file() {
    let mut bytes = small_file();
    let layout = gguf_layout(&bytes);
    let pos = layout.kv("general.alignment").value_pos;
    bytes[pos..pos + 4].copy_from_slice(&3u32.to_le_bytes());
    let path =
        std::env::temp_dir().join(format!("ferrite-gguf-corrupt-{}.gguf", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let err = GgufFile::open(&path).err();
    std::fs::remove_file(&path).unwrap();
    let err = err.expect("alignment 3 is rejected");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert!(err.field.contains("general.alignment"), "{err}");
}

/// Every file in testdata/gguf-regressions/ (fuzzer crashes once fixed, and
/// hand-built hostile inputs; see the README there) is rejected with an
/// error naming the file and a field, without a panic.
#[test]
fn fuzz_regressions_are_rejected() {
    let dir = common::testdata().join("gguf-regressions");
    let mut n = 0;
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            continue;
        }
        n += 1;
        let bytes = std::fs::read(&path).unwrap();
        let source = path.display().to_string();
        match parse(&bytes, &source) {
            Err(panic) => failures.push(format!("{source}: panicked: {panic}")),
            Ok(Ok(_)) => failures.push(format!("{source}: parsed without error")),
            Ok(Err(e)) if e.source != source || e.field.is_empty() => failures.push(format!(
                "{source}: error does not name the file and field: {e}"
            )),
            Ok(Err(_)) => {}
        }
    }
    assert!(n > 0, "no regression inputs in {}", dir.display());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---- files built for the tests ----

/// Vocabulary-sized arrays are cut to this many entries in [`small_file`].
const KEEP: usize = 8;

/// A small valid v3 file: SmolLM2's metadata with its arrays cut to [`KEEP`]
/// entries and `general.alignment = 32` inserted second, then `test.flags`
/// (bool array) and `test.nested` (array of arrays), and four tiny tensors.
fn small_file() -> Vec<u8> {
    static SMALL: OnceLock<Vec<u8>> = OnceLock::new();
    SMALL.get_or_init(build_small_file).clone()
}

fn build_small_file() -> Vec<u8> {
    let header = parse_header(&real("smollm2").bytes, "smollm2").unwrap();
    let mut metadata = Metadata::default();
    for (i, (key, value)) in header.metadata.iter().enumerate() {
        let value = match value {
            Value::Array(Array::String(v)) => {
                Value::Array(Array::String(v.iter().take(KEEP).cloned().collect()))
            }
            Value::Array(Array::I32(v)) => {
                Value::Array(Array::I32(v.iter().take(KEEP).copied().collect()))
            }
            v => v.clone(),
        };
        assert!(metadata.insert(key.to_owned(), value));
        if i == 0 {
            metadata.insert("general.alignment".into(), Value::U32(32));
        }
    }
    metadata.insert(
        "test.flags".into(),
        Value::Array(Array::Bool(vec![true, false, true])),
    );
    metadata.insert(
        "test.nested".into(),
        Value::Array(Array::Array(vec![
            Array::U16(vec![1, 2]),
            Array::String(vec!["x".into()]),
        ])),
    );
    let tensors: [(&str, &[u64], GgmlType); 4] = [
        ("a.f32", &[8, 2], GgmlType::F32),
        ("b.q4_0", &[32, 2], GgmlType::Q4_0),
        ("c.q4_k", &[256], GgmlType::Q4K),
        ("d.f16", &[16], GgmlType::F16),
    ];
    let data: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, dims, ty)| {
            let n = ty.bytes_for(dims.iter().product()).unwrap() as usize;
            (0..n).map(|i| (i * 31 % 251) as u8).collect()
        })
        .collect();
    let to_write: Vec<TensorToWrite> = tensors
        .iter()
        .zip(&data)
        .map(|(&(name, dims, ty), data)| TensorToWrite {
            name,
            dims,
            ty,
            data,
        })
        .collect();
    let mut out = Vec::new();
    write_gguf(&mut out, 3, &metadata, &to_write).unwrap();
    out
}

/// A file whose one key `deep` holds `depth` arrays nested in each other,
/// the innermost holding one u8.
fn file_with_nested_arrays(depth: usize) -> Vec<u8> {
    let mut a = Array::U8(vec![7]);
    for _ in 1..depth {
        a = Array::Array(vec![a]);
    }
    let mut metadata = Metadata::default();
    metadata.insert("deep".into(), Value::Array(a));
    let mut out = Vec::new();
    write_gguf(&mut out, 3, &metadata, &[]).unwrap();
    out
}

/// Like [`file_with_nested_arrays`] but written by hand, `depth` deep: a
/// recursive reader without a limit would overflow its stack.
fn nesting_bomb(depth: usize) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(b"GGUF");
    out.extend(le32(3));
    out.extend(le64(0)); // tensors
    out.extend(le64(1)); // metadata pairs
    out.extend(le64(4));
    out.extend(b"deep");
    out.extend(le32(9)); // array
    for _ in 1..depth {
        out.extend(le32(9)); // of arrays
        out.extend(le64(1)); // one element
    }
    out.extend(le32(0)); // of u8
    out.extend(le64(1));
    out.push(7);
    out
}

/// `bytes` with the dims of tensor `t` replaced by `dims` (the file is
/// re-spliced, so the count may change).
fn with_tensor_dims(bytes: &[u8], t: &common::TensorInfoLayout, dims: &[u64]) -> Vec<u8> {
    let mut out = bytes[..t.n_dims_pos].to_vec();
    out.extend(le32(dims.len() as u32));
    for &d in dims {
        out.extend(le64(d));
    }
    out.extend(&bytes[t.type_pos..]);
    out
}
