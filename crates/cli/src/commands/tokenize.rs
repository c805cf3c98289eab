//! `ferrite tokenize MODEL [TEXT|-]`: token ids as one JSON array.

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file or a short name (smollm2, gemma3-270m).
    model: String,
    /// The text; `-` reads standard input byte for byte.
    text: String,
}

pub fn run(args: Args) -> Result<(), String> {
    let _ = (args.model, args.text);
    Err("tokenize: not implemented yet".into())
}
