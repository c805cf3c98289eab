//! llama2.c checkpoints (`model.bin`) and vocabularies (`tokenizer.bin`),
//! turned into an in-memory GGUF file of the `llama` architecture that the
//! Llama loader runs unchanged.
//!
//! Checkpoint versions (karpathy/llama2.c `run.c`, `runq.c`, `export.py`):
//! - **v0 (legacy)**: seven little-endian i32 (`dim`, `hidden_dim`,
//!   `n_layers`, `n_heads`, `n_kv_heads`, `vocab_size`, `seq_len`; a
//!   negative `vocab_size` means the classifier is not shared with the token
//!   embedding), then f32 tensors: token embedding, attention norms, wq, wk,
//!   wv, wo (all layers each), ffn norms, w1, w2, w3, final norm, the RoPE
//!   tables (two of `seq_len * head_size / 2` values, skipped), and the
//!   classifier if
//!   not shared.
//! - **v1**: magic `ak42`, version 1, the seven i32, a shared-classifier
//!   byte, zero padding to 256 bytes; f32 tensors: attention norms, ffn
//!   norms, final norm, token embedding, wq, wk, wv, wo, w1, w2, w3, and the
//!   classifier if not shared.
//! - **v2** (Q8_0): as v1 with version 2 and an i32 group size after the
//!   shared byte; the norms in f32, then each matrix (token embedding, then
//!   per layer wq, wk, wv, wo, w1, w2, w3, then the classifier if not
//!   shared) as its int8 values followed by one f32 scale per group.
//!   Weights are dequantized to f32 at load (`q * scale`, exact), since
//!   their f32 group scales have no exact ggml block format; the metadata
//!   key `ferrite.int8_activation_groups` then has every matrix input
//!   rounded to int8 in groups of that size, as `runq.c` quantizes its
//!   inputs (`tensor::QuantizedActs::round_as_int8`).
//!
//! Matrices are stored as llama2.c multiplies them, `(out, in)` row-major,
//! which is GGUF's layout; RoPE rotates adjacent pairs (ggml "normal"), as
//! `run.c` does; RMSNorm eps is 1e-5 and the RoPE base 10 000.
//!
//! `tokenizer.bin`: an i32 `max_token_length`, then per token an f32 score,
//! an i32 length and that many bytes. Its SentencePiece pieces have `▁`
//! replaced by a space; ids 0, 1, 2 are `<unk>`, BOS and EOS, and 3..=258
//! the byte tokens `<0x00>`..`<0xFF>` (`run.c`'s byte fallback is
//! `byte + 3`). It becomes a GGUF `llama` (SentencePiece) vocabulary, so
//! prompts are encoded as `run.c` encodes them: a leading space, merges of
//! the best-scoring pair first, byte fallback.
//!
//! Every size is checked against the file's length before anything is
//! allocated.

use std::path::Path;

use ferrite_kernels::GgmlType;

use crate::formats::gguf::{write_gguf, Array, GgufFile, Metadata, TensorToWrite, Value};
use crate::formats::names;
use crate::Error;

/// The version-1/2 header's magic number (`ak42`, little-endian u32).
const MAGIC: u32 = 0x616b_3432;
/// Bytes of the version-1/2 header.
const HEADER: usize = 256;
/// Largest size a hyper-parameter may take.
const MAX_SIZE: i64 = 1 << 20;

/// The hyper-parameters of a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub dim: usize,
    pub hidden_dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub vocab_size: usize,
    pub seq_len: usize,
    pub shared_classifier: bool,
    /// v2: values per Q8_0 scale; `None`: f32 weights.
    pub group_size: Option<usize>,
}

/// A little-endian reader over a checkpoint's bytes that fails cleanly.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    source: &'a str,
}

