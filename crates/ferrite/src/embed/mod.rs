//! Sentence embeddings, as sentence-transformers computes them: tokenize
//! (cut to the model's maximum length), run the encoder, pool the last
//! hidden states (mean, CLS or last token, as the model's
//! `1_Pooling/config.json` or GGUF `pooling_type` says), optionally cut to
//! fewer dimensions (Matryoshka), L2-normalize.
//!
//! Batches: inputs are sorted by token count so each batch holds similar
//! lengths, run through the encoder with no padding (see
//! `models::encoder`), and returned in input order. An input's embedding
//! is bit-identical alone or in any batch, for any thread count.
//!
//! A model is either a sentence-transformers / HF directory
//! (`config.json`, `model.safetensors`, `tokenizer.json`, optional
//! `modules.json`, `1_Pooling/config.json`, `sentence_bert_config.json`) or
//! a GGUF file of architecture `bert` or `nomic-bert` as llama.cpp writes
//! them.

mod pooling;
pub mod tokenizer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::dump::TensorDump;
use crate::formats::gguf::GgufFile;
use crate::formats::safetensors::{read_json, SafetensorsDir};
use crate::models::encoder::weights::WeightSource;
pub use crate::models::encoder::Products;
use crate::models::encoder::{Encoder, Workspace};
use crate::models::encoder_arch;
use crate::models::hparams::HParams;
use crate::parallel::Threads;
use crate::Error;
pub use pooling::{l2_normalize, Pooling};
use pooling::{layer_norm_plain, pool, pooling_from_dir};
use tokenizer::EmbedTokenizer;

/// What an input is for, for models trained with task prefixes
/// (nomic-embed-text: "search_query: ", ...). The prefix is put before the
/// text; the same text with the prefix typed in gives the same vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    /// A search query (`search_query: `).
    Query,
    /// A document to be searched (`search_document: `).
    Document,
    /// Input to a classifier (`classification: `).
    Classification,
    /// Input to clustering (`clustering: `).
    Clustering,
}

impl Task {
    /// Every task.
    pub const ALL: [Task; 4] = [
        Task::Query,
        Task::Document,
        Task::Classification,
        Task::Clustering,
    ];

    /// `query`, `document`, `classification` or `clustering`.
    pub fn from_name(name: &str) -> Option<Task> {
        Task::ALL.into_iter().find(|t| t.name() == name)
    }

    /// `query`, `document`, `classification` or `clustering`.
    pub fn name(self) -> &'static str {
        match self {
            Task::Query => "query",
            Task::Document => "document",
            Task::Classification => "classification",
            Task::Clustering => "clustering",
        }
    }

    /// The text nomic-embed-text was trained to see before such inputs.
    pub fn prefix(self) -> &'static str {
        match self {
            Task::Query => "search_query: ",
            Task::Document => "search_document: ",
            Task::Classification => "classification: ",
            Task::Clustering => "clustering: ",
        }
    }
}

/// The smallest Matryoshka size nomic-embed-text v1.5 was trained for
/// (64, 128, 256, 512, 768).
pub const NOMIC_MIN_DIM: usize = 64;

/// Per-request choices.
#[derive(Clone, Copy, Debug)]
pub struct EmbedOptions {
    /// `None`: the model's own pooling.
    pub pooling: Option<Pooling>,
    /// Scale each vector to unit length (L2).
    pub normalize: bool,
    /// Matryoshka: keep the first `dim` values (re-normalized).
    pub dim: Option<usize>,
    /// Cut inputs longer than the maximum (else reject them).
    pub truncate: bool,
    /// Most inputs per encoder call.
    pub batch_size: usize,
    /// Put the task's prefix before every input (models with task
    /// prefixes only).
    pub task: Option<Task>,
    /// Longest input in tokens, specials included (`None`: the model's
    /// default, [`EmbedTokenizer::max_tokens`]); at most the model's
    /// positions ([`Embedder::max_positions`]).
    pub max_tokens: Option<usize>,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions {
            pooling: None,
            normalize: true,
            dim: None,
            truncate: true,
            batch_size: 32,
            task: None,
            max_tokens: None,
        }
    }
}

/// One batch's embeddings, in the batch's order, or the error that stopped
/// it.
type BatchResult = Result<Vec<Embedding>, Error>;

