//! Choosing the next token from logits: penalties, logit bias, then greedy
//! or temperature sampling after top-k / top-p / min-p filtering.
//!
//! The order of steps and the defaults follow llama.cpp's default sampler
//! chain (`common/sampling.cpp`): penalties -> top-k -> top-p -> min-p ->
//! temperature -> draw. Ties are broken by the lower token id, and the
//! random numbers come from our own seeded generator, so a (model, prompt,
//! options, seed) always gives the same tokens.

use std::collections::HashMap;

use crate::Error;

/// Sampling options. `temperature <= 0` means greedy (argmax).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerOptions {
    /// Divides the logits before sampling (`<= 0`: greedy).
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0 = all).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches `top_p` (1 = all).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely (0 = off).
    pub min_p: f32,
    /// Divide positive / multiply negative logits of recent tokens (1 = off).
    pub repeat_penalty: f32,
    /// Subtract from the logit of every recent token (0 = off).
    pub presence_penalty: f32,
    /// Subtract, times its count, from the logit of recent tokens (0 = off).
    pub frequency_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub penalty_last_n: usize,
    /// Added to the logits of given tokens (-inf forbids a token).
    pub logit_bias: Vec<(u32, f32)>,
    /// Seed of the random generator: the same seed and inputs give the same tokens.
    pub seed: u64,
}

impl Default for SamplerOptions {
    fn default() -> Self {
        SamplerOptions {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            logit_bias: Vec::new(),
            seed: 0x5EED,
        }
    }
}

impl SamplerOptions {
    /// Options that always pick the most likely token.
    pub fn greedy() -> Self {
        SamplerOptions {
            temperature: 0.0,
            ..Default::default()
        }
    }

    /// Checks the options are meaningful; the message names the bad one.
    pub fn validate(&self) -> Result<(), Error> {
        let finite = |name: &str, v: f32| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(Error::Input(format!(
                    "{name} must be a finite number, got {v}"
                )))
            }
        };
        finite("temperature", self.temperature)?;
        if self.temperature < 0.0 {
            return Err(Error::Input(format!(
                "temperature must be at least 0 (0 always picks the most likely token), got {}",
                self.temperature
            )));
        }
        finite("top-p", self.top_p)?;
        finite("min-p", self.min_p)?;
        finite("repeat penalty", self.repeat_penalty)?;
        finite("presence penalty", self.presence_penalty)?;
        finite("frequency penalty", self.frequency_penalty)?;
        if !(0.0..=1.0).contains(&self.top_p) {
            return Err(Error::Input(format!(
                "top-p must be in [0, 1], got {}",
                self.top_p
            )));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(Error::Input(format!(
                "min-p must be in [0, 1], got {}",
                self.min_p
            )));
        }
        if self.repeat_penalty <= 0.0 {
            return Err(Error::Input(format!(
                "repeat penalty must be positive, got {}",
                self.repeat_penalty
            )));
        }
        Ok(())
    }
}

/// A seed for a run that gave none: different on every call (the
/// process's random hash keys mixed with the time).
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

/// A small, fast, seedable generator (xoshiro256**, seeded through
/// SplitMix64). Not cryptographic; reproducible across platforms.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^ (x >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A token and its (adjusted) logit.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    id: u32,
    logit: f32,
}

/// Picks tokens. Keeps the recent-token history the penalties need and a
/// candidate buffer reused across calls.
pub struct Sampler {
    opts: SamplerOptions,
    rng: Rng,
    recent: Vec<u32>,
    candidates: Vec<Candidate>,
    weights: Vec<f64>,
    counts: HashMap<u32, u32>,
}

impl Sampler {
    /// A sampler seeded with `opts.seed`.
    pub fn new(opts: SamplerOptions) -> Sampler {
        Sampler {
            rng: Rng::new(opts.seed),
            opts,
            recent: Vec::new(),
            candidates: Vec::new(),
            weights: Vec::new(),
            counts: HashMap::new(),
        }
    }

    /// The options it samples with.
    pub fn options(&self) -> &SamplerOptions {
        &self.opts
    }

    /// Records a token as part of the text (prompt or generated), for the
    /// penalties.
    pub fn accept(&mut self, token: u32) {
        self.recent.push(token);
        let keep = self.opts.penalty_last_n.max(1);
        if self.recent.len() > 4 * keep {
            self.recent.drain(..self.recent.len() - keep);
        }
    }

