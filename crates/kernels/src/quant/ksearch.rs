//! The scale searches behind the k-quant quantizers (Q2_K ... Q6_K), as
//! ggml's `make_qx_quants`, `make_q3_quants` and `make_qkx2_quants`
//! (ggml-quants.c) do them without an importance matrix.
//!
//! Byte-exact output needs the same float operations in the same order:
//! every sum here runs left to right over the group, every product is
//! evaluated as C evaluates it (`w * x * l` is `(w * x) * l`), and nothing
//! is fused (ggml-base is built for baseline x86-64 without FMA, and Rust
//! never contracts). Integers convert to f32 exactly where C converts them.

/// Groups whose largest magnitude is below this are all zeros (ggml's
/// `GROUP_MAX_EPS`).
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: adding 1.5 * 2^23 leaves `round_ties_even(x)` in
/// the low mantissa bits for |x| < 2^22. Done on the bits exactly as ggml
/// does, so that out-of-range inputs (which ggml only asserts against in
/// debug builds) give the same integers too.
#[inline(always)]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// The largest magnitude of `x` and the value that has it (the first one
/// on ties; 0 for an empty or all-zero group).
fn signed_max(x: &[f32]) -> (f32, f32) {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    (amax, max)
}

/// `make_qx_quants` with `rmse_type == 1` and no importance weights (the
/// Q6_K search): symmetric levels `-nmax..nmax-1` with weights `x^2`, the
/// scale refined over 18 nearby starting points. Writes `L[i] = level + nmax`
/// and returns the scale.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn make_qx_quants_rmse1(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let (amax, max) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let l = level(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let mut iscale = -(nmax as f32) / max;
    for (o, &v) in l_out.iter_mut().zip(x) {
        *o = (level(iscale, v) + nmax) as i8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (o, &v) in l_out.iter_mut().zip(x) {
                *o = (level(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Eight [`make_qx_quants_rmse1`] searches at once, one per lane (group
/// `g`'s value `i` is `x[i][g]`), each lane running the scalar search's
/// operations in the same order. Writes `l[i][g]` and returns the scales.
#[inline(always)]
pub(crate) fn make_qx_quants_rmse1_x8<const N: usize>(
    nmax: i32,
    x: &[[f32; 8]; N],
    l: &mut [[i8; 8]; N],
) -> [f32; 8] {
    const G: usize = 8;
    let mut max = [0f32; G];
    let mut amax = [0f32; G];
    for xi in x {
        for g in 0..G {
            let ax = xi[g].abs();
            if ax > amax[g] {
                amax[g] = ax;
                max[g] = xi[g];
            }
        }
    }
    // A function, not a closure, so that it is inlined (and compiled with
    // the caller's target features).
    #[inline(always)]
    fn sums<const N: usize>(
        nmax: i32,
        x: &[[f32; 8]; N],
        iscale: &[f32; 8],
        laux: &mut [[i8; 8]; N],
    ) -> ([f32; 8], [f32; 8]) {
        let (mut sumlx, mut suml2) = ([0f32; 8], [0f32; 8]);
        for (xi, li) in x.iter().zip(laux.iter_mut()) {
            for g in 0..8 {
                let q = nearest_int(iscale[g] * xi[g]).clamp(-nmax, nmax - 1);
                li[g] = (q + nmax) as i8;
                let lf = q as f32;
                let w = xi[g] * xi[g];
                sumlx[g] += w * xi[g] * lf;
                suml2[g] += w * lf * lf;
            }
        }
        (sumlx, suml2)
    }
    let mut iscale = [0f32; G];
    for g in 0..G {
        iscale[g] = -(nmax as f32) / max[g];
    }
    let (sumlx, suml2) = sums(nmax, x, &iscale, l);
    let mut scale = [0f32; G];
    let mut best = [0f32; G];
    for g in 0..G {
        scale[g] = if suml2[g] != 0.0 {
            sumlx[g] / suml2[g]
        } else {
            0.0
        };
        best[g] = scale[g] * sumlx[g];
    }
    let mut laux = [[0i8; G]; N];
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        for g in 0..G {
            iscale[g] = -(nmax as f32 + 0.1 * is as f32) / max[g];
        }
        let (sumlx, suml2) = sums(nmax, x, &iscale, &mut laux);
        let mut take = [false; G];
        for g in 0..G {
            take[g] = suml2[g] > 0.0 && sumlx[g] * sumlx[g] > best[g] * suml2[g];
            if take[g] {
                scale[g] = sumlx[g] / suml2[g];
                best[g] = scale[g] * sumlx[g];
            }
        }
        for (li, ai) in l.iter_mut().zip(&laux) {
            for g in 0..G {
                if take[g] {
                    li[g] = ai[g];
                }
            }
        }
    }
    for g in 0..G {
        if amax[g] < GROUP_MAX_EPS {
            scale[g] = 0.0;
            for li in l.iter_mut() {
                li[g] = 0;
            }
        }
    }
    scale
}

/// `make_q3_quants` with `do_rmse` (the Q3_K search): symmetric levels
/// `-nmax..nmax-1` weighted by `x^2`, then up to five passes moving single
/// values to the level that improves the weighted fit. Writes
/// `L[i] = level + nmax` (all zeros for an all-zero group) and returns the
/// scale.
#[inline(always)]
pub(crate) fn make_q3_quants_rmse(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let (amax, max) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for (o, &v) in l_out.iter_mut().zip(x) {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *o = l as i8;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for (o, &v) in l_out.iter_mut().zip(x) {
            let w = v * v;
            let cur = f32::from(*o);
            let mut slx = sumlx - w * v * cur;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * cur * cur;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != i32::from(*o) {
                    let nl = new_l as f32;
                    slx += w * v * nl;
                    sl2 += w * nl * nl;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *o = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for o in l_out.iter_mut() {
        *o += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// The search parameters of `make_qkx2_quants`.
pub(crate) struct Qkx2 {
    pub nmax: i32,
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    /// Absolute instead of squared errors.
    pub use_mad: bool,
}

/// `make_qkx2_quants` (the Q2_K, Q4_K and Q5_K search), one group: the
/// scalar reference of [`make_qkx2_quants_x8`], which the quantizers use: levels `0..=nmax`
/// with a scale and a min (`x ~ scale * L - the_min`), fitted by weighted
/// least squares from `nstep + 1` starting scales; the best by weighted
/// error wins. Writes `L` (uses `laux` as scratch) and returns
/// `(scale, the_min)`.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn make_qkx2_quants(
    p: &Qkx2,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    laux: &mut [u8],
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out.fill(0);
        return (0.0, -min);
    }
    let nmax = p.nmax;
    let err = |d: f32| if p.use_mad { d.abs() } else { d * d };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if p.nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=p.nstep {
        iscale = (p.rmin + p.rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * f32::from(laux[i]) + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Eight [`make_qkx2_quants`] searches at once, one per lane: group `g`'s
/// value `i` is `x[i][g]` (and its weight `w[i][g]`). Every lane runs
/// exactly the scalar search's operations in the same order (the lanes
/// only share the loop structure, which lets the compiler use SIMD), so
/// the results are the same bits; the `k-quant` goldens check it. Writes
/// `l[i][g]` and returns the per-lane `(scale, the_min)`.
#[inline(always)]
pub(crate) fn make_qkx2_quants_x8<const N: usize>(
    p: &Qkx2,
    x: &[[f32; 8]; N],
    w: &[[f32; 8]; N],
    l: &mut [[u8; 8]; N],
) -> ([f32; 8], [f32; 8]) {
    const G: usize = 8;
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = w[0];
    let mut sum_x = [0f32; G];
    for g in 0..G {
        sum_x[g] = sum_w[g] * x[0][g];
    }
    for i in 1..N {
        for g in 0..G {
            let v = x[i][g];
            min[g] = if v < min[g] { v } else { min[g] };
            max[g] = if v > max[g] { v } else { max[g] };
            sum_w[g] += w[i][g];
            sum_x[g] += w[i][g] * v;
        }
    }
    let mut flat = [false; G];
    let mut range = [0f32; G];
    for g in 0..G {
        if min[g] > 0.0 {
            min[g] = 0.0;
        }
        flat[g] = max[g] == min[g];
        range[g] = max[g] - min[g];
    }
    // A flat lane's result is fixed here (its search runs on, on inf and
    // NaN, and is thrown away).
    let min0 = min;
    let nmax = p.nmax;
    let nmaxf = nmax as f32;
    let err = |d: f32| if p.use_mad { d.abs() } else { d * d };
    let mut iscale = [0f32; G];
    let mut scale = [0f32; G];
    for g in 0..G {
        iscale[g] = nmaxf / range[g];
        scale[g] = 1.0 / iscale[g];
    }
    let mut best_error = [0f32; G];
    for i in 0..N {
        for g in 0..G {
            let q = nearest_int(iscale[g] * (x[i][g] - min[g])).clamp(0, nmax);
            l[i][g] = q as u8;
            let diff = scale[g] * q as f32 + min[g] - x[i][g];
            best_error[g] += w[i][g] * err(diff);
        }
    }
    let mut laux = [[0u8; G]; N];
    for is in 0..=p.nstep {
        let start = p.rmin + p.rdelta * is as f32 + nmaxf;
        let (mut sum_l, mut sum_l2, mut sum_xl) = ([0f32; G], [0f32; G], [0f32; G]);
        for g in 0..G {
            // `min` moves with each better fit, and the range with it.
            iscale[g] = start / (max[g] - min[g]);
        }
        for i in 0..N {
            for g in 0..G {
                let q = nearest_int(iscale[g] * (x[i][g] - min[g])).clamp(0, nmax);
                laux[i][g] = q as u8;
                let lf = q as f32;
                sum_l[g] += w[i][g] * lf;
                sum_l2[g] += w[i][g] * lf * lf;
                sum_xl[g] += w[i][g] * lf * x[i][g];
            }
        }
        let mut this_scale = [0f32; G];
        let mut this_min = [0f32; G];
        let mut ok = [false; G];
        for g in 0..G {
            let d = sum_w[g] * sum_l2[g] - sum_l[g] * sum_l[g];
            ok[g] = d > 0.0;
            this_scale[g] = (sum_w[g] * sum_xl[g] - sum_x[g] * sum_l[g]) / d;
            this_min[g] = (sum_l2[g] * sum_x[g] - sum_l[g] * sum_xl[g]) / d;
            if this_min[g] > 0.0 {
                this_min[g] = 0.0;
                this_scale[g] = sum_xl[g] / sum_l2[g];
            }
        }
        let mut cur_error = [0f32; G];
        for i in 0..N {
            for g in 0..G {
                let diff = this_scale[g] * f32::from(laux[i][g]) + this_min[g] - x[i][g];
                cur_error[g] += w[i][g] * err(diff);
            }
        }
        let mut take = [false; G];
        for g in 0..G {
            take[g] = ok[g] && cur_error[g] < best_error[g];
            if take[g] {
                best_error[g] = cur_error[g];
                scale[g] = this_scale[g];
                min[g] = this_min[g];
            }
        }
        for i in 0..N {
            for g in 0..G {
                if take[g] {
                    l[i][g] = laux[i][g];
                }
            }
        }
    }
    let mut the_min = [0f32; G];
    for g in 0..G {
        if flat[g] {
            scale[g] = 0.0;
            min[g] = min0[g];
            for li in l.iter_mut() {
                li[g] = 0;
            }
        }
        the_min[g] = -min[g];
    }
    (scale, the_min)
}

/// Packs 2-bit values as Q2_K and Q3_K store them: in each half of 128
/// values, byte `l` holds values `l`, `l + 32`, `l + 64`, `l + 96` at bit
/// offsets 0, 2, 4, 6.
#[inline(always)]
pub(crate) fn pack_2bit(l: &[u8; 256], qs: &mut [u8; 64]) {
    for h in 0..2 {
        let l = &l[128 * h..];
        for i in 0..32 {
            qs[32 * h + i] = l[i] | (l[i + 32] << 2) | (l[i + 64] << 4) | (l[i + 96] << 6);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The eight-lane search gives each lane the scalar search's bits, on
    /// random groups and on flat, all-positive and all-zero ones.
    fn lanes_match_scalar<const N: usize>(p: &Qkx2, seed: u64) {
        let mut next = crate::xorshift(seed);
        for case in 0..400 {
            let mut x = [[0f32; 8]; N];
            let mut w = [[0f32; 8]; N];
            for g in 0..8 {
                let kind = (case + g) % 6;
                let scale = [1e-3f32, 0.1, 1.0, 30.0][(case / 6) % 4];
                for i in 0..N {
                    let r = (next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                    x[i][g] = match kind {
                        0 => 0.0,
                        1 => -0.75 * scale,
                        2 => (r + 1.0) * scale,
                        _ => r * scale,
                    };
                    w[i][g] = x[i][g].abs() + if kind == 5 { 0.0 } else { 0.3 };
                }
            }
            let mut l8 = [[0u8; 8]; N];
            let (s8, m8) = make_qkx2_quants_x8(p, &x, &w, &mut l8);
            for g in 0..8 {
                let xg: [f32; N] = std::array::from_fn(|i| x[i][g]);
                let wg: [f32; N] = std::array::from_fn(|i| w[i][g]);
                let (mut l, mut aux) = ([0u8; N], [0u8; N]);
                let (s, m) = make_qkx2_quants(p, &xg, &wg, &mut l, &mut aux);
                assert_eq!(
                    (s.to_bits(), m.to_bits()),
                    (s8[g].to_bits(), m8[g].to_bits())
                );
                assert!((0..N).all(|i| l[i] == l8[i][g]), "case {case} lane {g}");
            }
        }
    }

    #[test]
    fn eight_lane_search_matches_scalar() {
        let q4 = Qkx2 {
            nmax: 15,
            rmin: -1.0,
            rdelta: 0.1,
            nstep: 20,
            use_mad: false,
        };
        let q2 = Qkx2 {
            nmax: 3,
            rmin: -0.5,
            rdelta: 0.1,
            nstep: 15,
            use_mad: true,
        };
        lanes_match_scalar::<32>(&q4, 7);
        lanes_match_scalar::<16>(&q2, 8);
    }

    #[test]
    fn eight_lane_qx_search_matches_scalar() {
        let mut next = crate::xorshift(9);
        for case in 0..600 {
            let mut x = [[0f32; 8]; 16];
            for g in 0..8 {
                let kind = (case + g) % 5;
                let scale = [1e-3f32, 0.1, 1.0, 30.0, 1e-16][(case / 5) % 5];
                for xi in x.iter_mut() {
                    let r = (next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                    xi[g] = match kind {
                        0 => 0.0,
                        1 => 0.5 * scale,
                        _ => r * scale,
                    };
                }
            }
            let mut l8 = [[0i8; 8]; 16];
            let s8 = make_qx_quants_rmse1_x8(32, &x, &mut l8);
            for g in 0..8 {
                let xg: [f32; 16] = std::array::from_fn(|i| x[i][g]);
                let mut l = [0i8; 16];
                let s = make_qx_quants_rmse1(32, &xg, &mut l);
                assert_eq!(s.to_bits(), s8[g].to_bits(), "case {case} lane {g}");
                assert!((0..16).all(|i| l[i] == l8[i][g]), "case {case} lane {g}");
            }
        }
    }

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        for (x, want) in [
            (0.5f32, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (3.49, 3),
            (-7.51, -8),
            (4_194_303.0, 4_194_303),
        ] {
            assert_eq!(nearest_int(x), want, "{x}");
        }
    }
}
