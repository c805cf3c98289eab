//! `ferrite._native`: the ferrite library for Python. The public classes
//! (`ferrite.Embedder`, `ferrite.Generator`, `ferrite.Translator`) are thin
//! Python wrappers in `python/ferrite/__init__.py` that give these their
//! documented signatures; everything here checks its own arguments too.
//!
//! Every call that computes releases the GIL (`Python::detach`), and the
//! objects are `Sync`: several Python threads may share one (their
//! parallel sections take turns on the object's thread pool).

use std::sync::{mpsc, Arc, Mutex};

use ferrite::{
    random_seed, EmbedOptions, ErrorKind, GenerateOptions, Grammar, Message, OpenOptions, Pooling,
    Products, SamplerOptions, StopReason, Task, Threads, TranslateOptions, WeightFormat, MAX_BEAMS,
};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyString};

/// Most threads a model takes (as the CLI's `-t`).
const MAX_THREADS: i64 = 512;

/// The Python exception for a library error: a class of
/// `ferrite._errors` chosen by the error's kind, all subclasses of
/// `ferrite.Error` (bad input is also a `ValueError`, a missing model a
/// `FileNotFoundError`).
fn lib_err(e: ferrite::Error) -> PyErr {
    let class = match e.kind() {
        ErrorKind::BadInput => "InputError",
        ErrorKind::NotFound => "ModelNotFoundError",
        ErrorKind::BadModel => "ModelError",
        ErrorKind::Cancelled => "CancelledError",
        ErrorKind::Internal => "Error",
    };
    raise(class, e.to_string())
}

/// An instance of `ferrite._errors.<class>` with `message`, as a `PyErr`.
fn raise(class: &str, message: String) -> PyErr {
    Python::attach(|py| {
        match py
            .import("ferrite._errors")
            .and_then(|m| m.getattr(class))
            .and_then(|c| c.call1((message,)))
        {
            Ok(instance) => PyErr::from_value(instance),
            Err(e) => e,
        }
    })
}

/// A bad argument: `ferrite.InputError` (a `ValueError`).
fn bad_input(message: impl Into<String>) -> PyErr {
    raise("InputError", message.into())
}

/// The thread pool for `threads` (`None`: one per core).
fn threads(n: Option<i64>) -> PyResult<Threads> {
    match n {
        None => Threads::try_new(ferrite::available_cores()).map_err(lib_err),
        Some(n) if (1..=MAX_THREADS).contains(&n) => Threads::try_new(n as usize).map_err(lib_err),
        Some(n) => Err(bad_input(format!(
            "threads={n}: give 1 to {MAX_THREADS} (None: one per core, {} here)",
            ferrite::available_cores()
        ))),
    }
}

/// A count argument that must be at least `min`.
fn count(name: &str, n: i64, min: i64) -> PyResult<usize> {
    if n < min {
        return Err(bad_input(format!("{name}={n}: must be at least {min}")));
    }
    usize::try_from(n).map_err(|_| bad_input(format!("{name}={n}: too large")))
}

/// One text: a `str`, or `bytes` that must be UTF-8. `what` names it in
/// errors (`texts[3]`).
fn text_of(item: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    if let Ok(s) = item.cast::<PyString>() {
        return match s.to_cow() {
            Ok(t) => Ok(t.to_string()),
            Err(e) => Err(bad_input(format!(
                "{what} is not valid Unicode text (it cannot be encoded as UTF-8): {e}"
            ))),
        };
    }
    if let Ok(b) = item.cast::<PyBytes>() {
        let bytes = b.as_bytes();
        return match std::str::from_utf8(bytes) {
            Ok(t) => Ok(t.to_string()),
            Err(e) => Err(bad_input(format!(
                "{what} is not UTF-8: invalid byte 0x{:02x} at byte offset {}",
                bytes[e.valid_up_to()],
                e.valid_up_to()
            ))),
        };
    }
    Err(PyTypeError::new_err(format!(
        "{what} is {}, expected str (or UTF-8 bytes)",
        type_name(item)
    )))
}

fn type_name(item: &Bound<'_, PyAny>) -> String {
    item.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "an object".into())
}

/// `texts`: one text (`str` / `bytes`, `single` is true) or an iterable of
/// them.
fn texts_of(texts: &Bound<'_, PyAny>) -> PyResult<(Vec<String>, bool)> {
    if texts.is_instance_of::<PyString>() || texts.is_instance_of::<PyBytes>() {
        return Ok((vec![text_of(texts, "the text")?], true));
    }
    let iter = texts.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "texts is {}, expected a str or a list of str",
            type_name(texts)
        ))
    })?;
    let mut out = Vec::new();
    for (i, item) in iter.enumerate() {
        out.push(text_of(&item?, &format!("texts[{i}]"))?);
    }
    Ok((out, false))
}

