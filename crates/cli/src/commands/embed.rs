//! `ferrite embed [MODEL] [FILE|-]`: one text per input line in, one
//! embedding per output line out (a JSON array of floats), in input order;
//! or all of them as one `.npy` matrix with `--format npy --output F`.

use crate::error::{CliError, CliResult};
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::PathBuf;

use ferrite::tools;
use ferrite::{EmbedOptions, Embedder, Embedding, Pooling, Products, Task};

use super::input;

/// The embedding model used when none is named.
pub const DEFAULT_EMBED_MODEL: &str = "minilm";

/// Inputs above which a progress bar is drawn (on a terminal).
const PROGRESS_MIN_INPUTS: usize = 256;

#[derive(clap::Args)]
pub struct Args {
    /// A model directory (sentence-transformers / HF) or GGUF file, or a
    /// short name (default: minilm).
    model: Option<String>,
    /// Texts, one per line; `-` or nothing reads stdin.
    input: Option<String>,
    #[command(flatten)]
    flags: Flags,
    /// Threads, 1 to 512 (default: one per core).
    #[arg(short = 't', long, value_parser = input::parse_threads, allow_negative_numbers = true)]
    threads: Option<usize>,
    /// Output format: json (one array per line) or npy.
    #[arg(long, default_value = "json")]
    format: String,
    /// Write to this file instead of stdout (required for npy).
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    #[command(flatten)]
    dump: super::common::DumpArgs,
}

/// The embedding options of `ferrite embed`.
#[derive(clap::Args)]
pub struct Flags {
    /// Keep only the first D dimensions (Matryoshka), re-normalized.
    /// nomic-embed-text: 64..768, layer-normalized before the cut as nomic
    /// does.
    #[arg(long)]
    dim: Option<usize>,
    /// Pooling: mean, cls or last (default: the model's own).
    #[arg(long)]
    pooling: Option<String>,
    /// Do not L2-normalize the embeddings.
    #[arg(long)]
    no_normalize: bool,
    /// Reject inputs longer than the maximum instead of cutting them (a
    /// cut input keeps its first tokens and its closing [SEP]).
    #[arg(long)]
    no_truncate: bool,
    /// Inputs per encoder call.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// nomic-embed-text's task prefix, put before every input: query
    /// ("search_query: "), document ("search_document: "), classification
    /// ("classification: ") or clustering ("clustering: "). Writing the
    /// prefix into the text yourself gives the same vector.
    #[arg(long)]
    task: Option<String>,
    /// Longest input in tokens, specials included (default: the model's
    /// sentence-transformers max_seq_length, else its trained length;
    /// nomic-embed-text GGUF: 2048, and up to 8192 with dynamic NTK RoPE
    /// scaling past 2048).
    #[arg(long)]
    max_tokens: Option<usize>,
    /// Multiply in bf16 (weights and layer inputs rounded to bf16, sums in
    /// f32) on CPUs with AVX512-BF16, or FEAT_BF16 on aarch64: faster, not
    /// the f32 results (cosine >= 0.9999 to them on MiniLM, mpnet and
    /// nomic-embed).
    #[arg(long, conflicts_with = "int8")]
    pub bf16: bool,
    /// Multiply in integers (weights rounded to int8 per output feature
    /// and 16 inputs at load, layer inputs to 16 bits per token, exact
    /// integer sums scaled in f32) on any CPU: not the f32 results
    /// (smallest cosine to them over the test corpus: 0.99968 MiniLM,
    /// 0.99960 mpnet, 0.99983 nomic-embed-text).
    #[arg(long)]
    pub int8: bool,
}

impl Flags {
    /// The products `--bf16` / `--int8` ask for.
    pub fn products(&self) -> Products {
        products(self.bf16, self.int8)
    }
}

/// The products of the options `--bf16` and `--int8` (which exclude each
/// other).
pub fn products(bf16: bool, int8: bool) -> Products {
    match (bf16, int8) {
        (true, _) => Products::Bf16,
        (_, true) => Products::Int8,
        _ => Products::F32,
    }
}

impl Flags {
    pub fn options(&self) -> CliResult<EmbedOptions> {
        let pooling = match &self.pooling {
            None => None,
            Some(p) => Some(Pooling::from_name(p).ok_or_else(|| {
                CliError::usage(format!("--pooling '{p}': expected mean, cls or last"))
            })?),
        };
        let task = match &self.task {
            None => None,
            Some(t) => Some(Task::from_name(t).ok_or_else(|| {
                let names: Vec<&str> = Task::ALL.iter().map(|t| t.name()).collect();
                CliError::usage(format!("--task '{t}': expected {}", names.join(", ")))
            })?),
        };
        Ok(EmbedOptions {
            pooling,
            normalize: !self.no_normalize,
            dim: self.dim,
            truncate: !self.no_truncate,
            batch_size: batch_size(self.batch_size)?,
            task,
            max_tokens: self.max_tokens,
        })
    }
}

