//! Position schemes other than rotation (`rope.rs`): relative-position
//! buckets (T5, MPNet), the bias a model adds to an attention score by the
//! distance between query and key; and Marian's fixed sinusoidal vectors,
//! added to the token embeddings.

/// The bucket of a relative position `rel = key - query` among
/// `n_buckets`: exact buckets for short distances, logarithmic ones up to
/// `max_distance`. Bidirectional (encoders) splits the buckets by sign,
/// keys after the query in the upper half; causal (T5's decoder) buckets
/// only keys before the query.
///
/// As `transformers` computes it (T5's `_relative_position_bucket`,
/// MPNet's `relative_position_bucket`): the logarithm of the distance in
/// f32, divided by `log(max_distance / max_exact)` (a Python float, taken
/// in f64 and rounded to f32), times the logarithmic buckets, truncated.
pub fn relative_bucket(
    rel: i64,
    bidirectional: bool,
    n_buckets: usize,
    max_distance: usize,
) -> usize {
    let mut n = n_buckets as i64;
    let mut bucket = 0i64;
    let mut rel = rel;
    if bidirectional {
        n /= 2;
        if rel > 0 {
            bucket += n;
        }
        rel = rel.abs();
    } else {
        rel = -rel.min(0);
    }
    let max_exact = n / 2;
    if rel < max_exact {
        bucket += rel;
    } else {
        let denominator = (max_distance as f64 / max_exact as f64).ln() as f32;
        let large = (rel as f32 / max_exact as f32).ln() / denominator * (n - max_exact) as f32;
        bucket += (max_exact + large as i64).min(n - 1);
    }
    bucket as usize
}

/// Sinusoidal positions as Marian builds them: position `p`, pair `i` of
/// `dim / 2`: `sin(p / 10000^(2i/dim))` in the first half, `cos` of the
/// same angle in the second, computed in f64 and rounded.
pub fn sinusoidal_table(n: usize, dim: usize) -> Vec<f32> {
    let half = dim.div_ceil(2);
    let mut t = vec![0f32; n * dim];
    for p in 0..n {
        let row = &mut t[p * dim..(p + 1) * dim];
        for (j, out) in row.iter_mut().enumerate() {
            // Column j holds sin of pair j (first half) or cos of pair
            // j - half (second half), pair i's angle p / 10000^(2i/dim).
            let (i, sin) = if j < half {
                (j, true)
            } else {
                (j - half, false)
            };
            let angle = p as f64 / 10000f64.powf((2 * i) as f64 / dim as f64);
            *out = if sin { angle.sin() } else { angle.cos() } as f32;
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_match_t5() {
        // T5's _relative_position_bucket (32 buckets, distance 128).
        assert_eq!(relative_bucket(0, true, 32, 128), 0);
        assert_eq!(relative_bucket(3, true, 32, 128), 19);
        assert_eq!(relative_bucket(-3, true, 32, 128), 3);
        assert_eq!(relative_bucket(-100, true, 32, 128), 15);
        assert_eq!(relative_bucket(-5, false, 32, 128), 5);
        assert_eq!(relative_bucket(4, false, 32, 128), 0);
        // MPNet's: tests/embed_mpnet.rs (goldens from transformers).
    }

    #[test]
    fn sinusoids_start_at_zero_and_one() {
        let t = sinusoidal_table(3, 8);
        assert_eq!(&t[..8], &[0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]);
        assert_eq!(t[8], 1f64.sin() as f32);
        assert_eq!(t[12], 1f64.cos() as f32);
    }
}
