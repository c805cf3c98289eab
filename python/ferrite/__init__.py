"""ferrite: CPU transformer inference from Python, bit-for-bit deterministic.

This is the ferrite Rust library (not a subprocess): the same vectors as
``ferrite embed``, the same text as ``ferrite run`` / ``ferrite chat`` and
the same translations as ``ferrite translate`` for the same model and
options, whatever the thread count or batching.

    >>> import ferrite
    >>> emb = ferrite.Embedder("minilm")
    >>> emb.encode(["A man is playing a guitar.", "Someone plays music."]).shape
    (2, 384)

A model is a path (GGUF file, Hugging Face / sentence-transformers
directory, Marian or T5 directory, llama2.c checkpoint) or a short name
(``smollm2``, ``minilm``, ``qwen2.5-0.5b``, ...) looked up in the models
directory (``FERRITE_MODELS``), as the ``ferrite`` command does.

Every computing call releases the GIL, and every object may be shared by
several Python threads. Errors are ``ferrite.Error``: ``InputError`` (also a
``ValueError``) for bad input, ``ModelNotFoundError`` (also a
``FileNotFoundError``) for a missing model, ``ModelError`` for a model that
cannot be used. ``ferrite.ray`` has Ray Data actors for work on a cluster.
"""

import json as _json

from . import _native
from ._errors import CancelledError, Error, InputError, ModelError, ModelNotFoundError

__all__ = [
    "Embedder",
    "Generator",
    "Translator",
    "TextStream",
    "Error",
    "InputError",
    "ModelNotFoundError",
    "ModelError",
    "CancelledError",
]

__version__ = _native.__version__

TextStream = _native.TextStream


def _path(model):
    """A model argument as the library takes it: str or os.PathLike."""
    import os

    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    raise TypeError(f"model is {type(model).__name__}, expected a path or a short name (str)")


class Embedder:
    """A sentence-embedding model (BERT such as all-MiniLM-L6-v2, MPNet such
    as all-mpnet-base-v2, nomic-bert such as nomic-embed-text-v1.5).

    ``threads``: threads the model computes on (1 to 512; None: one per
    core). ``precision``: ``"f32"`` (the reference results), ``"bf16"``
    (CPUs with AVX512-BF16; faster, not the f32 bits) or ``"int8"``
    (faster, further from f32), as ``ferrite embed --bf16`` / ``--int8``.
    """

    def __init__(self, model, threads=None, precision="f32"):
        self._native = _native.Embedder(_path(model), threads, precision)
        self.model = _path(model)

    @property
    def dim(self):
        """Width of the vectors (before any ``dim`` cut)."""
        return self._native.dim

    @property
    def max_tokens(self):
        """Longest input in tokens (specials included); longer inputs are cut
        to it, keeping their first tokens."""
        return self._native.max_tokens

    @property
    def threads(self):
        return self._native.threads

    def encode(
        self,
        texts,
        batch_size=32,
        normalize=True,
        dim=None,
        task=None,
        *,
        max_tokens=None,
        truncate=True,
        pooling=None,
        return_truncated=False,
    ):
        """Embeds ``texts`` (a str, or a list of str): a float32 numpy array
        of shape ``(len(texts), d)``, or ``(d,)`` for a single str, as
        sentence-transformers' ``encode``; the same bits as ``ferrite embed``.

        ``batch_size``: inputs per encoder call (results do not depend on
        it). ``normalize``: L2-normalize. ``dim``: keep the first ``dim``
        values, re-normalized (nomic-embed-text: 64 to 768, its Matryoshka
        recipe). ``task``: nomic-embed-text's prefix, ``"query"``,
        ``"document"``, ``"classification"`` or ``"clustering"``.
        ``max_tokens``: longest input (default: the model's); ``truncate``:
        cut longer inputs (False: raise InputError). ``pooling``: ``"mean"``,
        ``"cls"`` or ``"last"`` (default: the model's). With
        ``return_truncated``, returns ``(array, indices of inputs that were
        cut)``. Bytes are taken as UTF-8 text; invalid UTF-8 raises
        InputError.
        """
        array, cut = self._native.encode(
            texts, batch_size, normalize, dim, task, max_tokens, truncate, pooling
        )
        return (array, cut) if return_truncated else array


