//! The SIMD dot products against the scalar reference, bit for bit.
//!
//! For every weight type that a kernel set implements itself (not through
//! the scalar fallback), thousands of random rows: random bytes for the
//! packed values (some rows made only of the extreme bytes 0x00, 0xff, 0x80,
//! 0x7f), random finite scales of both signs (subnormals included), and
//! activations either quantized from random values or random bytes
//! themselves (i8 -128 included, arbitrary Q8_K `bsums`), at every length
//! from 1 to 40 blocks, with misaligned starts, trailing partial blocks and
//! mismatched lengths. The results must have the same bits. Infinite and
//! NaN inputs must not panic, and are compared too (two NaNs count as equal
//! whatever their payloads; the test reports how many payloads differ).
//!
//! The sets are called explicitly (`KernelSet::vec_dot_kernel`), so
//! `FERRITE_KERNELS=scalar` does not empty the test; sets this CPU cannot
//! run are skipped with a note.

use ferrite_kernels::dispatch::{
    active_kernel_set, kernel_set_name, scalar_vec_dot_kernel, vec_dot_kernel, KernelRequest,
    KernelSet,
};
use ferrite_kernels::dot::{interleave, VecDotKernel};
use ferrite_kernels::quant::{
    quantize, BlockIq4Nl, BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K,
    BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1, GgmlType, ALL_TYPES,
};
use std::mem::offset_of;
use GgmlType::*;

/// A small deterministic generator (xorshift64*), so the test needs no crates.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }

    /// Random bytes; in one row of four, only the extreme bytes.
    fn bytes(&mut self, n: usize, extremes: bool) -> Vec<u8> {
        (0..n)
            .map(|_| {
                if extremes {
                    self.pick(&[0x00, 0xff, 0x80, 0x7f])
                } else {
                    self.next() as u8
                }
            })
            .collect()
    }

    /// A finite f16 of either sign: any exponent (subnormals and zero
    /// included) but the all-ones one.
    fn finite_f16(&mut self) -> u16 {
        let bits = self.next() as u16;
        if (bits >> 10) & 0x1f == 0x1f {
            bits & !0x4000
        } else {
            bits
        }
    }

    /// A finite f32 of either sign and any exponent (a few zeros, -0.0 too).
    fn finite_f32(&mut self) -> f32 {
        match self.below(16) {
            0 => 0.0,
            1 => -0.0,
            _ => {
                let bits = self.next() as u32;
                let x = f32::from_bits(bits);
                if x.is_finite() {
                    x
                } else {
                    f32::from_bits(bits & !0x4000_0000)
                }
            }
        }
    }

    /// Activation-like values: mostly of moderate size, some zeros, a few
    /// large or tiny.
    fn values(&mut self, n: usize) -> Vec<f32> {
        let scale = self.pick(&[1.0f32, 1e-3, 1e3, 1e-30, 1e30]);
        (0..n)
            .map(|_| match self.below(20) {
                0 => 0.0,
                1 => -0.0,
                _ => scale * (2.0 * self.unit() - 1.0),
            })
            .collect()
    }
}

/// Byte offsets of the f16 fields of a weight or activation block that must
/// hold finite values (the scales and mins); Q8_K's f32 `d` is separate.
fn f16_fields(t: GgmlType) -> &'static [usize] {
    const Q4_0: [usize; 1] = [offset_of!(BlockQ4_0, d)];
    const Q4_1: [usize; 2] = [offset_of!(BlockQ4_1, d), offset_of!(BlockQ4_1, m)];
    const Q5_0: [usize; 1] = [offset_of!(BlockQ5_0, d)];
    const Q5_1: [usize; 2] = [offset_of!(BlockQ5_1, d), offset_of!(BlockQ5_1, m)];
    const Q8_0: [usize; 1] = [offset_of!(BlockQ8_0, d)];
    const Q8_1: [usize; 2] = [offset_of!(BlockQ8_1, d), offset_of!(BlockQ8_1, s)];
    const Q2K: [usize; 2] = [offset_of!(BlockQ2K, d), offset_of!(BlockQ2K, dmin)];
    const Q3K: [usize; 1] = [offset_of!(BlockQ3K, d)];
    const Q4K: [usize; 2] = [offset_of!(BlockQ4K, d), offset_of!(BlockQ4K, dmin)];
    const Q5K: [usize; 2] = [offset_of!(BlockQ5K, d), offset_of!(BlockQ5K, dmin)];
    const Q6K: [usize; 1] = [offset_of!(BlockQ6K, d)];
    const IQ4NL: [usize; 1] = [offset_of!(BlockIq4Nl, d)];
    const IQ4XS: [usize; 1] = [offset_of!(BlockIq4Xs, d)];
    match t {
        GgmlType::Q4_0 => &Q4_0,
        GgmlType::Q4_1 => &Q4_1,
        GgmlType::Q5_0 => &Q5_0,
        GgmlType::Q5_1 => &Q5_1,
        GgmlType::Q8_0 => &Q8_0,
        GgmlType::Q8_1 => &Q8_1,
        GgmlType::Q2K => &Q2K,
        GgmlType::Q3K => &Q3K,
        GgmlType::Q4K => &Q4K,
        GgmlType::Q5K => &Q5K,
        GgmlType::Q6K => &Q6K,
        GgmlType::Iq4Nl => &IQ4NL,
        GgmlType::Iq4Xs => &IQ4XS,
        _ => &[],
    }
}

/// Writes `value(rng)` into every f16 field of every block of `q` (and a
/// Q8_K block's f32 `d`, from `value_f32`).
fn set_scales(
    t: GgmlType,
    q: &mut [u8],
    rng: &mut Rng,
    value: impl Fn(&mut Rng) -> u16,
    value_f32: impl Fn(&mut Rng) -> f32,
) {
    for block in q.chunks_exact_mut(t.type_size()) {
        for &at in f16_fields(t) {
            block[at..at + 2].copy_from_slice(&value(rng).to_le_bytes());
        }
        if t == Q8K {
            let at = offset_of!(BlockQ8K, d);
            block[at..at + 4].copy_from_slice(&value_f32(rng).to_le_bytes());
        }
    }
}

/// A random weight row of `n` values of block type `t`, finite scales.
fn weight_row(t: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    let extremes = rng.below(4) == 0;
    match t {
        F32 => (0..n)
            .flat_map(|_| rng.finite_f32().to_le_bytes())
            .collect(),
        F16 => (0..n)
            .flat_map(|_| rng.finite_f16().to_le_bytes())
            .collect(),
        Bf16 => (0..n)
            .flat_map(|_| ((rng.finite_f32().to_bits() >> 16) as u16).to_le_bytes())
            .collect(),
        _ => {
            let mut q = rng.bytes(n / t.block_size() * t.type_size(), extremes);
            set_scales(t, &mut q, rng, Rng::finite_f16, Rng::finite_f32);
            q
        }
    }
}

