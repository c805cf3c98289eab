//! The models a server serves, each under its API name, and the one place
//! a model's kind is decided: a decoder serves chat and completions, an
//! encoder serves embeddings, a cross-encoder (a directory whose
//! `config.json` names a `...ForSequenceClassification` architecture)
//! serves reranking. A new kind (translation, say) is one more
//! [`Kind`] variant, one more arm in [`detect`] and its own endpoint.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferrite::tools::Found;
use ferrite::tools::KNOWN_MODELS;
use ferrite::Threads;
use ferrite::Translator;
use ferrite::WeightFormat;

use crate::config::Limits;
use crate::embed::{self, EmbedModel};
use crate::error::{ApiError, ServeError};
use crate::generate::{scheduler, GenModel};
use crate::metrics::Metrics;
use crate::rerank::{self, RerankModel};
use crate::translate::TranslateModel;

/// A served model of some kind.
#[derive(Clone)]
pub enum Kind {
    /// A decoder: `/v1/chat/completions`, `/v1/completions`, tokenize.
    Generate(Arc<GenModel>),
    /// An encoder: `/v1/embeddings`.
    Embed(Arc<EmbedModel>),
    /// An encoder-decoder translation model: `/v1/translations`.
    Translate(Arc<TranslateModel>),
    /// A cross-encoder: `/v1/rerank`, `/rerank`.
    Rerank(Arc<RerankModel>),
}

impl Kind {
    /// What the model does, for messages.
    pub fn describe(&self) -> &'static str {
        match self {
            Kind::Generate(_) => "a text-generation model",
            Kind::Embed(_) => "an embedding model",
            Kind::Translate(_) => "a translation model",
            Kind::Rerank(_) => "a reranker",
        }
    }
}

/// A model and the names clients address it by.
pub struct Served {
    /// The name it is listed and answers under.
    pub name: String,
    /// Another name requests may use: the file name without `.gguf` of a
    /// model loaded by short name.
    pub alias: Option<String>,
    pub kind: Kind,
}

impl Served {
    /// Whether a request naming `name` means this model.
    pub fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.alias.as_deref() == Some(name)
    }
}

/// Every served model.
pub struct Registry {
    pub models: Vec<Served>,
}

/// The API name of a model given as `arg`: a short name as typed, else
/// the file or directory name without `.gguf`.
pub fn api_name(arg: &str, path: &Path) -> String {
    if KNOWN_MODELS.iter().any(|m| m.short_name == arg) {
        return arg.to_string();
    }
    file_name(arg, path)
}

/// The file or directory name of `path` without `.gguf`.
fn file_name(arg: &str, path: &Path) -> String {
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| arg.to_string());
    file.strip_suffix(".gguf").unwrap_or(&file).to_string()
}

impl Registry {
    /// Loads every model and starts its thread; all share `threads`.
    pub fn load(
        names: &[String],
        limits: &Limits,
        metrics: &Metrics,
        threads: &Threads,
    ) -> Result<Registry, ServeError> {
        let mut models: Vec<Served> = Vec::new();
        for arg in names {
            let path: PathBuf = ferrite::tools::resolve(arg)?;
            let name = api_name(arg, &path);
            let alias = Some(file_name(arg, &path)).filter(|a| *a != name);
            for n in std::iter::once(&name).chain(&alias) {
                if models.iter().any(|m| m.answers_to(n)) {
                    return Err(ServeError::Config(format!(
                        "the model name '{n}' is given twice"
                    )));
                }
            }
            let mm = metrics.for_model(&name);
            let opts = ferrite::OpenOptions {
                decoder_weights: limits.decoder_weights,
                ..Default::default()
            };
            let found = ferrite::tools::find(&path, &opts)?;
            let kind = match found {
                Found::Generator(file) => {
                    let m = Arc::new(GenModel::load(&name, &path, file, limits, mm)?);
                    scheduler::spawn(m.clone(), threads.clone(), *limits)
                        .map_err(|e| ServeError::io("starting the scheduler", e))?;
                    Kind::Generate(m)
                }
                Found::Embedder if ferrite::Reranker::is_cross_encoder(&path) => {
                    let m = Arc::new(RerankModel::load(&name, &path, limits, mm)?);
                    rerank::spawn(m.clone(), threads.clone())
                        .map_err(|e| ServeError::io("starting the rerank worker", e))?;
                    Kind::Rerank(m)
                }
                Found::Embedder => {
                    let m = Arc::new(EmbedModel::load(&name, &path, limits, mm)?);
                    embed::spawn(m.clone(), threads.clone())
                        .map_err(|e| ServeError::io("starting the embedding worker", e))?;
                    Kind::Embed(m)
                }
                Found::Translator => {
                    let translator =
                        Translator::open_with_threads(&path, WeightFormat::F32, threads.clone())?;
                    let m = Arc::new(TranslateModel::new(
                        name.clone(),
                        translator,
                        limits.max_queue,
                        mm,
                    ));
                    crate::translate::spawn(m.clone())
                        .map_err(|e| ServeError::io("starting the translation worker", e))?;
                    Kind::Translate(m)
                }
            };
            tracing::info!(model = %name, path = %path.display(), kind = kind.describe(), "loaded");
            models.push(Served { name, alias, kind });
        }
        Ok(Registry { models })
    }