/// A loaded embedding model.
#[pyclass(frozen, module = "ferrite._native")]
struct Embedder {
    inner: Arc<ferrite::Embedder>,
    threads: Threads,
}

#[pymethods]
impl Embedder {
    #[new]
    #[pyo3(signature = (model, threads=None, precision="f32"))]
    fn new(py: Python<'_>, model: &str, threads: Option<i64>, precision: &str) -> PyResult<Self> {
        let products = match precision {
            "f32" => Products::F32,
            "bf16" => Products::Bf16,
            "int8" => Products::Int8,
            other => {
                return Err(bad_input(format!(
                    "precision='{other}': expected 'f32', 'bf16' or 'int8'"
                )))
            }
        };
        let threads = self::threads(threads)?;
        let model = model.to_string();
        let embedder = py
            .detach(|| {
                let mut e = ferrite::open(&model)?.into_embedder()?;
                e.use_products(products)?;
                Ok(e)
            })
            .map_err(lib_err)?;
        Ok(Embedder {
            inner: Arc::new(embedder),
            threads,
        })
    }

    /// Width of the vectors (before any `dim` cut).
    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    /// Longest input in tokens; longer ones are cut (or refused).
    #[getter]
    fn max_tokens(&self) -> usize {
        self.inner.tokenizer().max_tokens
    }

    /// Threads the model computes on.
    #[getter]
    fn threads(&self) -> usize {
        self.threads.count()
    }

    /// Embeds `texts`; returns `(float32 numpy array (n, d) or (d,) for one
    /// text, list of the indices of inputs cut to fit)`.
    #[pyo3(signature = (texts, batch_size=32, normalize=true, dim=None, task=None, max_tokens=None, truncate=true, pooling=None))]
    #[allow(clippy::too_many_arguments)]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        batch_size: i64,
        normalize: bool,
        dim: Option<i64>,
        task: Option<&str>,
        max_tokens: Option<i64>,
        truncate: bool,
        pooling: Option<&str>,
    ) -> PyResult<(Bound<'py, PyAny>, Vec<usize>)> {
        let (texts, single) = texts_of(texts)?;
        let task = match task {
            None => None,
            Some(t) => Some(Task::from_name(t).ok_or_else(|| {
                let names: Vec<&str> = Task::ALL.iter().map(|t| t.name()).collect();
                bad_input(format!("task='{t}': expected {}", names.join(", ")))
            })?),
        };
        let pooling = match pooling {
            None => None,
            Some(p) => Some(Pooling::from_name(p).ok_or_else(|| {
                bad_input(format!("pooling='{p}': expected 'mean', 'cls' or 'last'"))
            })?),
        };
        let opts = EmbedOptions {
            pooling,
            normalize,
            dim: dim.map(|d| count("dim", d, 1)).transpose()?,
            truncate,
            batch_size: count("batch_size", batch_size, 1)?,
            task,
            max_tokens: max_tokens.map(|m| count("max_tokens", m, 1)).transpose()?,
        };
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let (inner, threads) = (&self.inner, &self.threads);
        let out = py
            .detach(|| inner.embed(&refs, &opts, threads))
            .map_err(lib_err)?;
        let width = opts.dim.unwrap_or(self.inner.dim());
        let cut: Vec<usize> = (0..out.len()).filter(|&i| out[i].truncated).collect();
        let bytes = PyByteArray::new_with(py, out.len() * width * 4, |buf| {
            for (e, row) in out.iter().zip(buf.chunks_exact_mut(width * 4)) {
                for (v, b) in e.vector.iter().zip(row.chunks_exact_mut(4)) {
                    b.copy_from_slice(&v.to_le_bytes());
                }
            }
            Ok(())
        })?;
        let array = py
            .import("numpy")?
            .call_method1("frombuffer", (bytes, "<f4"))?;
        let shape: Vec<usize> = if single {
            vec![width]
        } else {
            vec![out.len(), width]
        };
        Ok((array.call_method1("reshape", (shape,))?, cut))
    }
}

/// What a generation call asks for (the Python wrapper's keywords).
struct Request {
    sampling: SamplerOptions,
    opts: GenerateOptions,
}

/// The prompt of a generation call.
enum Prompt {
    Text(String),
    Chat(Vec<Message>),
}

