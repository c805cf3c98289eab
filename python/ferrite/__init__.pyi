"""Type stubs for ferrite (see __init__.py for the documentation)."""

import os
from typing import Any, Iterator, List, Literal, Mapping, Optional, Sequence, Tuple, Union, overload

import numpy as np
import numpy.typing as npt

from ._errors import (
    CancelledError as CancelledError,
    Error as Error,
    InputError as InputError,
    ModelError as ModelError,
    ModelNotFoundError as ModelNotFoundError,
)

__version__: str

ModelName = Union[str, "os.PathLike[str]"]
Text = Union[str, bytes]
JsonSchema = Union[str, Mapping[str, Any]]
Message = Mapping[str, str]

class TextStream(Iterator[str]):
    """The pieces of one generation as they come; ``stop_reason`` after the last."""

    def __iter__(self) -> "TextStream": ...
    def __next__(self) -> str: ...
    @property
    def stop_reason(self) -> Optional[str]: ...

class Embedder:
    model: str
    def __init__(
        self, model: ModelName, threads: Optional[int] = None,
        precision: Literal["f32", "bf16", "int8"] = "f32",
    ) -> None: ...
    @property
    def dim(self) -> int: ...
    @property
    def max_tokens(self) -> int: ...
    @property
    def threads(self) -> int: ...
    @overload
    def encode(
        self, texts: Union[Text, Sequence[Text]], batch_size: int = 32, normalize: bool = True,
        dim: Optional[int] = None,
        task: Optional[Literal["query", "document", "classification", "clustering"]] = None,
        *, max_tokens: Optional[int] = None, truncate: bool = True,
        pooling: Optional[Literal["mean", "cls", "last"]] = None,
        return_truncated: Literal[False] = False,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    def encode(
        self, texts: Union[Text, Sequence[Text]], batch_size: int = 32, normalize: bool = True,
        dim: Optional[int] = None,
        task: Optional[Literal["query", "document", "classification", "clustering"]] = None,
        *, max_tokens: Optional[int] = None, truncate: bool = True,
        pooling: Optional[Literal["mean", "cls", "last"]] = None,
        return_truncated: Literal[True],
    ) -> Tuple[npt.NDArray[np.float32], List[int]]: ...

class Generator:
    model: str
    def __init__(self, model: ModelName, threads: Optional[int] = None,
                 ctx: Optional[int] = None, *, draft: Optional[ModelName] = None,
                 lookup: bool = False, draft_max: Optional[int] = None) -> None: ...
    @property
    def ctx(self) -> int: ...
    @property
    def threads(self) -> int: ...
    @property
    def has_chat_template(self) -> bool: ...
    def complete(
        self, prompt: Text, max_tokens: Optional[int] = 256, temperature: float = 0.8,
        top_p: float = 0.95, top_k: int = 40, seed: Optional[int] = None,
        stop: Union[None, str, Sequence[str]] = None, json_schema: Optional[JsonSchema] = None,
        *, min_p: float = 0.05, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
        presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
    ) -> str: ...
    def stream(
        self, prompt: Text, max_tokens: Optional[int] = 256, temperature: float = 0.8,
        top_p: float = 0.95, top_k: int = 40, seed: Optional[int] = None,
        stop: Union[None, str, Sequence[str]] = None, json_schema: Optional[JsonSchema] = None,
        *, min_p: float = 0.05, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
        presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
    ) -> TextStream: ...
    @overload
    def chat(
        self, messages: Sequence[Message], max_tokens: Optional[int] = 1024,
        temperature: float = 0.8, top_p: float = 0.95, top_k: int = 40,
        seed: Optional[int] = None, stop: Union[None, str, Sequence[str]] = None,
        json_schema: Optional[JsonSchema] = None, *, stream: Literal[False] = False,
        min_p: float = 0.05, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
        presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
    ) -> str: ...
    @overload
    def chat(
        self, messages: Sequence[Message], max_tokens: Optional[int] = 1024,
        temperature: float = 0.8, top_p: float = 0.95, top_k: int = 40,
        seed: Optional[int] = None, stop: Union[None, str, Sequence[str]] = None,
        json_schema: Optional[JsonSchema] = None, *, stream: Literal[True],
        min_p: float = 0.05, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
        presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
    ) -> TextStream: ...

class Translator:
    model: str
    def __init__(self, model: ModelName, threads: Optional[int] = None,
                 weights: Literal["f32", "q8_0"] = "f32") -> None: ...
    @property
    def threads(self) -> int: ...
    @overload
    def translate(self, texts: Text, beams: Optional[int] = None,
                  max_length: Optional[int] = None, batch_size: int = 32) -> str: ...
    @overload
    def translate(self, texts: Sequence[Text], beams: Optional[int] = None,
                  max_length: Optional[int] = None, batch_size: int = 32) -> List[str]: ...
