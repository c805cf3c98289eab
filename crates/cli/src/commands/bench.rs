//! `ferrite bench [MODEL]`: whole-model throughput measured the way llama.cpp's
//! `llama-bench` measures it (tools/llama-bench/llama-bench.cpp,
//! `test_prompt` / `test_gen`), so the two can be compared run for run:
//!
//! - pp: one forward call over a prompt of P tokens (BOS first when the model
//!   adds one, then pseudo-random ids), only the last token's logits;
//! - tg: N single-token forward calls from an empty cache (BOS, then
//!   pseudo-random ids: the rate of decoding does not depend on the ids);
//! - one warm-up run first (the whole prompt for pp, one token for tg), then
//!   REPS timed runs, each from an empty cache; t/s is the mean ± sample
//!   standard deviation of the per-run rates;
//! - `-d DEPTH` (llama-bench's `-d`): both tests start from a cache that
//!   already holds DEPTH tokens (BOS, then pseudo-random ids), filled once
//!   and not timed; each run starts from a fork of it (the blocks shared,
//!   copy-on-write), so every run sees the same DEPTH positions.

use crate::error::{CliError, CliResult};
use std::io::{self, Write};
use std::time::Instant;

use ferrite::serving::CausalLm;
use ferrite::serving::{DecoderState, KvCache, Logits};
use ferrite_kernels::dispatch::kernel_set_name;

use super::common::load;

#[derive(clap::Args)]
pub struct Args {
    /// A GGUF file or short name (default: qwen2.5-0.5b).
    model: Option<String>,
    /// Prompt tokens of the pp test (0 skips it).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    n_prompt: usize,
    /// Generated tokens of the tg test (0 skips it).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    n_gen: usize,
    /// Threads, 1 to 512 (default: one per core).
    #[arg(short = 't', long, value_parser = super::input::parse_threads, allow_negative_numbers = true)]
    threads: Option<usize>,
    /// Tokens already in the cache when each test starts (llama-bench's
    /// `-d`): pp and tg measured at this depth.
    #[arg(short = 'd', long = "n-depth", default_value_t = 0)]
    depth: usize,
    /// Timed repetitions of each test, after one warm-up run.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    reps: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Benchmark an embedding model on these texts (one per line) instead:
    /// sentences/s and single-sentence latency (default model: minilm).
    #[arg(long)]
    texts: Option<String>,
    /// Inputs per encoder call (with --texts).
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// With --texts: bf16 products (see `ferrite embed --bf16`).
    #[arg(long, conflicts_with = "int8")]
    bf16: bool,
    /// With --texts: int8 products (see `ferrite embed --int8`).
    #[arg(long, requires = "texts")]
    int8: bool,
    /// With --lookup or --draft: the prompt to generate after (a file;
    /// `-`: standard input); tg is then measured with and without
    /// speculative decoding (greedy, -n tokens, the same text required).
    #[arg(long, value_name = "FILE")]
    prompt_file: Option<String>,
    #[command(flatten)]
    spec: super::speculate::SpecArgs,
}

/// Mean and sample standard deviation of the per-repetition rates
/// (tokens/s), and the process CPU time the timed runs took per token.
struct Rate {
    mean: f64,
    sd: f64,
    cpu_per_token: Option<f64>,
}

impl Rate {
    /// As llama-bench: the standard deviation is 0 for a single sample.
    fn of(samples: &[f64]) -> Rate {
        let n = samples.len() as f64;
        let mean = samples.iter().sum::<f64>() / n;
        let sd = if samples.len() > 1 {
            (samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        Rate {
            mean,
            sd,
            cpu_per_token: None,
        }
    }
}

/// The CPU time this process has used (all threads), in seconds, where the
/// OS says: on a shared machine, decode's cost per token is compared by
/// it (the wall clock also counts time the threads waited for a core).
fn process_cpu_secs() -> Option<f64> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec; clock_gettime writes only it.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } == 0;
    ok.then_some(t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9)
}

