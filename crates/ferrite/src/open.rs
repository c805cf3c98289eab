//! The one entry point: [`open`] takes what a user typed (a path or a
//! short name), decides what kind of model it is, and loads it.
//!
//! The rules, in order (the only place they are written):
//! 1. a directory that holds a Marian / opus-mt or T5 model is a
//!    translator;
//! 2. any other directory needs a `config.json`: an encoder `model_type`
//!    (BERT, nomic-bert, MPNet) is an embedder, anything else is read as a
//!    Hugging Face decoder (whose reader names what is wrong);
//! 3. a file starting with GGUF's magic is an embedder when its
//!    `general.architecture` is an encoder's, else a decoder;
//! 4. any other file is read as a llama2.c checkpoint, with the
//!    `tokenizer.bin` beside it (or [`OpenOptions::tokenizer`]).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::embed::Embedder;
use crate::formats::gguf::GgufFile;
use crate::formats::safetensors::read_json;
use crate::formats::{hf_decoder, llama2c};
use crate::generate::beam::{generate_decoder, SearchOptions};
use crate::generate::sampler::SamplerOptions;
use crate::generate::session::{GenerateOptions, StopReason};
use crate::models::{encoder_arch, load_causal_lm, CausalLm};
use crate::parallel::Threads;
use crate::tokenize::Tokenizer;
use crate::translate::{is_translation_dir, Translator};
use crate::{model_path, Error};

pub use crate::models::seq2seq::weights::WeightFormat;

/// What kind of model a file or directory holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    /// A decoder: text generation (completion, chat).
    Generator,
    /// An encoder: sentence embeddings.
    Embedder,
    /// An encoder-decoder: translation.
    Translator,
}

impl ModelKind {
    /// What the model does, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            ModelKind::Generator => "a text-generation model",
            ModelKind::Embedder => "an embedding model",
            ModelKind::Translator => "a translation model",
        }
    }
}

/// Choices made when a model is loaded.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// The `tokenizer.bin` of a llama2.c checkpoint (default: the one
    /// beside the checkpoint).
    pub tokenizer: Option<PathBuf>,
    /// Weight storage of a translation model (`Q8_0`: quantized at load).
    pub translation_weights: WeightFormat,
    /// Threads a translator runs on (default: one per core).
    pub threads: Option<Threads>,
    /// A Hugging Face decoder directory's matrices quantized at load to
    /// this file type, as `ferrite convert --outtype TYPE` would write them
    /// (`crate::convert::quantize_on_load`).
    pub decoder_weights: Option<crate::quantize::FileType>,
}

/// A loaded decoder model with its tokenizer.
pub struct Generator {
    /// The file the model came from (a GGUF file, or one read into memory
    /// from a Hugging Face directory or a llama2.c checkpoint).
    pub(crate) file: Arc<GgufFile>,
    /// The loaded decoder.
    pub(crate) model: Box<dyn CausalLm>,
    /// The tokenizer the file describes.
    pub(crate) tokenizer: Tokenizer,
    /// Where it was loaded from.
    pub(crate) path: PathBuf,
}

impl Generator {
    /// The GGUF file the model came from (one read into memory for a
    /// Hugging Face directory or a llama2.c checkpoint): its metadata and
    /// tensors.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The loaded decoder.
    pub fn model(&self) -> &dyn CausalLm {
        self.model.as_ref()
    }

    /// The tokenizer the file describes.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Where the model was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Loads the decoder in the GGUF `file` (already opened from `path`).
    pub fn from_gguf(file: Arc<GgufFile>, path: &Path) -> Result<Generator, Error> {
        let tokenizer = Tokenizer::from_gguf(file.metadata())
            .map_err(|e| Error::model(path.display().to_string(), e.to_string()))?;
        let model = load_causal_lm(file.clone())?;
        Ok(Generator {
            file,
            model,
            tokenizer,
            path: path.to_path_buf(),
        })
    }

    /// Continues `prompt` (special-token text such as `<|im_start|>` parsed,
    /// BOS added where the model wants it), calling `on_text` with each
    /// piece of text as it is complete (`false` stops); the same text as
    /// `ferrite run -p PROMPT` with the same options.
    pub fn complete_with(
        &self,
        prompt: &str,
        sampling: &SamplerOptions,
        opts: &GenerateOptions,
        threads: Threads,
        on_text: impl FnMut(&str) -> bool,
    ) -> Result<StopReason, Error> {
        self.complete_in(prompt, sampling, opts, threads, None, on_text)
    }