/// An activation row of `n` values of type `t`: quantized random values,
/// or (one row in three, quantized types) random bytes with finite scales.
fn activation_row(t: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    if t != F32 && rng.below(3) == 0 {
        let extremes = rng.below(4) == 0;
        let mut q = rng.bytes(n / t.block_size() * t.type_size(), extremes);
        set_scales(t, &mut q, rng, Rng::finite_f16, |r| {
            // Q8_K's d comes from 1 / iscale: any finite f32 will do.
            r.finite_f32()
        });
        return q;
    }
    if t == F32 && rng.below(3) == 0 {
        return (0..n)
            .flat_map(|_| rng.finite_f32().to_le_bytes())
            .collect();
    }
    let x = rng.values(n);
    let mut q = vec![0u8; t.bytes_for(n as u64).expect("whole blocks") as usize];
    quantize(t, &x, &mut q).expect("quantize");
    q
}

/// How two results compare.
#[derive(Default)]
struct Tally {
    cases: usize,
    /// Both NaN with different bits.
    nan_payloads: usize,
}

impl Tally {
    /// Bits must be equal, except that two NaNs may differ in payload when
    /// `nan_ok`.
    fn check(&mut self, what: &str, got: f32, want: f32, nan_ok: bool) {
        self.cases += 1;
        if got.to_bits() == want.to_bits() {
            return;
        }
        if nan_ok && got.is_nan() && want.is_nan() {
            self.nan_payloads += 1;
            return;
        }
        panic!(
            "{what}: got {got:e} ({:#010x}), scalar {want:e} ({:#010x})",
            got.to_bits(),
            want.to_bits()
        );
    }
}

/// The sets other than the scalar one that this CPU runs, and the types
/// each implements itself.
fn simd_sets() -> Vec<(KernelSet, Vec<GgmlType>)> {
    let mut sets = Vec::new();
    for set in KernelSet::ALL {
        if set == KernelSet::Scalar {
            continue;
        }
        if !set.is_supported() {
            eprintln!("skipping {}: not supported by this CPU", set.name());
            continue;
        }
        let types: Vec<_> = ALL_TYPES
            .into_iter()
            .filter(|&t| set.has_own_kernel(t))
            .collect();
        sets.push((set, types));
    }
    sets
}

/// Whether `set`'s kernel `addr` picks for `t` is the very function the
/// next slower set hands out (inherited, not its own, e.g. the i8mm set's
/// one-row and `dot8` kernels, which are dotprod's): the slower set's
/// pass checks it, so the long tests skip it (under emulation each
/// repeated case costs).
fn inherited(set: KernelSet, t: GgmlType, addr: impl Fn(&VecDotKernel) -> Option<usize>) -> bool {
    let i = KernelSet::ALL
        .iter()
        .position(|&s| s == set)
        .expect("a set of this architecture");
    let Some(slow) = i.checked_sub(1).map(|j| KernelSet::ALL[j]) else {
        return false;
    };
    let of = |s: KernelSet| s.vec_dot_kernel(t).and_then(|k| addr(&k));
    matches!((of(slow), of(set)), (Some(a), Some(b)) if a == b)
}

/// A copy of `bytes` starting `shift` bytes into a fresh buffer.
fn misaligned(bytes: &[u8], shift: usize) -> Vec<u8> {
    let mut v = vec![0u8; shift];
    v.extend_from_slice(bytes);
    v
}

#[test]
fn simd_kernels_match_scalar_bit_for_bit() {
    const ROWS_PER_LENGTH: usize = 100;
    let mut total = 0;
    for (set, types) in simd_sets() {
        for t in types {
            if inherited(set, t, |k| Some(k.dot as usize)) {
                eprintln!("{} {t:>5}: the slower set's dot, checked there", set.name());
                continue;
            }
            let simd = set.vec_dot_kernel(t).expect("kernel");
            let scalar = scalar_vec_dot_kernel(t).expect("scalar kernel");
            assert_eq!(simd.act_type, scalar.act_type, "{t}");
            let a_t = scalar.act_type;
            let mut rng = Rng::new(u64::from(t.id()) * 7919 + 1);
            let mut tally = Tally::default();
            // Block formats: 1..=40 blocks; float formats: 1..=40 values
            // and 40 more lengths up to 40 chunks of 32 lanes.
            let lengths: Vec<usize> = if t.block_size() == 1 {
                (1..=40)
                    .chain((1..=40).map(|c| 32 * c - 7 + c % 9))
                    .collect()
            } else {
                (1..=40).map(|b| b * t.block_size()).collect()
            };
            for &n in &lengths {
                for row in 0..ROWS_PER_LENGTH {
                    let w = weight_row(t, n, &mut rng);
                    let a = activation_row(a_t, n, &mut rng);
                    let want = (scalar.dot)(&w, &a);
                    let what = format!("{} {t} n={n} row={row}", set.name());
                    tally.check(&what, (simd.dot)(&w, &a), want, false);
                    // Other addresses; a trailing partial block or value.
                    let (s_w, s_a) = (rng.below(32), rng.below(32));
                    let (w2, a2) = (misaligned(&w, s_w), misaligned(&a, s_a));
                    tally.check(&what, (simd.dot)(&w2[s_w..], &a2[s_a..]), want, false);
                    let mut w3 = w.clone();
                    let extra = rng.below(t.type_size());
                    w3.extend(rng.bytes(extra, false));
                    tally.check(&what, (simd.dot)(&w3, &a), want, false);
                    // Mismatched lengths: only the common whole blocks count.
                    let cut = rng.below(a.len() + 1);
                    let want_cut = (scalar.dot)(&w, &a[..cut]);
                    tally.check(&what, (simd.dot)(&w, &a[..cut]), want_cut, false);
                }
            }
            eprintln!(
                "{} {t:>5} x {a_t}: {} cases bit-identical",
                set.name(),
                tally.cases
            );
            total += tally.cases;
        }
    }
    eprintln!("{total} cases in all");
}

