//! `ferrite tokenize MODEL [TEXT|-]`: token ids as one JSON array on one
//! line, formatted like `llama-tokenize --ids` (`[1, 2, 3]`), with the same
//! defaults: BOS/EOS added where the model asks for them, special-token
//! texts parsed.

use crate::error::{CliError, CliResult};
use std::io::{self, Write};

use ferrite::tools::EmbedTokenizer;
use ferrite::tools::Tokenizer;
use ferrite::tools::{wrong_kind, Found};
use ferrite::ModelKind;

use super::input;

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file, a Hugging Face decoder or embedding directory, or a
    /// short name (smollm2, gemma3-270m, minilm, ...).
    model: String,
    /// The text; `-` reads standard input byte for byte.
    text: String,
    /// Treat special-token texts such as `<|im_start|>` as plain text.
    #[arg(long)]
    no_parse_special: bool,
    /// Print the tokens' text (one JSON array of strings) instead of ids.
    #[arg(long)]
    pieces: bool,
}

/// The ids (with the model's special tokens) and their texts of `text`
/// for an embedding model, whose tokenizer runs as `ferrite embed` runs it.
fn encoder_tokens(tok: &EmbedTokenizer, text: &str) -> Result<(Vec<u32>, Vec<String>), CliError> {
    let ids = tok.encode_untruncated(text)?;
    let pieces = ids
        .iter()
        .map(|&id| tok.token_text(id).unwrap_or_default())
        .collect();
    Ok((ids, pieces))
}

pub fn run(args: Args) -> CliResult {
    let path = ferrite::tools::resolve(&args.model)?;
    // What the model is: `ferrite::open`'s rules (a decoder may be a GGUF
    // file, a Hugging Face directory or a llama2.c checkpoint).
    let found = ferrite::tools::find(&path, &Default::default())?;
    let file = match found {
        Found::Generator(file) => file,
        Found::Embedder => {
            if args.no_parse_special {
                return Err(CliError::usage(format!(
                    "{}: --no-parse-special: an embedding model's tokenizer always reads its \
                     special tokens",
                    path.display()
                )));
            }
            let tok = EmbedTokenizer::of_model(&path)?;
            let (ids, pieces) = encoder_tokens(&tok, &read_text(args.text)?)?;
            return print_tokens(&ids, args.pieces.then_some(&pieces[..]));
        }
        other => {
            return Err(wrong_kind(&path, other.kind(), ModelKind::Generator).into());
        }
    };
    let tokenizer = Tokenizer::from_gguf(file.metadata())
        .map_err(|e| ferrite::Error::model(path.display().to_string(), e.to_string()))?;
    let text = read_text(args.text)?;
    let ids = tokenizer.encode(&text, tokenizer.adds_bos(), !args.no_parse_special);
    let pieces: Vec<String> = ids
        .iter()
        .map(|&id| String::from_utf8_lossy(tokenizer.token_bytes(id)).into_owned())
        .collect();
    print_tokens(&ids, args.pieces.then_some(&pieces[..]))
}

/// The text argument, or standard input byte for byte for `-` (no final
/// newline dropped).
fn read_text(text: String) -> CliResult<String> {
    if text == "-" {
        input::utf8_text(input::input_name("-"), input::read_source("-")?)
    } else {
        Ok(text)
    }
}

/// One JSON array on one line: the ids, or the pieces' texts if given.
fn print_tokens(ids: &[u32], pieces: Option<&[String]>) -> CliResult {
    let items: Vec<String> = match pieces {
        Some(p) => p
            .iter()
            .map(|t| serde_json::Value::String(t.clone()).to_string())
            .collect(),
        None => ids.iter().map(u32::to_string).collect(),
    };
    let mut out = io::stdout().lock();
    super::output_result(writeln!(out, "[{}]", items.join(", ")).and_then(|()| out.flush()))
}