    /// As [`Generator::complete_with`], returning the whole text.
    pub fn complete(
        &self,
        prompt: &str,
        sampling: &SamplerOptions,
        opts: &GenerateOptions,
        threads: Threads,
    ) -> Result<String, Error> {
        let mut text = String::new();
        self.complete_with(prompt, sampling, opts, threads, |piece| {
            text.push_str(piece);
            true
        })?;
        Ok(text)
    }

    /// The best continuation of `prompt` by beam search
    /// (`opts.num_beams` beams; transformers' `generate(num_beams=N,
    /// do_sample=False)`), ended by the model's EOS; `opts.max_length`
    /// counts the prompt's tokens. Returns the text (the EOS left out) and
    /// the generated ids (EOS included if produced).
    pub fn beam_search(
        &self,
        prompt: &str,
        opts: &SearchOptions,
        threads: Threads,
    ) -> Result<(String, Vec<u32>), Error> {
        let tokens = self.tokenizer.encode(prompt, true, true);
        let eos = self.tokenizer.eos_id().unwrap_or(u32::MAX);
        let ids = generate_decoder(self.model.as_ref(), &tokens, eos, opts, threads)?;
        let text_ids = ids.strip_suffix(&[eos]).unwrap_or(&ids);
        Ok((self.tokenizer.decode(text_ids, false), ids))
    }

    /// Whether the model's file carries a chat template (without one, chat
    /// replies use a built-in template for the architecture, or ChatML).
    pub fn has_chat_template(&self) -> bool {
        self.file
            .metadata()
            .get_str(crate::generate::chat::TEMPLATE_KEY)
            .is_some()
    }

    /// Bytes of the key/value cache of one sequence of `n_ctx` positions
    /// (what a state from [`CausalLm::new_state`] allocates).
    pub fn kv_bytes(&self, n_ctx: usize) -> usize {
        self.model.decoder().kv_bytes(n_ctx)
    }
}

/// A loaded model of any kind.
pub enum Model {
    /// A decoder: text generation.
    Generator(Box<Generator>),
    /// An encoder: sentence embeddings.
    Embedder(Box<Embedder>),
    /// An encoder-decoder: translation.
    Translator(Box<Translator>),
}

impl Model {
    /// The decoder, or an error saying what kind of model this is.
    pub fn into_generator(self) -> Result<Generator, Error> {
        match self {
            Model::Generator(g) => Ok(*g),
            other => Err(other.not(ModelKind::Generator)),
        }
    }

    /// The embedding model, or an error saying what kind of model this is.
    pub fn into_embedder(self) -> Result<Embedder, Error> {
        match self {
            Model::Embedder(e) => Ok(*e),
            other => Err(other.not(ModelKind::Embedder)),
        }
    }

    /// The translation model, or an error saying what kind of model this is.
    pub fn into_translator(self) -> Result<Translator, Error> {
        match self {
            Model::Translator(t) => Ok(*t),
            other => Err(other.not(ModelKind::Translator)),
        }
    }

    fn not(&self, wanted: ModelKind) -> Error {
        Error::WrongKind {
            path: None,
            is: self.kind(),
            wanted,
        }
    }

    /// What kind of model this is.
    pub fn kind(&self) -> ModelKind {
        match self {
            Model::Generator(_) => ModelKind::Generator,
            Model::Embedder(_) => ModelKind::Embedder,
            Model::Translator(_) => ModelKind::Translator,
        }
    }
}

/// A model found but not yet loaded: its kind, and what was read to tell.
pub enum Found {
    /// A decoder, its file already read.
    Generator(Arc<GgufFile>),
    /// An embedding model.
    Embedder,
    /// A translation model.
    Translator,
}

impl Found {
    /// What kind of model was found.
    pub fn kind(&self) -> ModelKind {
        match self {
            Found::Generator(_) => ModelKind::Generator,
            Found::Embedder => ModelKind::Embedder,
            Found::Translator => ModelKind::Translator,
        }
    }
}

/// The file or directory a user means by `name_or_path`: an existing path
/// as is, else a short name (`smollm2`) or file name in the models
/// directory (`FERRITE_MODELS`).
pub fn resolve(name_or_path: &str) -> Result<PathBuf, Error> {
    model_path::resolve(name_or_path)
}

