//! Translation with encoder-decoder models: a [`Translator`] loads a model
//! directory — Marian / opus-mt (`config.json`, `model.safetensors`,
//! `source.spm`, `target.spm`, `vocab.json`) or T5 / flan-t5
//! (`config.json`, `model.safetensors`, `tokenizer.json`), with
//! `generation_config.json` for the search defaults — and turns sentences
//! into sentences. T5 task prefixes are plain text the caller puts in
//! front of each input (`translate English to German: ...`).
//!
//! Inputs are tokenized, sorted by length and run in batches (the encoder
//! once per batch, then greedy or beam search over all of its inputs);
//! outputs come back in input order, each the same as if it had been
//! translated alone. Inputs longer than the model's positions (Marian) or
//! [`T5_MAX_INPUT`] tokens (T5, whose relative positions have no limit)
//! are cut to fit, keeping their first tokens and the closing `</s>`; an
//! empty or
//! all-blank input translates to an empty string without running the
//! model.

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::Value as Json;

use crate::dump::TensorDump;
use crate::formats::safetensors::read_json;
use crate::generate::beam::{generate, EarlyStopping, SearchOptions};
use crate::generate::cancel::Cancel;
use crate::models::seq2seq::forward::Workspace;
use crate::models::seq2seq::weights::WeightFormat;
use crate::models::seq2seq::Seq2Seq;
use crate::models::{marian, t5};
use crate::parallel::Threads;
use crate::tokenize::marian::MarianTokenizer;
use crate::Error;

/// Longest T5 input kept, in tokens (T5 was trained on 512).
pub const T5_MAX_INPUT: usize = 512;

/// Largest `tokenizer.json` read.
const MAX_TOKENIZER_BYTES: u64 = 64 << 20;

/// A translation model's tokenizer.
pub enum TextCodec {
    /// Marian's SentencePiece pair and shared vocabulary.
    Marian(Box<MarianTokenizer>),
    /// A `tokenizer.json` (T5: Unigram, `</s>` appended by its
    /// post-processor), run by the `tokenizers` crate.
    Hf(Box<tokenizers::Tokenizer>),
}

impl TextCodec {
    /// Source text to ids, `</s>` appended.
    pub fn encode_source(&self, text: &str) -> Result<Vec<u32>, Error> {
        match self {
            TextCodec::Marian(t) => t.encode_source(text),
            TextCodec::Hf(t) => Ok(t
                .encode_fast(text, true)
                .map_err(|e| Error::Input(format!("tokenizer: {e}")))?
                .get_ids()
                .to_vec()),
        }
    }

    /// Output ids to text, special tokens skipped.
    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            TextCodec::Marian(t) => t.decode(ids),
            TextCodec::Hf(t) => t.decode(ids, true).unwrap_or_default(),
        }
    }

    /// Ids the tokenizer can produce (one past the largest).
    pub fn n_ids(&self) -> usize {
        match self {
            TextCodec::Marian(t) => t.n_ids(),
            TextCodec::Hf(t) => t.get_vocab_size(true),
        }
    }

    fn open_hf(dir: &Path) -> Result<TextCodec, Error> {
        let path = dir.join("tokenizer.json");
        let shown = path.display().to_string();
        let len = std::fs::metadata(&path)
            .map_err(|e| Error::model(&shown, e.to_string()))?
            .len();
        if len > MAX_TOKENIZER_BYTES {
            return Err(Error::model(&shown, format!("{len} bytes is too large")));
        }
        let tok = crate::tokenize::hf_json::read_hf_json(&path)
            .map_err(|e| Error::model(&shown, e))?;
        Ok(TextCodec::Hf(Box::new(tok)))
    }
}

/// Inputs run through the model together (at most).
pub const DEFAULT_BATCH: usize = 32;

/// The widest beam the server and the CLI take: search time grows with
/// the beam, and wider beams than this rarely change a translation.
pub const MAX_BEAMS: usize = 16;

/// How to load a translation model.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    pub format: WeightFormat,
    /// Threads (0: one per core).
    pub threads: usize,
}

/// Per-call overrides of the model's generation defaults.
#[derive(Clone, Debug, Default)]
pub struct TranslateOptions {
    /// Beams of the search (1: greedy), at most [`MAX_BEAMS`].
    pub beams: Option<usize>,
    /// Longest output in tokens, counting the decoder start token.
    pub max_length: Option<usize>,
    /// Exponent of the length a finished hypothesis's score is divided by.
    pub length_penalty: Option<f32>,
    /// No n-gram of this size is repeated in an output (0: off).
    pub no_repeat_ngram_size: Option<usize>,
    /// Inputs per batch (default `DEFAULT_BATCH`).
    pub batch: Option<usize>,
    /// Once set, the translation stops at its next step with
    /// `Error::Cancelled` (a server request whose client went away).
    pub cancel: Cancel,
    /// Debugging: write the named intermediates of every encoder pass
    /// (`enc.` names) and decoder step into this dump ([`TensorDump`]).
    /// Changes no output.
    pub dump: Option<Arc<TensorDump>>,
}

