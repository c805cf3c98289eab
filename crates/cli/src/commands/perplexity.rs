//! `ferrite perplexity MODEL -f TEXT`: the model's perplexity on a text,
//! chunked and scored as llama.cpp's `llama-perplexity` does (see
//! `ferrite::tools::perplexity`), printed as it prints it: `[1]p1,[2]p2,...`
//! as the chunks finish, then `Final estimate: PPL = ... +/- ...`.
//!
//! KL divergence, as `llama-perplexity`: `--kl-divergence-base FILE -f
//! TEXT` also saves every scored position's distribution to FILE (the
//! base, usually from the unquantized model); `--kl-divergence-base FILE
//! --kl-divergence` then compares another model with it (the text and the
//! chunking are the file's) and prints llama-perplexity's table and
//! statistics. The file is llama.cpp's format: either program reads the
//! other's.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};

use crate::error::{CliError, CliResult};
use ferrite::tools::{
    kl_divergence, mean_and_uncertainty, median, percentile, perplexity, text_tokens, BaseReader,
    BaseWriter, KldReport, KldStats, NllStats, PerplexityOptions,
};

use super::common::load;
use super::input;

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file, Hugging Face decoder directory or short name.
    model: String,
    /// The text to score (`-` reads standard input).
    #[arg(short = 'f', long = "file")]
    file: Option<String>,
    /// Tokens per chunk (llama-perplexity's default).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    ctx: usize,
    /// Score at most this many chunks.
    #[arg(long)]
    chunks: Option<usize>,
    /// Threads, 1 to 512 (default: one per core).
    #[arg(short = 't', long, value_parser = input::parse_threads, allow_negative_numbers = true)]
    threads: Option<usize>,
    /// The base-logits file: written with -f, read with --kl-divergence.
    #[arg(long = "kl-divergence-base")]
    kl_divergence_base: Option<String>,
    /// Compare the model with the base file instead of reading a text.
    #[arg(long = "kl-divergence", requires = "kl_divergence_base")]
    kl_divergence: bool,
}

pub fn run(args: Args) -> CliResult {
    let generator = load(Some(&args.model))?;
    let opts = PerplexityOptions {
        n_ctx: args.ctx,
        max_chunks: args.chunks,
        threads: input::threads(args.threads)?,
    };
    if args.kl_divergence {
        if args.file.is_some() {
            return Err(CliError::usage(
                "--kl-divergence reads its tokens from the base file; leave out -f".to_string(),
            ));
        }
        let path = args.kl_divergence_base.expect("clap requires it");
        return run_kld(&generator, &path, &opts);
    }
    let source = args
        .file
        .ok_or_else(|| CliError::usage("-f TEXT: the text to score".to_string()))?;
    let text = input::utf8_text(input::input_name(&source), input::read_source(&source)?)?;
    let tok = generator.tokenizer();
    let tokens = text_tokens(tok, &text);
    eprintln!(
        "perplexity: {} tokens, chunks of {} (scoring the second half of each), {} thread(s)",
        tokens.len(),
        opts.n_ctx,
        opts.threads.count()
    );
    let mut base = match &args.kl_divergence_base {
        Some(path) => {
            let f = File::create(path).map_err(|e| CliError::write(path, e))?;
            Some(BaseWriter::new(BufWriter::new(f), path.clone()))
        }
        None => None,
    };
    let mut out = io::stdout().lock();
    let stats = perplexity(
        generator.model(),
        tok,
        &tokens,
        &opts,
        base.as_mut(),
        |i, s| {
            let _ = write!(out, "[{}]{:.4},", i + 1, s.perplexity());
            let _ = out.flush();
        },
    )?;
    if let Some(b) = base {
        b.finish()?;
    }
    final_estimate(&mut out, &stats)
}

fn final_estimate(out: &mut impl Write, s: &NllStats) -> CliResult {
    let line = match s.uncertainty() {
        Some(u) => format!(
            "\nFinal estimate: PPL = {:.4} +/- {:.5}\n",
            s.perplexity(),
            u
        ),
        None => format!("\nFinal estimate: PPL = {:.4}\n", s.perplexity()),
    };
    super::output_result(out.write_all(line.as_bytes()))
}

fn run_kld(generator: &ferrite::Generator, path: &str, opts: &PerplexityOptions) -> CliResult {
    let f = File::open(path).map_err(|e| CliError::read(path, e))?;
    let len = f.metadata().map_err(|e| CliError::read(path, e))?.len();
    let mut base = BaseReader::open(BufReader::new(f), len, path)?;
    eprintln!(
        "kl-divergence: {} chunks of {} tokens from {path}, {} thread(s)",
        base.chunks.n_chunk,
        base.chunks.n_ctx,
        opts.threads.count()
    );
    let mut out = io::stdout().lock();
    let _ = writeln!(
        out,
        "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p"
    );
    let report = kl_divergence(
        generator.model(),
        generator.tokenizer(),
        &mut base,
        opts,
        |i, s| {
            let _ = writeln!(out, "{}", chunk_line(i, s));
            let _ = out.flush();
        },
    )?;
    super::output_result(out.write_all(summary(&report).as_bytes()))
}

