//! Mixture-of-experts feed-forward networks (Qwen2-MoE, Qwen3-MoE,
//! gpt-oss): a router scores every expert for each row, the row goes
//! through its `top_k` experts (each a gated MLP), and their outputs are
//! added with the router's weights; optionally a shared expert every row
//! goes through, scaled by a sigmoid gate (Qwen2-MoE).
//!
//! **Reading the weights once per chunk.** The rows of a chunk are grouped
//! by expert: each expert that any row picked runs once, over all of its
//! rows gathered into one block, so its matrices stream from memory once
//! per chunk; an expert no row picked is not read at all (decoding reads
//! only the picked experts).
//!
//! **Determinism.** A row's result does not depend on the other rows of the
//! batch: the router's logits and every expert's products are one dot
//! product per output value (`Linear::matmul`'s contract, whatever the
//! row count), the pick and the weights depend only on the row's own
//! logits, and each row adds its experts' outputs in ascending expert
//! order (the order experts are run in), starting from zero, as
//! transformers' `index_add_` loop over the hit experts does. Then the
//! shared expert's scaled output is added.
//!
//! Reference: transformers `modeling_qwen3_moe.py` (`Qwen3MoeTopKRouter`,
//! `Qwen3MoeExperts`), `modeling_qwen2_moe.py` (shared expert),
//! `modeling_gpt_oss.py` (router, clamped SwiGLU); llama.cpp
//! `llm_graph_context::build_moe_ffn`.

use ferrite_kernels::math::{exp, silu_mul};

use crate::parallel::Threads;
use crate::tensor::{matmul_each, matmul_many, Linear, MatmulJob, QuantizedActs};
use crate::Error;

/// How router logits become the picked experts' weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    /// Softmax over every expert's logit, then the `top_k` largest
    /// probabilities; with `norm` (`norm_topk_prob`) they are divided by
    /// their sum (Qwen3-MoE: yes, Qwen2-MoE: no).
    SoftmaxTopK { norm: bool },
    /// The `top_k` largest logits, then a softmax over those alone
    /// (gpt-oss).
    TopKSoftmax,
}

/// The activation of an expert's gated MLP.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ExpertAct {
    /// SwiGLU: `silu(gate) * up`.
    Silu,
    /// gpt-oss's clamped SwiGLU: `g = min(gate, limit)`,
    /// `u = clamp(up, -limit, limit)`, `(u + 1) * g * sigmoid(alpha * g)`.
    ClampedSwiglu { alpha: f32, limit: f32 },
}

impl ExpertAct {
    /// The activation of `gate` and `up` (equal lengths), into `up`.
    pub fn apply(self, gate: &[f32], up: &mut [f32]) {
        match self {
            ExpertAct::Silu => silu_mul(gate, up),
            ExpertAct::ClampedSwiglu { alpha, limit } => {
                for (u, &g) in up.iter_mut().zip(gate) {
                    let g = g.min(limit);
                    let v = u.clamp(-limit, limit);
                    let glu = g / (1.0 + exp(-(alpha * g)));
                    *u = (v + 1.0) * glu;
                }
            }
        }
    }
}

/// One expert: a gated MLP.
pub struct Expert {
    pub gate: Linear, // (ffn, dim)
    pub up: Linear,   // (ffn, dim)
    pub down: Linear, // (dim, ffn)
}

/// An expert every row goes through (Qwen2-MoE), its output scaled by
/// `sigmoid(gate x)` when there is a gate (a one-row matrix).
pub struct SharedExpert {
    pub mlp: Expert,
    pub gate: Option<Linear>, // (1, dim)
}

/// A mixture-of-experts feed-forward network.
pub struct Moe {
    /// `(n_experts, dim)`, with a bias where the model has one.
    pub router: Linear,
    pub gating: Gating,
    /// Experts per row, `1..=experts.len()`.
    pub top_k: usize,
    pub experts: Vec<Expert>,
    pub act: ExpertAct,
    pub shared: Option<SharedExpert>,
}

/// Rows of one expert: (row, weight), rows ascending.
type Routed = Vec<(usize, f32)>;

