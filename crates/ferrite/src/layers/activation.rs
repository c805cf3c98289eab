//! Activation functions and gated MLP combinations.

/// SiLU (swish): `x * sigmoid(x)`.
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GELU, tanh approximation (as ggml's `gelu` and PyTorch's
/// `gelu(approximate="tanh")`).
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const COEF_A: f32 = 0.044_715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + COEF_A * x * x)).tanh())
}

/// SwiGLU: `gate[i] = silu(gate[i]) * up[i]`.
pub fn swiglu_in_place(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

/// GeGLU (Gemma): `gate[i] = gelu_tanh(gate[i]) * up[i]`, with the
/// kernels' vectorized GELU (`ferrite_kernels::math::gelu_tanh`, within a
/// few ulp of the libm-based [`gelu_tanh`] above).
pub fn geglu_in_place(gate: &mut [f32], up: &[f32]) {
    ferrite_kernels::math::activate(ferrite_kernels::math::Activation::GeluTanh, gate);
    for (g, &u) in gate.iter_mut().zip(up) {
        *g *= u;
    }
}
