//! `ferrite tokenize MODEL [TEXT|-]`: token ids as one JSON array on one
//! line, formatted like `llama-tokenize --ids` (`[1, 2, 3]`), with the same
//! defaults: BOS/EOS added where the model asks for them, special-token
//! texts parsed.

use std::io::{self, Read, Write};

use ferrite::tokenize::Tokenizer;

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
    let path = ferrite::open::resolve(&args.model).map_err(|e| e.to_string())?;
    let file = match ferrite::open::find(&path, &Default::default()).map_err(|e| e.to_string())? {
        ferrite::open::Found::Generator(file) => file,
        other => {
            return Err(ferrite::open::wrong_kind(
                &path,
                other.kind(),
                ferrite::ModelKind::Generator,
            )
            .to_string())
        }
    };
    let tokenizer =
        Tokenizer::from_gguf(file.metadata()).map_err(|e| format!("{}: {e}", path.display()))?;
    let text = if args.text == "-" {
        let mut bytes = Vec::new();
        io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| format!("reading standard input: {e}"))?;
        String::from_utf8(bytes).map_err(|e| {
            format!(
                "standard input is not valid UTF-8 (bad byte at offset {})",
                e.utf8_error().valid_up_to()
            )
        })?
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
