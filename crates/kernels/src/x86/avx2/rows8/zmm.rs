//! The one-token eight-row kernel (`dot8`) of Q6_K for the AVX-512 set,
//! in 512-bit registers, on the interleaved groups of `super::Q6K` (the
//! 32 pieces of `ql` at `32p`, the 16 of `qh` at `1024 + 32p`, the four of
//! scales at `1536 + 32p`, `d` at 1664).
//!
//! A 64-byte load holds two adjacent pieces of the eight rows: piece `p`
//! of row `j` in i32 lane `j`, piece `p + 1` in lane `8 + j`. Its
//! activation operand is the four bytes of piece `p` in lanes 0..8 and
//! those of piece `p + 1` in lanes 8..16 (`vpermd` of the activation
//! block). The two pieces are always in the same group of 16 values, so
//! each group's accumulator holds half of its row sums in each half of
//! the register, both multiplied by the same scale, and the two halves
//! are added once per block. The values are made from one load each of
//! the `ql` pieces of runs `k, k + 2` (low and high nibbles), of runs
//! `k + 1, k + 3`, and of the `qh` piece of all four runs: 11 operations
//! for four 64-byte vectors of values (`q6_k_values` takes about 6 for
//! one 32-byte vector). With 32-byte registers (`q6_k_values`, one
//! `vpdpbusd` per piece) the kernel ran at ~42 GB/s of weights in cache
//! (`decode_bench 1024 1`), this one at ~68 (with 26 KiB of weights, in
//! L1: ~44 and ~83 GB/s). Streaming from memory both are near the
//! bandwidth (~35 GB/s at one thread); decode gained ~3.6% tokens/s at
//! one thread on the Llama-3 0.44B Q4_K_M bench file.

use std::arch::x86_64::*;

use super::{load_u8, q6_k_term, Rows8};
use crate::quant::BlockQ8K;

/// The first 64 bytes of `s`, a slice of bytes (`u8` or `i8`; panics if
/// shorter).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn load64<T: Copy>(s: &[T]) -> __m512i {
    const { assert!(std::mem::size_of::<T>() == 1) };
    let s = &s[..64];
    // SAFETY: `s` is 64 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm512_loadu_si512(s.as_ptr().cast()) }
}

/// `-16 * sum(x)` of each of the 16 groups of 16 activation values of a
/// Q8_K block (each sum within +-2048), in i32 lanes: `vpsadbw` sums each
/// eight values read as `x + 128` into a u64 (`sum + 1024`), and each
/// group's two are added.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn group_offsets(x: &[i8; 256]) -> __m512i {
    let flip = _mm512_set1_epi8(i8::MIN);
    let sad = |c: usize| {
        let v = _mm512_xor_si512(load64(&x[64 * c..]), flip);
        _mm512_sad_epu8(v, _mm512_setzero_si512())
    };
    // The u64 of each eight values (below 2^12) as their low i32 halves:
    // lane g of `pick(even)` is the u64 of values 16g..16g + 8, of
    // `pick(odd)` that of values 16g + 8..16g + 16.
    let (s0, s1, s2, s3) = (sad(0), sad(1), sad(2), sad(3));
    let even = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    let odd = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 2, 6, 10, 14, 18, 22, 26, 30);
    let pick = |idx: __m512i| {
        // Lanes 0..8 from the u64 of s0 and s1 (dwords 0..32 of the pair),
        // lanes 8..16 from those of s2 and s3 (`idx`'s lanes 8..16 unused).
        let lo = _mm512_permutex2var_epi32(s0, idx, s1);
        let hi = _mm512_permutex2var_epi32(s2, idx, s3);
        _mm512_inserti64x4::<1>(lo, _mm512_castsi512_si256(hi))
    };
    let sums = _mm512_add_epi32(pick(even), pick(odd));
    // -16 * (sums - 2048): within +-2^15.
    _mm512_slli_epi32::<4>(_mm512_sub_epi32(_mm512_set1_epi32(2048), sums))
}

/// Q6_K in the interleaved layout, its group sums taken with VNNI in
/// 512-bit registers (see the module).
pub(super) struct Q6KVnni;