/// A loaded text-generation model.
#[pyclass(frozen, module = "ferrite._native")]
struct Generator {
    inner: Arc<ferrite::Generator>,
    threads: Threads,
    ctx: Option<usize>,
    /// Speculative decoding for every call (`draft=` / `lookup=True`).
    speculate: Option<ferrite::Speculate>,
}

/// A message's `content`: a `str`, or a list of OpenAI content parts
/// (`{"type": "text", "text": ...}`), whose texts are joined as the server
/// joins them. `what` names it in errors (`messages[2]['content']`).
fn content_of(v: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    let Ok(parts) = v.cast::<PyList>() else {
        return text_of(v, what);
    };
    let mut text = String::new();
    for (j, part) in parts.iter().enumerate() {
        let here = format!("{what}[{j}]");
        let d = part.cast::<PyDict>().map_err(|_| {
            PyTypeError::new_err(format!(
                "{here} is {}, expected a dict {{'type': 'text', 'text': ...}}",
                type_name(&part)
            ))
        })?;
        let kind = match d.get_item("type")? {
            Some(k) => text_of(&k, &format!("{here}['type']"))?,
            None => return Err(bad_input(format!("{here} has no 'type'"))),
        };
        if kind != "text" {
            return Err(bad_input(format!(
                "{here}: content part '{kind}' is not supported (text only)"
            )));
        }
        match d.get_item("text")? {
            Some(t) => text.push_str(&text_of(&t, &format!("{here}['text']"))?),
            None => return Err(bad_input(format!("{here} has no 'text'"))),
        }
    }
    Ok(text)
}

/// The conversation in `messages`: a list of `{"role": ..., "content": ...}`,
/// each content a `str` or a list of text parts ([`content_of`]).
fn messages_of(messages: &Bound<'_, PyAny>) -> PyResult<Vec<Message>> {
    let iter = messages.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "messages is {}, expected a list of {{'role': ..., 'content': ...}} dicts",
            type_name(messages)
        ))
    })?;
    let mut out = Vec::new();
    for (i, m) in iter.enumerate() {
        let m = m?;
        let d = m.cast::<PyDict>().map_err(|_| {
            PyTypeError::new_err(format!(
                "messages[{i}] is {}, expected a dict with 'role' and 'content'",
                type_name(&m)
            ))
        })?;
        let field = |key: &str| -> PyResult<Bound<'_, PyAny>> {
            d.get_item(key)?
                .ok_or_else(|| bad_input(format!("messages[{i}] has no '{key}'")))
        };
        let role = text_of(&field("role")?, &format!("messages[{i}]['role']"))?;
        let content = content_of(&field("content")?, &format!("messages[{i}]['content']"))?;
        out.push(Message::new(&role, &content));
    }
    Ok(out)
}

#[pymethods]
impl Generator {
    #[new]
    #[pyo3(signature = (model, threads=None, ctx=None, draft=None, lookup=false, draft_max=None))]
    fn new(
        py: Python<'_>,
        model: &str,
        threads: Option<i64>,
        ctx: Option<i64>,
        draft: Option<&str>,
        lookup: bool,
        draft_max: Option<i64>,
    ) -> PyResult<Self> {
        let threads = self::threads(threads)?;
        let ctx = ctx.map(|c| count("ctx", c, 1)).transpose()?;
        let draft_max = draft_max.map(|m| count("draft_max", m, 1)).transpose()?;
        if draft.is_some() && lookup {
            return Err(bad_input("give draft= or lookup=True, not both"));
        }
        if draft_max.is_some() && draft.is_none() && !lookup {
            return Err(bad_input("draft_max needs draft= or lookup=True"));
        }
        let model = model.to_string();
        let generator = py
            .detach(|| ferrite::open(&model)?.into_generator())
            .map_err(lib_err)?;
        let speculate = match draft {
            Some(path) => {
                let path = path.to_string();
                let d = py
                    .detach(|| ferrite::open(&path)?.into_generator())
                    .map_err(lib_err)?;
                ferrite::serving::check_same_vocab(generator.tokenizer(), d.tokenizer())
                    .map_err(lib_err)?;
                Some(ferrite::Speculate::Draft {
                    model: Arc::new(d),
                    max: draft_max.unwrap_or(4),
                })
            }
            None if lookup => Some(ferrite::Speculate::Lookup {
                max: draft_max.unwrap_or(8),
            }),
            None => None,
        };
        let train = generator.model().n_ctx_train();
        if let Some(c) = ctx.filter(|&c| c > train) {
            return Err(bad_input(format!(
                "ctx={c}: more than the {train} tokens this model was trained for \
                 (leave ctx=None for {train})"
            )));
        }
        Ok(Generator {
            inner: Arc::new(generator),
            threads,
            ctx,
            speculate,
        })
    }