/// One row of the running table, as llama-perplexity prints it.
fn chunk_line(i: usize, s: &KldStats) -> String {
    let (lp, lpe) = s.log_ppl();
    let ppl = lp.exp();
    let (ratio, ratio_e) = s.log_ppl_ratio();
    let (kld, kld_e) = s.kld();
    let (rms, rms_e) = s.p_diff_rms();
    let (top, top_e) = s.same_top();
    format!(
        "{:4}    {:9.4} ± {:9.4}    {:10.5} ± {:10.5}    {:10.5} ± {:10.5}    {:6.3} ± {:6.3} %    {:6.3} ± {:6.3} %",
        i + 1,
        ppl,
        ppl * lpe,
        ratio,
        ratio_e,
        kld,
        kld_e,
        100.0 * rms,
        100.0 * rms_e,
        100.0 * top,
        100.0 * top_e
    )
}

/// The closing statistics, as llama-perplexity prints them (none under
/// 100 positions, as there).
fn summary(r: &KldReport) -> String {
    let s = &r.stats;
    if s.count < 100 {
        return "\n".to_string();
    }
    let mut o = String::from("\n====== Perplexity statistics ======\n");
    let (lp, lpe) = s.log_ppl();
    let (lb, lbe) = s.log_ppl_base();
    let (ppl, ppl_e) = (lp.exp(), lp.exp() * lpe);
    let (base, base_e) = (lb.exp(), lb.exp() * lbe);
    let cov = s.log_ppl_cov();
    let (ratio, ratio_e) = s.log_ppl_ratio();
    o += &format!("Mean PPL(Q)                   : {ppl:10.6} ± {ppl_e:10.6}\n");
    o += &format!("Mean PPL(base)                : {base:10.6} ± {base_e:10.6}\n");
    o += &format!(
        "Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%\n",
        100.0 * cov / (lpe * lbe)
    );
    o += &format!("Mean ln(PPL(Q)/PPL(base))     : {ratio:10.6} ± {ratio_e:10.6}\n");
    o += &format!(
        "Mean PPL(Q)/PPL(base)         : {:10.6} ± {:10.6}\n",
        ratio.exp(),
        ratio.exp() * ratio_e
    );
    let diff_e = (ppl_e * ppl_e + base_e * base_e - 2.0 * ppl * base * cov)
        .max(0.0)
        .sqrt();
    o += &format!(
        "Mean PPL(Q)-PPL(base)         : {:10.6} ± {diff_e:10.6}\n",
        ppl - base
    );
    o += "\n====== KL divergence statistics ======\n";
    let (kld, kld_e) = s.kld();
    let k = &r.kld_values;
    o += &format!("Mean    KLD: {kld:10.6} ± {kld_e:10.6}\n");
    o += &format!("Maximum KLD: {:10.6}\n", k[k.len() - 1]);
    for (label, f) in [
        ("99.9%", 0.999),
        ("99.0%", 0.99),
        ("95.0%", 0.95),
        ("90.0%", 0.9),
    ] {
        o += &format!("{label}   KLD: {:10.6}\n", percentile(k, f));
    }
    o += &format!("Median  KLD: {:10.6}\n", median(k));
    for (label, f) in [
        ("10.0%", 0.1),
        (" 5.0%", 0.05),
        (" 1.0%", 0.01),
        (" 0.1%", 0.001),
    ] {
        o += &format!("{label}   KLD: {:10.6}\n", percentile(k, f));
    }
    o += &format!("Minimum KLD: {:10.6}\n", k[0]);
    o += "\n====== Token probability statistics ======\n";
    let p = &r.p_diff_values;
    let (mean, mean_e) = mean_and_uncertainty(s.sum_p_diff, s.sum_p_diff2, s.count);
    o += &format!(
        "Mean    Δp: {:6.3} ± {:5.3} %\n",
        100.0 * mean,
        100.0 * mean_e
    );
    o += &format!("Maximum Δp: {:6.3}%\n", 100.0 * p[p.len() - 1]);
    for (label, f) in [
        ("99.9%", 0.999),
        ("99.0%", 0.99),
        ("95.0%", 0.95),
        ("90.0%", 0.9),
        ("75.0%", 0.75),
    ] {
        o += &format!("{label}   Δp: {:6.3}%\n", 100.0 * percentile(p, f));
    }
    o += &format!("Median  Δp: {:6.3}%\n", 100.0 * median(p));
    for (label, f) in [
        ("25.0%", 0.25),
        ("10.0%", 0.1),
        (" 5.0%", 0.05),
        (" 1.0%", 0.01),
        (" 0.1%", 0.001),
    ] {
        o += &format!("{label}   Δp: {:6.3}%\n", 100.0 * percentile(p, f));
    }
    o += &format!("Minimum Δp: {:6.3}%\n", 100.0 * p[0]);
    let (rms, rms_e) = s.p_diff_rms();
    o += &format!(
        "RMS Δp    : {:6.3} ± {:5.3} %\n",
        100.0 * rms,
        100.0 * rms_e
    );
    let (top, top_e) = s.same_top();
    o += &format!(
        "Same top p: {:6.3} ± {:5.3} %\n",
        100.0 * top,
        100.0 * top_e
    );
    o
}