/// The model-dependent flags (`--dim`, `--max-tokens`, `--task`) checked
/// against `embedder`, in the flags' names (the library's own errors name
/// its options).
pub fn check_flags(embedder: &Embedder, opts: &EmbedOptions) -> CliResult {
    if let Some(d) = opts.dim {
        let dims = embedder.dims();
        if !dims.contains(&d) {
            return Err(CliError::usage(format!(
                "--dim {d} is not in {}..={} for this model",
                dims.start(),
                dims.end()
            )));
        }
    }
    if let Some(m) = opts.max_tokens {
        if m < 3 || m > embedder.max_positions() {
            return Err(CliError::usage(format!(
                "--max-tokens {m} is not in 3..={} for this model",
                embedder.max_positions()
            )));
        }
    }
    if opts.task.is_some() && !embedder.has_task_prefixes() {
        return Err(CliError::usage(
            "--task: this model was not trained with task prefixes \
             (nomic-embed-text is); write any prefix into the text instead",
        ));
    }
    Ok(())
}

/// `--batch-size`, checked.
pub fn batch_size(n: usize) -> CliResult<usize> {
    if n == 0 {
        return Err(CliError::usage("--batch-size must be at least 1"));
    }
    Ok(n)
}

/// Loads an embedding model by path or short name, for `products`.
pub fn load(model: Option<&str>, products: Products) -> CliResult<Embedder> {
    input::refuse_text_file(model, "embed")?;
    let path = tools::resolve(model.unwrap_or(DEFAULT_EMBED_MODEL))?;
    let mut embedder = Embedder::open(&path)?;
    embedder.use_products(products)?;
    Ok(embedder)
}

/// Reads texts, one per line (`\n` or `\r\n` endings), from a file or `-`;
/// a line that is not UTF-8 is an error naming it, before any output.
pub fn read_lines(file: Option<&str>) -> CliResult<Vec<String>> {
    let source = file.unwrap_or("-");
    input::utf8_lines(input::input_name(source), &input::read_source(source)?)
}

pub fn run(args: Args) -> CliResult {
    let npy = match args.format.as_str() {
        "json" => false,
        "npy" => true,
        other => {
            return Err(CliError::usage(format!(
                "--format '{other}': expected json or npy"
            )))
        }
    };
    if npy && args.output.is_none() {
        return Err(CliError::usage("--format npy needs --output FILE"));
    }
    let opts = args.flags.options()?;
    let embedder = load(args.model.as_deref(), args.flags.products())?;
    check_flags(&embedder, &opts)?;
    let texts = read_lines(args.input.as_deref())?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let threads = input::threads(args.threads)?;

    let show_progress = texts.len() >= PROGRESS_MIN_INPUTS && io::stderr().is_terminal();
    let total = texts.len();
    let mut progress = |done: usize| {
        if show_progress {
            let width = 40;
            let filled = done * width / total.max(1);
            eprint!(
                "\r[{}{}] {done}/{total}",
                "#".repeat(filled),
                " ".repeat(width - filled)
            );
            if done == total {
                eprintln!();
            }
        }
    };
    let dump = args.dump.open()?;
    let embeddings = match &dump {
        Some(d) => embedder.embed_dumped(&refs, &opts, &threads, &mut progress, d.clone())?,
        None => embedder.embed_with_progress(&refs, &opts, &threads, &mut progress)?,
    };
    super::common::DumpArgs::report(dump.as_deref());
    let cut: Vec<usize> = embeddings
        .iter()
        .enumerate()
        .filter(|(_, e)| e.truncated)
        .map(|(i, _)| i + 1)
        .collect();
    input::warn_cut(
        &cut,
        opts.max_tokens.unwrap_or(embedder.tokenizer().max_tokens),
    );

    let result = match &args.output {
        Some(path) => {
            let file =
                std::fs::File::create(path).map_err(|e| CliError::write(path.display(), e))?;
            let mut w = BufWriter::new(file);
            let r = if npy {
                write_npy(&mut w, &embeddings)
            } else {
                write_json_lines(&mut w, &embeddings)
            };
            r.and_then(|()| w.flush())
                .map_err(|e| CliError::write(path.display(), e))
        }
        None => {
            let mut w = BufWriter::new(io::stdout().lock());
            super::output_result(write_json_lines(&mut w, &embeddings).and_then(|()| w.flush()))
        }
    };
    result
}

fn write_json_lines(w: &mut impl Write, embeddings: &[Embedding]) -> io::Result<()> {
    for e in embeddings {
        w.write_all(b"[")?;
        for (i, v) in e.vector.iter().enumerate() {
            if i > 0 {
                w.write_all(b",")?;
            }
            // Shortest text that reads back as the same f32.
            write!(w, "{v:?}")?;
        }
        w.write_all(b"]\n")?;
    }
    Ok(())
}

/// NumPy `.npy` (the library's writer): little-endian f32, shape (n, dim).
fn write_npy(w: &mut impl Write, embeddings: &[Embedding]) -> io::Result<()> {
    let dim = embeddings.first().map_or(0, |e| e.vector.len());
    let values: Vec<f32> = embeddings
        .iter()
        .flat_map(|e| e.vector.iter().copied())
        .collect();
    ferrite::tools::write_npy(w, &values, embeddings.len(), dim)
}
