//! Cross-encoder rerankers, as sentence-transformers' `CrossEncoder`
//! scores a (query, document) pair: the pair is tokenized as one input
//! (`[CLS] query [SEP] document [SEP]`, token types 0 then 1, cut
//! longest-first to the model's maximum length as HF `tokenizers` cuts a
//! pair), run through the encoder, and the first token's last hidden state
//! goes through the classification head of HF's
//! `BertForSequenceClassification`: the pooler (`dense`, tanh), then the
//! `classifier` linear layer to `num_labels` logits. The scores are the
//! logits through the activation the model's `config.json` names
//! (sentence-transformers' `activation_fn`), else sigmoid for one label and
//! identity for several; or the raw logits on request.
//!
//! Pairs run in batches of similar lengths through the same packed,
//! padding-free encoder pass as embeddings (`models::encoder`), so a
//! pair's scores are bit-identical alone or in any batch.
//!
//! A directory without the head (a plain `BertModel` such as
//! all-MiniLM-L6-v2) is refused: its scores would be meaningless.

use std::path::{Path, PathBuf};

use tokenizers::{EncodeInput, TruncationDirection, TruncationParams, TruncationStrategy};

use crate::formats::safetensors::{read_json, SafetensorsDir};
use crate::models::encoder::weights::{Dense, WeightSource};
use crate::models::encoder::{dense, Encoder, Workspace};
use crate::parallel::Threads;
use crate::Error;

/// The function a cross-encoder's logits go through to become scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoreActivation {
    /// `1 / (1 + e^-x)` (the default for one label).
    Sigmoid,
    /// The logits as they are (the default for several labels).
    Identity,
    /// `tanh(x)`.
    Tanh,
}

impl ScoreActivation {
    fn from_torch_name(name: &str) -> Option<ScoreActivation> {
        // "torch.nn.modules.activation.Sigmoid", "torch.nn.Identity", ...
        Some(match name.rsplit('.').next()? {
            "Sigmoid" => ScoreActivation::Sigmoid,
            "Identity" => ScoreActivation::Identity,
            "Tanh" => ScoreActivation::Tanh,
            _ => return None,
        })
    }

    /// Applies the function to one logit (in f32, as torch does).
    pub fn apply(self, x: f32) -> f32 {
        match self {
            ScoreActivation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            ScoreActivation::Identity => x,
            ScoreActivation::Tanh => x.tanh(),
        }
    }
}

/// Per-call choices.
#[derive(Clone, Copy, Debug)]
pub struct RerankOptions {
    /// The logits themselves, without the model's activation.
    pub raw_scores: bool,
    /// Most pairs per encoder call.
    pub batch_size: usize,
}

impl Default for RerankOptions {
    fn default() -> Self {
        RerankOptions {
            raw_scores: false,
            batch_size: 32,
        }
    }
}

/// A pair tokenized for the encoder ([`Reranker::tokenize_pair`]).
#[derive(Clone, Debug)]
pub struct PairTokens {
    /// The token ids, special tokens included.
    pub ids: Vec<u32>,
    /// Each token's type (0 for the query's part, 1 for the document's).
    pub types: Vec<u32>,
    /// Whether a text was cut to fit the model's maximum length.
    pub truncated: bool,
}

/// One document's place in a ranking ([`Reranker::rank`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ranked {
    /// The document's index in the input.
    pub index: usize,
    /// Its score.
    pub score: f32,
}

/// A loaded cross-encoder.
pub struct Reranker {
    encoder: Encoder,
    tokenizer: tokenizers::Tokenizer,
    max_tokens: usize,
    /// The pooler: `(dim, dim)`, tanh after.
    pooler: Dense,
    /// `(n_labels, dim)`.
    classifier: Dense,
    n_labels: usize,
    activation: ScoreActivation,
    source: PathBuf,
}