    /// The context in tokens a call runs in (`new` refused a `ctx` past
    /// the training context).
    #[getter]
    fn ctx(&self) -> usize {
        self.ctx.unwrap_or(self.inner.model().n_ctx_train())
    }

    #[getter]
    fn threads(&self) -> usize {
        self.threads.count()
    }

    /// Whether the model's file has a chat template (`chat` needs one).
    #[getter]
    fn has_chat_template(&self) -> bool {
        self.inner.has_chat_template()
    }

    /// Generates after `prompt` (a str) or, with `chat`, the reply to the
    /// messages in `prompt`; returns the text, or with `stream` a
    /// `TextStream` of its pieces.
    #[pyo3(signature = (prompt, chat, stream, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty, seed, stop, json_schema))]
    #[allow(clippy::too_many_arguments)]
    fn generate<'py>(
        &self,
        py: Python<'py>,
        prompt: &Bound<'py, PyAny>,
        chat: bool,
        stream: bool,
        max_tokens: Option<i64>,
        temperature: f32,
        top_k: i64,
        top_p: f32,
        min_p: f32,
        repeat_penalty: f32,
        repeat_last_n: i64,
        presence_penalty: f32,
        frequency_penalty: f32,
        seed: Option<u64>,
        stop: Vec<String>,
        json_schema: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let prompt = if chat {
            Prompt::Chat(messages_of(prompt)?)
        } else {
            Prompt::Text(text_of(prompt, "the prompt")?)
        };
        let json = match json_schema {
            None => None,
            Some(text) => {
                let schema: serde_json::Value = serde_json::from_str(text)
                    .map_err(|e| bad_input(format!("json_schema is not JSON: {e}")))?;
                Some(Arc::new(
                    Grammar::from_schema(&schema)
                        .map_err(|e| bad_input(format!("json_schema: {e}")))?,
                ))
            }
        };
        let sampling = SamplerOptions {
            temperature,
            top_k: count("top_k", top_k, 0)?,
            top_p,
            min_p,
            repeat_penalty,
            presence_penalty,
            frequency_penalty,
            penalty_last_n: count("repeat_last_n", repeat_last_n, 0)?,
            logit_bias: Vec::new(),
            seed: seed.unwrap_or_else(random_seed),
        };
        sampling.validate().map_err(lib_err)?;
        let request = Request {
            sampling,
            opts: GenerateOptions {
                max_tokens: max_tokens.map(|m| count("max_tokens", m, 0)).transpose()?,
                stop: stop.into_iter().filter(|s| !s.is_empty()).collect(),
                end_tokens: Vec::new(),
                json,
                speculate: self.speculate.clone(),
            },
        };
        if stream {
            let stream = self.start_stream(prompt, request);
            return Ok(Bound::new(py, stream)?.into_any());
        }
        let mut text = String::new();
        let mut interrupt = None;
        let on_text = |piece: &str| {
            text.push_str(piece);
            // Ctrl-C in the main thread stops generation.
            match Python::attach(|py| py.check_signals()) {
                Ok(()) => true,
                Err(e) => {
                    interrupt = Some(e);
                    false
                }
            }
        };
        let result = py.detach(|| self.run(&prompt, &request, on_text));
        if let Some(e) = interrupt {
            return Err(e);
        }
        result.map_err(lib_err)?;
        Ok(PyString::new(py, &text).into_any())
    }
}

impl Generator {
    fn run(
        &self,
        prompt: &Prompt,
        r: &Request,
        on_text: impl FnMut(&str) -> bool,
    ) -> Result<StopReason, ferrite::Error> {
        let threads = self.threads.clone();
        match prompt {
            Prompt::Text(p) => {
                self.inner
                    .complete_in(p, &r.sampling, &r.opts, threads, self.ctx, on_text)
            }
            Prompt::Chat(m) => {
                self.inner
                    .chat_with(m, &r.sampling, &r.opts, threads, self.ctx, on_text)
            }
        }
    }

    /// Runs the request on a thread of its own, sending the pieces to a
    /// `TextStream`; generation stops when the stream is dropped.
    fn start_stream(&self, prompt: Prompt, request: Request) -> TextStream {
        let (tx, rx) = mpsc::channel();
        let worker = Generator {
            inner: self.inner.clone(),
            threads: self.threads.clone(),
            ctx: self.ctx,
            speculate: self.speculate.clone(),
        };
        std::thread::spawn(move || {
            let result = worker.run(&prompt, &request, |piece| {
                tx.send(Piece::Text(piece.to_string())).is_ok()
            });
            let _ = tx.send(Piece::Done(result));
        });
        TextStream {
            rx: Mutex::new(Some(rx)),
            stop_reason: Mutex::new(None),
        }
    }
}