impl Moe {
    /// Hidden width of the widest expert (shared one included): the
    /// scratch each of `forward`'s `gate` and `up` needs per row.
    pub fn ffn_dim(&self) -> usize {
        let widths = self
            .experts
            .iter()
            .chain(self.shared.as_ref().map(|s| &s.mlp));
        widths.map(|e| e.gate.rows).max().unwrap_or(0)
    }

    /// The picked experts of one row and their weights, from its router
    /// logits: `top_k` (expert, weight) pairs, largest first (ties: the
    /// lower expert index first).
    pub fn route(&self, logits: &[f32], picked: &mut Vec<(usize, f32)>) {
        route_with(self.gating, self.top_k, logits, picked);
    }

    /// `out = moe(x)` for the rows of `x` (`n x dim`, `out` the same);
    /// `gate` and `up` are scratch of at least `n * self.ffn_dim()` values.
    pub fn forward(
        &self,
        x: &[f32],
        out: &mut [f32],
        gate: &mut [f32],
        up: &mut [f32],
        acts: &mut QuantizedActs,
        threads: &Threads,
    ) -> Result<(), Error> {
        let dim = self.router.cols;
        let n = x.len() / dim;
        let n_exp = self.experts.len();
        let mut logits = vec![0.0f32; n * n_exp];
        self.router.matmul(x, &mut logits, acts, threads)?;
        let mut picked = Vec::with_capacity(self.top_k);
        if n == 1 {
            self.route(&logits, &mut picked);
            self.experts_one(x, &mut picked, out, acts, threads)?;
            return self.add_shared(x, out, gate, up, acts, threads);
        }
        let mut by_expert: Vec<Routed> = vec![Vec::new(); n_exp];
        for (t, row) in logits.chunks_exact(n_exp).enumerate() {
            self.route(row, &mut picked);
            for &(e, w) in &picked {
                by_expert[e].push((t, w));
            }
        }
        out[..n * dim].fill(0.0);
        let mut rows = vec![0.0f32; n * dim];
        let mut y = vec![0.0f32; n * dim];
        for (expert, routed) in self.experts.iter().zip(&by_expert) {
            if routed.is_empty() {
                continue;
            }
            let m = routed.len();
            for (i, &(t, _)) in routed.iter().enumerate() {
                rows[i * dim..(i + 1) * dim].copy_from_slice(&x[t * dim..(t + 1) * dim]);
            }
            let y = &mut y[..m * dim];
            self.mlp(expert, &rows[..m * dim], y, gate, up, acts, threads)?;
            for (i, &(t, w)) in routed.iter().enumerate() {
                let o = &mut out[t * dim..(t + 1) * dim];
                for (o, &v) in o.iter_mut().zip(&y[i * dim..(i + 1) * dim]) {
                    *o += v * w;
                }
            }
        }
        self.add_shared(x, out, gate, up, acts, threads)
    }