impl Rows8 for Q6KVnni {
    const BLOCK: usize = 210;
    type A = BlockQ8K;
    /// As `Q6K::term`: `(d * d_x) * isum` with the exact integer `isum =
    /// sum over the 16 groups g of sc_g * (S_g - 32 X_g)`, `S_g =
    /// sum(q * x)` over the group's 16 values and `X_g = sum(x)` (the
    /// scalar reference's `sum(sc * sum((q - 32) * x))`, regrouped).
    ///
    /// Group g's accumulator starts at `-16 X_g` in every lane and each of
    /// its lanes adds eight products `q * x` by two `vpdpbusd` (lane `j`
    /// and lane `8 + j` together: `S_g - 32 X_g` of row `j`, at most
    /// `16 * 32 * 128 = 2^16` in size; each lane alone at most
    /// `8 * 63 * 128 + 16 * 2048 < 2^17`); times `sc_g` (|.| <= 128) by
    /// `vpmulld`, added over the 16 groups (each lane below `2^28`); the
    /// halves added: `isum`, `|isum| <= 16 * 128 * 2^16 = 2^27`. No
    /// operation saturates and no value reaches `2^31`, so every
    /// integer is exact (and `vpdpbusd`, `vpmulld` and `vpaddd` wrap, so
    /// the result would be `isum` mod `2^32` whatever the order): the
    /// same `isum`, then the same f32 operations, so the same bits.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn term(w: &[u8], a: &BlockQ8K) -> __m256 {
        let x = &a.qs;
        let off = group_offsets(x);
        // The activation block as four vectors of 16 four-byte pieces,
        // and `pair[m]`: pieces m and m + 1 of a vector to lanes 0..8 and
        // 8..16 (m even).
        let xv: [__m512i; 4] = std::array::from_fn(|c| load64(&x[64 * c..]));
        let pair = |m: i32| _mm512_mask_set1_epi32(_mm512_set1_epi32(m), 0xff00, m + 1);
        let nib = _mm512_set1_epi8(0x0f);
        let tops02 = _mm512_set1_epi8(0x33);
        let tops13 = _mm512_set1_epi8(0xccu8 as i8);
        let mut isum = _mm512_setzero_si512();
        // Half h of the super-block: runs 4h + k (k = 0..4) of 32 values,
        // groups 8h + 2k + half, half = i4 / 4 for pieces i4 of a run.
        for h in 0..2 {
            // The scale pieces 2h (groups 8h..8h + 4) and 2h + 1, the same
            // in both halves of the register.
            let sp: [__m512i; 2] = std::array::from_fn(|s| {
                _mm512_broadcast_i64x4(load_u8(&w[1536 + 32 * (2 * h + s)..]))
            });
            for half in 0..2 {
                // Run 4h + k's group: 8h + 2k + half.
                let mut acc: [__m512i; 4] = std::array::from_fn(|k| {
                    _mm512_permutexvar_epi32(_mm512_set1_epi32((8 * h + 2 * k + half) as i32), off)
                });
                for i4 in [4 * half, 4 * half + 2] {
                    // Pieces i4, i4 + 1 of: ql of runs k = 0 and 2 (low,
                    // high nibbles), of runs 1 and 3, qh of all four (bits
                    // 2k, 2k + 1).
                    let lo = load64(&w[32 * (16 * h + i4)..]);
                    let hi = load64(&w[32 * (16 * h + 8 + i4)..]);
                    let qh = load64(&w[1024 + 32 * (8 * h + i4)..]);
                    // Top bits of runs 0 and 2 at bits 0, 1 and 4, 5; of
                    // runs 1 and 3 at bits 2, 3 and 6, 7.
                    let t02 = _mm512_and_si512(qh, tops02);
                    let t13 = _mm512_and_si512(qh, tops13);
                    // Each value: the nibble (bits 0..4 of the first
                    // operand) with its top bits (bits 4, 5 of the second,
                    // whose bits 6, 7 are 0); 16-bit shifts only move in
                    // bits that the selection drops (0xe4: a where c is
                    // set, else b).
                    let v = [
                        _mm512_ternarylogic_epi32::<0xe4>(lo, _mm512_slli_epi16::<4>(t02), nib),
                        _mm512_ternarylogic_epi32::<0xe4>(hi, _mm512_slli_epi16::<2>(t13), nib),
                        _mm512_ternarylogic_epi32::<0xe4>(_mm512_srli_epi16::<4>(lo), t02, nib),
                        _mm512_ternarylogic_epi32::<0xe4>(
                            _mm512_srli_epi16::<4>(hi),
                            _mm512_srli_epi16::<2>(t13),
                            nib,
                        ),
                    ];
                    for (k, (acc, v)) in acc.iter_mut().zip(v).enumerate() {
                        // Activation piece 8r + i4 = 16 (r / 2) + m.
                        let r = 4 * h + k;
                        let m = 8 * (r % 2) + i4;
                        let xb = _mm512_permutexvar_epi32(pair(m as i32), xv[r / 2]);
                        *acc = _mm512_dpbusd_epi32(*acc, v, xb);
                    }
                }
                for (k, acc) in acc.into_iter().enumerate() {
                    // Group 8h + 2k + half: scale piece 2h + k / 2, byte
                    // 2 (k % 2) + half, sign-extended.
                    let byte = 2 * (k % 2) + half;
                    let s = sp[k / 2];
                    let sc = match byte {
                        0 => _mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(s)),
                        1 => _mm512_srai_epi32::<24>(_mm512_slli_epi32::<16>(s)),
                        2 => _mm512_srai_epi32::<24>(_mm512_slli_epi32::<8>(s)),
                        _ => _mm512_srai_epi32::<24>(s),
                    };
                    isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(acc, sc));
                }
            }
        }
        let isum = _mm256_add_epi32(
            _mm512_castsi512_si256(isum),
            _mm512_extracti64x4_epi64::<1>(isum),
        );
        q6_k_term(w, a, isum)
    }
}