/// Rows made of one extreme byte each (weights and activations, scales
/// then set to 1), the cases closest to the i16 saturation of
/// `maddubs`: every pair of {0x00, 0xff, 0x80, 0x7f, 0x01} on both sides,
/// for the quantized types.
#[test]
fn extreme_rows_match_scalar() {
    const BYTES: [u8; 5] = [0x00, 0xff, 0x80, 0x7f, 0x01];
    let one = |_: &mut Rng| 0x3c00u16; // f16 1.0
    let mut rng = Rng::new(5);
    for (set, types) in simd_sets() {
        for t in types.into_iter().filter(|t| t.block_size() > 1) {
            let simd = set.vec_dot_kernel(t).expect("kernel");
            let scalar = scalar_vec_dot_kernel(t).expect("scalar kernel");
            let a_t = scalar.act_type;
            let n = 9 * t.block_size();
            let mut tally = Tally::default();
            for (wb, ab) in BYTES.iter().flat_map(|&w| BYTES.map(|a| (w, a))) {
                let mut w = vec![wb; t.bytes_for(n as u64).expect("whole blocks") as usize];
                let mut a = vec![ab; a_t.bytes_for(n as u64).expect("whole blocks") as usize];
                set_scales(t, &mut w, &mut rng, one, |_| 1.0);
                set_scales(a_t, &mut a, &mut rng, one, |_| 1.0);
                let what = format!("{} {t} bytes {wb:#04x} x {ab:#04x}", set.name());
                tally.check(&what, (simd.dot)(&w, &a), (scalar.dot)(&w, &a), false);
            }
        }
    }
}

/// The f16/f32 patterns a non-finite scale or value is drawn from.
const SPECIAL_F16: [u16; 6] = [0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7d01, 0x7fff];
const SPECIAL_F32: [u32; 6] = [
    0x7f80_0000,
    0xff80_0000,
    0x7fc0_0000,
    0xffc0_0000,
    0x7fa0_0001,
    0x7fff_ffff,
];

/// Scale or value bits: mostly finite, often infinite or (if `nan`) NaN,
/// signalling NaNs included.
fn maybe_special_f16(rng: &mut Rng, nan: bool) -> u16 {
    if rng.below(3) == 0 {
        rng.pick(&SPECIAL_F16[..if nan { 6 } else { 2 }])
    } else {
        rng.finite_f16()
    }
}

fn maybe_special_f32(rng: &mut Rng, nan: bool) -> f32 {
    if rng.below(3) == 0 {
        f32::from_bits(rng.pick(&SPECIAL_F32[..if nan { 6 } else { 2 }]))
    } else {
        rng.finite_f32()
    }
}

#[test]
fn non_finite_inputs_do_not_panic_and_match() {
    for (set, types) in simd_sets() {
        for t in types {
            let simd = set.vec_dot_kernel(t).expect("kernel");
            let scalar = scalar_vec_dot_kernel(t).expect("scalar kernel");
            let a_t = scalar.act_type;
            let mut rng = Rng::new(u64::from(t.id()) + 99);
            let mut tally = Tally::default();
            let (mut nans, mut exact) = (0, 0);
            for row in 0..4000 {
                // Even rows: infinities only, so any NaN is generated
                // (inf - inf, 0 * inf), the same default NaN either way.
                let nan = row % 2 == 1;
                let n = t.block_size() * (1 + rng.below(12));
                let n = if t.block_size() == 1 {
                    n + rng.below(64)
                } else {
                    n
                };
                let (mut w, mut a) = (weight_row(t, n, &mut rng), activation_row(a_t, n, &mut rng));
                match t {
                    F32 | F16 | Bf16 => {
                        let wsize = t.type_size();
                        for _ in 0..1 + rng.below(3) {
                            let i = rng.below(n);
                            let bits = maybe_special_f32(&mut rng, nan).to_bits();
                            let wv: Vec<u8> = match t {
                                F32 => bits.to_le_bytes().to_vec(),
                                F16 => maybe_special_f16(&mut rng, nan).to_le_bytes().to_vec(),
                                _ => ((bits >> 16) as u16).to_le_bytes().to_vec(),
                            };
                            w[i * wsize..(i + 1) * wsize].copy_from_slice(&wv);
                            let j = rng.below(n);
                            let av = maybe_special_f32(&mut rng, nan).to_le_bytes();
                            a[4 * j..4 * j + 4].copy_from_slice(&av);
                        }
                    }
                    _ => {
                        let f16 = |r: &mut Rng| maybe_special_f16(r, nan);
                        let f32 = |r: &mut Rng| maybe_special_f32(r, nan);
                        set_scales(t, &mut w, &mut rng, f16, f32);
                        set_scales(a_t, &mut a, &mut rng, f16, f32);
                    }
                }
                let want = (scalar.dot)(&w, &a);
                let got = (simd.dot)(&w, &a);
                nans += usize::from(want.is_nan());
                exact += usize::from(!nan && want.is_nan());
                tally.check(&format!("{} {t} row={row}", set.name()), got, want, nan);
            }
            eprintln!(
                "{} {t:>5}: {} non-finite cases, {nans} NaN results ({exact} from \
                 infinities alone, bit-identical), {} NaN payloads differ",
                set.name(),
                tally.cases,
                tally.nan_payloads
            );
        }
    }
}

#[test]
fn dispatch_hands_out_the_active_set_with_scalar_activation_types() {
    let active = active_kernel_set();
    assert_eq!(kernel_set_name(), active.name());
    assert!(active.is_supported());
    for t in ALL_TYPES {
        let got = vec_dot_kernel(t).map(|k| k.act_type);
        let want = scalar_vec_dot_kernel(t).map(|k| k.act_type);
        assert_eq!(got, want, "{t}");
        for set in KernelSet::ALL.into_iter().filter(|s| s.is_supported()) {
            assert_eq!(set.vec_dot_kernel(t).map(|k| k.act_type), want, "{t}");
        }
    }
    // The set FERRITE_KERNELS forces (a CI job runs the tests with
    // `scalar` or `avx2`), else the fastest one the CPU runs.
    let best = KernelSet::ALL.into_iter().rev().find(|s| s.is_supported());
    match KernelRequest::from_env() {
        KernelRequest::Forced(set) => assert_eq!(active, set),
        _ => assert_eq!(Some(active), best),
    }
    eprintln!("active kernel set: {}", kernel_set_name());
}

/// Run by [`env_override_forces_scalar`] in a child process.
#[test]
#[ignore = "run by env_override_forces_scalar with FERRITE_KERNELS set"]
fn child_prints_kernel_set() {
    println!("kernel set: {}", kernel_set_name());
}

#[test]
fn env_override_forces_scalar() {
    let exe = std::env::current_exe().expect("test binary path");
    for (value, want) in [("scalar", "scalar"), ("bogus", active_best().name())] {
        let out = child_command(&exe)
            .args([
                "--exact",
                "child_prints_kernel_set",
                "--ignored",
                "--nocapture",
            ])
            .env("FERRITE_KERNELS", value)
            .output()
            .expect("run the test binary");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        assert!(
            stdout.contains(&format!("kernel set: {want}\n")),
            "FERRITE_KERNELS={value}: {stdout}"
        );
    }
}

