//! SentencePiece unigram models read from their `.model` protobuf files
//! (Marian's `source.spm` / `target.spm` are such files), encoding text to
//! pieces and decoding pieces to text as the `sentencepiece` library does.
//!
//! No maintained pure-Rust crate reads the model protobuf (the `tokenizers`
//! crate takes the pieces from Python's converter), so [`ModelProto`] is a
//! minimal reader of the few fields needed, checked as hostile input: every
//! length is bounded by the bytes left, nesting is one level deep, and the
//! piece count is capped. The pipeline around it:
//! - normalization by the model's precompiled character map
//!   (`tokenizers`' `Precompiled`, the same map `sentencepiece` uses),
//!   then `remove_extra_whitespaces` (strip, collapse runs of spaces),
//!   `add_dummy_prefix` (one leading space) and `escape_whitespaces`
//!   (space -> U+2581), as `normalizer.cc` does;
//! - the best segmentation by piece scores (Viterbi) with runs of unknown
//!   characters fused into one piece: `tokenizers`' `Unigram`, over the
//!   normal and user-defined pieces only (control pieces such as `</s>`
//!   never match text, as in `sentencepiece`).
//!
//! Reference: google/sentencepiece `src/sentencepiece_model.proto`,
//! `src/normalizer.cc`, `src/unigram_model.cc`,
//! `src/sentencepiece_processor.cc` (`Decode`).

use std::collections::HashMap;
use std::path::Path;

use tokenizers::models::unigram::Unigram;
use tokenizers::normalizers::precompiled::Precompiled;
use tokenizers::{NormalizedString, Normalizer};

use crate::Error;

/// What is wrong with a SentencePiece model's bytes (its file is named by
/// [`SentencePiece::open`]'s error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpmError(pub String);

impl std::fmt::Display for SpmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpmError {}

impl From<&str> for SpmError {
    fn from(s: &str) -> SpmError {
        SpmError(s.to_string())
    }
}

impl From<String> for SpmError {
    fn from(s: String) -> SpmError {
        SpmError(s)
    }
}

/// Largest `.model` file read (real ones are under 5 MB).
const MAX_FILE_BYTES: u64 = 64 << 20;
/// Most pieces a model may have.
const MAX_PIECES: usize = 1 << 21;
/// The piece that replaces a space.
pub const SPACE: char = '\u{2581}';
/// What `sentencepiece` decodes an unknown piece to (its default
/// `unk_surface`).
const UNK_SURFACE: &str = " \u{2047} ";

/// `SentencePiece.Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PieceType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl PieceType {
    fn from_proto(v: u64) -> Option<PieceType> {
        Some(match v {
            1 => PieceType::Normal,
            2 => PieceType::Unknown,
            3 => PieceType::Control,
            4 => PieceType::UserDefined,
            5 => PieceType::Unused,
            6 => PieceType::Byte,
            _ => return None,
        })
    }
}

/// One `SentencePiece` entry.
#[derive(Clone, Debug)]
pub struct Piece {
    pub text: String,
    pub score: f32,
    pub kind: PieceType,
}

/// The fields of `ModelProto` this reader keeps.
#[derive(Clone, Debug)]
pub struct ModelProto {
    pub pieces: Vec<Piece>,
    /// `TrainerSpec.model_type`: 1 unigram, 2 BPE, 3 word, 4 char.
    pub model_type: u64,
    pub byte_fallback: bool,
    /// `NormalizerSpec.precompiled_charsmap` (empty: no normalization).
    pub charsmap: Vec<u8>,
    pub add_dummy_prefix: bool,
    pub remove_extra_whitespaces: bool,
    pub escape_whitespaces: bool,
}

/// A protobuf field's value: varints and fixed32 as numbers, the rest as
/// the bytes they hold.
enum Field<'a> {
    Varint(u64),
    Fixed32(u32),
    Fixed64,
    Bytes(&'a [u8]),
}

/// Reads the fields of one protobuf message, in order.
struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    fn varint(&mut self) -> Result<u64, SpmError> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&b, rest) = self.rest.split_first().ok_or("truncated varint")?;
            self.rest = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], SpmError> {
        let n = usize::try_from(n).map_err(|_| "length too large")?;
        if n > self.rest.len() {
            return Err(SpmError::from(format!(
                "field of {n} bytes runs past the end ({} left)",
                self.rest.len()
            )));
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    /// The next `(field number, value)`, or None at the end.
    fn next_field(&mut self) -> Result<Option<(u64, Field<'a>)>, SpmError> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let (number, wire) = (key >> 3, key & 7);
        let value = match wire {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Field::Fixed64
            }
            2 => {
                let n = self.varint()?;
                Field::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                Field::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            w => {
                return Err(SpmError::from(format!(
                    "field {number}: unsupported wire type {w}"
                )))
            }
        };
        Ok(Some((number, value)))
    }
}

fn fields(bytes: &[u8]) -> Fields<'_> {
    Fields { rest: bytes }
}

