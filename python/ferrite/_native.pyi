"""The native module (Rust, PyO3); use the classes of ``ferrite`` instead."""

from typing import Any, List, Optional, Tuple

__version__: str

class TextStream:
    def __iter__(self) -> "TextStream": ...
    def __next__(self) -> str: ...
    @property
    def stop_reason(self) -> Optional[str]: ...

class Embedder:
    def __init__(self, model: str, threads: Optional[int] = None, precision: str = "f32") -> None: ...
    dim: int
    max_tokens: int
    threads: int
    def encode(self, texts: Any, batch_size: int = 32, normalize: bool = True,
               dim: Optional[int] = None, task: Optional[str] = None,
               max_tokens: Optional[int] = None, truncate: bool = True,
               pooling: Optional[str] = None) -> Tuple[Any, List[int]]: ...

class Reranker:
    def __init__(self, model: str, threads: Optional[int] = None) -> None: ...
    num_labels: int
    max_length: int
    threads: int
    def predict(self, pairs: Any, batch_size: int = 32, raw: bool = False) -> Any: ...

class Generator:
    def __init__(self, model: str, threads: Optional[int] = None, ctx: Optional[int] = None) -> None: ...
    ctx: int
    threads: int
    has_chat_template: bool
    def generate(self, prompt: Any, chat: bool, stream: bool, max_tokens: Optional[int],
                 temperature: float, top_k: int, top_p: float, min_p: float,
                 repeat_penalty: float, repeat_last_n: int, presence_penalty: float,
                 frequency_penalty: float, seed: Optional[int], stop: List[str],
                 json_schema: Optional[str]) -> Any: ...

class Translator:
    def __init__(self, model: str, threads: Optional[int] = None, weights: str = "f32") -> None: ...
    threads: int
    def translate(self, texts: Any, beams: Optional[int] = None, max_length: Optional[int] = None,
                  batch_size: int = 32) -> Any: ...
