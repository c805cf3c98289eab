//! Handing a Hugging Face `tokenizer.json` to the `tokenizers` crate, after
//! the checks the crate does not make.
//!
//! Every model directory can carry a `tokenizer.json`, so its contents are
//! untrusted. The crate builds an Aho-Corasick automaton over the added
//! tokens' texts in time quadratic in the length of a repetitive one
//! (`"x" * 8000` took 5.6 s to load, `"x" * 50000` over a minute; 0.22.2,
//! the newest stable release), so an added token longer than
//! [`MAX_ADDED_TOKEN_BYTES`] is refused before the crate sees the file.
//! Real added tokens (`<|im_start|>`, `<|reserved_special_token_250|>`,
//! runs of spaces for code models) are at most a few dozen bytes.

use std::path::Path;

use serde::Deserialize;
use tokenizers::Tokenizer as HfTokenizer;

/// Longest added token (in bytes of its `content`) a `tokenizer.json` may
/// hold.
pub const MAX_ADDED_TOKEN_BYTES: usize = 1024;

/// Parses the text of a `tokenizer.json`. The error says what is wrong,
/// without the file's name.
pub fn parse_hf_json(text: &str) -> Result<HfTokenizer, String> {
    // The crate panics on some text that is not JSON (its decoder section
    // is read with `expect`: the fuzz target `tokenizer_json` found
    // `{"decoder" :\u{fffd}`), so the syntax is checked here first.
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map_err(|e| format!("invalid tokenizer.json: {e}"))?;
    check_added_tokens(text)?;
    // Well-formed JSON can still reach an `expect` in the crate (its
    // normalizers read a precompiled charsmap that way): a panic there is
    // this file's error, not the caller's crash.
    std::panic::catch_unwind(|| text.parse::<HfTokenizer>())
        .map_err(|_| "invalid tokenizer.json: the tokenizers crate could not read it".to_string())?
        .map_err(|e| format!("invalid tokenizer.json: {e}"))
}

/// Reads and parses the `tokenizer.json` at `path` ([`parse_hf_json`]).
pub fn read_hf_json(path: &Path) -> Result<HfTokenizer, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    parse_hf_json(&text)
}

/// Fails when an added token is longer than [`MAX_ADDED_TOKEN_BYTES`].
/// Text that is not JSON of the expected shape passes: the crate's own
/// parse then reports it.
fn check_added_tokens(text: &str) -> Result<(), String> {
    /// The part of `tokenizer.json` checked here; the rest is skipped.
    #[derive(Deserialize)]
    struct Added {
        #[serde(default)]
        added_tokens: Vec<Token>,
    }
    #[derive(Deserialize)]
    struct Token {
        #[serde(default)]
        id: Option<u64>,
        content: String,
    }
    let Ok(added) = serde_json::from_str::<Added>(text) else {
        return Ok(());
    };
    match added
        .added_tokens
        .iter()
        .find(|t| t.content.len() > MAX_ADDED_TOKEN_BYTES)
    {
        None => Ok(()),
        Some(t) => Err(format!(
            "added token{} is {} bytes long, more than the {MAX_ADDED_TOKEN_BYTES} a token \
             may have (it starts {:?})",
            t.id.map(|id| format!(" {id}")).unwrap_or_default(),
            t.content.len(),
            t.content.chars().take(16).collect::<String>(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A WordLevel `tokenizer.json` with a small vocabulary and one added
    /// token of `content`.
    fn tokenizer_json(content: &str) -> String {
        serde_json::json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": [{
                "id": 3, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true
            }],
            "normalizer": null,
            "pre_tokenizer": {"type": "Whitespace"},
            "post_processor": null,
            "decoder": null,
            "model": {
                "type": "WordLevel",
                "vocab": {"[UNK]": 0, "a": 1, "b": 2},
                "unk_token": "[UNK]"
            }
        })
        .to_string()
    }

    /// Issue 44: a 50,000-byte repetitive added token took the crate over
    /// a minute to load; it is refused before the crate builds anything.
    #[test]
    fn long_added_tokens_are_refused() {
        let err = parse_hf_json(&tokenizer_json(&"x".repeat(50_000)))
            .map(|_| ()).expect_err("refused");
        assert!(err.contains("added token 3 is 50000 bytes long"), "{err}");
        let at_limit = parse_hf_json(&tokenizer_json(&"x".repeat(MAX_ADDED_TOKEN_BYTES)));
        assert!(at_limit.is_ok());
    }

    #[test]
    fn ordinary_files_load_and_bad_ones_keep_the_crates_error() {
        let tok = parse_hf_json(&tokenizer_json("<|im_end|>")).unwrap();
        assert_eq!(tok.token_to_id("<|im_end|>"), Some(3));
        let err = parse_hf_json("{\"added_tokens\": 5}").err().unwrap();
        assert!(err.starts_with("invalid tokenizer.json"), "{err}");
    }

    /// Found by the `tokenizer_json` fuzz target: a `decoder` key followed
    /// by text that is not JSON made the crate panic (`expect("Helper")`).
    #[test]
    fn text_that_is_not_json_is_an_error_not_a_panic() {
        for text in ["{\"decoder\" :\u{fffd}         ", "{\"decoder\": }", "{\"model\": {"] {
            let err = parse_hf_json(text).err().unwrap();
            assert!(err.starts_with("invalid tokenizer.json"), "{text}: {err}");
        }
    }
}
