"""Ray Data actors: ferrite's models over a dataset, on one machine or many.

Each class is a callable class for ``Dataset.map_batches``: Ray starts
``concurrency`` actors, each loads the model once (in ``__init__``) and
then transforms batch after batch::

    import ray, ferrite.ray
    ds = ray.data.read_parquet("corpus.parquet")          # a "text" column
    ds = ds.map_batches(
        ferrite.ray.Embed,
        fn_constructor_kwargs={"model": "minilm"},
        concurrency=4,          # actors (one per node, or several per node)
        num_cpus=2,             # CPUs each actor reserves: its threads
        batch_size=256,
    )
    ds.write_parquet("embeddings/")                       # + "embedding"

Each actor computes on as many threads as the CPUs Ray gave it
(``num_cpus``; 1 by default), unless ``threads=`` says otherwise. Results
are the same bits as ``ferrite.Embedder`` etc. in one process: how the
rows are split into batches and actors changes nothing.

The model must be readable on every node (a path on shared storage, or a
short name resolved in each node's ``FERRITE_MODELS``).
"""

import numpy as _np

import ferrite as _ferrite

__all__ = ["Embed", "Translate", "Complete"]


def _assigned_threads(threads):
    """``threads`` if given, else the CPUs Ray assigned to this actor (at
    least 1), else None (one per core) outside Ray."""
    if threads is not None:
        return threads
    try:
        import ray

        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    except Exception:  # not in a Ray worker: the library's default
        return None
    if not cpus:
        return None
    return max(1, int(cpus))


def _column(batch, name):
    """The values of column ``name`` of a numpy-dict or pandas batch, as a list."""
    try:
        values = batch[name]
    except KeyError:
        columns = list(batch.keys()) if isinstance(batch, dict) else list(batch.columns)
        raise _ferrite.InputError(
            f"the batch has no column '{name}' (columns: {columns}); "
            f"pass fn_constructor_kwargs={{'column': ...}}"
        ) from None
    return list(values)


def _put(batch, name, values):
    """Adds column ``name`` to a numpy-dict or pandas batch."""
    if isinstance(batch, dict):
        batch[name] = values
    else:  # pandas: one cell per row
        batch[name] = list(values)
    return batch


class Embed:
    """Adds a column ``output_column`` (default ``embedding``): each row's
    ``column`` (default ``text``) embedded, a float32 vector.

    Keyword arguments (``fn_constructor_kwargs``): ``model``, ``threads``,
    ``precision`` as ``ferrite.Embedder``; ``column``, ``output_column``;
    and ``encode``'s ``batch_size``, ``normalize``, ``dim``, ``task``.
    """

    def __init__(self, model, threads=None, precision="f32", column="text",
                 output_column="embedding", batch_size=32, normalize=True, dim=None,
                 task=None):
        self.embedder = _ferrite.Embedder(model, threads=_assigned_threads(threads),
                                          precision=precision)
        self.column = column
        self.output_column = output_column
        self.options = dict(batch_size=batch_size, normalize=normalize, dim=dim, task=task)

    def __call__(self, batch):
        texts = _column(batch, self.column)
        vectors = self.embedder.encode(texts, **self.options)
        return _put(batch, self.output_column, vectors)


class Translate:
    """Adds a column ``output_column`` (default ``translation``): each row's
    ``column`` (default ``text``) translated.

    Keyword arguments: ``model``, ``threads``, ``weights`` as
    ``ferrite.Translator``; ``column``, ``output_column``; ``translate``'s
    ``beams``, ``max_length``, ``batch_size``.
    """

    def __init__(self, model, threads=None, weights="f32", column="text",
                 output_column="translation", beams=None, max_length=None, batch_size=32):
        self.translator = _ferrite.Translator(model, threads=_assigned_threads(threads),
                                              weights=weights)
        self.column = column
        self.output_column = output_column
        self.options = dict(beams=beams, max_length=max_length, batch_size=batch_size)

    def __call__(self, batch):
        texts = _column(batch, self.column)
        out = self.translator.translate(texts, **self.options)
        return _put(batch, self.output_column, _np.array(out, dtype=object))


class Complete:
    """Adds a column ``output_column`` (default ``completion``): each row's
    ``column`` (default ``prompt``) continued by ``Generator.complete``, or
    with ``chat=True`` the reply to it as one user message.

    Keyword arguments: ``model``, ``threads``, ``ctx`` as
    ``ferrite.Generator``; ``column``, ``output_column``, ``chat``,
    ``system`` (a system message for ``chat``); and ``complete``'s options
    (``max_tokens``, ``temperature``, ``seed``, ...). With a ``seed``,
    every row is sampled with that seed, so a row's text does not depend on
    which actor ran it.
    """

    def __init__(self, model, threads=None, ctx=None, column="prompt",
                 output_column="completion", chat=False, system=None, **options):
        self.generator = _ferrite.Generator(model, threads=_assigned_threads(threads), ctx=ctx)
        self.column = column
        self.output_column = output_column
        self.chat = chat
        self.system = system
        self.options = options

    def _one(self, prompt):
        if not self.chat:
            return self.generator.complete(prompt, **self.options)
        messages = [{"role": "user", "content": prompt}]
        if self.system is not None:
            messages.insert(0, {"role": "system", "content": self.system})
        return self.generator.chat(messages, **self.options)

    def __call__(self, batch):
        prompts = _column(batch, self.column)
        out = [self._one(p) for p in prompts]
        return _put(batch, self.output_column, _np.array(out, dtype=object))
