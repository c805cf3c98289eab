//! `ferrite tokenize MODEL [TEXT|-]`: token ids as one JSON array on one
//! line, formatted like `llama-tokenize --ids` (`[1, 2, 3]`), with the same
//! defaults: BOS/EOS added where the model asks for them, special-token
//! texts parsed.

use std::io::{self, Write};

use ferrite::formats::gguf::GgufFile;
use ferrite::formats::hf_decoder;
use ferrite::model_path;
use ferrite::tokenize::Tokenizer;

use super::input;

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file, a Hugging Face decoder directory, or a short name
    /// (smollm2, gemma3-270m).
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

pub fn run(args: Args) -> Result<(), String> {
    let path = model_path::resolve(&args.model)?;
    let file = if path.is_dir() {
        hf_decoder::open(&path).map_err(|e| e.to_string())?
    } else {
        GgufFile::open(&path).map_err(|e| e.to_string())?
    };
    let tokenizer =
        Tokenizer::from_gguf(file.metadata()).map_err(|e| format!("{}: {e}", path.display()))?;
    let text = if args.text == "-" {
        // Byte for byte: no final newline is dropped.
        input::utf8_text(input::input_name("-"), input::read_source("-")?)?
    } else {
        args.text
    };

    let ids = tokenizer.encode(&text, tokenizer.adds_bos(), !args.no_parse_special);
    let items: Vec<String> = if args.pieces {
        ids.iter()
            .map(|&id| {
                let piece = String::from_utf8_lossy(tokenizer.token_bytes(id));
                serde_json::Value::String(piece.into_owned()).to_string()
            })
            .collect()
    } else {
        ids.iter().map(u32::to_string).collect()
    };
    let mut out = io::stdout().lock();
    super::output_result(writeln!(out, "[{}]", items.join(", ")).and_then(|()| out.flush()))
}