    /// The experts of one row `x` (decoding): `picked` are its experts and
    /// weights (sorted here into ascending expert order), their sum goes
    /// to `out`. The same values as [`Moe::forward`]'s grouped path, which
    /// runs each expert on this row alone: every expert's gate and up
    /// projections take the one quantized `x` in one parallel step, and
    /// all down projections run in a second one, each on its expert's own
    /// hidden values; then the outputs are added in ascending expert order
    /// from zero, as there.
    fn experts_one(
        &self,
        x: &[f32],
        picked: &mut [(usize, f32)],
        out: &mut [f32],
        acts: &mut QuantizedActs,
        threads: &Threads,
    ) -> Result<(), Error> {
        let dim = x.len();
        picked.sort_by_key(|p| p.0);
        let experts: Vec<&Expert> = picked.iter().map(|&(e, _)| &self.experts[e]).collect();
        let ffn = experts.iter().map(|e| e.gate.rows).max().unwrap_or(0);
        let k = experts.len();
        let (mut gate, mut up) = (vec![0.0f32; k * ffn], vec![0.0f32; k * ffn]);
        let uniform = experts
            .iter()
            .all(|e| e.gate.rows == ffn && e.up.rows == ffn && e.down.cols == ffn);
        if !uniform {
            // Experts of different widths: one at a time (the same values).
            let mut y = vec![0.0f32; dim];
            out[..dim].fill(0.0);
            for (e, &(_, w)) in experts.iter().zip(picked.iter()) {
                self.mlp(e, x, &mut y, &mut gate, &mut up, acts, threads)?;
                out.iter_mut().zip(&y).for_each(|(o, &v)| *o += v * w);
            }
            return Ok(());
        }
        let mut jobs: Vec<MatmulJob> = Vec::with_capacity(2 * k);
        for ((e, g), u) in experts
            .iter()
            .zip(gate.chunks_exact_mut(ffn))
            .zip(up.chunks_exact_mut(ffn))
        {
            jobs.push(MatmulJob::new(&e.gate, g));
            jobs.push(MatmulJob::new(&e.up, u));
        }
        matmul_many(&mut jobs, x, acts, threads)?;
        drop(jobs);
        for (g, u) in gate.chunks_exact(ffn).zip(up.chunks_exact_mut(ffn)) {
            self.act.apply(g, u);
        }
        let mut y = vec![0.0f32; k * dim];
        let mut jobs: Vec<MatmulJob> = experts
            .iter()
            .zip(y.chunks_exact_mut(dim))
            .map(|(e, y)| MatmulJob::new(&e.down, y))
            .collect();
        matmul_each(&mut jobs, &up, acts, threads)?;
        drop(jobs);
        out[..dim].fill(0.0);
        for (y, &(_, w)) in y.chunks_exact(dim).zip(picked.iter()) {
            for (o, &v) in out.iter_mut().zip(y) {
                *o += v * w;
            }
        }
        Ok(())
    }

    /// Adds the shared expert's scaled output for the rows of `x` to `out`
    /// (nothing without one).
    fn add_shared(
        &self,
        x: &[f32],
        out: &mut [f32],
        gate: &mut [f32],
        up: &mut [f32],
        acts: &mut QuantizedActs,
        threads: &Threads,
    ) -> Result<(), Error> {
        let dim = self.router.cols;
        let n = x.len() / dim;
        if let Some(shared) = &self.shared {
            let mut y = vec![0.0f32; n * dim];
            self.mlp(&shared.mlp, x, &mut y, gate, up, acts, threads)?;
            let mut scale = vec![1.0f32; n];
            if let Some(g) = &shared.gate {
                g.matmul(x, &mut scale, acts, threads)?;
                scale.iter_mut().for_each(|s| *s = 1.0 / (1.0 + exp(-*s)));
            }
            for (t, &s) in scale.iter().enumerate() {
                let o = &mut out[t * dim..(t + 1) * dim];
                for (o, &v) in o.iter_mut().zip(&y[t * dim..(t + 1) * dim]) {
                    *o += s * v;
                }
            }
        }
        Ok(())
    }

    /// One gated MLP over the rows of `x`, into `y`.
    #[allow(clippy::too_many_arguments)]
    fn mlp(
        &self,
        e: &Expert,
        x: &[f32],
        y: &mut [f32],
        gate: &mut [f32],
        up: &mut [f32],
        acts: &mut QuantizedActs,
        threads: &Threads,
    ) -> Result<(), Error> {
        let m = x.len() / e.gate.cols;
        let ffn = e.gate.rows;
        let (gate, up) = (&mut gate[..m * ffn], &mut up[..m * ffn]);
        let jobs = &mut [
            MatmulJob::new(&e.gate, &mut *gate),
            MatmulJob::new(&e.up, &mut *up),
        ];
        matmul_many(jobs, x, acts, threads)?;
        self.act.apply(gate, up);
        e.down.matmul(up, y, acts, threads)
    }
}