/// A command running `exe`, through `FERRITE_TEST_RUNNER` if set (the
/// emulator of a cross-built test binary, e.g. `qemu-aarch64 -L
/// /usr/aarch64-linux-gnu -cpu max`, which a child process would
/// otherwise not run under; see `scripts/test-arm.sh`).
fn child_command(exe: &std::path::Path) -> std::process::Command {
    let runner = std::env::var("FERRITE_TEST_RUNNER").unwrap_or_default();
    let mut words = runner.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut c = std::process::Command::new(program);
            c.args(words).arg(exe);
            c
        }
        None => std::process::Command::new(exe),
    }
}

/// The fastest set this CPU runs.
fn active_best() -> KernelSet {
    KernelSet::ALL
        .into_iter()
        .rev()
        .find(|s| s.is_supported())
        .unwrap_or(KernelSet::Scalar)
}

/// The types whose kernel in `set` has a four-row `dot4`.
fn dot4_types(set: KernelSet) -> Vec<GgmlType> {
    ALL_TYPES
        .into_iter()
        .filter(|&t| set.vec_dot_kernel(t).is_some_and(|k| k.dot4.is_some()))
        .collect()
}

/// `out[i]` of a `dot4` call against the scalar `dot` of row `i`
/// (`w.len() / 4` bytes), bit for bit (NaN payloads aside if `nan_ok`).
fn check_dot4(
    tally: &mut Tally,
    what: &str,
    dot4: fn(&[u8], &[u8], &mut [f32; 4]),
    scalar: fn(&[u8], &[u8]) -> f32,
    (w, a): (&[u8], &[u8]),
    nan_ok: bool,
) {
    let mut out = [f32::NAN; 4];
    dot4(w, a, &mut out);
    let rb = w.len() / 4;
    for (i, &got) in out.iter().enumerate() {
        let want = scalar(&w[i * rb..(i + 1) * rb], a);
        tally.check(&format!("{what} out[{i}]"), got, want, nan_ok);
    }
}

#[test]
fn dot4_matches_scalar_rows_bit_for_bit() {
    const CASES_PER_LENGTH: usize = 60;
    let mut total = 0;
    for (set, _) in simd_sets() {
        for t in dot4_types(set) {
            let dot4 = set.vec_dot_kernel(t).and_then(|k| k.dot4).expect("dot4");
            let scalar = scalar_vec_dot_kernel(t).expect("scalar kernel");
            let a_t = scalar.act_type;
            let mut rng = Rng::new(u64::from(t.id()) * 104_729 + 3);
            let mut tally = Tally::default();
            for blocks in 1..=40 {
                let n = blocks * t.block_size();
                for case in 0..CASES_PER_LENGTH {
                    let what = format!("{} {t} dot4 blocks={blocks} case={case}", set.name());
                    let w: Vec<u8> = (0..4).flat_map(|_| weight_row(t, n, &mut rng)).collect();
                    let a = activation_row(a_t, n, &mut rng);
                    let check = |tally: &mut Tally, w: &[u8], a: &[u8]| {
                        check_dot4(tally, &what, dot4, scalar.dot, (w, a), false)
                    };
                    check(&mut tally, &w, &a);
                    // Other addresses.
                    let (s_w, s_a) = (rng.below(32), rng.below(32));
                    let (w2, a2) = (misaligned(&w, s_w), misaligned(&a, s_a));
                    check(&mut tally, &w2[s_w..], &a2[s_a..]);
                    // Mismatched lengths: activations cut anywhere, or
                    // longer than the rows.
                    let cut = rng.below(a.len() + 1);
                    check(&mut tally, &w, &a[..cut]);
                    let mut a3 = a.clone();
                    a3.extend(activation_row(a_t, t.block_size(), &mut rng));
                    check(&mut tally, &w, &a3);
                    // Weights not four rows of whole blocks (the rows are
                    // then other byte ranges, their scales random bytes
                    // that may be NaN: payloads may differ, as documented
                    // in `x86::avx2`).
                    let mut w3 = w.clone();
                    let extra = 1 + rng.below(4 * t.type_size() - 1);
                    w3.extend(rng.bytes(extra, false));
                    check_dot4(&mut tally, &what, dot4, scalar.dot, (&w3, &a), true);
                    let cut = rng.below(w.len() + 1);
                    check_dot4(&mut tally, &what, dot4, scalar.dot, (&w[..cut], &a), true);
                }
            }
            // Degenerate lengths.
            let w = weight_row(t, 4 * t.block_size(), &mut rng);
            let a = activation_row(a_t, t.block_size(), &mut rng);
            for len in 0..8 {
                let what = format!("{} {t} dot4 w.len()={len}", set.name());
                check_dot4(&mut tally, &what, dot4, scalar.dot, (&w[..len], &a), true);
                check_dot4(&mut tally, &what, dot4, scalar.dot, (&w, &a[..len]), false);
            }
            eprintln!(
                "{} {t:>5} x {a_t}: dot4, {} row results, {} bit-identical, {} NaN with \
                 another payload (rows with random-byte scales)",
                set.name(),
                tally.cases,
                tally.cases - tally.nan_payloads,
                tally.nan_payloads
            );
            total += tally.cases;
        }
    }
    eprintln!("{total} dot4 row results in all");
}

#[test]
fn dot4_extreme_and_non_finite_rows_match_scalar() {
    const BYTES: [u8; 5] = [0x00, 0xff, 0x80, 0x7f, 0x01];
    let one = |_: &mut Rng| 0x3c00u16; // f16 1.0
    for (set, _) in simd_sets() {
        for t in dot4_types(set) {
            let dot4 = set.vec_dot_kernel(t).and_then(|k| k.dot4).expect("dot4");
            let scalar = scalar_vec_dot_kernel(t).expect("scalar kernel");
            let a_t = scalar.act_type;
            let mut rng = Rng::new(u64::from(t.id()) + 7);
            let mut tally = Tally::default();
            // Each row made of one extreme byte, scales 1.
            let n = 9 * t.block_size();
            let row_bytes = t.bytes_for(n as u64).expect("whole blocks") as usize;
            for ab in BYTES {
                for rows in 0..BYTES.len().pow(2) {
                    let w: Vec<u8> = (0..4)
                        .flat_map(|i| vec![BYTES[(rows + i * 3) % BYTES.len()]; row_bytes])
                        .collect();
                    let mut w = w;
                    let mut a = vec![ab; a_t.bytes_for(n as u64).expect("whole blocks") as usize];
                    set_scales(t, &mut w, &mut rng, one, |_| 1.0);
                    set_scales(a_t, &mut a, &mut rng, one, |_| 1.0);
                    let what = format!("{} {t} dot4 extreme rows {rows} x {ab:#04x}", set.name());
                    check_dot4(&mut tally, &what, dot4, scalar.dot, (&w, &a), false);
                }
            }
            // Infinite and NaN scales: no panic, same bits (NaN payloads
            // aside where NaNs are among the inputs).
            for case in 0..2000 {
                let nan = case % 2 == 1;
                let n = t.block_size() * (1 + rng.below(12));
                let mut w: Vec<u8> = (0..4).flat_map(|_| weight_row(t, n, &mut rng)).collect();
                let mut a = activation_row(a_t, n, &mut rng);
                let f16 = |r: &mut Rng| maybe_special_f16(r, nan);
                let f32 = |r: &mut Rng| maybe_special_f32(r, nan);
                set_scales(t, &mut w, &mut rng, f16, f32);
                set_scales(a_t, &mut a, &mut rng, f16, f32);
                let what = format!("{} {t} dot4 non-finite case={case}", set.name());
                check_dot4(&mut tally, &what, dot4, scalar.dot, (&w, &a), nan);
            }
            eprintln!(
                "{} {t:>5}: dot4, {} extreme/non-finite row results match, {} NaN payloads differ",
                set.name(),
                tally.cases,
                tally.nan_payloads
            );
        }
    }
}