fn text(b: &[u8], what: &str) -> Result<String, SpmError> {
    String::from_utf8(b.to_vec()).map_err(|_| SpmError(format!("{what} is not UTF-8")))
}

impl ModelProto {
    /// Parses a serialized `ModelProto`.
    pub fn parse(bytes: &[u8]) -> Result<ModelProto, SpmError> {
        let mut m = ModelProto {
            pieces: Vec::new(),
            model_type: 1,
            byte_fallback: false,
            charsmap: Vec::new(),
            add_dummy_prefix: true,
            remove_extra_whitespaces: true,
            escape_whitespaces: true,
        };
        let mut top = fields(bytes);
        while let Some((number, value)) = top.next_field()? {
            match (number, value) {
                (1, Field::Bytes(b)) => {
                    if m.pieces.len() >= MAX_PIECES {
                        return Err(SpmError::from(format!("more than {MAX_PIECES} pieces")));
                    }
                    m.pieces.push(parse_piece(b, m.pieces.len())?);
                }
                (2, Field::Bytes(b)) => m.parse_trainer(b)?,
                (3, Field::Bytes(b)) => m.parse_normalizer(b)?,
                (1..=3, _) => {
                    return Err(SpmError::from(format!(
                        "field {number} has the wrong wire type"
                    )))
                }
                _ => {}
            }
        }
        if m.pieces.is_empty() {
            return Err("no pieces".into());
        }
        Ok(m)
    }

    fn parse_trainer(&mut self, b: &[u8]) -> Result<(), SpmError> {
        let mut f = fields(b);
        while let Some((number, value)) = f.next_field()? {
            match (number, value) {
                (3, Field::Varint(v)) => self.model_type = v,
                (35, Field::Varint(v)) => self.byte_fallback = v != 0,
                _ => {}
            }
        }
        Ok(())
    }

    fn parse_normalizer(&mut self, b: &[u8]) -> Result<(), SpmError> {
        let mut f = fields(b);
        while let Some((number, value)) = f.next_field()? {
            match (number, value) {
                (2, Field::Bytes(map)) => self.charsmap = map.to_vec(),
                (3, Field::Varint(v)) => self.add_dummy_prefix = v != 0,
                (4, Field::Varint(v)) => self.remove_extra_whitespaces = v != 0,
                (5, Field::Varint(v)) => self.escape_whitespaces = v != 0,
                _ => {}
            }
        }
        Ok(())
    }
}

fn parse_piece(b: &[u8], index: usize) -> Result<Piece, SpmError> {
    let mut piece = Piece {
        text: String::new(),
        score: 0.0,
        kind: PieceType::Normal,
    };
    let mut f = fields(b);
    while let Some((number, value)) = f.next_field()? {
        match (number, value) {
            (1, Field::Bytes(t)) => piece.text = text(t, &format!("piece {index}"))?,
            (2, Field::Fixed32(s)) => piece.score = f32::from_bits(s),
            (3, Field::Varint(t)) => {
                piece.kind = PieceType::from_proto(t)
                    .ok_or_else(|| format!("piece {index}: unknown type {t}"))?
            }
            (1..=3, _) => {
                return Err(SpmError::from(format!(
                    "piece {index}: field {number} has the wrong wire type"
                )))
            }
            _ => {}
        }
    }
    if !piece.score.is_finite() {
        return Err(SpmError::from(format!(
            "piece {index}: score is not finite"
        )));
    }
    Ok(piece)
}

/// A SentencePiece unigram model ready to encode and decode.
pub struct SentencePiece {
    proto: ModelProto,
    normalizer: Option<Precompiled>,
    unigram: Unigram,
    /// Piece text -> index in the model.
    index: HashMap<String, usize>,
}

impl SentencePiece {
    /// Reads a `.model` / `.spm` file.
    pub fn open(path: &Path) -> Result<SentencePiece, Error> {
        let shown = path.display().to_string();
        let bad = |p: String| Error::model(&shown, p);
        let len = std::fs::metadata(path)
            .map_err(|e| bad(e.to_string()))?
            .len();
        if len > MAX_FILE_BYTES {
            return Err(bad(format!(
                "{len} bytes is too large for a SentencePiece model"
            )));
        }
        let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        let proto = ModelProto::parse(&bytes)
            .map_err(|e| bad(format!("not a SentencePiece model: {e}")))?;
        SentencePiece::new(proto).map_err(|e| bad(e.0))
    }

