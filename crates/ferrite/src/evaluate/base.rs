//! The base-logits file of a KL-divergence run, in the layout llama.cpp's
//! `llama-perplexity --kl-divergence-base FILE` writes and reads, so a
//! base saved by either program can be compared against by the other.
//!
//! All little-endian:
//!
//! | bytes | what |
//! |---|---|
//! | 8 | `_logits_` |
//! | 4 | `n_ctx` (u32) |
//! | 4 | `n_vocab` (i32) |
//! | 4 | `n_chunk` (i32) |
//! | 4 × n_ctx × n_chunk | the evaluated tokens (i32) |
//! | then, per chunk, per scored position | one row of `nv = 2 * ((n_vocab + 1) / 2) + 4` u16 |
//!
//! A row is the position's log-probabilities, quantized: its first 4 u16
//! hold two f32, `scale` and `min_log_prob`; then token `i`'s log-probability
//! is `scale * q[i] + min_log_prob`, with `q[i] = round((logit_i - lo) /
//! scale)` for logits above `lo = max(min logit, max logit - 16)` and 0
//! below (probabilities under e^-16 are treated as that), `scale = (max
//! logit - lo) / 65535`.

use std::io::{Read, Write};

use super::Chunking;
use crate::Error;

const MAGIC: &[u8; 8] = b"_logits_";

/// u16 values per row for a vocabulary of `n_vocab` tokens.
pub fn row_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// One position's logits as a base-file row (see the module notes).
pub fn quantize_row(logits: &[f32]) -> Vec<u16> {
    let n = logits.len();
    let mut out = vec![0u16; row_len(n)];
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let min = logits.iter().copied().fold(f32::INFINITY, f32::min);
    let lo = min.max(max - 16.0);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    let log_sum = sum.ln() as f32;
    let min_log_prob = lo - max - log_sum;
    let scale = (max - lo) / 65535.0;
    out[0..2].copy_from_slice(&halves(scale));
    out[2..4].copy_from_slice(&halves(min_log_prob));
    if scale > 0.0 {
        let inv = 1.0 / scale;
        for (q, &l) in out[4..].iter_mut().zip(logits) {
            if l > lo {
                *q = (inv * (l - lo)).round_ties_even().clamp(0.0, 65535.0) as u16;
            }
        }
    }
    out
}

/// A base row's log-probabilities: `(scale, min_log_prob, q)`.
pub fn row_parts(row: &[u16]) -> (f32, f32, &[u16]) {
    let f = |a: u16, b: u16| f32::from_bits(u32::from(a) | u32::from(b) << 16);
    (f(row[0], row[1]), f(row[2], row[3]), &row[4..])
}

fn halves(x: f32) -> [u16; 2] {
    let b = x.to_bits();
    [b as u16, (b >> 16) as u16]
}

/// Writes a base file: [`BaseWriter::header`] once, then
/// [`BaseWriter::row`] per scored position in order.
pub struct BaseWriter<'a> {
    out: Box<dyn Write + 'a>,
    name: String,
}

impl<'a> BaseWriter<'a> {
    /// A writer to `out`, named `name` in errors.
    pub fn new(out: impl Write + 'a, name: impl Into<String>) -> Self {
        BaseWriter {
            out: Box::new(out),
            name: name.into(),
        }
    }

    /// Flushes what is buffered (call it at the end).
    pub fn finish(mut self) -> Result<(), Error> {
        self.out.flush().map_err(|e| Error::io(self.name.clone(), e))
    }

    /// The header and the evaluated tokens.
    pub fn header(&mut self, chunks: &Chunking, n_vocab: usize, tokens: &[u32]) -> Result<(), Error> {
        let mut head = Vec::with_capacity(20 + 4 * tokens.len());
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&(chunks.n_ctx as u32).to_le_bytes());
        head.extend_from_slice(&(n_vocab as i32).to_le_bytes());
        head.extend_from_slice(&(chunks.n_chunk as i32).to_le_bytes());
        for &t in tokens {
            head.extend_from_slice(&t.to_le_bytes());
        }
        self.write(&head)
    }

    /// One scored position's row.
    pub fn row(&mut self, row: &[u16]) -> Result<(), Error> {
        let bytes: Vec<u8> = row.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.write(&bytes)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.out.write_all(bytes).map_err(|e| Error::io(self.name.clone(), e))
    }
}

/// A base file opened for reading: its header checked against the file's
/// length before anything is allocated, then rows chunk by chunk.
pub struct BaseReader<R: Read> {
    input: R,
    name: String,
    /// How the base's tokens were cut into chunks.
    pub chunks: Chunking,
    /// The base model's vocabulary size.
    pub n_vocab: usize,
    /// The evaluated tokens, `n_ctx * n_chunk`.
    pub tokens: Vec<u32>,
}

impl<R: Read> BaseReader<R> {
    /// Reads and checks the header of a base file of `len` bytes.
    pub fn open(mut input: R, len: u64, name: impl Into<String>) -> Result<Self, Error> {
        let name = name.into();
        let bad = |what: String| Error::Input(format!("{name}: not a KL-divergence base file: {what}"));
        let mut head = [0u8; 20];
        input
            .read_exact(&mut head)
            .map_err(|_| bad("shorter than its 20-byte header".into()))?;
        if &head[..8] != MAGIC {
            return Err(bad("it does not start with `_logits_`".into()));
        }
        let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
        let (n_ctx, n_vocab, n_chunk) = (word(8) as u64, word(12) as i32, word(16) as i32);
        if n_ctx < 4 || n_vocab <= 0 || n_chunk <= 0 {
            return Err(bad(format!("n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunk}")));
        }
        let (n_vocab, n_chunk) = (n_vocab as u64, n_chunk as u64);
        let scored = n_ctx - 1 - n_ctx / 2;
        let expected = n_ctx
            .checked_mul(n_chunk)
            .and_then(|t| t.checked_mul(4))
            .and_then(|t| {
                let rows = scored.checked_mul(n_chunk)?.checked_mul(row_len(n_vocab as usize) as u64)?;
                t.checked_add(rows.checked_mul(2)?)?.checked_add(20)
            });
        if expected != Some(len) {
            return Err(bad(format!(
                "its header (n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunk}) needs {} bytes, \
                 the file has {len}",
                expected.map_or("more than 2^64".to_string(), |e| e.to_string())
            )));
        }
        let mut raw = vec![0u8; (n_ctx * n_chunk * 4) as usize];
        input
            .read_exact(&mut raw)
            .map_err(|e| Error::io(name.clone(), e))?;
        let tokens = raw
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        Ok(BaseReader {
            input,
            name,
            chunks: Chunking {
                n_ctx: n_ctx as usize,
                n_chunk: n_chunk as usize,
            },
            n_vocab: n_vocab as usize,
            tokens,
        })
    }

    /// The next chunk's rows, `chunks.scored()` of `row_len` values.
    pub fn chunk_rows(&mut self) -> Result<Vec<u16>, Error> {
        let n = self.chunks.scored() * row_len(self.n_vocab);
        let mut raw = vec![0u8; 2 * n];
        self.input
            .read_exact(&mut raw)
            .map_err(|e| Error::io(self.name.clone(), e))?;
        Ok(raw
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect())
    }
}