/// What is fed to the model: BOS (if the model adds one) then pseudo-random
/// ids from a fixed seed (llama-bench uses the unseeded `std::rand`).
struct TokenSource {
    bos: Option<u32>,
    n_vocab: u64,
    state: u64,
}

impl TokenSource {
    fn next(&mut self) -> u32 {
        // xorshift64: fast, fixed sequence, good enough to pick token ids.
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        // The remainder is below n_vocab, which came from a usize of ids.
        (self.state % self.n_vocab) as u32
    }

    /// `n` tokens that start a sequence (`fresh`: BOS first) or go on
    /// one.
    fn sequence(&mut self, n: usize, fresh: bool) -> Vec<u32> {
        let mut tokens: Vec<u32> = (0..n).map(|_| self.next()).collect();
        if let (Some(bos), Some(first), true) = (self.bos, tokens.first_mut(), fresh) {
            *first = bos;
        }
        tokens
    }
}

/// Runs one test: a warm-up, then `reps` timed runs of `run`, each from a
/// fork of `base` (the cache at the test's depth); returns the rate of
/// each run for `n_tokens` tokens.
fn measure(
    state: &mut DecoderState,
    base: &KvCache,
    reps: usize,
    n_tokens: usize,
    mut run: impl FnMut(&mut DecoderState, bool) -> CliResult,
) -> CliResult<Rate> {
    state.cache = base.fork();
    run(state, true)?;
    let mut rates = Vec::with_capacity(reps);
    let mut cpu = Some(0.0);
    for _ in 0..reps {
        state.cache = base.fork();
        let cpu0 = process_cpu_secs();
        let start = Instant::now();
        run(state, false)?;
        rates.push(n_tokens as f64 / start.elapsed().as_secs_f64());
        cpu = cpu
            .zip(process_cpu_secs().zip(cpu0))
            .map(|(c, (t1, t0))| c + t1 - t0);
    }
    let mut rate = Rate::of(&rates);
    rate.cpu_per_token = cpu.map(|c| c / (reps * n_tokens.max(1)) as f64);
    Ok(rate)
}

fn bench_pp(
    model: &dyn CausalLm,
    state: &mut DecoderState,
    base: &KvCache,
    src: &mut TokenSource,
    a: &Args,
) -> CliResult<Rate> {
    let mut logits = Vec::new();
    measure(state, base, a.reps, a.n_prompt, |state, _warm_up| {
        let tokens = src.sequence(a.n_prompt, base.is_empty());
        model
            .forward(&tokens, state, Logits::Last, &mut logits)
            .map_err(CliError::from)
    })
}

fn bench_tg(
    model: &dyn CausalLm,
    state: &mut DecoderState,
    base: &KvCache,
    src: &mut TokenSource,
    a: &Args,
) -> CliResult<Rate> {
    let mut logits = Vec::new();
    measure(state, base, a.reps, a.n_gen, |state, warm_up| {
        let n = if warm_up { 1 } else { a.n_gen };
        for token in src.sequence(n, base.is_empty()) {
            model.forward(&[token], state, Logits::Last, &mut logits)?;
        }
        Ok(())
    })
}

/// Bytes of weights one decode step (one token) reads, from each tensor's
/// name, row count and size: every tensor once, except the token
/// embedding (one row, unless it is also the output head: no
/// `output.weight`) and the experts of a mixture-of-experts layer (stacked
/// in `*_exps` tensors: only `used` of `experts`). The decode roofline: tg
/// t/s times this is the weight bandwidth achieved (compare `cargo run
/// --release -p ferrite-kernels --example membw`).
fn weights_per_token<'a>(
    tensors: impl Iterator<Item = (&'a str, u64, u64)> + Clone,
    experts: u64,
    used: u64,
) -> u64 {
    let tied = !tensors.clone().any(|(name, _, _)| name == "output.weight");
    tensors
        .map(|(name, rows, size)| {
            if name == "token_embd.weight" && !tied {
                size / rows.max(1)
            } else if name.contains("_exps.") && experts > 0 && used <= experts {
                size / experts * used
            } else {
                size
            }
        })
        .sum()
}

