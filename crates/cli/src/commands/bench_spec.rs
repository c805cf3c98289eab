//! `ferrite bench --lookup | --draft FILE --prompt-file FILE`: decode speed
//! with speculative decoding against plain decoding, on a real prompt
//! (drafts depend on the text, so random ids would say nothing). Greedy,
//! `-n` tokens after the prompt; one warm-up run, then `-r` timed runs of
//! each; the prompt is prefilled once and not timed. The two texts must
//! be the same (speculation changes no output): a difference is an error.

use crate::error::{CliError, CliResult};
use std::io::{self, Write};

use ferrite::serving::{Sampler, Session};
use ferrite::{GenerateOptions, SamplerOptions};

use super::common::load;
use super::input::read_prompt;
use super::speculate::SpecArgs;

/// What `bench` passes on in this mode.
pub struct SpecBench<'a> {
    pub model: Option<&'a str>,
    pub prompt_file: &'a str,
    pub n_gen: usize,
    pub threads: Option<usize>,
    pub reps: usize,
    pub json: bool,
    pub spec: &'a SpecArgs,
}

/// Rates of the timed runs of one mode, its text and its counts per run.
struct Runs {
    rates: Vec<f64>,
    text: String,
    drafted: usize,
    accepted: usize,
}

impl Runs {
    fn mean(&self) -> f64 {
        self.rates.iter().sum::<f64>() / self.rates.len() as f64
    }

    fn sd(&self) -> f64 {
        let n = self.rates.len() as f64;
        if self.rates.len() < 2 {
            return 0.0;
        }
        let m = self.mean();
        (self.rates.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    }
}

pub fn run(b: SpecBench) -> CliResult {
    if b.n_gen == 0 {
        return Err(CliError::usage(
            "-n must be at least 1 with --lookup / --draft",
        ));
    }
    let loaded = load(b.model)?;
    let draft = b.spec.load_draft(&loaded)?;
    let prompt = read_prompt(b.prompt_file)?;
    let tokens = loaded.tokenizer().encode(&prompt, true, true);
    let threads = super::input::threads(b.threads)?;
    let n_ctx = tokens.len() + b.n_gen;
    if n_ctx > loaded.model().n_ctx_train() {
        return Err(CliError::usage(format!(
            "the prompt ({} tokens) and -n {} exceed the model's context of {}",
            tokens.len(),
            b.n_gen,
            loaded.model().n_ctx_train()
        )));
    }
    let opts = GenerateOptions {
        max_tokens: Some(b.n_gen),
        ..GenerateOptions::default()
    };
    let measure = |speculate: bool| -> CliResult<Runs> {
        let mut session = Session::new(
            loaded.model(),
            loaded.tokenizer(),
            Some(n_ctx),
            threads.clone(),
        )?;
        if speculate {
            let spec = b.spec.speculation(draft.as_ref(), n_ctx, threads.clone())?;
            session.set_speculation(spec);
        }
        let mut runs = Runs {
            rates: Vec::new(),
            text: String::new(),
            drafted: 0,
            accepted: 0,
        };
        for rep in 0..=b.reps {
            // The prompt is in the cache after the first run: only its
            // last token is fed again.
            session.set_prompt(&tokens)?;
            let mut sampler = Sampler::new(SamplerOptions::greedy());
            let mut text = String::new();
            session.generate(&mut sampler, &opts, |piece| {
                text.push_str(piece);
                true
            })?;
            let s = &session.stats;
            if rep > 0 {
                runs.rates
                    .push(s.generated_tokens as f64 / s.generation_time.as_secs_f64());
                runs.drafted = s.drafted;
                runs.accepted = s.accepted;
            }
            runs.text = text;
        }
        Ok(runs)
    };
    let plain = measure(false)?;
    let spec = measure(true)?;
    if spec.text != plain.text {
        return Err(CliError::input(
            "bench",
            "speculative decoding changed the text: this is a bug, please report it",
        ));
    }
    let how = match &b.spec.draft {
        Some(d) => format!("draft {d}"),
        None => "lookup".to_string(),
    };
    let rate = |d: usize, a: usize| {
        if d == 0 {
            0.0
        } else {
            100.0 * a as f64 / d as f64
        }
    };
    let text = if b.json {
        let json = serde_json::json!({
            "model": loaded.path().display().to_string(),
            "threads": threads.count(),
            "n_prompt": tokens.len(),
            "n_gen": b.n_gen,
            "reps": b.reps,
            "speculation": how,
            "tg_tok_s_plain": plain.mean(),
            "tg_tok_s_plain_sd": plain.sd(),
            "tg_tok_s_spec": spec.mean(),
            "tg_tok_s_spec_sd": spec.sd(),
            "drafted_per_run": spec.drafted,
            "accepted_per_run": spec.accepted,
            "same_text": true,
        });
        format!("{json}\n")
    } else {
        let name = loaded
            .path()
            .file_name()
            .unwrap_or_default()
            .to_string_lossy();
        let mut s = String::from("| model | threads | test | t/s |\n| --- | ---: | --- | ---: |\n");
        for (label, r) in [("plain", &plain), (how.as_str(), &spec)] {
            s += &format!(
                "| {name} | {} | tg{} {label} | {:.2} ± {:.2} |\n",
                threads.count(),
                b.n_gen,
                r.mean(),
                r.sd()
            );
        }
        s += &format!(
            "\nper run: drafted {}, accepted {} ({:.1}%); the same text as plain decoding; \
             prompt {} tokens (not timed); {} repetitions after a warm-up\n",
            spec.drafted,
            spec.accepted,
            rate(spec.drafted, spec.accepted),
            tokens.len(),
            b.reps
        );
        s
    };
    let mut out = io::stdout().lock();
    super::output_result(out.write_all(text.as_bytes()).and_then(|()| out.flush()))
}