/// The texts whose f32 activations set the int8 products' smoothing
/// ([`Embedder::use_int8`]): short and long, questions, code, numbers,
/// several languages, and nomic-embed-text's task prefixes (none of them
/// from the test corpus).
pub const CALIBRATION_TEXTS: &[&str] = &[
    "The weather today is sunny with a light breeze from the west.",
    "How do I reset my password if I no longer have access to my email?",
    "search_query: what causes the seasons on Earth?",
    "search_document: The tilt of the Earth's axis relative to its orbit causes the seasons: \
     the hemisphere tilted towards the Sun receives more direct sunlight and longer days.",
    "classification: This product broke after two days and the support team never answered.",
    "clustering: Central banks raised interest rates again to fight inflation.",
    "fn main() { let v: Vec<u32> = (0..10).map(|x| x * x).collect(); println!(\"{v:?}\"); }",
    "SELECT name, COUNT(*) FROM orders WHERE total > 100 GROUP BY name ORDER BY 2 DESC;",
    "In 1969, Apollo 11 landed on the Moon; Neil Armstrong stepped out at 02:56 UTC on July 21.",
    "Photosynthesis converts light energy, water and carbon dioxide into glucose and oxygen.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Le musée ouvre à neuf heures, mais la billetterie ferme à dix-sept heures trente.",
    "東京は日本の首都であり、世界で最も人口の多い都市圏の一つです。",
    "OK",
    "A recipe: whisk two eggs, add 200 g of flour and 300 ml of milk, rest for 30 minutes, \
     then fry thin pancakes in a hot buttered pan, turning each once.",
    "The committee reviewed the proposal in detail. After a long discussion about costs, \
     risks and the schedule, it approved the first phase and asked for a revised budget \
     for the second, to be presented at the next quarterly meeting together with an \
     assessment of the staffing needs and of the legal questions raised by the partners.",
];

/// One input's result.
pub struct Embedding {
    /// The pooled (and, if asked, normalized and cut) vector.
    pub vector: Vec<f32>,
    /// Tokens the encoder saw (after truncation).
    pub n_tokens: usize,
    /// Whether the input was cut to the model's maximum length.
    pub truncated: bool,
}

/// A loaded embedding model.
pub struct Embedder {
    /// The encoder's weights.
    encoder: Encoder,
    /// The model's tokenizer.
    tokenizer: EmbedTokenizer,
    /// The model's own pooling.
    pooling: Pooling,
    /// nomic-bert's Matryoshka recipe: layer-normalize (no weights) before
    /// cutting dimensions.
    matryoshka_layer_norm: bool,
    /// Whether the model was trained with [`Task`] prefixes.
    task_prefixes: bool,
    /// Where the model was loaded from.
    source: PathBuf,
}

impl Embedder {
    /// Switches to bf16 products (`--bf16`): see `Encoder::use_bf16`.
    /// Measured on all-MiniLM-L6-v2 and all-mpnet-base-v2 against
    /// sentence-transformers in f32: cosine >= 0.9999 (tests/embed_bf16.rs).
    pub fn use_bf16(&mut self) -> Result<(), Error> {
        self.encoder.use_bf16()
    }

    /// Switches to int8 products (`--int8`): see `Encoder::use_int8`,
    /// the inputs' ranges measured by the f32 model on
    /// `CALIBRATION_TEXTS`. Measured against sentence-transformers
    /// (all-MiniLM-L6-v2, all-mpnet-base-v2) and llama.cpp
    /// (nomic-embed-text-v1.5) in f32 in tests/embed_int8.rs.
    pub fn use_int8(&mut self) -> Result<(), Error> {
        let ids = CALIBRATION_TEXTS
            .iter()
            .map(|t| Ok(self.tokenizer.encode(t, true)?.ids))
            .collect::<Result<Vec<Vec<u32>>, Error>>()?;
        let seqs: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
        let ranges = self.encoder.input_ranges(&seqs, &Threads::all_cores())?;
        self.encoder.use_int8(&ranges)
    }

    /// Switches to `products` (see [`Products`]).
    pub fn use_products(&mut self, products: Products) -> Result<(), Error> {
        match products {
            Products::F32 => Ok(()),
            Products::Bf16 => self.use_bf16(),
            Products::Int8 => self.use_int8(),
        }
    }