/// Opens the model named by `name_or_path` (a path or a short name).
pub fn open(name_or_path: &str) -> Result<Model, Error> {
    open_with(name_or_path, &OpenOptions::default())
}

/// As [`open`], with options.
pub fn open_with(name_or_path: &str, opts: &OpenOptions) -> Result<Model, Error> {
    let path = resolve(name_or_path)?;
    open_path(&path, opts)
}

/// Opens the model at `path` (no short-name lookup).
pub fn open_path(path: &Path, opts: &OpenOptions) -> Result<Model, Error> {
    Ok(match find(path, opts)? {
        Found::Generator(file) => Model::Generator(Box::new(Generator::from_gguf(file, path)?)),
        Found::Embedder => Model::Embedder(Box::new(Embedder::open(path)?)),
        Found::Translator => {
            let threads = opts.threads.clone().unwrap_or_else(Threads::all_cores);
            Model::Translator(Box::new(Translator::open_with_threads(
                path,
                opts.translation_weights,
                threads,
            )?))
        }
    })
}

/// Opens the decoder at `path`, or says what kind of model it is instead.
pub fn open_generator(path: &Path, opts: &OpenOptions) -> Result<Generator, Error> {
    match find(path, opts)? {
        Found::Generator(file) => Generator::from_gguf(file, path),
        other => Err(wrong_kind(path, other.kind(), ModelKind::Generator)),
    }
}

/// The error for a model of kind `is` used where `wanted` is needed.
pub fn wrong_kind(path: &Path, is: ModelKind, wanted: ModelKind) -> Error {
    Error::WrongKind {
        path: Some(path.display().to_string()),
        is,
        wanted,
    }
}

/// Reads `path` far enough to tell its kind (see the module's rules).
pub fn find(path: &Path, opts: &OpenOptions) -> Result<Found, Error> {
    let shown = || path.display().to_string();
    if !path.exists() {
        return Err(Error::NotFound(format!(
            "{}: no such file or directory",
            shown()
        )));
    }
    if is_translation_dir(path) {
        return Ok(Found::Translator);
    }
    let is_encoder = |name: &str, hf: bool| encoder_arch(name, hf, "").is_ok();
    if path.is_dir() {
        if !path.join("config.json").is_file() {
            return Err(Error::model(
                shown(),
                "not a model directory: expected a Hugging Face model (config.json and \
                 model.safetensors), a Marian / T5 translation model, or give a .gguf file",
            ));
        }
        let config = read_json(&path.join("config.json"))?;
        let model_type = config.get("model_type").and_then(|v| v.as_str());
        if model_type.is_some_and(|t| is_encoder(t, true)) {
            return Ok(Found::Embedder);
        }
        let file = match opts.decoder_weights {
            Some(ft) => {
                let threads = crate::parallel::available_cores();
                crate::convert::quantize_on_load(path, ft, threads)?
            }
            None => hf_decoder::open(path)?,
        };
        return Ok(Found::Generator(Arc::new(file)));
    }
    if let Some(ft) = opts.decoder_weights {
        return Err(Error::Input(format!(
            "{}: --weights {} quantizes a Hugging Face directory at load; quantize a \
             file with `ferrite quantize IN OUT {}`",
            shown(),
            ft.name,
            ft.name
        )));
    }
    if !starts_with_gguf_magic(path) {
        let tokenizer = match &opts.tokenizer {
            Some(t) => t.clone(),
            None => path.with_file_name("tokenizer.bin"),
        };
        let file = llama2c::open(path, &tokenizer).map_err(|e| {
            Error::model(
                shown(),
                format!("not a GGUF file; as a llama2.c checkpoint: {e}"),
            )
        })?;
        return Ok(Found::Generator(Arc::new(file)));
    }
    let file = GgufFile::open(path)?;
    if file
        .header
        .architecture()
        .is_some_and(|a| is_encoder(a, false))
    {
        return Ok(Found::Embedder);
    }
    Ok(Found::Generator(Arc::new(file)))
}

/// Whether `path` starts with GGUF's magic (else it may be a llama2.c
/// checkpoint). Unreadable files count as GGUF, whose reader says why.
fn starts_with_gguf_magic(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    match std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)) {
        Ok(()) => &magic == b"GGUF",
        Err(_) => true,
    }
}