/// `dot_rows4` is four calls of `dot` where a kernel has no `dot4` (the
/// scalar set has none), and `dot4` where it has one.
#[test]
fn dot_rows4_falls_back_to_dot() {
    let mut tally = Tally::default();
    for set in KernelSet::ALL.into_iter().filter(|s| s.is_supported()) {
        for t in ALL_TYPES {
            let Some(k) = set.vec_dot_kernel(t) else {
                continue;
            };
            if set == KernelSet::Scalar {
                assert!(k.dot4.is_none(), "{t}");
            }
            let scalar = scalar_vec_dot_kernel(t).expect("scalar kernel");
            let mut rng = Rng::new(u64::from(t.id()) + 11);
            for blocks in [1, 2, 3, 7] {
                let n = blocks * t.block_size().max(32);
                let w: Vec<u8> = (0..4).flat_map(|_| weight_row(t, n, &mut rng)).collect();
                let a = activation_row(k.act_type, n, &mut rng);
                let mut out = [f32::NAN; 4];
                k.dot_rows4(&w, &a, &mut out);
                let rb = w.len() / 4;
                for (i, &got) in out.iter().enumerate() {
                    let want = (scalar.dot)(&w[i * rb..(i + 1) * rb], &a);
                    tally.check(&format!("{} {t} dot_rows4", set.name()), got, want, false);
                }
            }
        }
    }
    eprintln!("{} dot_rows4 results bit-identical", tally.cases);
}

/// The types whose kernel in `set` has an eight-row `dot8`.
fn dot8_types(set: KernelSet) -> Vec<GgmlType> {
    ALL_TYPES
        .into_iter()
        .filter(|&t| set.vec_dot_kernel(t).is_some_and(|k| k.dot8.is_some()))
        .collect()
}

/// `out[i]` of a `dot8` call on the interleaved `rows` (eight rows of
/// `rows.len() / 8` bytes) against the scalar `dot` of row `i`, bit for bit
/// (NaN payloads aside if `nan_ok`).
fn check_dot8(
    tally: &mut Tally,
    what: &str,
    t: GgmlType,
    dot8: fn(&[u8], &[u8], &mut [f32; 8]),
    scalar: fn(&[u8], &[u8]) -> f32,
    (rows, a): (&[u8], &[u8]),
    nan_ok: bool,
) {
    let mut group = vec![0u8; rows.len()];
    assert!(
        interleave::interleave(t, 8, rows, &mut group),
        "{what}: interleave"
    );
    let mut out = [f32::NAN; 8];
    dot8(&group, a, &mut out);
    let rb = rows.len() / 8;
    for (i, &got) in out.iter().enumerate() {
        let want = scalar(&rows[i * rb..(i + 1) * rb], a);
        tally.check(&format!("{what} out[{i}]"), got, want, nan_ok);
    }
}

#[test]
fn dot8_matches_scalar_rows_bit_for_bit() {
    const CASES_PER_LENGTH: usize = 40;
    const BYTES: [u8; 5] = [0x00, 0xff, 0x80, 0x7f, 0x01];
    let mut total = 0;
    for (set, _) in simd_sets() {
        for t in dot8_types(set) {
            if inherited(set, t, |k| k.dot8.map(|f| f as usize)) {
                eprintln!(
                    "{} {t:>5}: the slower set's dot8, checked there",
                    set.name()
                );
                continue;
            }
            let dot8 = set.vec_dot_kernel(t).and_then(|k| k.dot8).expect("dot8");
            let scalar = scalar_vec_dot_kernel(t).expect("scalar kernel");
            let a_t = scalar.act_type;
            let mut rng = Rng::new(u64::from(t.id()) * 7_919 + 11);
            let mut tally = Tally::default();
            for blocks in 1..=40 {
                let n = blocks * t.block_size();
                for case in 0..CASES_PER_LENGTH {
                    let what = format!("{} {t} dot8 blocks={blocks} case={case}", set.name());
                    let w: Vec<u8> = (0..8).flat_map(|_| weight_row(t, n, &mut rng)).collect();
                    let a = activation_row(a_t, n, &mut rng);
                    let check = |tally: &mut Tally, a: &[u8]| {
                        check_dot8(tally, &what, t, dot8, scalar.dot, (&w, a), false)
                    };
                    check(&mut tally, &a);
                    let s_a = rng.below(32);
                    check(&mut tally, &misaligned(&a, s_a)[s_a..]);
                    // Mismatched lengths: activations cut anywhere, or
                    // longer than the rows.
                    check(&mut tally, &a[..rng.below(a.len() + 1)]);
                    let mut a3 = a.clone();
                    a3.extend(activation_row(a_t, t.block_size(), &mut rng));
                    check(&mut tally, &a3);
                }
            }
            // Rows of one extreme byte each, against extreme activations,
            // scales as they come (random finite).
            let n = 5 * t.block_size();
            let row_bytes = t.bytes_for(n as u64).expect("whole blocks") as usize;
            // (Scales are then made of these bytes too, 0xffff being NaN.)
            for ab in BYTES {
                for shift in 0..BYTES.len() {
                    let w: Vec<u8> = (0..8)
                        .flat_map(|i| vec![BYTES[(shift + i) % BYTES.len()]; row_bytes])
                        .collect();
                    let a = vec![ab; a_t.bytes_for(n as u64).expect("whole blocks") as usize];
                    let what = format!("{} {t} dot8 extreme w={shift} a={ab:#x}", set.name());
                    check_dot8(&mut tally, &what, t, dot8, scalar.dot, (&w, &a), true);
                }
            }
            // Any group length: never a panic, and the whole blocks agree.
            let w = weight_row(t, 8 * 3 * t.block_size(), &mut rng);
            let a = activation_row(a_t, 3 * t.block_size(), &mut rng);
            for len in 0..w.len() {
                let mut out = [0f32; 8];
                dot8(&w[..len], &a, &mut out);
            }
            eprintln!(
                "{} {t:>5} x {a_t}: dot8, {} row results, {} bit-identical, {} NaN with \
                 another payload",
                set.name(),
                tally.cases,
                tally.cases - tally.nan_payloads,
                tally.nan_payloads
            );
            total += tally.cases;
        }
    }
    eprintln!("{total} dot8 row results in all");
}