/// A loaded translation model (Marian or T5) with its tokenizer.
pub struct Translator {
    /// The encoder-decoder's weights.
    model: Seq2Seq,
    /// The model's tokenizer.
    tokenizer: TextCodec,
    /// The model's `generation_config.json` (or `config.json`) settings.
    defaults: SearchOptions,
    threads: Threads,
    ws: Mutex<Workspace>,
}

/// The kind of translation model in `dir`, if it is one ferrite reads.
fn kind(dir: &Path) -> Option<&'static str> {
    if !dir.is_dir() {
        return None;
    }
    if MarianTokenizer::is_marian_dir(dir) {
        return Some("marian");
    }
    let config = read_json(&dir.join("config.json")).ok()?;
    (t5::is_t5(&config) && dir.join("tokenizer.json").is_file()).then_some("t5")
}

/// True if `dir` looks like a translation model directory ferrite reads.
pub fn is_translation_dir(dir: &Path) -> bool {
    kind(dir).is_some()
}

/// The search settings of a generation config (`generation_config.json`,
/// or the same keys in `config.json` for older directories).
pub fn search_defaults(gen: &Json, max_positions: usize) -> SearchOptions {
    let u = |k: &str| gen.get(k).and_then(Json::as_u64);
    let mut o = SearchOptions {
        max_length: 20,
        ..Default::default()
    };
    if let Some(n) = u("num_beams") {
        o.num_beams = (n as usize).clamp(1, 64);
    }
    if let Some(n) = u("max_length") {
        o.max_length = (n as usize).clamp(2, max_positions + 1);
    }
    if let Some(p) = gen.get("length_penalty").and_then(Json::as_f64) {
        o.length_penalty = p as f32;
    }
    o.early_stopping = match gen.get("early_stopping") {
        Some(Json::Bool(true)) => EarlyStopping::True,
        Some(Json::String(s)) if s == "never" => EarlyStopping::Never,
        _ => EarlyStopping::False,
    };
    if let Some(n) = u("no_repeat_ngram_size") {
        o.no_repeat_ngram_size = n as usize;
    }
    if let Some(Json::Array(words)) = gen.get("bad_words_ids") {
        for w in words {
            if let Some([id]) = w.as_array().map(Vec::as_slice) {
                if let Some(id) = id.as_u64().and_then(|i| u32::try_from(i).ok()) {
                    o.banned.push(id);
                }
            }
        }
    }
    o.forced_eos = u("forced_eos_token_id").and_then(|i| u32::try_from(i).ok());
    o.renormalize = gen.get("renormalize_logits").and_then(Json::as_bool) == Some(true);
    o
}

impl Translator {
    /// Loads the model directory `dir`.
    pub fn open(dir: &Path, opts: &LoadOptions) -> Result<Translator, Error> {
        let threads = if opts.threads == 0 {
            Threads::all_cores()
        } else {
            Threads::new(opts.threads)
        };
        Translator::open_with_threads(dir, opts.format, threads)
    }

    /// Loads the model directory `dir`, to run on an existing thread pool.
    pub fn open_with_threads(
        dir: &Path,
        format: WeightFormat,
        threads: Threads,
    ) -> Result<Translator, Error> {
        let shown = dir.display().to_string();
        if !dir.is_dir() {
            return Err(Error::model(
                shown,
                "not a directory (a translation model is a directory)",
            ));
        }
        let (model, tokenizer) =
            match kind(dir) {
                Some("marian") => (
                    marian::load(dir, format)?,
                    TextCodec::Marian(Box::new(MarianTokenizer::open(dir)?)),
                ),
                Some(_) => (t5::load(dir, format)?, TextCodec::open_hf(dir)?),
                None => return Err(Error::model(
                    shown,
                    "not a translation model: expected a Marian / opus-mt directory (config.json, \
                     model.safetensors, source.spm, target.spm, vocab.json) or a T5 one \
                     (config.json with model_type t5, model.safetensors, tokenizer.json)",
                )),
            };
        if tokenizer.n_ids() > model.config.n_vocab {
            return Err(Error::model(
                shown,
                format!(
                    "vocab.json has ids up to {} but the model only {}",
                    tokenizer.n_ids(),
                    model.config.n_vocab
                ),
            ));
        }
        let gen_path = dir.join("generation_config.json");
        let gen = if gen_path.is_file() {
            read_json(&gen_path)?
        } else {
            read_json(&dir.join("config.json"))?
        };
        let max_pos = model.config.max_positions.unwrap_or(usize::MAX - 1);
        Ok(Translator {
            defaults: search_defaults(&gen, max_pos),
            model,
            tokenizer,
            threads,
            ws: Mutex::new(Workspace::default()),
        })
    }