impl<'a> Reader<'a> {
    fn err(&self, problem: String) -> Error {
        Error::model(self.source, problem)
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Error> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| {
            self.err(format!(
                "{what}: {n} bytes at offset {} run past the end of the file ({} bytes)",
                self.at,
                self.bytes.len()
            ))
        })?;
        let bytes: &'a [u8] = self.bytes;
        let s = &bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn i32(&mut self, what: &str) -> Result<i32, Error> {
        let b = self.take(4, what)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// `n` f32 values, as their bytes.
    fn f32s(&mut self, n: usize, what: &str) -> Result<&'a [u8], Error> {
        let len = n
            .checked_mul(4)
            .ok_or_else(|| self.err(format!("{what}: too large")))?;
        self.take(len, what)
    }
}

/// A positive size no larger than [`MAX_SIZE`].
fn size(r: &Reader, v: i32, what: &str) -> Result<usize, Error> {
    if v <= 0 || i64::from(v) > MAX_SIZE {
        return Err(r.err(format!("{what} = {v} is not a size in 1..={MAX_SIZE}")));
    }
    Ok(v as usize)
}

/// The seven hyper-parameters (the sign of `vocab_size` is the caller's).
fn read_params(r: &mut Reader) -> Result<[i32; 7], Error> {
    let mut p = [0i32; 7];
    for (v, what) in p.iter_mut().zip([
        "dim",
        "hidden_dim",
        "n_layers",
        "n_heads",
        "n_kv_heads",
        "vocab_size",
        "seq_len",
    ]) {
        *v = r.i32(what)?;
    }
    Ok(p)
}

fn config(
    r: &Reader,
    p: [i32; 7],
    shared: bool,
    group_size: Option<usize>,
) -> Result<Config, Error> {
    let c = Config {
        dim: size(r, p[0], "dim")?,
        hidden_dim: size(r, p[1], "hidden_dim")?,
        n_layers: size(r, p[2], "n_layers")?,
        n_heads: size(r, p[3], "n_heads")?,
        n_kv_heads: size(r, p[4], "n_kv_heads")?,
        vocab_size: size(r, p[5].checked_abs().unwrap_or(0), "vocab_size")?,
        seq_len: size(r, p[6], "seq_len")?,
        shared_classifier: shared,
        group_size,
    };
    if !c.dim.is_multiple_of(c.n_heads)
        || !c.n_heads.is_multiple_of(c.n_kv_heads)
        || !(c.dim / c.n_heads).is_multiple_of(2)
    {
        return Err(r.err(format!(
            "{} heads ({} KV heads) do not divide dim {} into even heads",
            c.n_heads, c.n_kv_heads, c.dim
        )));
    }
    Ok(c)
}

/// The tensors of a checkpoint, by GGUF name, as f32 bytes.
struct Tensors {
    list: Vec<(String, Vec<u64>, Vec<u8>)>,
}

impl Tensors {
    fn push(&mut self, name: String, dims: &[u64], bytes: Vec<u8>) {
        self.list.push((name, dims.to_vec(), bytes));
    }
}

/// A per-layer matrix: its GGUF name for a layer, rows (out), columns (in).
type Matrix = (fn(usize) -> String, usize, usize);

/// Per-layer GGUF names of the seven matrices, in llama2.c's order, with
/// their `(out, in)` sizes.
fn matrices(c: &Config) -> [Matrix; 7] {
    let kv = c.dim / c.n_heads * c.n_kv_heads;
    [
        (names::attn_q, c.dim, c.dim),
        (names::attn_k, kv, c.dim),
        (names::attn_v, kv, c.dim),
        (names::attn_output, c.dim, c.dim),
        (names::ffn_gate, c.hidden_dim, c.dim),
        (names::ffn_down, c.dim, c.hidden_dim),
        (names::ffn_up, c.hidden_dim, c.dim),
    ]
}