    /// Loads a model directory or GGUF file.
    pub fn open(path: &Path) -> Result<Embedder, Error> {
        if path.is_dir() {
            Self::open_dir(path)
        } else {
            Self::open_gguf(path)
        }
    }

    fn open_dir(dir: &Path) -> Result<Embedder, Error> {
        let st = SafetensorsDir::open(dir)?;
        let config = st.config.clone();
        let source = dir.display().to_string();
        let model_type = config
            .get("model_type")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        let src = WeightSource::Safetensors(st);
        let arch = encoder_arch(model_type, true, &source)?;
        let encoder = (arch.from_hf)(&src, &config)?;
        // sentence-transformers' max_seq_length, else the model's positions.
        let st_config = dir.join("sentence_bert_config.json");
        let max_tokens = if st_config.is_file() {
            read_json(&st_config)?
                .get("max_seq_length")
                .and_then(|v| v.as_u64())
                .map(|n| n as usize)
        } else {
            None
        }
        .unwrap_or(encoder.config.trained_positions)
        .clamp(2, encoder.config.max_positions);
        let pooling = pooling_from_dir(dir)?.unwrap_or(Pooling::Mean);
        let tokenizer = EmbedTokenizer::from_file(&dir.join("tokenizer.json"), max_tokens)?;
        Ok(Embedder {
            matryoshka_layer_norm: arch.matryoshka_layer_norm,
            task_prefixes: arch.task_prefixes,
            encoder,
            tokenizer,
            pooling,
            source: dir.to_path_buf(),
        })
    }

    fn open_gguf(path: &Path) -> Result<Embedder, Error> {
        let file = Arc::new(GgufFile::open(path)?);
        let source = path.display().to_string();
        let arch = file.header.architecture().unwrap_or("").to_string();
        let meta = file.metadata();
        let hp = HParams {
            meta,
            arch: &arch,
            source: &source,
        };
        let src = WeightSource::Gguf(file.clone());
        let entry = encoder_arch(&arch, false, &source)?;
        let load = entry
            .gguf
            .map(|g| g.1)
            .ok_or_else(|| Error::model(&source, "no GGUF loader"))?;
        let encoder = load(&src, &hp)?;
        // llama.cpp's pooling types: 1 mean, 2 cls, 3 last.
        let pooling = match hp.opt_value("pooling_type").and_then(|v| v.as_u64()) {
            Some(2) => Pooling::Cls,
            Some(3) => Pooling::Last,
            _ => Pooling::Mean,
        };
        // Inputs are cut to the trained length unless a call asks for more.
        let tokenizer = EmbedTokenizer::from_gguf(meta, encoder.config.trained_positions, &source)?;
        Ok(Embedder {
            matryoshka_layer_norm: entry.matryoshka_layer_norm,
            task_prefixes: entry.task_prefixes,
            encoder,
            tokenizer,
            pooling,
            source: path.to_path_buf(),
        })
    }

    /// The model's tokenizer (the token ids [`Self::embed_tokens`] takes).
    pub fn tokenizer(&self) -> &EmbedTokenizer {
        &self.tokenizer
    }

