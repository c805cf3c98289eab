//! Model file formats: GGUF (read and write) and safetensors directories.