impl Reranker {
    /// Loads a `BertForSequenceClassification` directory (`config.json`,
    /// `model.safetensors`, `tokenizer.json`).
    pub fn open(path: &Path) -> Result<Reranker, Error> {
        let source = path.display().to_string();
        if !path.is_dir() {
            return Err(Error::model(
                &source,
                "a cross-encoder is read from a Hugging Face directory \
                 (config.json, model.safetensors, tokenizer.json)",
            ));
        }
        let st = SafetensorsDir::open(path)?;
        let config = st.config.clone();
        let model_type = config
            .get("model_type")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        if model_type != "bert" {
            return Err(Error::model(
                &source,
                format!(
                    "model_type '{model_type}' is not supported as a cross-encoder \
                     (BertForSequenceClassification only)"
                ),
            ));
        }
        let src = WeightSource::Safetensors(st);
        let (pooler_name, classifier_name) = ("bert.pooler.dense", "classifier");
        if !src.has(&format!("{classifier_name}.weight")) {
            let classes = config
                .get("architectures")
                .map(|a| a.to_string())
                .unwrap_or_else(|| "none".into());
            return Err(Error::model(
                &source,
                format!(
                    "not a cross-encoder: no classification head ('classifier.weight'); \
                     its architectures are {classes}. A reranker is a \
                     BertForSequenceClassification directory (an embedding model such \
                     as all-MiniLM-L6-v2 has no head: use `ferrite embed`)"
                ),
            ));
        }
        let encoder = crate::models::encoder::bert::from_hf(&src, &config)?;
        if encoder.token_types.as_ref().map_or(0, |t| t.len()) < 2 * encoder.config.dim {
            return Err(Error::model(
                &source,
                "a cross-encoder needs two token types (its token_type_embeddings)",
            ));
        }
        let dim = encoder.config.dim;
        let n_labels = match src.shape(&format!("{classifier_name}.weight")).as_deref() {
            Some([n, d]) if *d == dim && *n > 0 => *n,
            other => {
                return Err(Error::model(
                    &source,
                    format!("'classifier.weight' has shape {other:?}, expected (num_labels, {dim})"),
                ))
            }
        };
        let read_dense = |name: &str, rows: usize| -> Result<Dense, Error> {
            Ok(Dense {
                w: src.packed(&format!("{name}.weight"), rows, dim)?,
                bias: Some(src.vector(&format!("{name}.bias"), rows)?),
            })
        };
        if !src.has(&format!("{pooler_name}.weight")) {
            return Err(Error::model(
                &source,
                "no pooler ('bert.pooler.dense.weight'): BertForSequenceClassification \
                 classifies the pooled first token",
            ));
        }
        let pooler = read_dense(pooler_name, dim)?;
        let classifier = read_dense(classifier_name, n_labels)?;
        let activation = activation_of(&config, n_labels, &source)?;
        let max_tokens = max_tokens_of(path, encoder.config.max_positions)?;
        let mut tokenizer = crate::tokenize::hf_json::read_hf_json(&path.join("tokenizer.json"))
            .map_err(|e| Error::model(&source, format!("tokenizer: {e}")))?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            }))
            .map_err(|e| Error::model(&source, format!("tokenizer: {e}")))?;
        Ok(Reranker {
            encoder,
            tokenizer,
            max_tokens,
            pooler,
            classifier,
            n_labels,
            activation,
            source: path.to_path_buf(),
        })
    }

    /// Whether `path` is a directory whose `config.json` names a
    /// sequence-classification architecture (`BertForSequenceClassification`,
    /// ...): what a server loads as a reranker rather than an embedder.
    pub fn is_cross_encoder(path: &Path) -> bool {
        let config = path.join("config.json");
        if !path.is_dir() || !config.is_file() {
            return false;
        }
        read_json(&config).is_ok_and(|c| {
            c.get("architectures")
                .and_then(|a| a.as_array())
                .is_some_and(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str())
                        .any(|x| x.ends_with("ForSequenceClassification"))
                })
        })
    }

    /// Where the model was loaded from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// How many scores each pair gets (the model's `num_labels`).
    pub fn n_labels(&self) -> usize {
        self.n_labels
    }

    /// The activation the scores go through unless raw scores are asked for.
    pub fn activation(&self) -> ScoreActivation {
        self.activation
    }

    /// The longest pair in tokens, special tokens included; longer pairs
    /// are cut, the longer text first.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// The pair's token ids and types, cut longest-first to
    /// [`Self::max_tokens`] as HF `tokenizers` cuts a pair (the shorter
    /// text keeps its tokens while it fits half of the room).
    pub fn tokenize_pair(&self, query: &str, document: &str) -> Result<PairTokens, Error> {
        let enc = self
            .tokenizer
            .encode_fast(EncodeInput::Dual(query.into(), document.into()), true)
            .map_err(|e| Error::Input(format!("cannot tokenize the pair: {e}")))?;
        Ok(PairTokens {
            ids: enc.get_ids().to_vec(),
            types: enc.get_type_ids().to_vec(),
            truncated: !enc.get_overflowing().is_empty(),
        })
    }

    /// Every pair's scores (`n_labels` each), in input order.
    pub fn predict(
        &self,
        pairs: &[(&str, &str)],
        opts: &RerankOptions,
        threads: &Threads,
    ) -> Result<Vec<Vec<f32>>, Error> {
        let tokens = pairs
            .iter()
            .enumerate()
            .map(|(i, (q, d))| {
                self.tokenize_pair(q, d)
                    .map_err(|e| Error::Input(format!("pair {}: {e}", i + 1)))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let refs: Vec<&PairTokens> = tokens.iter().collect();
        self.score_tokens(&refs, opts, threads)
    }

    /// The scores of pairs already tokenized ([`Self::tokenize_pair`]), in
    /// input order; batches of at most `opts.batch_size` pairs of similar
    /// lengths.
    pub fn score_tokens(
        &self,
        pairs: &[&PairTokens],
        opts: &RerankOptions,
        threads: &Threads,
    ) -> Result<Vec<Vec<f32>>, Error> {
        for (i, p) in pairs.iter().enumerate() {
            if p.ids.len() != p.types.len() || p.ids.len() > self.max_tokens || p.ids.is_empty() {
                return Err(Error::Input(format!(
                    "pair {}: {} tokens and {} types (1 to {} tokens, one type each)",
                    i + 1,
                    p.ids.len(),
                    p.types.len(),
                    self.max_tokens
                )));
            }
        }
        let mut order: Vec<usize> = (0..pairs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(pairs[i].ids.len()));
        let mut out = vec![Vec::new(); pairs.len()];
        let mut ws = Workspace::default();
        let dim = self.encoder.config.dim;
        for batch in order.chunks(opts.batch_size.max(1)) {
            let seqs: Vec<&[u32]> = batch.iter().map(|&i| pairs[i].ids.as_slice()).collect();
            let types: Vec<&[u32]> = batch.iter().map(|&i| pairs[i].types.as_slice()).collect();
            let hidden = self.encoder.forward_typed(&seqs, &types, threads, &mut ws)?;
            // The first token of each sequence, gathered.
            let mut first = Vec::with_capacity(batch.len() * dim);
            let mut start = 0;
            for s in &seqs {
                first.extend_from_slice(&hidden[start * dim..(start + 1) * dim]);
                start += s.len();
            }
            let mut pooled = vec![0.0; batch.len() * dim];
            dense(&self.pooler, &first, batch.len(), &mut pooled, None, threads);
            pooled.iter_mut().for_each(|v| *v = v.tanh());
            let mut logits = vec![0.0; batch.len() * self.n_labels];
            dense(
                &self.classifier,
                &pooled,
                batch.len(),
                &mut logits,
                None,
                threads,
            );
            for (&i, row) in batch.iter().zip(logits.chunks_exact(self.n_labels)) {
                out[i] = row
                    .iter()
                    .map(|&x| {
                        if opts.raw_scores {
                            x
                        } else {
                            self.activation.apply(x)
                        }
                    })
                    .collect();
            }
        }
        Ok(out)
    }

    /// The documents ranked by their score against `query`, best first
    /// (ties by index), the first `top_n` if given. The model must have
    /// one label; an empty query is an error.
    pub fn rank(
        &self,
        query: &str,
        documents: &[&str],
        top_n: Option<usize>,
        opts: &RerankOptions,
        threads: &Threads,
    ) -> Result<Vec<Ranked>, Error> {
        if query.trim().is_empty() {
            return Err(Error::Input("the query is empty".into()));
        }
        let pairs: Vec<(&str, &str)> = documents.iter().map(|d| (query, *d)).collect();
        let scores = self.predict(&pairs, opts, threads)?;
        self.ranking(&scores, top_n)
    }

    /// Scores of a one-label model ([`Self::score_tokens`]) sorted best
    /// first, ties by index, cut to `top_n` if given.
    pub fn ranking(&self, scores: &[Vec<f32>], top_n: Option<usize>) -> Result<Vec<Ranked>, Error> {
        if self.n_labels != 1 {
            return Err(Error::Input(format!(
                "ranking needs a model with one score per pair; this one has {} labels \
                 (use predict for its scores)",
                self.n_labels
            )));
        }
        Ok(rank_scores(scores.iter().map(|s| s[0]), top_n))
    }
}

/// `scores` sorted best first (ties by index; NaN last), cut to `top_n`.
pub fn rank_scores(scores: impl Iterator<Item = f32>, top_n: Option<usize>) -> Vec<Ranked> {
    let mut ranked: Vec<Ranked> = scores
        .enumerate()
        .map(|(index, score)| Ranked { index, score })
        .collect();
    ranked.sort_by(|a, b| {
        let key = |r: &Ranked| if r.score.is_nan() { f32::NEG_INFINITY } else { r.score };
        key(b).total_cmp(&key(a)).then(a.index.cmp(&b.index))
    });
    if let Some(n) = top_n {
        ranked.truncate(n);
    }
    ranked
}

/// The activation `config.json` names (sentence-transformers v4's
/// `sentence_transformers.activation_fn`, or v2/v3's
/// `sbert_ce_default_activation_function`), else sigmoid for one label and
/// identity for several, as `CrossEncoder` chooses.
fn activation_of(
    config: &serde_json::Value,
    n_labels: usize,
    source: &str,
) -> Result<ScoreActivation, Error> {
    let named = config
        .pointer("/sentence_transformers/activation_fn")
        .or_else(|| config.get("sbert_ce_default_activation_function"))
        .and_then(|v| v.as_str());
    match named {
        Some(name) => ScoreActivation::from_torch_name(name).ok_or_else(|| {
            Error::model(
                source,
                format!("activation '{name}' is not supported (Sigmoid, Identity, Tanh)"),
            )
        }),
        None if n_labels == 1 => Ok(ScoreActivation::Sigmoid),
        None => Ok(ScoreActivation::Identity),
    }
}

/// The tokenizer's `model_max_length` (`tokenizer_config.json`, what
/// `CrossEncoder` cuts pairs to), at most the model's positions.
fn max_tokens_of(dir: &Path, positions: usize) -> Result<usize, Error> {
    let path = dir.join("tokenizer_config.json");
    let configured = if path.is_file() {
        read_json(&path)?
            .get("model_max_length")
            .and_then(|v| v.as_f64())
            .filter(|&n| n >= 4.0 && n < positions as f64)
            .map(|n| n as usize)
    } else {
        None
    };
    Ok(configured.unwrap_or(positions))
}