/// Reads a checkpoint into its config and f32 tensors.
fn read_checkpoint(bytes: &[u8], source: &str) -> Result<(Config, Tensors), Error> {
    let mut r = Reader {
        bytes,
        at: 0,
        source,
    };
    let first = u32::from_le_bytes(
        r.take(4, "header")?
            .try_into()
            .map_err(|_| r.err("header".into()))?,
    );
    let mut t = Tensors { list: Vec::new() };
    if first != MAGIC {
        r.at = 0;
        let p = read_params(&mut r)?;
        let c = config(&r, p, p[5] > 0, None)?;
        read_v0(&mut r, &c, &mut t)?;
        return Ok((c, t));
    }
    let version = r.i32("version")?;
    let p = read_params(&mut r)?;
    let shared = r.take(1, "shared_classifier")?[0] != 0;
    let group_size = match version {
        1 => None,
        2 => {
            let gs = r.i32("group_size")?;
            Some(size(&r, gs, "group_size")?)
        }
        v => {
            return Err(r.err(format!(
                "checkpoint version {v} is not supported (0, 1 or 2)"
            )))
        }
    };
    let c = config(&r, p, shared, group_size)?;
    r.at = HEADER;
    match group_size {
        None => read_v1(&mut r, &c, &mut t)?,
        Some(gs) => read_v2(&mut r, &c, gs, &mut t)?,
    }
    Ok((c, t))
}

fn read_v0(r: &mut Reader, c: &Config, t: &mut Tensors) -> Result<(), Error> {
    let (dim, l, v) = (c.dim as u64, c.n_layers, c.vocab_size);
    let embd = r.f32s(v * c.dim, "token embedding")?.to_vec();
    t.push(names::TOKEN_EMBD.into(), &[dim, v as u64], embd);
    per_layer_vectors(r, c, names::attn_norm, t)?;
    for (name, rows, cols) in matrices(c).into_iter().take(4) {
        per_layer_f32(r, l, name, rows, cols, t)?;
    }
    per_layer_vectors(r, c, names::ffn_norm, t)?;
    for (name, rows, cols) in matrices(c).into_iter().skip(4) {
        per_layer_f32(r, l, name, rows, cols, t)?;
    }
    let norm = r.f32s(c.dim, "final norm")?.to_vec();
    t.push(names::OUTPUT_NORM.into(), &[dim], norm);
    // The RoPE tables (real and imaginary parts), recomputed by the model.
    let pairs = c.dim / c.n_heads / 2;
    r.f32s(c.seq_len * pairs, "freq_cis_real")?;
    r.f32s(c.seq_len * pairs, "freq_cis_imag")?;
    if !c.shared_classifier {
        let cls = r.f32s(v * c.dim, "classifier")?.to_vec();
        t.push(names::OUTPUT.into(), &[dim, v as u64], cls);
    }
    Ok(())
}

fn read_v1(r: &mut Reader, c: &Config, t: &mut Tensors) -> Result<(), Error> {
    let (dim, l, v) = (c.dim as u64, c.n_layers, c.vocab_size);
    per_layer_vectors(r, c, names::attn_norm, t)?;
    per_layer_vectors(r, c, names::ffn_norm, t)?;
    let norm = r.f32s(c.dim, "final norm")?.to_vec();
    t.push(names::OUTPUT_NORM.into(), &[dim], norm);
    let embd = r.f32s(v * c.dim, "token embedding")?.to_vec();
    t.push(names::TOKEN_EMBD.into(), &[dim, v as u64], embd);
    for (name, rows, cols) in matrices(c) {
        per_layer_f32(r, l, name, rows, cols, t)?;
    }
    if !c.shared_classifier {
        let cls = r.f32s(v * c.dim, "classifier")?.to_vec();
        t.push(names::OUTPUT.into(), &[dim, v as u64], cls);
    }
    Ok(())
}

