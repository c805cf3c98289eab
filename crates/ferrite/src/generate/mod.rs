//! Text generation: the KV cache, samplers, and the prefill/decode loop.

pub mod beam;
pub mod cancel;
pub mod chat;
pub mod continuation;
pub mod json;
// Documentation of the public items in these files waits for wave/attn,
// which is rewriting them (attention / KV cache): see issue 28.

pub mod sampler;
pub mod session;
pub mod speculative;
