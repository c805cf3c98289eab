//! Fuzzes ferrite's `tokenizer.json` loading: the input (UTF-8, lossily)
//! is a whole `tokenizer.json` carried as GGUF metadata, as an HF model
//! directory's is. Loading must succeed or fail with an error, never panic
//! or take long (the `tokenizers` crate's added-token automaton was
//! quadratic in a token's length); a loaded tokenizer then encodes and
//! decodes a short text.

#![no_main]

use ferrite::formats::gguf::{Metadata, Value};
use ferrite::tokenize::{Tokenizer, KEY_HF_JSON};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // ferrite catches a panic of the `tokenizers` crate on odd input and
    // turns it into an error; libFuzzer's panic hook would abort at the
    // panic itself, so the default hook is put back. A panic that escapes
    // to the harness still fails the input.
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| drop(std::panic::take_hook()));
    let mut md = Metadata::default();
    md.set(
        KEY_HF_JSON.to_string(),
        Value::String(String::from_utf8_lossy(data).into_owned()),
    );
    let Ok(tok) = Tokenizer::from_gguf(&md) else {
        return;
    };
    let ids = tok.encode("Hello world, <|im_end|> 42!", true, true);
    let _ = tok.decode(&ids, false);
});
