//! KL divergence of a model's token distributions from a base file's
//! ([`super::base`]), with the statistics `llama-perplexity
//! --kl-divergence` reports: both perplexities and their ratio, the mean
//! KL divergence and its percentiles, the change of the correct token's
//! probability (Δp) and how often the most likely token is the same.

use std::io::Read;

use super::base::{row_len, row_parts, BaseReader};
use super::{bos_of, chunk_logits, per_row, PerplexityOptions};
use crate::models::CausalLm;
use crate::tokenize::Tokenizer;
use crate::Error;

/// One scored position compared with the base.
#[derive(Clone, Copy, Debug)]
struct Position {
    nll: f64,
    nll_base: f64,
    kld: f64,
    p_diff: f64,
    same_top: bool,
}

/// Running sums over the scored positions (llama.cpp's
/// `kl_divergence_result`).
#[derive(Clone, Copy, Debug, Default)]
pub struct KldStats {
    /// Sum of the model's `-ln p(token)`.
    pub sum_nll: f64,
    /// Sum of its squares.
    pub sum_nll2: f64,
    /// Sum of the base's `-ln p(token)`.
    pub sum_nll_base: f64,
    /// Sum of its squares.
    pub sum_nll_base2: f64,
    /// Sum of the products of the two.
    pub sum_nll_nll_base: f64,
    /// Sum of the KL divergences.
    pub sum_kld: f64,
    /// Sum of their squares.
    pub sum_kld2: f64,
    /// Sum of Δp, the model's minus the base's probability of the token.
    pub sum_p_diff: f64,
    /// Sum of Δp².
    pub sum_p_diff2: f64,
    /// Sum of Δp⁴.
    pub sum_p_diff4: f64,
    /// Largest |Δp|.
    pub max_p_diff: f64,
    /// Positions where both give the same most likely token.
    pub n_same_top: usize,
    /// Positions compared.
    pub count: usize,
}

/// `(mean, standard error)` from a sum and a sum of squares, the error 0
/// for fewer than 11 values (llama.cpp's rule).
pub fn mean_and_uncertainty(sum: f64, sum2: f64, count: usize) -> (f64, f64) {
    if count == 0 {
        return (0.0, 0.0);
    }
    let n = count as f64;
    let mean = sum / n;
    let var = sum2 / n - mean * mean;
    let err = if var > 0.0 && count > 10 { (var / (n - 1.0)).sqrt() } else { 0.0 };
    (mean, err)
}

impl KldStats {
    fn add(&mut self, p: &Position) {
        self.sum_nll += p.nll;
        self.sum_nll2 += p.nll * p.nll;
        self.sum_nll_base += p.nll_base;
        self.sum_nll_base2 += p.nll_base * p.nll_base;
        self.sum_nll_nll_base += p.nll * p.nll_base;
        self.sum_kld += p.kld;
        self.sum_kld2 += p.kld * p.kld;
        self.sum_p_diff += p.p_diff;
        let d2 = p.p_diff * p.p_diff;
        self.sum_p_diff2 += d2;
        self.sum_p_diff4 += d2 * d2;
        self.max_p_diff = self.max_p_diff.max(p.p_diff.abs());
        self.n_same_top += usize::from(p.same_top);
        self.count += 1;
    }

    /// `(ln PPL, error)` of the model.
    pub fn log_ppl(&self) -> (f64, f64) {
        mean_and_uncertainty(self.sum_nll, self.sum_nll2, self.count)
    }

    /// `(ln PPL, error)` of the base.
    pub fn log_ppl_base(&self) -> (f64, f64) {
        mean_and_uncertainty(self.sum_nll_base, self.sum_nll_base2, self.count)
    }

    /// Covariance of the two mean log-likelihoods (0 under 10 values).
    pub fn log_ppl_cov(&self) -> f64 {
        if self.count < 10 {
            return 0.0;
        }
        let n = self.count as f64;
        (self.sum_nll_nll_base / n - (self.sum_nll / n) * (self.sum_nll_base / n)) / (n - 1.0)
    }

    /// `(ln(PPL/PPL_base), error)`.
    pub fn log_ppl_ratio(&self) -> (f64, f64) {
        let (a, ea) = self.log_ppl();
        let (b, eb) = self.log_ppl_base();
        let var = ea * ea + eb * eb - 2.0 * self.log_ppl_cov();
        (a - b, var.max(0.0).sqrt())
    }

    /// `(mean KLD, error)`.
    pub fn kld(&self) -> (f64, f64) {
        mean_and_uncertainty(self.sum_kld, self.sum_kld2, self.count)
    }

    /// `(RMS Δp, error)`.
    pub fn p_diff_rms(&self) -> (f64, f64) {
        let (mse, err) = mean_and_uncertainty(self.sum_p_diff2, self.sum_p_diff4, self.count);
        let rms = mse.sqrt();
        (rms, if rms > 0.0 { 0.5 / rms * err } else { 0.0 })
    }

