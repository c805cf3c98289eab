//! From token vectors to one sentence vector: the pooling a model asks for
//! (sentence-transformers' `1_Pooling/config.json`), and the
//! normalizations after it.

use std::path::Path;

use crate::formats::safetensors::read_json;
use crate::Error;

/// How token vectors become one sentence vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// Average of every token's vector (special tokens included).
    Mean,
    /// The first token's vector (`[CLS]`).
    Cls,
    /// The last token's vector.
    Last,
}

impl Pooling {
    /// `mean`, `cls` or `last`.
    pub fn from_name(name: &str) -> Option<Pooling> {
        Some(match name {
            "mean" => Pooling::Mean,
            "cls" => Pooling::Cls,
            "last" => Pooling::Last,
            _ => return None,
        })
    }

    /// `mean`, `cls` or `last`.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }
}

/// The pooling the sentence-transformers directory asks for, if it says.
pub(super) fn pooling_from_dir(dir: &Path) -> Result<Option<Pooling>, Error> {
    let path = dir.join("1_Pooling").join("config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let cfg = read_json(&path)?;
    let on = |key: &str| cfg.get(key).and_then(|v| v.as_bool()) == Some(true);
    Ok(if on("pooling_mode_cls_token") {
        Some(Pooling::Cls)
    } else if on("pooling_mode_lasttoken") {
        Some(Pooling::Last)
    } else if on("pooling_mode_mean_tokens") {
        Some(Pooling::Mean)
    } else {
        let modes: Vec<&str> = cfg
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(k, v)| k.starts_with("pooling_mode") && v.as_bool() == Some(true))
                    .map(|(k, _)| k.as_str())
                    .collect()
            })
            .unwrap_or_default();
        return Err(Error::model(
            path.display().to_string(),
            format!("pooling {modes:?} is not supported (mean, cls, last token)"),
        ));
    })
}

/// Pools `rows` (`n x dim`) into one vector; sums in f64, in token order.
pub(super) fn pool(rows: &[f32], dim: usize, pooling: Pooling) -> Vec<f32> {
    let n = rows.len() / dim;
    if n == 0 {
        return vec![0.0; dim];
    }
    match pooling {
        Pooling::Cls => rows[..dim].to_vec(),
        Pooling::Last => rows[(n - 1) * dim..].to_vec(),
        Pooling::Mean => {
            let mut sum = vec![0f64; dim];
            for row in rows.chunks_exact(dim) {
                sum.iter_mut().zip(row).for_each(|(s, &v)| *s += v as f64);
            }
            sum.iter().map(|&s| (s / n as f64) as f32).collect()
        }
    }
}

/// `v / max(|v|, 1e-12)`, as `torch.nn.functional.normalize`.
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let inv = 1.0 / norm.max(1e-12);
    v.iter_mut().for_each(|x| *x = (*x as f64 * inv) as f32);
}

/// Layer normalization without weights.
pub(super) fn layer_norm_plain(v: &mut [f32], eps: f64) {
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
    let inv = 1.0 / (var + eps).sqrt();
    v.iter_mut()
        .for_each(|x| *x = ((*x as f64 - mean) * inv) as f32);
}
