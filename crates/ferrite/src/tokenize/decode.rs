//! From token ids back to text: the bytes each token stands for, whole-sequence
//! decoding, and a streaming decoder that only ever hands out whole UTF-8
//! characters.
//!
//! Mirrors `token_to_piece` and `detokenize` in llama.cpp's
//! `src/llama-vocab.cpp`: control and unknown tokens render as their text or
//! as nothing, normal SPM tokens turn `▁` back into spaces, normal BPE tokens
//! undo the GPT-2 byte mapping, `<0xNN>` tokens are single bytes, tokens of
//! other types (unused, undefined) are empty; the first token loses one
//! leading space when the vocabulary adds a space prefix; vocabularies with
//! `clean_spaces` get llama.cpp's three clean-up passes.

use super::bpe::char_to_byte_table;
use super::hf::{HfEngine, HfStream};
use super::vocab::{parse_byte_token, Algorithm, Attr, Vocab};
use super::Tokenizer;

/// The bytes of every token, with control tokens rendered as their text.
pub(crate) fn token_pieces(vocab: &Vocab) -> Vec<Box<[u8]>> {
    let byte_table = char_to_byte_table();
    vocab
        .texts
        .iter()
        .zip(&vocab.attrs)
        .map(|(text, &attr)| {
            let piece: Vec<u8> = if attr.any(Attr::UNKNOWN | Attr::CONTROL | Attr::USER_DEFINED) {
                text.as_bytes().to_vec()
            } else if attr.any(Attr::NORMAL) {
                match vocab.algorithm {
                    Algorithm::Spm => text.replace('\u{2581}', " ").into_bytes(),
                    Algorithm::Bpe(_) => byte_level_decode(text, &byte_table),
                    Algorithm::Hf => text.as_bytes().to_vec(),
                }
            } else if attr.any(Attr::BYTE) {
                parse_byte_token(text).map(|b| vec![b]).unwrap_or_default()
            } else {
                Vec::new()
            };
            piece.into_boxed_slice()
        })
        .collect()
}