    /// The encoder-decoder itself, for the library's own tests.
    #[cfg(any(test, feature = "internals"))]
    #[doc(hidden)]
    pub fn model(&self) -> &Seq2Seq {
        &self.model
    }

    /// The tokenizer, for the library's own tests.
    #[cfg(any(test, feature = "internals"))]
    #[doc(hidden)]
    pub fn tokenizer(&self) -> &TextCodec {
        &self.tokenizer
    }

    /// The model's own search settings (`generation_config.json`), for the
    /// library's own tests; [`Translator::search_options`] applies them.
    #[cfg(any(test, feature = "internals"))]
    #[doc(hidden)]
    pub fn defaults(&self) -> &SearchOptions {
        &self.defaults
    }

    /// The search settings for `opts` over the model's defaults.
    pub fn search_options(&self, opts: &TranslateOptions) -> SearchOptions {
        let mut s = self.defaults.clone();
        if let Some(b) = opts.beams {
            s.num_beams = b.max(1);
        }
        if let Some(m) = opts.max_length {
            let limit = self
                .model
                .config
                .max_positions
                .map_or(usize::MAX, |p| p + 1);
            s.max_length = m.clamp(2, limit);
        }
        if let Some(p) = opts.length_penalty {
            s.length_penalty = p;
        }
        if let Some(n) = opts.no_repeat_ngram_size {
            s.no_repeat_ngram_size = n;
        }
        s.cancel = opts.cancel.clone();
        s
    }

    /// The most source tokens an input keeps (the model's positions; T5:
    /// 512); [`Translator::encode`] cuts longer ones.
    pub fn max_source_tokens(&self) -> usize {
        self.model.config.max_positions.unwrap_or(T5_MAX_INPUT)
    }

    /// Whether [`Translator::encode`] cuts `text` to fit.
    pub fn is_cut(&self, text: &str) -> Result<bool, Error> {
        Ok(self.tokenizer.encode_source(text)?.len() > self.max_source_tokens())
    }

    /// Source text to input ids, cut to the model's positions if longer.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, Error> {
        let mut ids = self.tokenizer.encode_source(text)?;
        let max = self.max_source_tokens();
        if ids.len() > max {
            ids.truncate(max - 1);
            ids.push(self.model.config.eos);
        }
        Ok(ids)
    }

    /// Output ids for each input (ids as [`Translator::encode`] gives
    /// them), in batches of inputs of similar length.
    pub fn generate_ids(
        &self,
        inputs: &[Vec<u32>],
        opts: &TranslateOptions,
    ) -> Result<Vec<Vec<u32>>, Error> {
        let search = self.search_options(opts);
        let batch = opts.batch.unwrap_or(DEFAULT_BATCH).max(1);
        let mut order: Vec<usize> = (0..inputs.len()).collect();
        order.sort_by_key(|&i| inputs[i].len());
        let mut out = vec![Vec::new(); inputs.len()];
        let mut ws = self.ws.lock().unwrap_or_else(|e| e.into_inner());
        // The workspace is the translator's: it holds this call's dump
        // only while the call runs.
        ws.dump = opts.dump.clone();
        let result = (|| -> Result<(), Error> {
            for group in order.chunks(batch) {
                // Also before the first batch: a request may have waited for
                // the workspace while its client left.
                search.cancel.check()?;
                let seqs: Vec<&[u32]> = group.iter().map(|&i| &inputs[i][..]).collect();
                let encoded = self.model.encode(&seqs, &self.threads, &mut ws)?;
                let results = generate(&self.model, &encoded, &search, &self.threads, &mut ws)?;
                for (&i, r) in group.iter().zip(results) {
                    out[i] = r;
                }
            }
            Ok(())
        })();
        ws.dump = None;
        result.map(|()| out)
    }

    /// Translates each text; blank texts give empty strings.
    pub fn translate(&self, texts: &[&str], opts: &TranslateOptions) -> Result<Vec<String>, Error> {
        let mut ids = Vec::new();
        let mut which = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            if !t.trim().is_empty() {
                ids.push(self.encode(t)?);
                which.push(i);
            }
        }
        let outs = self.generate_ids(&ids, opts)?;
        let mut result = vec![String::new(); texts.len()];
        for (i, o) in which.into_iter().zip(outs) {
            result[i] = self.tokenizer.decode(&o);
        }
        Ok(result)
    }
}