/// A Q6_K block: every value `q` (0..64) from `q(i)`, the 16 group scales
/// from `sc(g)`, `d` the f16 bits `d`.
fn q6_k_block(q: impl Fn(usize) -> u8, sc: impl Fn(usize) -> i8, d: u16) -> Vec<u8> {
    let mut b = vec![0u8; std::mem::size_of::<BlockQ6K>()];
    let (ql, qh) = (offset_of!(BlockQ6K, ql), offset_of!(BlockQ6K, qh));
    for i in 0..256 {
        // Value i: half h, position l, run k of the half (see BlockQ6K).
        let (h, l, k) = (i / 128, i % 32, (i % 128) / 32);
        let v = q(i);
        assert!(v < 64);
        b[ql + 64 * h + 32 * (k % 2) + l] |= (v & 0x0f) << (4 * (k / 2));
        b[qh + 32 * h + l] |= (v >> 4) << (2 * k);
    }
    for g in 0..16 {
        b[offset_of!(BlockQ6K, scales) + g] = sc(g) as u8;
    }
    b[offset_of!(BlockQ6K, d)..][..2].copy_from_slice(&d.to_le_bytes());
    b
}

/// A Q8_K block of the values `x(i)`, scale `d`, and `bsums` that are
/// not the sums (Q6_K's kernels must not read them).
fn q8_k_block(x: impl Fn(usize) -> i8, d: f32) -> Vec<u8> {
    let mut b = vec![0x5au8; std::mem::size_of::<BlockQ8K>()];
    b[offset_of!(BlockQ8K, d)..][..4].copy_from_slice(&d.to_le_bytes());
    for i in 0..256 {
        b[offset_of!(BlockQ8K, qs) + i] = x(i) as u8;
    }
    b
}

/// Q6_K's eight-row kernels at the corners of their integer sums: values
/// all 0, all 63, all 32 or mixed, scales -128 and 127 (and mixed),
/// activations +-127 and -128 (and mixed), on 1 to 7 blocks, each of the
/// eight rows different, against the scalar reference bit for bit; and the
/// extreme sum checked by hand (`isum = 256 * (0 - 32) * -128 * -128 =
/// -2^27` per block, exact in f32).
#[test]
fn q6_k_dot8_extremes_match_scalar() {
    let values: [fn(usize) -> u8; 5] = [
        |_| 0,
        |_| 63,
        |_| 32,
        |i| if i % 2 == 0 { 63 } else { 0 },
        |i| ((i * 37 + i / 16) % 64) as u8,
    ];
    let scales: [fn(usize) -> i8; 4] = [
        |_| -128,
        |_| 127,
        |g| if g % 3 == 0 { -128 } else { 127 },
        |g| (g as i8).wrapping_mul(29).wrapping_sub(100),
    ];
    let acts: [fn(usize) -> i8; 5] = [
        |_| 127,
        |_| -128,
        |_| -127,
        |i| if i % 2 == 0 { 127 } else { -128 },
        |i| (i as i8).wrapping_mul(77),
    ];
    let scalar = scalar_vec_dot_kernel(Q6K).expect("scalar kernel");
    let mut checked = 0;
    for (set, _) in simd_sets() {
        let Some(dot8) = set.vec_dot_kernel(Q6K).and_then(|k| k.dot8) else {
            continue;
        };
        let mut tally = Tally::default();
        for blocks in [1, 2, 3, 5, 7] {
            for case in 0..values.len() * scales.len() {
                // Row r, block b: its own pattern of values and scales.
                let rows: Vec<u8> = (0..8)
                    .flat_map(|r| {
                        (0..blocks).flat_map(move |b| {
                            let v = values[(case + r + b) % values.len()];
                            let sc = scales[(case / values.len() + r) % scales.len()];
                            let d = if (r + b) % 4 == 3 { 0xb555 } else { 0x3c00 };
                            q6_k_block(v, sc, d)
                        })
                    })
                    .collect();
                for (ai, x) in acts.iter().enumerate() {
                    let d = if ai == 4 { 0.37 } else { 1.0 };
                    let a: Vec<u8> = (0..blocks).flat_map(|_| q8_k_block(x, d)).collect();
                    let what = format!(
                        "{} Q6_K dot8 blocks={blocks} case={case} a={ai}",
                        set.name()
                    );
                    check_dot8(&mut tally, &what, Q6K, dot8, scalar.dot, (&rows, &a), false);
                    // Fewer activation blocks than the rows have.
                    let cut = &a[..a.len() - std::mem::size_of::<BlockQ8K>()];
                    check_dot8(
                        &mut tally,
                        &what,
                        Q6K,
                        dot8,
                        scalar.dot,
                        (&rows, cut),
                        false,
                    );
                }
            }
        }
        // The largest sum in size, by hand.
        let rows: Vec<u8> = (0..8 * 3)
            .flat_map(|_| q6_k_block(|_| 0, |_| -128, 0x3c00))
            .collect();
        let a: Vec<u8> = (0..3).flat_map(|_| q8_k_block(|_| -128, 1.0)).collect();
        let mut group = vec![0u8; rows.len()];
        assert!(interleave::interleave(Q6K, 8, &rows, &mut group));
        let mut out = [0f32; 8];
        dot8(&group, &a, &mut out);
        assert_eq!(out, [-3.0 * (1u32 << 27) as f32; 8], "{}", set.name());
        eprintln!(
            "{}  Q6_K: dot8, {} extreme row results bit-identical",
            set.name(),
            tally.cases
        );
        checked += tally.cases;
    }
    eprintln!("{checked} Q6_K extreme dot8 results in all");
}

