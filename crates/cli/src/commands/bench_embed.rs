//! `ferrite bench MODEL --texts FILE`: embedding throughput and latency.
//!
//! - throughput: the whole file embedded in batches of `--batch-size`
//!   (tokenization included, as a user's call would), once to warm up, then
//!   REPS timed runs; sentences/s per run, mean and runs reported;
//! - latency: each of the first 64 lines embedded alone, after one warm-up
//!   pass over them; the median milliseconds per sentence.

use crate::error::{CliError, CliResult};
use std::io::{self, Write};
use std::time::Instant;

use ferrite::{EmbedOptions, Products};
use ferrite_kernels::dispatch::kernel_set_name;

use super::embed::{batch_size, load, read_lines};

/// Sentences timed one at a time for the latency figure.
const LATENCY_SENTENCES: usize = 64;

pub struct EmbedBench<'a> {
    pub model: Option<&'a str>,
    pub texts: &'a str,
    pub batch_size: usize,
    pub threads: Option<usize>,
    pub reps: usize,
    pub json: bool,
    pub products: Products,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

pub fn run(b: EmbedBench) -> CliResult {
    let embedder = load(b.model, b.products)?;
    let texts = read_lines(Some(b.texts))?;
    if texts.is_empty() {
        return Err(CliError::input(b.texts, "no texts"));
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let opts = EmbedOptions {
        batch_size: batch_size(b.batch_size)?,
        ..EmbedOptions::default()
    };
    let threads = super::input::threads(b.threads)?;
    let embed = |t: &[&str]| embedder.embed(t, &opts, &threads).map_err(CliError::from);

    embed(&refs)?;
    let mut runs = Vec::with_capacity(b.reps);
    for _ in 0..b.reps {
        let start = Instant::now();
        embed(&refs)?;
        runs.push(refs.len() as f64 / start.elapsed().as_secs_f64());
    }
    let mean = runs.iter().sum::<f64>() / runs.len() as f64;

    let few = &refs[..refs.len().min(LATENCY_SENTENCES)];
    for t in few {
        embed(std::slice::from_ref(t))?;
    }
    let mut times = Vec::with_capacity(few.len());
    for t in few {
        let start = Instant::now();
        embed(std::slice::from_ref(t))?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let single_ms = median(times);

    let kernels = match b.products {
        Products::F32 => kernel_set_name().to_string(),
        Products::Bf16 => format!("{}+bf16", kernel_set_name()),
        Products::Int8 => format!("{}+int8", kernel_set_name()),
    };
    let text = if b.json {
        let json = serde_json::json!({
            "model": embedder.source().display().to_string(),
            "kernels": kernels,
            "threads": threads.count(),
            "batch_size": b.batch_size,
            "sentences": refs.len(),
            "reps": b.reps,
            "sent_per_s": mean,
            "sent_per_s_runs": runs,
            "single_ms": single_ms,
            "single_sentences": few.len(),
        });
        format!("{json}\n")
    } else {
        format!(
            "| model | kernels | threads | batch | sentences/s | single (ms, median of {}) |\n\
             | --- | --- | ---: | ---: | ---: | ---: |\n\
             | {} | {} | {} | {} | {:.1} | {:.2} |\n",
            few.len(),
            embedder.source().display(),
            kernels,
            threads.count(),
            b.batch_size,
            mean,
            single_ms
        )
    };
    let mut out = io::stdout().lock();
    super::output_result(out.write_all(text.as_bytes()).and_then(|()| out.flush()))
}