/// The peak resident set size of this process (`VmHWM`), where the OS says.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

pub fn run(args: Args) -> CliResult {
    if args.reps == 0 {
        return Err(CliError::usage("--repetitions must be at least 1"));
    }
    if args.spec.enabled() || args.prompt_file.is_some() {
        let Some(prompt_file) = &args.prompt_file else {
            return Err(CliError::usage(
                "--lookup / --draft in bench need --prompt-file FILE (the text to generate after)",
            ));
        };
        if !args.spec.enabled() {
            return Err(CliError::usage(
                "--prompt-file needs --lookup or --draft FILE",
            ));
        }
        if args.texts.is_some() {
            return Err(CliError::usage(
                "--lookup / --draft do not combine with --texts",
            ));
        }
        return super::bench_spec::run(super::bench_spec::SpecBench {
            model: args.model.as_deref(),
            prompt_file,
            n_gen: args.n_gen,
            threads: args.threads,
            reps: args.reps,
            json: args.json,
            spec: &args.spec,
        });
    }
    if let Some(texts) = &args.texts {
        return super::bench_embed::run(super::bench_embed::EmbedBench {
            model: args.model.as_deref(),
            texts,
            batch_size: args.batch_size,
            threads: args.threads,
            reps: args.reps,
            json: args.json,
            products: super::embed::products(args.bf16, args.int8),
        });
    }
    let loaded = load(args.model.as_deref())?;
    let model = loaded.model();
    let threads = super::input::threads(args.threads)?;
    let n_threads = threads.count();
    let n_ctx = args
        .depth
        .checked_add(args.n_prompt.max(args.n_gen).max(1))
        .filter(|&n| n <= model.n_ctx_train())
        .ok_or_else(|| {
            CliError::usage(format!(
                "a depth of {} plus {} tokens exceeds the model's context of {}",
                args.depth,
                args.n_prompt.max(args.n_gen),
                model.n_ctx_train()
            ))
        })?;
    let mut state = model.new_state(n_ctx, threads)?;
    let mut src = TokenSource {
        bos: loaded
            .tokenizer()
            .bos_id()
            .filter(|_| loaded.tokenizer().adds_bos()),
        n_vocab: model.n_vocab().max(1) as u64,
        state: 0x5EED_1234_ABCD_0001,
    };
    // The cache at the tests' depth, filled once (not timed).
    if args.depth > 0 {
        let tokens = src.sequence(args.depth, true);
        model.forward(&tokens, &mut state, Logits::Last, &mut Vec::new())?;
    }
    let base = state.cache.fork();
    let pp = match args.n_prompt {
        0 => None,
        _ => Some(bench_pp(model, &mut state, &base, &mut src, &args)?),
    };
    let tg = match args.n_gen {
        0 => None,
        _ => Some(bench_tg(model, &mut state, &base, &mut src, &args)?),
    };
    let rss = peak_rss_bytes();

    let tensors: Vec<_> = loaded.file().tensors().map(|t| t.info).collect();
    let size: u64 = tensors.iter().map(|t| t.size).sum();
    let n_params: u64 = tensors.iter().map(|t| t.n_elements()).sum();
    let md = loaded.file().metadata();
    let arch = md.get_str("general.architecture").unwrap_or_default();
    let per_token = weights_per_token(
        tensors.iter().map(|t| {
            let rows = t.dims.iter().skip(1).product::<u64>();
            (t.name.as_str(), rows, t.size)
        }),
        md.get_u64(&format!("{arch}.expert_count")).unwrap_or(0),
        md.get_u64(&format!("{arch}.expert_used_count"))
            .unwrap_or(0),
    );
    // Weight bytes read per second in decode (10^9 bytes: GB/s).
    let tg_gb_s = tg.as_ref().map(|r| r.mean * per_token as f64 / 1e9);
    let path = loaded.file().path();
    let name = path
        .file_name()
        .unwrap_or(path.as_os_str())
        .to_string_lossy();
    let kernels = kernel_set_name();

    let mut out = io::stdout().lock();
    let text = if args.json {
        let mean = |r: &Option<Rate>| r.as_ref().map(|r| r.mean);
        let sd = |r: &Option<Rate>| r.as_ref().map(|r| r.sd);
        let json = serde_json::json!({
            "model": path.display().to_string(),
            "model_size_bytes": size,
            "model_n_params": n_params,
            "kernels": kernels,
            "threads": n_threads,
            "n_prompt": args.n_prompt,
            "n_gen": args.n_gen,
            "n_depth": args.depth,
            "reps": args.reps,
            "pp_tok_s": mean(&pp),
            "pp_tok_s_sd": sd(&pp),
            "tg_tok_s": mean(&tg),
            "tg_tok_s_sd": sd(&tg),
            "peak_rss_bytes": rss,
            "weights_read_per_token_bytes": per_token,
            "tg_cpu_ms_per_token": tg.as_ref().and_then(|r| r.cpu_per_token).map(|c| c * 1e3),
            "tg_weights_gb_s": tg_gb_s,
        });
        format!("{json}\n")
    } else {
        let mib = |b: u64| format!("{:.2} MiB", b as f64 / (1024.0 * 1024.0));
        let mut s = String::from(
            "| model | size | params | kernels | threads | test | t/s |\n\
             | --- | ---: | ---: | --- | ---: | ---: | ---: |\n",
        );
        let tests = [("pp", args.n_prompt, &pp), ("tg", args.n_gen, &tg)];
        // llama-bench's name of a test at depth: `pp512 @ d4096`.
        let at = match args.depth {
            0 => String::new(),
            d => format!(" @ d{d}"),
        };
        for (test, n, rate) in tests {
            if let Some(r) = rate {
                s += &format!(
                    "| {name} | {} | {:.2} M | {kernels} | {n_threads} | {test}{n}{at} | {:.2} ± {:.2} |\n",
                    mib(size),
                    n_params as f64 / 1e6,
                    r.mean,
                    r.sd
                );
            }
        }
        let rss = rss.map_or_else(|| "n/a".to_string(), mib);
        if let Some(gb_s) = tg_gb_s {
            s += &format!(
                "\nweights read per token: {}; tg reads them at {gb_s:.1} GB/s\n",
                mib(per_token)
            );
        }
        if let Some(cpu) = tg.as_ref().and_then(|r| r.cpu_per_token) {
            s += &format!(
                "tg CPU time: {:.3} ms per token (all threads; {:.1} GB/s of weights per CPU-second)\n",
                cpu * 1e3,
                per_token as f64 / cpu / 1e9
            );
        }
        s += &format!(
            "\npeak RSS: {rss}; {} repetitions after a warm-up\n",
            args.reps
        );
        s
    };
    super::output_result(out.write_all(text.as_bytes()).and_then(|()| out.flush()))
}

#[cfg(test)]
mod tests {
    use super::weights_per_token;

    #[test]
    fn weights_per_token_reads_one_embedding_row_and_the_picked_experts() {
        let separate = [
            ("token_embd.weight", 1000, 64_000),
            ("output.weight", 1000, 64_000),
            ("blk.0.ffn_up_exps.weight", 8 * 32, 8_000),
            ("blk.0.ffn_up_shexp.weight", 32, 1_000),
            ("blk.0.attn_norm.weight", 1, 256),
        ];
        // One embedding row (64), the head, 2 of 8 experts, the rest.
        let want = 64 + 64_000 + 2_000 + 1_000 + 256;
        assert_eq!(weights_per_token(separate.into_iter(), 8, 2), want);
        // Tied: the embedding is the head, read whole, once.
        let tied = [
            ("token_embd.weight", 1000, 64_000),
            ("blk.0.x.weight", 4, 100),
        ];
        assert_eq!(weights_per_token(tied.into_iter(), 0, 0), 64_100);
        // A dense file: the expert keys are absent (0), nothing is cut.
        let dense = [("blk.0.ffn_up_exps.weight", 4, 400)];
        assert_eq!(weights_per_token(dense.into_iter(), 0, 0), 400);
    }
}