#[test]
fn dot8n_matches_dot8_row_by_row() {
    let mut total = 0;
    for (set, _) in simd_sets() {
        for t in ALL_TYPES {
            let Some(kernel) = set.vec_dot_kernel(t) else {
                continue;
            };
            let (Some(dot8), Some(dot8n)) = (kernel.dot8, kernel.dot8n) else {
                continue;
            };
            let a_t = kernel.act_type;
            let mut rng = Rng::new(u64::from(t.id()) * 31 + 5);
            for blocks in [1usize, 2, 3, 7, 18, 20] {
                let n = blocks * t.block_size();
                let rows: Vec<u8> = (0..8).flat_map(|_| weight_row(t, n, &mut rng)).collect();
                let mut group = vec![0u8; rows.len()];
                assert!(interleave::interleave(t, 8, &rows, &mut group));
                let act_row = a_t.bytes_for(n as u64).expect("whole blocks") as usize;
                // Up to 40 rows (more than one pass), the last row cut
                // short, or missing.
                for n_rows in [1usize, 2, 15, 16, 17, 40] {
                    let mut acts: Vec<u8> = (0..n_rows)
                        .flat_map(|_| activation_row(a_t, n, &mut rng))
                        .collect();
                    let cut = acts.len() - rng.below(act_row + 1);
                    acts.truncate(cut);
                    let mut out = vec![[f32::NAN; 8]; n_rows + 1];
                    dot8n(&group, &acts, act_row, &mut out);
                    for (r, got) in out.iter().enumerate() {
                        let start = (r * act_row).min(acts.len());
                        let end = (start + act_row).min(acts.len());
                        let mut want = [0f32; 8];
                        dot8(&group, &acts[start..end], &mut want);
                        for i in 0..8 {
                            assert!(
                                got[i].to_bits() == want[i].to_bits()
                                    || (got[i].is_nan() && want[i].is_nan()),
                                "{} {t} dot8n blocks={blocks} rows={n_rows} row {r} out[{i}]: \
                                 {} vs {}",
                                set.name(),
                                got[i],
                                want[i]
                            );
                            total += 1;
                        }
                    }
                }
            }
        }
    }
    eprintln!("{total} dot8n results, each equal to dot8's");
}

#[test]
fn dot8n_extreme_rows_match_scalar() {
    // Rows of one extreme byte each (scales made of them too, 0xffff being
    // NaN), against activation rows of one extreme byte each: the corners
    // of every integer bound (e.g. -128 * -128 for Q8_0, whose VNNI form
    // reads the weights as w + 128).
    const BYTES: [u8; 5] = [0x00, 0xff, 0x80, 0x7f, 0x01];
    let mut total = 0;
    for (set, _) in simd_sets() {
        for t in ALL_TYPES {
            let Some(kernel) = set.vec_dot_kernel(t) else {
                continue;
            };
            let Some(dot8n) = kernel.dot8n else {
                continue;
            };
            let scalar = scalar_vec_dot_kernel(t).expect("scalar kernel");
            let a_t = kernel.act_type;
            let n = 3 * t.block_size();
            let row_bytes = t.bytes_for(n as u64).expect("whole blocks") as usize;
            let act_row = a_t.bytes_for(n as u64).expect("whole blocks") as usize;
            // One activation row per extreme byte, repeated past one pass.
            let acts: Vec<u8> = (0..20)
                .flat_map(|i| vec![BYTES[i % BYTES.len()]; act_row])
                .collect();
            let mut tally = Tally::default();
            for shift in 0..BYTES.len() {
                let rows: Vec<u8> = (0..8)
                    .flat_map(|i| vec![BYTES[(shift + i) % BYTES.len()]; row_bytes])
                    .collect();
                let mut group = vec![0u8; rows.len()];
                assert!(interleave::interleave(t, 8, &rows, &mut group));
                let mut out = vec![[f32::NAN; 8]; acts.len() / act_row];
                dot8n(&group, &acts, act_row, &mut out);
                for (r, got) in out.iter().enumerate() {
                    let a = &acts[r * act_row..(r + 1) * act_row];
                    for (i, &g) in got.iter().enumerate() {
                        let want = (scalar.dot)(&rows[i * row_bytes..(i + 1) * row_bytes], a);
                        let what = format!(
                            "{} {t} dot8n extreme w={shift} row {r} out[{i}]",
                            set.name()
                        );
                        tally.check(&what, g, want, true);
                    }
                }
            }
            total += tally.cases;
        }
    }
    eprintln!("{total} dot8n results on extreme rows, each equal to the scalar reference's");
}