/// Undoes the GPT-2 byte mapping; a character outside it is kept visible
/// the way llama.cpp shows it (`[UNK_BYTE_0x<utf8 hex><token text>]`).
fn byte_level_decode(text: &str, table: &[Option<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match table.get(c as usize).copied().flatten() {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

impl Tokenizer {
    /// The bytes of `ids`, as llama.cpp's `detokenize`: with `skip_special`,
    /// a leading BOS / trailing EOS that the vocabulary adds is dropped and
    /// control tokens render as nothing; without it they render as text.
    pub(crate) fn decode_bytes(&self, ids: &[u32], skip_special: bool) -> Vec<u8> {
        let v = &self.vocab;
        let mut ids = ids;
        let mut strip_space = v.add_space_prefix;
        if skip_special && v.add_bos && ids.first().is_some_and(|&id| Some(id) == v.special.bos) {
            strip_space = false;
            ids = &ids[1..];
        }
        if skip_special && v.add_eos && ids.last().is_some_and(|&id| Some(id) == v.special.eos) {
            ids = &ids[..ids.len() - 1];
        }
        let mut out = Vec::new();
        for &id in ids {
            out.extend_from_slice(self.piece(id, skip_special, strip_space));
            strip_space = false;
        }
        if v.clean_spaces {
            clean_spaces(&mut out);
        }
        out
    }

    /// One token's bytes as decoding emits them.
    fn piece(&self, id: u32, skip_special: bool, strip_space: bool) -> &[u8] {
        if skip_special && self.vocab.attr(id).any(Attr::CONTROL | Attr::UNKNOWN) {
            return &[];
        }
        let piece = self.token_bytes(id);
        match piece.split_first() {
            Some((b' ', rest)) if strip_space => rest,
            _ => piece,
        }
    }
}

/// llama.cpp's clean-up of decoded BPE text: no space before `?!.,`, a lone
/// `'` between spaces loses both spaces, no space before `'s`, `'m`, `'re`
/// and `'ve`. Each pass reads the previous pass's output.
fn clean_spaces(text: &mut Vec<u8>) {
    if text.is_empty() {
        return;
    }
    let t = std::mem::take(text);
    let mut out = vec![t[0]];
    for i in 1..t.len() {
        if t[i - 1] == b' ' && matches!(t[i], b'?' | b'!' | b'.' | b',') {
            out.pop();
        }
        out.push(t[i]);
    }

    let mut t = std::mem::take(&mut out);
    out.push(t[0]);
    let mut i = 1;
    while i < t.len() {
        let x = t[i];
        if x == b'\'' && i + 1 < t.len() && t[i - 1] == b' ' && t[i + 1] == b' ' {
            out.pop();
            // The space after is dropped, and is no longer a space for the
            // character that follows it.
            t[i + 1] = 0;
            out.push(x);
            i += 2;
            continue;
        }
        out.push(x);
        i += 1;
    }

    let t = std::mem::take(&mut out);
    out.push(t[0]);
    for i in 1..t.len() {
        let x = t[i];
        if t[i - 1] == b' ' && x == b'\'' && i + 1 < t.len() {
            let x1 = t[i + 1];
            let x2 = t.get(i + 2).copied();
            let joins = matches!(x1, b's' | b'm')
                || (i + 2 < t.len() && matches!((x1, x2), (b'r', Some(b'e')) | (b'v', Some(b'e'))));
            if joins {
                out.pop();
            }
        }
        out.push(x);
    }
    *text = out;
}

/// Turns a stream of token ids into text, one call per token, handing out
/// only whole UTF-8 characters: bytes of a character split across tokens
/// (byte-fallback tokens, byte-level BPE pieces) wait for the rest. Bytes
/// that can never form a character come out as U+FFFD. Gives the same text
/// as [`Tokenizer::decode`] on the whole sequence, except that it does not
/// apply `clean_spaces` and does not drop a trailing EOS. (A Hugging Face
/// `tokenizer.json` streams through `HfStream` instead.)
pub struct StreamDecoder<'t> {
    tokenizer: &'t Tokenizer,
    skip_special: bool,
    strip_space: bool,
    first: bool,
    pending: Vec<u8>,
    hf: Option<(&'t HfEngine, HfStream)>,
}

impl<'t> StreamDecoder<'t> {
    pub(crate) fn new(tokenizer: &'t Tokenizer, skip_special: bool) -> StreamDecoder<'t> {
        StreamDecoder {
            tokenizer,
            skip_special,
            strip_space: tokenizer.vocab.add_space_prefix,
            first: true,
            pending: Vec::new(),
            hf: None,
        }
    }

    pub(crate) fn hf(
        tokenizer: &'t Tokenizer,
        engine: &'t HfEngine,
        skip_special: bool,
    ) -> StreamDecoder<'t> {
        StreamDecoder {
            hf: Some((engine, HfStream::new(skip_special))),
            ..StreamDecoder::new(tokenizer, skip_special)
        }
    }

    /// The decoder for tokens that continue a sequence already under way
    /// (generated after a prompt): its first token keeps its leading space,
    /// as llama.cpp's `token_to_piece` prints each generated token.
    pub fn continuing(mut self) -> StreamDecoder<'t> {
        self.first = false;
        self.strip_space = false;
        self
    }

    /// Adds one token; returns the text that is now complete (maybe empty).
    pub fn push(&mut self, id: u32) -> String {
        if let Some((engine, stream)) = &mut self.hf {
            return stream.push(engine, id);
        }
        let v = &self.tokenizer.vocab;
        if std::mem::take(&mut self.first)
            && self.skip_special
            && v.add_bos
            && Some(id) == v.special.bos
        {
            self.strip_space = false;
            return String::new();
        }
        let piece = self
            .tokenizer
            .piece(id, self.skip_special, self.strip_space);
        self.strip_space = false;
        self.pending.extend_from_slice(piece);
        self.take_complete()
    }

    /// Ends the stream: whatever is left (an unfinished character) comes
    /// out as U+FFFD.
    pub fn finish(self) -> String {
        if let Some((engine, stream)) = self.hf {
            return stream.finish(engine);
        }
        String::from_utf8_lossy(&self.pending).into_owned()
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut pos = 0;
        loop {
            match std::str::from_utf8(&self.pending[pos..]) {
                Ok(s) => {
                    out.push_str(s);
                    pos = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // `valid` bytes from `pos` are UTF-8 by the error's word.
                    out.push_str(
                        std::str::from_utf8(&self.pending[pos..pos + valid]).unwrap_or_default(),
                    );
                    pos += valid;
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            pos += bad;
                        }
                        None => break,
                    }
                }
            }
        }
        self.pending.drain(..pos);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::clean_spaces;

    fn cleaned(s: &str) -> String {
        let mut v = s.as_bytes().to_vec();
        clean_spaces(&mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn clean_spaces_passes() {
        assert_eq!(cleaned("a , b ' c 's d 't"), "a, b'c's d 't");
        assert_eq!(
            cleaned("Hi ! Why ? Yes . we 're they 've I 'm it 'll"),
            "Hi! Why? Yes. we're they've I'm it 'll"
        );
        // After a lone apostrophe loses its spaces, the next character no
        // longer follows a space.
        assert_eq!(cleaned("x ' 's"), "x''s");
        assert_eq!(cleaned(""), "");
        assert_eq!(cleaned(" ."), ".");
    }
}