    fn names(&self) -> Vec<&str> {
        self.models.iter().map(|m| m.name.as_str()).collect()
    }

    /// The model a request names; with no name, the first model `pick`
    /// accepts. `pick` says whether a kind serves the endpoint.
    pub fn find<T>(
        &self,
        name: Option<&str>,
        endpoint: &str,
        pick: impl Fn(&Kind) -> Option<T>,
    ) -> Result<T, ApiError> {
        let Some(name) = name else {
            return self
                .models
                .iter()
                .find_map(|m| pick(&m.kind))
                .ok_or_else(|| {
                    ApiError::bad_param("model", format!("no served model serves {endpoint}"))
                });
        };
        let Some(m) = self.models.iter().find(|m| m.answers_to(name)) else {
            return Err(ApiError::model_not_found(name, &self.names()));
        };
        pick(&m.kind).ok_or_else(|| {
            ApiError::bad_param(
                "model",
                format!(
                    "'{name}' is {}; it does not serve {endpoint}",
                    m.kind.describe()
                ),
            )
        })
    }

    /// A generation model by name.
    pub fn generator(&self, name: Option<&str>, endpoint: &str) -> Result<Arc<GenModel>, ApiError> {
        self.find(name, endpoint, |k| match k {
            Kind::Generate(m) => Some(m.clone()),
            _ => None,
        })
    }

    /// A translation model by name.
    pub fn translator(&self, name: Option<&str>) -> Result<Arc<TranslateModel>, ApiError> {
        self.find(name, "/v1/translations", |k| match k {
            Kind::Translate(m) => Some(m.clone()),
            _ => None,
        })
    }

    /// A reranker by name.
    pub fn reranker(&self, name: Option<&str>) -> Result<Arc<RerankModel>, ApiError> {
        self.find(name, "/v1/rerank", |k| match k {
            Kind::Rerank(m) => Some(m.clone()),
            _ => None,
        })
    }

    /// An embedding model by name.
    pub fn embedder(&self, name: Option<&str>) -> Result<Arc<EmbedModel>, ApiError> {
        self.find(name, "/v1/embeddings", |k| match k {
            Kind::Embed(m) => Some(m.clone()),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_config_json_is_not_a_model() {
        let dir = std::env::temp_dir().join(format!("ferrite-not-a-model-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("readme.txt"), "hello").unwrap();
        let names = [dir.display().to_string()];
        let limits = Limits::default();
        let metrics = Metrics::new();
        let err = Registry::load(&names, &limits, &metrics, &Threads::new(1))
            .err()
            .expect("a directory with no model is refused");
        std::fs::remove_dir_all(&dir).ok();
        let err = err.to_string();
        assert!(err.contains("not a model directory"), "{err}");
        assert!(err.contains(&dir.display().to_string()), "{err}");
    }

    /// A llama2.c checkpoint (tokenizer.bin beside it) is served like any
    /// decoder (`ferrite::open`'s rules).
    #[test]
    fn a_llama2c_checkpoint_is_a_generation_model() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/llama2c/v1.bin");
        let names = [path.display().to_string()];
        let reg = Registry::load(
            &names,
            &Limits::default(),
            &Metrics::new(),
            &Threads::new(1),
        )
        .expect("a llama2.c checkpoint loads");
        assert_eq!(reg.models[0].name, "v1.bin");
        assert!(matches!(reg.models[0].kind, Kind::Generate(_)));
    }
}