#[test]
fn dot16n_matches_two_dot8n_calls() {
    // Random groups, and groups of one extreme byte (scales made of it too,
    // 0xffff being NaN) against rows of extreme bytes: each half of every
    // result must be the bits of `dot8n` on that group alone.
    const BYTES: [u8; 5] = [0x00, 0xff, 0x80, 0x7f, 0x01];
    let mut total = 0;
    let mut facts_checked = 0;
    for (set, _) in simd_sets() {
        for t in ALL_TYPES {
            let Some(kernel) = set.vec_dot_kernel(t) else {
                continue;
            };
            // (With sixteen-row groups, `dot16n` reads one such group.)
            let (Some(dot8n), Some(dot16n), 8) = (kernel.dot8n, kernel.dot16n, kernel.group_rows)
            else {
                continue;
            };
            let a_t = kernel.act_type;
            let mut rng = Rng::new(u64::from(t.id()) * 17 + 3);
            let mut cases: Vec<(Vec<u8>, Vec<u8>, usize)> = Vec::new();
            for blocks in [1usize, 2, 3, 7, 20] {
                let n = blocks * t.block_size();
                let rows: Vec<u8> = (0..16).flat_map(|_| weight_row(t, n, &mut rng)).collect();
                let act_row = a_t.bytes_for(n as u64).expect("whole blocks") as usize;
                let mut acts: Vec<u8> = (0..40)
                    .flat_map(|_| activation_row(a_t, n, &mut rng))
                    .collect();
                // The last row cut short.
                acts.truncate(acts.len() - rng.below(act_row + 1));
                cases.push((rows, acts, act_row));
            }
            let n = 3 * t.block_size();
            let row_bytes = t.bytes_for(n as u64).expect("whole blocks") as usize;
            let act_row = a_t.bytes_for(n as u64).expect("whole blocks") as usize;
            for shift in 0..BYTES.len() {
                let rows: Vec<u8> = (0..16)
                    .flat_map(|i| vec![BYTES[(shift + i) % BYTES.len()]; row_bytes])
                    .collect();
                let acts: Vec<u8> = (0..20)
                    .flat_map(|i| vec![BYTES[i % BYTES.len()]; act_row])
                    .collect();
                cases.push((rows, acts, act_row));
            }
            for (rows, acts, act_row) in &cases {
                let mut groups = vec![0u8; rows.len()];
                let half = rows.len() / 2;
                assert!(interleave::interleave(
                    t,
                    8,
                    &rows[..half],
                    &mut groups[..half]
                ));
                assert!(interleave::interleave(
                    t,
                    8,
                    &rows[half..],
                    &mut groups[half..]
                ));
                for n_rows in [1usize, 2, 15, 16, 17, 40] {
                    // One more entry than rows: a missing row counts as empty.
                    let mut got = vec![[f32::NAN; 16]; n_rows + 1];
                    dot16n(&groups, acts, *act_row, &[], &mut got);
                    if a_t == Q8_0 {
                        // With the activations laid out in panels beforehand
                        // (what a product passes), the same bits again.
                        let mut facts = Vec::new();
                        ferrite_kernels::quant::act_panels(acts, *act_row, &mut facts);
                        let mut with_facts = vec![[f32::NAN; 16]; n_rows + 1];
                        dot16n(&groups, acts, *act_row, &facts, &mut with_facts);
                        for (r, (x, y)) in with_facts
                            .iter()
                            .flatten()
                            .zip(got.iter().flatten())
                            .enumerate()
                        {
                            assert!(
                                x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                                "{} {t} dot16n with panels, rows={n_rows} value {r}: {x} vs {y}",
                                set.name()
                            );
                        }
                        facts_checked += 1;
                    }
                    for (g, group) in groups.chunks_exact(half).enumerate() {
                        let mut want = vec![[f32::NAN; 8]; n_rows + 1];
                        dot8n(group, acts, *act_row, &mut want);
                        for (r, (got, want)) in got.iter().zip(&want).enumerate() {
                            for i in 0..8 {
                                let (x, y) = (got[8 * g + i], want[i]);
                                assert!(
                                    x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                                    "{} {t} dot16n rows={n_rows} row {r} group {g} out[{i}]: \
                                     {x} vs {y}",
                                    set.name()
                                );
                                total += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    eprintln!("{total} dot16n results, each equal to dot8n's on its group");
    eprintln!("{facts_checked} Q8_0 dot16n calls with activation panels, each equal to without");
}

/// Every set's many-row kernels (`dot8n`, and `dot16n` on two groups, with
/// and without Q8_0 activation panels) against the scalar `dot` of each
/// weight row directly, not only against each other, so that a mistake
/// they share fails too: random rows (a quarter of them only extreme
/// bytes) and rows of one extreme byte each (scales of 1, or made of the
/// bytes too, 0xffff being NaN), 1 to 5 and 11 blocks, 1 to 70 activation rows (the
/// kernels' steps of several rows, their remainders and more than one
/// pass: 16 rows for most, 64 for AVX-512's Q4_K and Q6_K `dot16n`), random or extreme activation rows, the last one cut short.
#[test]
fn many_row_kernels_match_scalar() {
    const BYTES: [u8; 5] = [0x00, 0xff, 0x80, 0x7f, 0x01];
    let mut total = 0;
    for (set, _) in simd_sets() {
        for t in ALL_TYPES {
            let Some(kernel) = set.vec_dot_kernel(t) else {
                continue;
            };
            if kernel.group_rows != 8 || (kernel.dot8n.is_none() && kernel.dot16n.is_none()) {
                continue;
            }
            let scalar = scalar_vec_dot_kernel(t).expect("scalar kernel").dot;
            let a_t = kernel.act_type;
            let mut rng = Rng::new(u64::from(t.id()) * 1_009 + 17);
            let mut tally = Tally::default();
            for (case, blocks) in [1usize, 2, 3, 4, 5, 11].into_iter().enumerate() {
                let n = blocks * t.block_size();
                let row_bytes = t.bytes_for(n as u64).expect("whole blocks") as usize;
                let act_row = a_t.bytes_for(n as u64).expect("whole blocks") as usize;
                let extreme = case % 2 == 1;
                // Extreme rows with scales of 1 (so that a wrapped integer
                // sum shows), or scales made of the bytes too.
                let unit_scales = case % 4 == 1;
                let one = |_: &mut Rng| 0x3c00u16;
                let rows: Vec<u8> = if extreme {
                    let mut rows: Vec<u8> = (0..16)
                        .flat_map(|i| vec![BYTES[(case + i) % BYTES.len()]; row_bytes])
                        .collect();
                    if unit_scales {
                        set_scales(t, &mut rows, &mut rng, one, |_| 1.0);
                    }
                    rows
                } else {
                    (0..16).flat_map(|_| weight_row(t, n, &mut rng)).collect()
                };
                let mut groups = vec![0u8; rows.len()];
                let half = rows.len() / 2;
                for (src, dst) in rows.chunks_exact(half).zip(groups.chunks_exact_mut(half)) {
                    assert!(interleave::interleave(t, 8, src, dst));
                }
                for n_rows in [1usize, 2, 3, 4, 5, 7, 16, 17, 37, 70] {
                    let mut acts: Vec<u8> = (0..n_rows)
                        .flat_map(|i| {
                            if extreme && i % 2 == 0 {
                                let mut a = vec![BYTES[(i / 2) % BYTES.len()]; act_row];
                                if unit_scales {
                                    set_scales(a_t, &mut a, &mut rng, one, |_| 1.0);
                                }
                                a
                            } else {
                                activation_row(a_t, n, &mut rng)
                            }
                        })
                        .collect();
                    acts.truncate(acts.len() - rng.below(act_row + 1));
                    // What each output row must be: the scalar dot of weight
                    // row i with activation row r (cut, or missing: empty).
                    let want = |r: usize, i: usize| {
                        let start = (r * act_row).min(acts.len());
                        let a = &acts[start..(start + act_row).min(acts.len())];
                        scalar(&rows[i * row_bytes..(i + 1) * row_bytes], a)
                    };
                    let what = |k: &str, r: usize, i: usize| {
                        format!(
                            "{} {t} {k} blocks={blocks} rows={n_rows} row {r} out[{i}]",
                            set.name()
                        )
                    };
                    if let Some(dot8n) = kernel.dot8n {
                        let mut got = vec![[f32::NAN; 8]; n_rows + 1];
                        dot8n(&groups[..half], &acts, act_row, &mut got);
                        for (r, got) in got.iter().enumerate() {
                            for (i, &g) in got.iter().enumerate() {
                                tally.check(&what("dot8n", r, i), g, want(r, i), extreme);
                            }
                        }
                    }
                    let Some(dot16n) = kernel.dot16n else {
                        continue;
                    };
                    let mut panels = Vec::new();
                    if a_t == Q8_0 {
                        ferrite_kernels::quant::act_panels(&acts, act_row, &mut panels);
                    }
                    for facts in [&[][..], &panels[..]] {
                        let mut got = vec![[f32::NAN; 16]; n_rows + 1];
                        dot16n(&groups, &acts, act_row, facts, &mut got);
                        for (r, got) in got.iter().enumerate() {
                            for (i, &g) in got.iter().enumerate() {
                                tally.check(&what("dot16n", r, i), g, want(r, i), extreme);
                            }
                        }
                        if a_t != Q8_0 {
                            break;
                        }
                    }
                }
            }
            eprintln!(
                "{} {t:>5}: {} many-row results equal to the scalar dot ({} NaNs of another \
                 payload)",
                set.name(),
                tally.cases,
                tally.nan_payloads
            );
            total += tally.cases;
        }
    }
    eprintln!("{total} many-row results in all");
}