    /// Where the model was loaded from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// The encoder itself, for the library's own tests.
    #[cfg(any(test, feature = "internals"))]
    #[doc(hidden)]
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }

    /// Width of the embeddings before any Matryoshka cut.
    pub fn dim(&self) -> usize {
        self.encoder.config.dim
    }

    /// The longest input the model takes ([`EmbedOptions::max_tokens`]).
    pub fn max_positions(&self) -> usize {
        self.encoder.config.max_positions
    }

    /// Whether the model was trained for shortened (Matryoshka) vectors,
    /// whose recipe [`Self::embed`] applies for [`EmbedOptions::dim`].
    pub fn matryoshka(&self) -> bool {
        self.matryoshka_layer_norm
    }

    /// Whether the model was trained with task prefixes
    /// ([`EmbedOptions::task`]; nomic-embed-text is).
    pub fn has_task_prefixes(&self) -> bool {
        self.task_prefixes
    }

    /// The Matryoshka sizes [`EmbedOptions::dim`] may take.
    pub fn dims(&self) -> std::ops::RangeInclusive<usize> {
        let min = if self.matryoshka_layer_norm {
            NOMIC_MIN_DIM.min(self.dim())
        } else {
            1
        };
        min..=self.dim()
    }

    /// Checks a request's options against the model. The errors name the
    /// options as [`EmbedOptions`] (and the Python package) spell them;
    /// the CLI checks its flags first, under their own names.
    fn check(&self, opts: &EmbedOptions) -> Result<(), Error> {
        if let Some(d) = opts.dim {
            let dims = self.dims();
            if !dims.contains(&d) {
                return Err(Error::Input(format!(
                    "dim={d} is not in {}..={} for this model",
                    dims.start(),
                    dims.end()
                )));
            }
        }
        if let Some(m) = opts.max_tokens {
            if m < 3 || m > self.max_positions() {
                return Err(Error::Input(format!(
                    "max_tokens={m} is not in 3..={} for this model",
                    self.max_positions()
                )));
            }
        }
        if opts.task.is_some() && !self.task_prefixes {
            return Err(Error::Input(
                "task: this model was not trained with task prefixes \
                 (nomic-embed-text is); write any prefix into the text instead"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Embeds `texts`, results in input order.
    pub fn embed(
        &self,
        texts: &[&str],
        opts: &EmbedOptions,
        threads: &Threads,
    ) -> Result<Vec<Embedding>, Error> {
        let mut progress = |_: usize| {};
        self.embed_with_progress(texts, opts, threads, &mut progress)
    }

    /// As [`Self::embed`], calling `progress(done)` after each batch.
    pub fn embed_with_progress(
        &self,
        texts: &[&str],
        opts: &EmbedOptions,
        threads: &Threads,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<Embedding>, Error> {
        self.check(opts)?;
        let tokens = self.tokenize_all(texts, opts, threads)?;
        self.embed_tokenized(&tokens, opts, threads, progress, None)
    }

    /// As [`Self::embed_with_progress`], writing the named intermediates
    /// of every encoder pass (one per batch) into `dump`, for debugging
    /// ([`TensorDump`]; the vectors are the same bits as without it).
    pub fn embed_dumped(
        &self,
        texts: &[&str],
        opts: &EmbedOptions,
        threads: &Threads,
        progress: &mut dyn FnMut(usize),
        dump: Arc<TensorDump>,
    ) -> Result<Vec<Embedding>, Error> {
        self.check(opts)?;
        let tokens = self.tokenize_all(texts, opts, threads)?;
        self.embed_tokenized(&tokens, opts, threads, progress, Some(dump))
    }

    /// Embeds inputs already tokenized, each with the model's special
    /// tokens ([`EmbedTokenizer::encode_untruncated`], or
    /// [`EmbedTokenizer::with_special_tokens`] for a text's token ids):
    /// the vectors [`Self::embed`] gives for the texts. An input longer
    /// than the model's maximum ([`EmbedOptions::max_tokens`], else the
    /// tokenizer's) is an error; `task` is not applied.
    pub fn embed_tokens(
        &self,
        inputs: &[&[u32]],
        opts: &EmbedOptions,
        threads: &Threads,
    ) -> Result<Vec<Embedding>, Error> {
        self.check(opts)?;
        let max = opts.max_tokens.unwrap_or(self.tokenizer.max_tokens);
        let n_vocab = self.encoder.config.n_vocab;
        let mut tokens = Vec::with_capacity(inputs.len());
        for (i, ids) in inputs.iter().enumerate() {
            if ids.len() > max {
                return Err(Error::Input(format!(
                    "input {}: {} tokens, more than the maximum of {max}",
                    i + 1,
                    ids.len()
                )));
            }
            if let Some(id) = ids.iter().find(|&&id| id as usize >= n_vocab) {
                return Err(Error::Input(format!(
                    "input {}: token id {id} is not below the model's {n_vocab}",
                    i + 1
                )));
            }
            tokens.push(tokenizer::Tokens {
                ids: ids.to_vec(),
                truncated: false,
            });
        }
        self.embed_tokenized(&tokens, opts, threads, &mut |_| {}, None)
    }

    /// The batches of [`Self::embed_with_progress`] over tokenized inputs.
    fn embed_tokenized(
        &self,
        tokens: &[tokenizer::Tokens],
        opts: &EmbedOptions,
        threads: &Threads,
        progress: &mut dyn FnMut(usize),
        dump: Option<Arc<TensorDump>>,
    ) -> Result<Vec<Embedding>, Error> {
        // Longest first, ties in input order: batches of similar lengths.
        let mut order: Vec<usize> = (0..tokens.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(tokens[i].ids.len()));
        let batches: Vec<&[usize]> = order.chunks(opts.batch_size.max(1)).collect();
        let mut out: Vec<Option<Embedding>> = (0..tokens.len()).map(|_| None).collect();
        let mut ws = Workspace::default();
        ws.dump = dump;
        let mut done = 0;
        for batch in &batches {
            let vectors = self.embed_batch(batch, tokens, opts, threads, &mut ws)?;
            for (&i, e) in batch.iter().zip(vectors) {
                out[i] = Some(e);
            }
            done += batch.len();
            progress(done);
        }
        // Every index was in exactly one batch.
        Ok(out
            .into_iter()
            .map(|e| e.expect("every input embedded"))
            .collect())
    }

    /// Every text tokenized (its task prefix first), the texts split
    /// across the threads; the first failure in input order is the error.
    fn tokenize_all(
        &self,
        texts: &[&str],
        opts: &EmbedOptions,
        threads: &Threads,
    ) -> Result<Vec<tokenizer::Tokens>, Error> {
        let max = opts.max_tokens.unwrap_or(self.tokenizer.max_tokens);
        let parts: Vec<Mutex<Vec<Result<tokenizer::Tokens, Error>>>> =
            (0..threads.count()).map(|_| Mutex::default()).collect();
        threads.split_indexed(texts.len(), |part, range| {
            let mut prefixed = String::new();
            let tokens = range.map(|i| {
                let text = match opts.task {
                    Some(task) => {
                        prefixed.clear();
                        prefixed.push_str(task.prefix());
                        prefixed.push_str(texts[i]);
                        &prefixed
                    }
                    None => texts[i],
                };
                self.tokenizer
                    .encode_to(text, max, opts.truncate)
                    .map_err(|e| Error::Input(format!("input {}: {e}", i + 1)))
            });
            let mut out = parts[part].lock().unwrap_or_else(|e| e.into_inner());
            out.extend(tokens);
        });
        // The parts cover the texts in order.
        parts
            .into_iter()
            .flat_map(|p| p.into_inner().unwrap_or_else(|e| e.into_inner()))
            .collect()
    }

    /// The embeddings of the inputs `batch` (indices into `tokens`), in
    /// that order, computed by one encoder pass over all of them.
    fn embed_batch(
        &self,
        batch: &[usize],
        tokens: &[tokenizer::Tokens],
        opts: &EmbedOptions,
        threads: &Threads,
        ws: &mut Workspace,
    ) -> BatchResult {
        let pooling = opts.pooling.unwrap_or(self.pooling);
        let dim = self.dim();
        let seqs: Vec<&[u32]> = batch.iter().map(|&i| tokens[i].ids.as_slice()).collect();
        let hidden = self.encoder.forward(&seqs, threads, ws)?;
        let mut start = 0;
        Ok(batch
            .iter()
            .zip(&seqs)
            .map(|(&i, seq)| {
                let rows = &hidden[start * dim..(start + seq.len()) * dim];
                start += seq.len();
                Embedding {
                    vector: self.finish(pool(rows, dim, pooling), opts),
                    n_tokens: seq.len(),
                    truncated: tokens[i].truncated,
                }
            })
            .collect())
    }

    /// Matryoshka cut and normalization of a pooled vector.
    fn finish(&self, mut v: Vec<f32>, opts: &EmbedOptions) -> Vec<f32> {
        if let Some(d) = opts.dim {
            if self.matryoshka_layer_norm {
                // nomic-embed-text-v1.5's documented recipe:
                // F.layer_norm(emb, (dim,)) then cut, then normalize.
                layer_norm_plain(&mut v, 1e-5);
            }
            v.truncate(d);
        }
        if opts.normalize {
            l2_normalize(&mut v);
        }
        v
    }
}
