//! Relative-position buckets (T5, MPNet): the bias a model adds to an
//! attention score by the distance between query and key.

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
}