    /// Chooses the next token from `logits` (one per vocabulary entry).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        self.candidates.clear();
        self.candidates
            .extend(logits.iter().enumerate().map(|(i, &logit)| Candidate {
                id: i as u32,
                logit,
            }));
        self.apply_penalties();
        for &(id, bias) in &self.opts.logit_bias {
            if let Some(c) = self.candidates.get_mut(id as usize) {
                c.logit += bias;
            }
        }
        if self.opts.temperature <= 0.0 {
            return self.argmax();
        }
        self.sort_and_filter();
        self.draw()
    }

    fn apply_penalties(&mut self) {
        let o = &self.opts;
        let off =
            o.repeat_penalty == 1.0 && o.presence_penalty == 0.0 && o.frequency_penalty == 0.0;
        if off || o.penalty_last_n == 0 {
            return;
        }
        self.counts.clear();
        let start = self.recent.len().saturating_sub(o.penalty_last_n);
        for &t in &self.recent[start..] {
            *self.counts.entry(t).or_insert(0) += 1;
        }
        for (&id, &count) in &self.counts {
            let Some(c) = self.candidates.get_mut(id as usize) else {
                continue;
            };
            if c.logit > 0.0 {
                c.logit /= o.repeat_penalty;
            } else {
                c.logit *= o.repeat_penalty;
            }
            c.logit -= count as f32 * o.frequency_penalty + o.presence_penalty;
        }
    }

    /// The highest logit; ties go to the lower id. NaN logits never win.
    fn argmax(&self) -> u32 {
        let mut best: Option<Candidate> = None;
        for &c in &self.candidates {
            if c.logit.is_nan() {
                continue;
            }
            if best.is_none_or(|b| c.logit > b.logit) {
                best = Some(c);
            }
        }
        best.map_or(0, |b| b.id)
    }

    /// Sorts candidates by logit (descending, ties by id), then applies
    /// top-k, top-p and min-p, leaving at least one candidate.
    fn sort_and_filter(&mut self) {
        let o = &self.opts;
        let by_logit = |a: &Candidate, b: &Candidate| {
            b.logit
                .partial_cmp(&a.logit)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.id.cmp(&b.id))
        };
        self.candidates
            .retain(|c| !c.logit.is_nan() && c.logit != f32::NEG_INFINITY);
        if self.candidates.is_empty() {
            // Everything was forbidden: fall back to token 0 rather than fail.
            self.candidates.push(Candidate { id: 0, logit: 0.0 });
            return;
        }
        if o.top_k > 0 && o.top_k < self.candidates.len() {
            self.candidates
                .select_nth_unstable_by(o.top_k - 1, by_logit);
            self.candidates.truncate(o.top_k);
        }
        self.candidates.sort_unstable_by(by_logit);

        // Probabilities at temperature 1, as llama.cpp's top-p / min-p see them.
        let max = self.candidates[0].logit;
        let weights = &mut self.weights;
        weights.clear();
        weights.extend(
            self.candidates
                .iter()
                .map(|c| f64::from(c.logit - max).exp()),
        );
        let total: f64 = weights.iter().sum();
        let mut keep = self.candidates.len();
        if o.top_p < 1.0 {
            let mut cum = 0.0;
            for (i, w) in weights.iter().enumerate() {
                cum += w / total;
                if cum >= f64::from(o.top_p) {
                    keep = i + 1;
                    break;
                }
            }
        }
        if o.min_p > 0.0 {
            // weights[0] is the largest (= 1); keep those >= min_p of it.
            let n = weights
                .iter()
                .take_while(|&&w| w >= f64::from(o.min_p))
                .count();
            keep = keep.min(n.max(1));
        }
        self.candidates.truncate(keep.max(1));
    }

    /// Draws from the softmax of the remaining candidates at the temperature.
    fn draw(&mut self) -> u32 {
        let t = self.opts.temperature;
        let max = self.candidates[0].logit;
        let weights = &mut self.weights;
        weights.clear();
        weights.extend(
            self.candidates
                .iter()
                .map(|c| f64::from((c.logit - max) / t).exp()),
        );
        let total: f64 = weights.iter().sum();
        let mut r = self.rng.next_f64() * total;
        for (c, w) in self.candidates.iter().zip(weights.iter()) {
            if r < *w {
                return c.id;
            }
            r -= w;
        }
        self.candidates[self.candidates.len() - 1].id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_max_and_breaks_ties_low() {
        let mut s = Sampler::new(SamplerOptions::greedy());
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 3.0]), 1);
        assert_eq!(s.sample(&[f32::NAN, 0.5, 0.2]), 1);
    }

    #[test]
    fn same_seed_same_tokens() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let run = |seed| {
            let mut s = Sampler::new(SamplerOptions {
                seed,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                temperature: 1.0,
                ..Default::default()
            });
            (0..50).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn top_k_one_is_greedy() {
        let mut s = Sampler::new(SamplerOptions {
            top_k: 1,
            temperature: 5.0,
            ..Default::default()
        });
        for _ in 0..20 {
            assert_eq!(s.sample(&[0.0, 1.0, 0.5, 0.9]), 1);
        }
    }

    #[test]
    fn min_p_and_top_p_filter() {
        let logits = [10.0, 9.9, 0.0, -5.0];
        let mut s = Sampler::new(SamplerOptions {
            min_p: 0.5,
            top_p: 1.0,
            top_k: 0,
            temperature: 1.0,
            ..Default::default()
        });
        for _ in 0..50 {
            assert!(s.sample(&logits) <= 1);
        }
        let mut s = Sampler::new(SamplerOptions {
            min_p: 0.0,
            top_p: 0.4,
            top_k: 0,
            temperature: 1.0,
            ..Default::default()
        });
        for _ in 0..50 {
            assert_eq!(s.sample(&logits), 0);
        }
    }

    #[test]
    fn penalties_and_bias_change_the_choice() {
        let mut s = Sampler::new(SamplerOptions {
            repeat_penalty: 4.0,
            ..SamplerOptions::greedy()
        });
        s.accept(0);
        assert_eq!(s.sample(&[2.0, 1.0]), 1);
        let mut s = Sampler::new(SamplerOptions {
            logit_bias: vec![(0, f32::NEG_INFINITY)],
            ..SamplerOptions::greedy()
        });
        assert_eq!(s.sample(&[2.0, 1.0]), 1);
        let mut s = Sampler::new(SamplerOptions {
            presence_penalty: 0.5,
            frequency_penalty: 0.5,
            ..SamplerOptions::greedy()
        });
        s.accept(0);
        s.accept(0);
        // 2.0 - 2*0.5 - 0.5 = 0.5 < 1.0
        assert_eq!(s.sample(&[2.0, 1.0]), 1);
    }
}
