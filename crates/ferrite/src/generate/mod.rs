//! Text generation: the KV cache, samplers, and the prefill/decode loop.

pub mod beam;
pub mod cancel;
pub mod chat;
pub mod continuation;
pub mod json;
pub mod kv_cache;
pub mod sampler;
pub mod session;