    /// `(share of positions with the same most likely token, error)`.
    pub fn same_top(&self) -> (f64, f64) {
        let p = self.n_same_top as f64 / self.count as f64;
        let err = if self.count > 1 { (p * (1.0 - p) / (self.count as f64 - 1.0)).sqrt() } else { 0.0 };
        (p, err)
    }
}

/// Everything a KL-divergence run measured: the sums, and every
/// position's KLD and Δp (for the percentiles).
#[derive(Clone, Debug, Default)]
pub struct KldReport {
    /// The running sums at the end.
    pub stats: KldStats,
    /// Each scored position's KL divergence, sorted ascending.
    pub kld_values: Vec<f64>,
    /// Each scored position's Δp (model minus base probability of the
    /// correct token), sorted ascending.
    pub p_diff_values: Vec<f64>,
}

/// The value at `fraction` of sorted `values`, interpolated linearly
/// between neighbours (llama.cpp's percentile).
pub fn percentile(values: &[f64], fraction: f64) -> f64 {
    if fraction <= 0.0 {
        return values[0];
    }
    if fraction >= 1.0 {
        return values[values.len() - 1];
    }
    let p = fraction * (values.len() - 1) as f64;
    let i = p as usize;
    let f = p - i as f64;
    (1.0 - f) * values[i] + f * values[(i + 1).min(values.len() - 1)]
}

/// The median of sorted `values`.
pub fn median(values: &[f64]) -> f64 {
    let n = values.len();
    if n.is_multiple_of(2) {
        0.5 * (values[n / 2] + values[n / 2 - 1])
    } else {
        values[n / 2]
    }
}

/// One position: the model's logits against the base's row.
fn compare(logits: &[f32], base_row: &[u16], token: u32) -> Position {
    let (scale, min_log_prob, q) = row_parts(base_row);
    let (mut top, mut max) = (0, logits[0]);
    for (i, &l) in logits.iter().enumerate() {
        if l > max {
            (top, max) = (i, l);
        }
    }
    let log_sum = logits.iter().map(|&l| f64::from(l - max).exp()).sum::<f64>().ln();
    let log_p = |i: usize| f64::from(logits[i] - max) - log_sum;
    let log_p_base = |i: usize| f64::from(scale) * f64::from(q[i]) + f64::from(min_log_prob);
    let nll = -log_p(token as usize);
    let nll_base = -log_p_base(token as usize);
    // KL(base || model) over the tokens the base gives more than e^-16.
    let mut kld = 0.0;
    let (mut top_base, mut max_base) = (0, f64::NEG_INFINITY);
    for i in 0..logits.len() {
        let lb = log_p_base(i);
        if lb > max_base {
            (top_base, max_base) = (i, lb);
        }
        if lb > -16.0 {
            kld += lb.exp() * (lb - log_p(i));
        }
    }
    Position {
        nll,
        nll_base,
        kld,
        p_diff: (-nll).exp() - (-nll_base).exp(),
        same_top: top == top_base,
    }
}

/// Compares `model` with the base file `base` position by position,
/// calling `on_chunk(i, running)` after chunk `i`. The tokens and the
/// chunking are the base file's; its vocabulary must be the model's.
pub fn kl_divergence<R: Read>(
    model: &dyn CausalLm,
    tok: &Tokenizer,
    base: &mut BaseReader<R>,
    opts: &PerplexityOptions,
    mut on_chunk: impl FnMut(usize, &KldStats),
) -> Result<KldReport, Error> {
    let n_vocab = model.n_vocab();
    if base.n_vocab != n_vocab {
        return Err(Error::Input(format!(
            "the base file's vocabulary has {} tokens, this model's {n_vocab}: they cannot be compared",
            base.n_vocab
        )));
    }
    if let Some(&t) = base.tokens.iter().find(|&&t| t as usize >= n_vocab) {
        return Err(Error::Input(format!("the base file holds token {t}, outside the vocabulary of {n_vocab}")));
    }
    let chunks = base.chunks;
    let n_chunk = opts.max_chunks.map_or(chunks.n_chunk, |m| m.min(chunks.n_chunk));
    let bos = bos_of(tok);
    let nv = row_len(n_vocab);
    let mut report = KldReport::default();
    let mut logits = Vec::new();
    for i in 0..n_chunk {
        let rows = base.chunk_rows()?;
        let chunk = &base.tokens[i * chunks.n_ctx..(i + 1) * chunks.n_ctx];
        chunk_logits(model, chunk, bos, &opts.threads, &mut logits)?;
        let targets = &chunk[chunks.first() + 1..];
        let positions = per_row(&opts.threads, chunks.scored(), |r| {
            compare(&logits[r * n_vocab..][..n_vocab], &rows[r * nv..][..nv], targets[r])
        });
        for p in &positions {
            report.stats.add(p);
            report.kld_values.push(p.kld);
            report.p_diff_values.push(p.p_diff);
        }
        on_chunk(i, &report.stats);
    }
    report.kld_values.sort_by(f64::total_cmp);
    report.p_diff_values.sort_by(f64::total_cmp);
    Ok(report)
}