/// [`Moe::route`] for a gating and a `top_k`.
fn route_with(gating: Gating, top_k: usize, logits: &[f32], picked: &mut Vec<(usize, f32)>) {
    let k = top_k.min(logits.len());
    picked.clear();
    if k == 0 {
        return;
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    // Descending by logit (softmax keeps the order), NaNs last.
    order.sort_by(|&a, &b| {
        let key = |i: usize| {
            if logits[i].is_nan() {
                f32::NEG_INFINITY
            } else {
                logits[i]
            }
        };
        key(b).total_cmp(&key(a)).then(a.cmp(&b))
    });
    picked.clear();
    match gating {
        Gating::SoftmaxTopK { norm } => {
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f32 = logits.iter().map(|&l| exp(l - max)).sum();
            let inv = 1.0 / sum;
            picked.extend(order[..k].iter().map(|&e| (e, exp(logits[e] - max) * inv)));
            if norm {
                let total: f32 = picked.iter().map(|p| p.1).sum();
                picked.iter_mut().for_each(|p| p.1 /= total);
            }
        }
        Gating::TopKSoftmax => {
            let max = logits[order[0]];
            picked.extend(order[..k].iter().map(|&e| (e, exp(logits[e] - max))));
            let sum: f32 = picked.iter().map(|p| p.1).sum();
            picked.iter_mut().for_each(|p| p.1 /= sum);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picks(gating: Gating, top_k: usize, logits: &[f32]) -> Vec<(usize, f32)> {
        let mut p = Vec::new();
        route_with(gating, top_k, logits, &mut p);
        p
    }

    /// Softmax, then the k largest (ties: lower index), renormalized or
    /// not; or the k largest logits, then their softmax (gpt-oss).
    #[test]
    fn routing_weights_follow_each_gating() {
        let logits = [0.5f32, 2.0, -1.0, 2.0, 1.0];
        let e: Vec<f64> = logits.iter().map(|&l| (f64::from(l) - 2.0).exp()).collect();
        let total: f64 = e.iter().sum();
        let p = |i: usize| e[i] / total;
        let close = |got: &[(usize, f32)], want: &[(usize, f64)]| {
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(want) {
                assert_eq!(g.0, w.0);
                assert!((f64::from(g.1) - w.1).abs() < 1e-6, "{got:?} vs {want:?}");
            }
        };
        let plain = picks(Gating::SoftmaxTopK { norm: false }, 3, &logits);
        close(&plain, &[(1, p(1)), (3, p(3)), (4, p(4))]);
        let s = p(1) + p(3) + p(4);
        let normed = picks(Gating::SoftmaxTopK { norm: true }, 3, &logits);
        close(&normed, &[(1, p(1) / s), (3, p(3) / s), (4, p(4) / s)]);
        let z = 1.0 + 1.0 + (-1.0f64).exp();
        let oss = picks(Gating::TopKSoftmax, 3, &logits);
        close(
            &oss,
            &[(1, 1.0 / z), (3, 1.0 / z), (4, (-1.0f64).exp() / z)],
        );
        // NaN logits sort last and never panic.
        let nan = picks(Gating::SoftmaxTopK { norm: true }, 2, &[f32::NAN, 1.0, 0.0]);
        assert_eq!(nan.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 2]);
    }

    /// gpt-oss's activation: `(clamp(up) + 1) * g * sigmoid(1.702 g)` with
    /// `g = min(gate, 7)`, as transformers' `GptOssExperts`.
    #[test]
    fn clamped_swiglu_matches_its_formula() {
        let act = ExpertAct::ClampedSwiglu {
            alpha: 1.702,
            limit: 7.0,
        };
        let gate = [-3.0f32, 0.0, 0.5, 6.9, 7.5, 100.0];
        let mut up = [0.25f32, -9.0, 8.0, -0.5, 1.0, -7.5];
        let want: Vec<f64> = gate
            .iter()
            .zip(&up)
            .map(|(&g, &u)| {
                let g = f64::from(g).min(7.0);
                let u = f64::from(u).clamp(-7.0, 7.0);
                (u + 1.0) * g / (1.0 + (-1.702 * g).exp())
            })
            .collect();
        act.apply(&gate, &mut up);
        for (g, w) in up.iter().zip(&want) {
            assert!(
                (f64::from(*g) - w).abs() <= 1e-5 * w.abs().max(1.0),
                "{up:?} vs {want:?}"
            );
        }
    }
}