fn read_v2(r: &mut Reader, c: &Config, gs: usize, t: &mut Tensors) -> Result<(), Error> {
    let (dim, v) = (c.dim as u64, c.vocab_size);
    per_layer_vectors(r, c, names::attn_norm, t)?;
    per_layer_vectors(r, c, names::ffn_norm, t)?;
    let norm = r.f32s(c.dim, "final norm")?.to_vec();
    t.push(names::OUTPUT_NORM.into(), &[dim], norm);
    let embd = q8_tensor(r, v * c.dim, gs, "token embedding")?;
    t.push(names::TOKEN_EMBD.into(), &[dim, v as u64], embd);
    for (name, rows, cols) in matrices(c) {
        for layer in 0..c.n_layers {
            let values = q8_tensor(r, rows * cols, gs, &name(layer))?;
            t.push(name(layer), &[cols as u64, rows as u64], values);
        }
    }
    if !c.shared_classifier {
        let cls = q8_tensor(r, v * c.dim, gs, "classifier")?;
        t.push(names::OUTPUT.into(), &[dim, v as u64], cls);
    }
    Ok(())
}

/// `n` int8 values and their `n / gs` f32 scales, dequantized to f32 bytes.
fn q8_tensor(r: &mut Reader, n: usize, gs: usize, what: &str) -> Result<Vec<u8>, Error> {
    if !n.is_multiple_of(gs) {
        return Err(r.err(format!("{what}: {n} values are not whole groups of {gs}")));
    }
    let q = r.take(n, what)?;
    let scales = r.f32s(n / gs, what)?;
    let mut out = Vec::with_capacity(4 * n);
    for (group, s) in q.chunks_exact(gs).zip(scales.chunks_exact(4)) {
        let s = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        for &b in group {
            out.extend_from_slice(&(f32::from(b as i8) * s).to_le_bytes());
        }
    }
    Ok(out)
}

/// One `dim` vector per layer, named `name(l)`.
fn per_layer_vectors(
    r: &mut Reader,
    c: &Config,
    name: fn(usize) -> String,
    t: &mut Tensors,
) -> Result<(), Error> {
    for layer in 0..c.n_layers {
        let v = r.f32s(c.dim, &name(layer))?.to_vec();
        t.push(name(layer), &[c.dim as u64], v);
    }
    Ok(())
}

/// One `rows x cols` f32 matrix per layer, named `name(l)`.
fn per_layer_f32(
    r: &mut Reader,
    n_layers: usize,
    name: fn(usize) -> String,
    rows: usize,
    cols: usize,
    t: &mut Tensors,
) -> Result<(), Error> {
    for layer in 0..n_layers {
        let m = r.f32s(rows * cols, &name(layer))?.to_vec();
        t.push(name(layer), &[cols as u64, rows as u64], m);
    }
    Ok(())
}

/// The pieces and scores of a `tokenizer.bin` of `vocab_size` tokens.
fn read_tokenizer(
    bytes: &[u8],
    vocab_size: usize,
    source: &str,
) -> Result<(Vec<String>, Vec<f32>), Error> {
    let mut r = Reader {
        bytes,
        at: 0,
        source,
    };
    let max_len = r.i32("max_token_length")?;
    let (mut pieces, mut scores) = (Vec::new(), Vec::new());
    for id in 0..vocab_size {
        let what = format!("token {id}");
        let score = f32::from_le_bytes(
            r.take(4, &what)?
                .try_into()
                .map_err(|_| r.err(what.clone()))?,
        );
        let len = r.i32(&what)?;
        if len < 0 || len > max_len.max(0) {
            return Err(r.err(format!("{what}: length {len} (max_token_length {max_len})")));
        }
        let text = String::from_utf8_lossy(r.take(len as usize, &what)?).into_owned();
        pieces.push(text);
        scores.push(score);
    }
    Ok((pieces, scores))
}

