//! `ferrite rerank MODEL --query Q [FILE...|-]`: documents one per line
//! in, ranked by a cross-encoder's score against the query out (best
//! first, ties by input order): as text (`score<TAB>index<TAB>document`
//! per line) or as one JSON object `{"results": [{"index": i, "score":
//! s}, ...]}`.

use std::io::{self, BufWriter, Write};

use ferrite::tools;
use ferrite::{Ranked, RerankOptions, Reranker};

use super::input;
use crate::error::{CliError, CliResult};

#[derive(clap::Args)]
pub struct Args {
    /// A cross-encoder directory (BertForSequenceClassification, as
    /// cross-encoder/ms-marco-MiniLM-L-6-v2), or a short name.
    model: String,
    /// The query the documents are scored against.
    #[arg(short = 'q', long)]
    query: String,
    /// Files of documents, one per line; `-` or nothing reads stdin.
    inputs: Vec<String>,
    /// Print only the N best documents.
    #[arg(long)]
    top_n: Option<usize>,
    /// The model's logits, without its activation (sigmoid for one label).
    #[arg(long)]
    raw_scores: bool,
    /// Output: text (score, index and document per line) or json.
    #[arg(long, default_value = "text")]
    format: String,
    /// Pairs per encoder call.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Threads, 1 to 512 (default: one per core).
    #[arg(short = 't', long, value_parser = input::parse_threads, allow_negative_numbers = true)]
    threads: Option<usize>,
}

pub fn run(args: Args) -> CliResult {
    let json = match args.format.as_str() {
        "text" => false,
        "json" => true,
        other => {
            return Err(CliError::usage(format!(
                "--format '{other}': expected text or json"
            )))
        }
    };
    if args.query.trim().is_empty() {
        return Err(CliError::usage("--query is empty"));
    }
    let batch_size = super::embed::batch_size(args.batch_size)?;
    input::refuse_text_file(Some(&args.model), "rerank")?;
    let model = Reranker::open(&tools::resolve(&args.model)?)?;
    let mut docs = Vec::new();
    let sources: Vec<&str> = if args.inputs.is_empty() {
        vec!["-"]
    } else {
        args.inputs.iter().map(String::as_str).collect()
    };
    for source in sources {
        docs.extend(input::utf8_lines(
            input::input_name(source),
            &input::read_source(source)?,
        )?);
    }
    let threads = input::threads(args.threads)?;
    let opts = RerankOptions {
        raw_scores: args.raw_scores,
        batch_size,
    };
    let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let pairs: Vec<(&str, &str)> = refs.iter().map(|d| (args.query.as_str(), *d)).collect();
    let tokens = pairs
        .iter()
        .enumerate()
        .map(|(i, (q, d))| {
            model.tokenize_pair(q, d).map_err(|e| {
                CliError::from(ferrite::Error::Input(format!("document {}: {e}", i + 1)))
            })
        })
        .collect::<CliResult<Vec<_>>>()?;
    let cut: Vec<usize> = (0..tokens.len())
        .filter(|&i| tokens[i].truncated)
        .map(|i| i + 1)
        .collect();
    input::warn_cut(&cut, model.max_tokens());
    let token_refs: Vec<&ferrite::PairTokens> = tokens.iter().collect();
    let scores = model.score_tokens(&token_refs, &opts, &threads)?;
    let ranked = model.ranking(&scores, args.top_n)?;
    let mut w = BufWriter::new(io::stdout().lock());
    let written = if json {
        write_json(&mut w, &ranked)
    } else {
        write_text(&mut w, &ranked, &refs)
    };
    super::output_result(written.and_then(|()| w.flush()))
}

/// `{"results":[{"index":i,"score":s},...]}` and a newline; each score
/// the shortest text that reads back as the same f32.
pub fn write_json(w: &mut impl Write, ranked: &[Ranked]) -> io::Result<()> {
    w.write_all(b"{\"results\":[")?;
    for (i, r) in ranked.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        write!(
            w,
            "{{\"index\":{},\"score\":{}}}",
            r.index,
            json_f32(r.score)
        )?;
    }
    w.write_all(b"]}\n")
}

/// An f32 as JSON: the shortest round-tripping text; NaN and the
/// infinities (which JSON has no numbers for) as `null`.
fn json_f32(v: f32) -> String {
    if v.is_finite() {
        format!("{v:?}")
    } else {
        "null".into()
    }
}

fn write_text(w: &mut impl Write, ranked: &[Ranked], docs: &[&str]) -> io::Result<()> {
    for r in ranked {
        writeln!(w, "{:.6}\t{}\t{}", r.score, r.index, docs[r.index])?;
    }
    Ok(())
}