/// What a generation thread sends to its stream.
enum Piece {
    Text(String),
    Done(Result<StopReason, ferrite::Error>),
}

/// An iterator over the pieces of text of one generation, as they come.
/// After the last piece, `stop_reason` says why generation ended. An
/// error during generation is raised by the iteration.
#[pyclass(frozen, module = "ferrite._native")]
struct TextStream {
    /// The pieces; `None` once the generation thread has finished. Held
    /// while waiting for a piece (without the GIL).
    rx: Mutex<Option<mpsc::Receiver<Piece>>>,
    /// Apart from `rx`, so that reading it never waits for a piece.
    stop_reason: Mutex<Option<StopReason>>,
}

#[pymethods]
impl TextStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<String>> {
        // The wait for the next piece runs without the GIL, so other Python
        // threads (and the stream's own producer) go on meanwhile.
        let next = py.detach(|| {
            let mut rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
            let received = rx.as_ref().map(|rx| rx.recv());
            match received {
                None => Ok(None),
                Some(Ok(Piece::Text(t))) => Ok(Some(t)),
                Some(Ok(Piece::Done(result))) => {
                    *rx = None;
                    result.map(|reason| {
                        *self.stop_reason.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
                        None
                    })
                }
                Some(Err(mpsc::RecvError)) => {
                    *rx = None;
                    Err(ferrite::Error::Internal(
                        "the generation thread stopped without a result".into(),
                    ))
                }
            }
        });
        next.map_err(lib_err)
    }

    /// Why generation ended ("end of generation", "max tokens", "stop
    /// string", "context full"), or None while it runs.
    #[getter]
    fn stop_reason(&self) -> Option<&'static str> {
        let reason = self.stop_reason.lock().unwrap_or_else(|e| e.into_inner());
        reason.map(StopReason::describe)
    }
}

/// A loaded translation model.
#[pyclass(frozen, module = "ferrite._native")]
struct Translator {
    inner: Arc<ferrite::Translator>,
    threads: usize,
}

#[pymethods]
impl Translator {
    #[new]
    #[pyo3(signature = (model, threads=None, weights="f32"))]
    fn new(py: Python<'_>, model: &str, threads: Option<i64>, weights: &str) -> PyResult<Self> {
        let translation_weights = match weights {
            "f32" => WeightFormat::F32,
            "q8_0" => WeightFormat::Q8_0,
            other => {
                return Err(bad_input(format!(
                    "weights='{other}': expected 'f32' or 'q8_0'"
                )))
            }
        };
        let threads = self::threads(threads)?;
        let n = threads.count();
        let opts = OpenOptions {
            translation_weights,
            threads: Some(threads),
            ..Default::default()
        };
        let model = model.to_string();
        let translator = py
            .detach(|| ferrite::open_with(&model, &opts)?.into_translator())
            .map_err(lib_err)?;
        Ok(Translator {
            inner: Arc::new(translator),
            threads: n,
        })
    }

    #[getter]
    fn threads(&self) -> usize {
        self.threads
    }

    /// Translates `texts` (a str, or a list of str); returns a str or a
    /// list of str.
    #[pyo3(signature = (texts, beams=None, max_length=None, batch_size=32))]
    fn translate<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        beams: Option<i64>,
        max_length: Option<i64>,
        batch_size: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (texts, single) = texts_of(texts)?;
        if let Some(b) = beams {
            if !(1..=MAX_BEAMS as i64).contains(&b) {
                return Err(bad_input(format!(
                    "beams={b}: give 1 to {MAX_BEAMS} (1 is greedy)"
                )));
            }
        }
        let opts = TranslateOptions {
            beams: beams.map(|b| b as usize),
            max_length: max_length.map(|m| count("max_length", m, 1)).transpose()?,
            batch: Some(count("batch_size", batch_size, 1)?),
            ..Default::default()
        };
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let inner = &self.inner;
        let out = py
            .detach(|| inner.translate(&refs, &opts))
            .map_err(lib_err)?;
        if single {
            let one = out.into_iter().next().unwrap_or_default();
            return Ok(PyString::new(py, &one).into_any());
        }
        Ok(out.into_pyobject(py)?.into_any())
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Embedder>()?;
    m.add_class::<Generator>()?;
    m.add_class::<TextStream>()?;
    m.add_class::<Translator>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