/// The GGUF vocabulary of llama2.c's pieces: `▁` for spaces, `<unk>`,
/// `<s>`, `</s>` as ids 0..2, byte tokens typed as bytes.
fn vocab_metadata(md: &mut Metadata, pieces: Vec<String>, scores: Vec<f32>) {
    const UNKNOWN: i32 = 2;
    const CONTROL: i32 = 3;
    const NORMAL: i32 = 1;
    const BYTE: i32 = 6;
    let is_byte = |p: &str| p.len() == 6 && p.starts_with("<0x") && p.ends_with('>');
    let types: Vec<i32> = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| match i {
            0 => UNKNOWN,
            1 | 2 => CONTROL,
            _ if is_byte(p) => BYTE,
            _ => NORMAL,
        })
        .collect();
    let tokens: Vec<String> = pieces
        .into_iter()
        .enumerate()
        .map(|(i, p)| match i {
            0 => "<unk>".to_string(),
            1 => "<s>".to_string(),
            2 => "</s>".to_string(),
            _ => p.replace(' ', "\u{2581}"),
        })
        .collect();
    let mut set = |k: &str, v: Value| {
        md.insert(k.to_string(), v);
    };
    set("tokenizer.ggml.model", Value::String("llama".into()));
    set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    set("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    set("tokenizer.ggml.bos_token_id", Value::U32(1));
    set("tokenizer.ggml.eos_token_id", Value::U32(2));
    // llama2.c's models were trained on stories that each start with BOS
    // and never see EOS: a story ends where the model writes the next BOS,
    // and run.c / runq.c stop there. Marking BOS as the end of a turn makes
    // it end generation here too.
    set("tokenizer.ggml.eot_token_id", Value::U32(1));
    set("tokenizer.ggml.unknown_token_id", Value::U32(0));
    set("tokenizer.ggml.add_bos_token", Value::Bool(true));
    set("tokenizer.ggml.add_space_prefix", Value::Bool(true));
}

/// Reads llama2.c checkpoint `model` and vocabulary `tokenizer` into an
/// in-memory GGUF file of the `llama` architecture (weights in f32).
pub fn open(model: &Path, tokenizer: &Path) -> Result<GgufFile, Error> {
    let source = model.display().to_string();
    let read = |p: &Path| {
        std::fs::read(p)
            .map_err(|e| Error::model(p.display().to_string(), format!("cannot read: {e}")))
    };
    let bytes = read(model)?;
    let (c, tensors) = read_checkpoint(&bytes, &source)?;
    drop(bytes);
    let tok_source = tokenizer.display().to_string();
    let (pieces, scores) = read_tokenizer(&read(tokenizer)?, c.vocab_size, &tok_source)?;

    let mut md = Metadata::default();
    let mut set = |k: &str, v: Value| {
        md.insert(k.to_string(), v);
    };
    let u32_of = |n: usize| Value::U32(n as u32);
    set("general.architecture", Value::String("llama".into()));
    set(
        "general.name",
        Value::String(format!("llama2.c {}", model.display())),
    );
    set("llama.embedding_length", u32_of(c.dim));
    set("llama.feed_forward_length", u32_of(c.hidden_dim));
    set("llama.block_count", u32_of(c.n_layers));
    set("llama.attention.head_count", u32_of(c.n_heads));
    set("llama.attention.head_count_kv", u32_of(c.n_kv_heads));
    set("llama.context_length", u32_of(c.seq_len));
    set("llama.rope.dimension_count", u32_of(c.dim / c.n_heads));
    set("llama.rope.freq_base", Value::F32(10_000.0));
    set("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5));
    if let Some(gs) = c.group_size {
        // runq.c quantizes every matmul input to int8 in groups of `gs`.
        set(names::INT8_ACTIVATION_GROUPS, u32_of(gs));
    }
    vocab_metadata(&mut md, pieces, scores);

    let to_write: Vec<TensorToWrite> = tensors
        .list
        .iter()
        .map(|(name, dims, data)| TensorToWrite {
            name,
            dims,
            ty: GgmlType::F32,
            data,
        })
        .collect();
    let mut out = Vec::new();
    write_gguf(&mut out, 3, &md, &to_write).map_err(|e| Error::model(&source, e.to_string()))?;
    Ok(GgufFile::from_vec(model, out)?)
}
