//! Gated MLP combinations not covered by the kernels crate as one call.
//! (SwiGLU is `ferrite_kernels::math::silu_mul`.)

/// GeGLU (Gemma): `gate[i] = gelu_tanh(gate[i]) * up[i]`, with the
/// kernels' vectorized tanh-approximation GELU
/// (`ferrite_kernels::math::gelu_tanh`, as ggml's `gelu` and PyTorch's
/// `gelu(approximate="tanh")`).
pub fn geglu_in_place(gate: &mut [f32], up: &[f32]) {
    ferrite_kernels::math::activate(ferrite_kernels::math::Activation::GeluTanh, gate);
    for (g, &u) in gate.iter_mut().zip(up) {
        *g *= u;
    }
}