    pub fn new(proto: ModelProto) -> Result<SentencePiece, SpmError> {
        if proto.model_type != 1 {
            return Err(SpmError::from(format!(
                "model type {} is not supported (only unigram, type 1)",
                proto.model_type
            )));
        }
        if proto.byte_fallback {
            return Err("byte fallback is not supported".into());
        }
        let normalizer = if proto.charsmap.is_empty() {
            None
        } else {
            Some(
                Precompiled::from(&proto.charsmap)
                    .map_err(|e| format!("bad precompiled_charsmap: {e}"))?,
            )
        };
        // The lattice holds the pieces that can match text; the unknown
        // piece is there for unknown characters only (its score is not
        // used: `Unigram` scores unknowns as `sentencepiece` does).
        let mut vocab = Vec::new();
        let mut unk = None;
        for p in &proto.pieces {
            match p.kind {
                PieceType::Normal | PieceType::UserDefined => {
                    vocab.push((p.text.clone(), f64::from(p.score)))
                }
                PieceType::Unknown => {
                    unk = Some(vocab.len());
                    vocab.push((p.text.clone(), 0.0));
                }
                _ => {}
            }
        }
        let unk = unk.ok_or("the model has no unknown piece")?;
        let unigram =
            Unigram::from(vocab, Some(unk), false).map_err(|e| format!("bad pieces: {e}"))?;
        let index = proto
            .pieces
            .iter()
            .enumerate()
            .map(|(i, p)| (p.text.clone(), i))
            .collect();
        Ok(SentencePiece {
            proto,
            normalizer,
            unigram,
            index,
        })
    }

    /// The text the segmentation runs on: normalized, spaces handled and
    /// escaped.
    pub fn normalize(&self, text: &str) -> Result<String, Error> {
        let mut s = NormalizedString::from(text);
        if let Some(n) = &self.normalizer {
            n.normalize(&mut s)
                .map_err(|e| Error::Input(format!("normalization failed: {e}")))?;
        }
        let mut out = String::with_capacity(s.get().len() + 3);
        let p = &self.proto;
        let mut body = s.get();
        if p.remove_extra_whitespaces {
            body = body.trim_matches(' ');
        }
        if body.is_empty() {
            return Ok(out);
        }
        let space = if p.escape_whitespaces { SPACE } else { ' ' };
        if p.add_dummy_prefix {
            out.push(space);
        }
        let mut last_space = false;
        for c in body.chars() {
            if c == ' ' {
                if p.remove_extra_whitespaces && last_space {
                    continue;
                }
                out.push(space);
                last_space = true;
            } else {
                out.push(c);
                last_space = false;
            }
        }
        Ok(out)
    }

    /// The pieces of `text` (unknown characters as their own text).
    pub fn encode(&self, text: &str) -> Result<Vec<String>, Error> {
        let normalized = self.normalize(text)?;
        if normalized.is_empty() {
            return Ok(Vec::new());
        }
        self.unigram
            .encode(&normalized)
            .map_err(|e| Error::Input(format!("segmentation failed: {e}")))
    }

    /// Pieces back to text: pieces joined, U+2581 turned back into spaces,
    /// the dummy prefix's space dropped, control pieces dropped, the
    /// unknown piece itself shown as " ⁇ " (a piece the model does not have
    /// is kept as its text, as `DecodePieces` does).
    pub fn decode<'a>(&self, pieces: impl IntoIterator<Item = &'a str>) -> String {
        let mut out = String::new();
        for piece in pieces {
            match self.index.get(piece).map(|&i| self.proto.pieces[i].kind) {
                Some(PieceType::Control) => continue,
                Some(PieceType::Unknown) => out.push_str(UNK_SURFACE),
                _ => {
                    for c in piece.chars() {
                        out.push(if c == SPACE { ' ' } else { c });
                    }
                }
            }
        }
        if self.proto.add_dummy_prefix {
            if let Some(rest) = out.strip_prefix(' ') {
                return rest.to_string();
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_protobufs_are_errors() {
        // Truncated varint, length past the end, wrong wire type, empty.
        for bytes in [
            &[0x0a, 0x80][..],
            &[0x0a, 0x05, 0x01],
            &[0x08, 0x01],
            &[],
            &[0x0b],
        ] {
            assert!(ModelProto::parse(bytes).is_err(), "{bytes:?}");
        }
    }

    #[test]
    fn pieces_and_flags_are_read() {
        // pieces { piece: "a" score: -1.0 }, normalizer { add_dummy_prefix: false }
        let mut b = vec![0x0a, 0x08, 0x0a, 0x01, b'a', 0x15];
        b.extend_from_slice(&(-1.0f32).to_le_bytes());
        b.extend_from_slice(&[0x1a, 0x02, 0x18, 0x00]);
        let m = ModelProto::parse(&b).unwrap();
        assert_eq!(m.pieces.len(), 1);
        assert_eq!(m.pieces[0].text, "a");
        assert_eq!(m.pieces[0].score, -1.0);
        assert!(!m.add_dummy_prefix && m.remove_extra_whitespaces);
    }
}
