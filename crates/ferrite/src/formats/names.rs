//! Tensor names of llama.cpp's GGUF files, in one place (`llama-arch.cpp`'s
//! tensor name table). Model code asks for `names::attn_q(l)`, never formats
//! a name itself.

pub const TOKEN_EMBD: &str = "token_embd.weight";
pub const OUTPUT_NORM: &str = "output_norm.weight";
pub const OUTPUT: &str = "output.weight";
pub const ROPE_FREQS: &str = "rope_freqs.weight";
/// Learned absolute positions (GPT-2): `(n_positions, dim)`.
pub const POSITION_EMBD: &str = "position_embd.weight";

/// ferrite's own metadata key (not llama.cpp's): every matrix input of the
/// model is rounded to int8 values with one f32 scale per this many values
/// before its product, as the reference engine of the model's format does
/// (llama2.c's runq.c, for v2 Q8_0 checkpoints). See
/// `tensor::QuantizedActs::round_as_int8`.
pub const INT8_ACTIVATION_GROUPS: &str = "ferrite.int8_activation_groups";

/// The bias that goes with weight tensor `weight` (`*.weight` -> `*.bias`).
pub fn bias_of(weight: &str) -> String {
    let stem = weight.strip_suffix(".weight").unwrap_or(weight);
    format!("{stem}.bias")
}

fn blk(layer: usize, what: &str) -> String {
    format!("blk.{layer}.{what}.weight")
}

pub fn attn_norm(layer: usize) -> String {
    blk(layer, "attn_norm")
}
pub fn attn_q(layer: usize) -> String {
    blk(layer, "attn_q")
}
pub fn attn_k(layer: usize) -> String {
    blk(layer, "attn_k")
}
pub fn attn_v(layer: usize) -> String {
    blk(layer, "attn_v")
}
/// Q, K and V projections in one matrix (GPT-2, Phi): rows `q | k | v`.
pub fn attn_qkv(layer: usize) -> String {
    blk(layer, "attn_qkv")
}
pub fn attn_output(layer: usize) -> String {
    blk(layer, "attn_output")
}
/// Per-head RMSNorm of queries (Gemma 3, Qwen 3).
pub fn attn_q_norm(layer: usize) -> String {
    blk(layer, "attn_q_norm")
}
/// Per-head RMSNorm of keys (Gemma 3, Qwen 3).
pub fn attn_k_norm(layer: usize) -> String {
    blk(layer, "attn_k_norm")
}
/// Norm after the attention block (Gemma 2/3).
pub fn post_attention_norm(layer: usize) -> String {
    blk(layer, "post_attention_norm")
}
pub fn ffn_norm(layer: usize) -> String {
    blk(layer, "ffn_norm")
}
pub fn ffn_gate(layer: usize) -> String {
    blk(layer, "ffn_gate")
}
pub fn ffn_up(layer: usize) -> String {
    blk(layer, "ffn_up")
}
pub fn ffn_down(layer: usize) -> String {
    blk(layer, "ffn_down")
}
/// Norm after the MLP block (Gemma 2/3).
pub fn post_ffw_norm(layer: usize) -> String {
    blk(layer, "post_ffw_norm")
}