class Generator:
    """A text-generation model (GGUF decoders such as SmolLM2, Qwen2.5,
    Gemma 3; Hugging Face decoder directories; llama2.c checkpoints).

    ``threads``: 1 to 512 (None: one per core). ``ctx``: context size in
    tokens per call (default and maximum: the model's). Each call runs in a
    context of its own, so calls from several threads do not interfere.

    Sampling follows ``ferrite run`` and llama.cpp: ``temperature`` (0 is
    greedy), ``top_k``, ``top_p``, ``min_p``, penalties; ``seed`` makes a
    sampled text reproducible (None: a new random seed per call). ``stop``:
    a str or list of str that ends the text (not included). ``json_schema``
    (a dict or JSON text): the text is one JSON value matching the schema,
    by constrained decoding (keywords it cannot enforce, such as
    ``pattern``, raise InputError).

    Speculative decoding (``ferrite run --lookup`` / ``--draft``), which
    changes no output, only the number of forward passes: ``lookup=True``
    drafts by prompt lookup; ``draft``: a draft model (path or short name)
    with the same tokenizer; ``draft_max``: most tokens per draft (default
    8 with lookup, 4 with a draft model).
    """

    def __init__(self, model, threads=None, ctx=None, *, draft=None, lookup=False,
                 draft_max=None):
        self._native = _native.Generator(
            _path(model), threads, ctx,
            None if draft is None else _path(draft), bool(lookup), draft_max,
        )
        self.model = _path(model)

    @property
    def ctx(self):
        """The context size (tokens) each call runs in."""
        return self._native.ctx

    @property
    def threads(self):
        return self._native.threads

    @property
    def has_chat_template(self):
        """Whether the model's file carries a chat template (``chat`` needs one)."""
        return self._native.has_chat_template

    def _run(self, prompt, chat, stream, max_tokens, temperature, top_k, top_p, min_p,
             repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty, seed,
             stop, json_schema):
        if stop is None:
            stop = []
        elif isinstance(stop, str):
            stop = [stop]
        else:
            stop = list(stop)
        if json_schema is not None and not isinstance(json_schema, str):
            json_schema = _json.dumps(json_schema)
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise TypeError(f"seed is {type(seed).__name__}, expected an int or None")
        if seed is not None and not 0 <= seed < 2**64:
            raise InputError(f"seed={seed}: give 0 to 2**64-1, or None for a random one")
        return self._native.generate(
            prompt, chat, stream, max_tokens, temperature, top_k, top_p, min_p,
            repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty, seed,
            stop, json_schema,
        )

    def complete(self, prompt, max_tokens=256, temperature=0.8, top_p=0.95, top_k=40,
                 seed=None, stop=None, json_schema=None, *, min_p=0.05,
                 repeat_penalty=1.0, repeat_last_n=64, presence_penalty=0.0,
                 frequency_penalty=0.0):
        """Continues ``prompt`` and returns the continuation: the same text as
        ``ferrite run MODEL -p PROMPT`` with the same options (special-token
        text such as ``<|im_start|>`` is parsed; BOS added where the model
        wants it). ``max_tokens``: at most this many tokens (None: until the
        end of generation or a full context)."""
        return self._run(prompt, False, False, max_tokens, temperature, top_k, top_p, min_p,
                         repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty,
                         seed, stop, json_schema)

    def stream(self, prompt, max_tokens=256, temperature=0.8, top_p=0.95, top_k=40,
               seed=None, stop=None, json_schema=None, *, min_p=0.05,
               repeat_penalty=1.0, repeat_last_n=64, presence_penalty=0.0,
               frequency_penalty=0.0):
        """As ``complete``, returning an iterator (``TextStream``) of the
        text's pieces as they are generated; joined, they are ``complete``'s
        text. Dropping the iterator stops the generation."""
        return self._run(prompt, False, True, max_tokens, temperature, top_k, top_p, min_p,
                         repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty,
                         seed, stop, json_schema)

    def chat(self, messages, max_tokens=1024, temperature=0.8, top_p=0.95, top_k=40,
             seed=None, stop=None, json_schema=None, *, stream=False, min_p=0.05,
             repeat_penalty=1.0, repeat_last_n=64, presence_penalty=0.0,
             frequency_penalty=0.0):
        """The assistant's reply to ``messages``, OpenAI-style dicts
        (``{"role": "system" | "user" | "assistant", "content": str}``),
        rendered with the model's chat template: the same reply as
        ``ferrite chat`` gives to that conversation. The reply ends at the
        template's end of turn. A conversation longer than the context loses
        its oldest turns (never the system messages or the last turn). With
        ``stream=True``, returns a ``TextStream`` of the reply's pieces.
        Models without a chat template raise InputError."""
        return self._run(messages, True, stream, max_tokens, temperature, top_k, top_p,
                         min_p, repeat_penalty, repeat_last_n, presence_penalty,
                         frequency_penalty, seed, stop, json_schema)


class Translator:
    """A translation model: Marian / opus-mt or T5 / flan-t5 directory.

    ``threads``: 1 to 512 (None: one per core). ``weights``: ``"f32"`` or
    ``"q8_0"`` (quantized at load), as ``ferrite translate --weights``.
    """

    def __init__(self, model, threads=None, weights="f32"):
        self._native = _native.Translator(_path(model), threads, weights)
        self.model = _path(model)

    @property
    def threads(self):
        return self._native.threads

    def translate(self, texts, beams=None, max_length=None, batch_size=32):
        """Translates ``texts`` (a str, or a list of str), returning a str or
        a list of str: the same as ``ferrite translate``. ``beams``: 1 to 16
        (default: the model's generation config; 1 is greedy).
        ``max_length``: longest output in tokens, counting the start token.
        Blank texts give empty strings; a text longer than the model's
        positions is cut to fit."""
        return self._native.translate(texts, beams, max_length, batch_size)
