//! One table of kernels per kernel set: every hot kernel outside the
//! quantized dot products (which `crate::dispatch` hands out per weight
//! type) is reached through the active set's [`KernelTable`].
//!
//! Each set's table is the next slower set's with some entries replaced
//! (avx512 <- avx2 <- scalar), and every entry records which set provided
//! it ([`Entry::by`]), so a test can check that a fast set really runs its
//! own code where it claims to ([`KernelSet::claims`]) instead of silently
//! falling back. Nothing outside the tables asks which set is active.
//!
//! Every entry gives the scalar reference's bits (see the modules of the
//! public wrappers: `crate::math`, `crate::attend`, `crate::attend_tile`, `crate::attend_f32`,
//! `crate::columns`, `crate::gemm`,
//! `crate::gemm_f16`, `crate::gemm_w8a16`, `crate::quant::q8_0`, `crate::dispatch::f16_to_f32_row`,
//! `crate::quant::quantize`).

use std::ops::Range;
use std::sync::OnceLock;

use crate::attend::F16Rows;
use crate::dispatch::{active_kernel_set, KernelSet};
use crate::gemm::{Acts, OutPtr, PackedWeights};
use crate::gemm_f16::PackedF16;
use crate::gemm_w8a16::PackedW8;
use crate::math::Activation;
use crate::quant::{BlockQ8K, QK, QK_K};

/// A kernel and the set whose code it is.
#[derive(Clone, Copy, Debug)]
pub struct Entry<F> {
    pub f: F,
    pub by: KernelSet,
}

/// `crate::gemm::gemm_panels`' contract.
pub type GemmPanelsFn = unsafe fn(Acts, &PackedWeights, Range<usize>, OutPtr);
/// `crate::gemm_f16::gemm_f16_panels`' contract (arguments checked by the
/// wrapper).
pub type GemmF16PanelsFn = unsafe fn(Acts, &PackedF16, Range<usize>, OutPtr);
/// `crate::gemm_w8a16::gemm_w8a16_panels`' contract (arguments checked by
/// the wrapper).
pub type GemmW8A16PanelsFn = unsafe fn(Acts, &PackedW8, Range<usize>, OutPtr);
/// `crate::attend::scores_f16`.
pub type ScoresFn = fn(&[f32], usize, &[F16Rows], usize, f32, &mut [f32]);
/// `crate::attend::weighted_sum_f16`.
pub type WeightedSumFn = fn(&[f32], usize, &[F16Rows], &mut [f32]);
/// `crate::attend_tile::scores_tile` (arguments checked by the wrapper).
pub type ScoresTileFn = fn(&[f32], usize, &[f32], f32, &mut [f32]);
/// `crate::attend_tile::accumulate_tile` (arguments checked by the
/// wrapper).
pub type AccumulateTileFn = fn(&[f32], &[(u32, u32)], &[f32], &[f32], &mut [f32]);
/// `crate::attend_tile::f16_keys_to_block` (arguments checked by the
/// wrapper).
pub type F16KeysToBlockFn = fn(&[u8], usize, usize, usize, &mut [f32], usize);
/// `crate::attend_tile::f16_rows_to_f32` (arguments checked by the
/// wrapper).
pub type F16RowsToF32Fn = fn(&[u8], usize, usize, usize, &mut [f32]);
/// `crate::math::activate`.
pub type ActivateFn = fn(Activation, &mut [f32]);
/// `crate::math::silu_mul`.
pub type SiluMulFn = fn(&[f32], &mut [f32]);
/// `crate::math::layer_norm`'s body (arguments checked by the wrapper).
pub type LayerNormFn = fn(&mut [f32], &[f32], &[f32], f32);
/// `x = e^(x - max)` in place, returning the sum (softmax's loop).
pub type ExpSumFn = fn(&mut [f32], f32) -> f32;
/// `crate::attend_f32::scores` (arguments checked by the wrapper).
pub type ScoresF32Fn = fn(&crate::attend_f32::Heads, usize, &mut [f32]);
/// `crate::attend_f32::weighted_sum` (arguments checked by the wrapper).
pub type WeightedSumF32Fn = fn(&crate::attend_f32::Heads, &[f32], &mut [f32]);
/// `crate::columns::tile_stats`.
pub type TileStatsFn = fn(&mut [f32], usize, Option<&[f32]>, &mut [f32], &mut [f32]);
/// `crate::columns::rescaled_sums`.
pub type RescaledSumsFn = fn(&[f32], &[f32], usize, &[f32], &mut [f32]);
/// `crate::columns::store_columns`.
pub type StoreColumnsFn = fn(&[[f32; 16]], usize, &mut [f32], usize, usize);
/// 8-bit quantization of one 32-value activation block (Q8_0 / Q8_1).
pub type QuantizeQ8Fn = fn(&[f32; QK]) -> (f32, [i8; QK]);
/// `crate::quant::q8_0::quantize_acts_row` (arguments checked by the
/// wrapper).
pub type QuantizeActsRowFn = fn(&[f32], &mut [u8], &mut [crate::quant::q8_0::ActBlockFacts]);
/// Q8_K quantization of one 256-value activation block.
pub type QuantizeQ8KFn = fn(&[f32; QK_K]) -> BlockQ8K;
/// f16 -> f32 row conversion (`dst.len()` values, `src` long enough).
pub type F16ToF32Fn = fn(&[u8], &mut [f32]);
/// `crate::quant::quantize`'s body (type and lengths checked by it).
pub type QuantizeRowFn = fn(crate::GgmlType, &[f32], &mut [u8]);

/// The kernels of one set.
#[derive(Clone, Copy, Debug)]
pub struct KernelTable {
    pub set: KernelSet,
    pub gemm_panels: Entry<GemmPanelsFn>,
    pub gemm_f16_panels: Entry<GemmF16PanelsFn>,
    pub gemm_w8a16_panels: Entry<GemmW8A16PanelsFn>,
    pub scores_f16: Entry<ScoresFn>,
    pub weighted_sum_f16: Entry<WeightedSumFn>,
    pub scores_tile: Entry<ScoresTileFn>,
    pub accumulate_tile: Entry<AccumulateTileFn>,
    pub f16_keys_to_block: Entry<F16KeysToBlockFn>,
    pub f16_rows_to_f32: Entry<F16RowsToF32Fn>,
    pub activate: Entry<ActivateFn>,
    pub silu_mul: Entry<SiluMulFn>,
    pub layer_norm: Entry<LayerNormFn>,
    pub exp_shifted_sum: Entry<ExpSumFn>,
    pub scores_f32: Entry<ScoresF32Fn>,
    pub weighted_sum_f32: Entry<WeightedSumF32Fn>,
    pub tile_stats: Entry<TileStatsFn>,
    pub rescaled_sums: Entry<RescaledSumsFn>,
    pub store_columns: Entry<StoreColumnsFn>,
    pub quantize_q8: Entry<QuantizeQ8Fn>,
    pub quantize_acts_row: Entry<QuantizeActsRowFn>,
    pub quantize_q8k: Entry<QuantizeQ8KFn>,
    pub f16_to_f32: Entry<F16ToF32Fn>,
    pub quantize_row: Entry<QuantizeRowFn>,
}

/// The names of a table's entries, for [`KernelSet::claims`] and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    GemmPanels,
    GemmF16Panels,
    GemmW8A16Panels,
    ScoresF16,
    WeightedSumF16,
    ScoresTile,
    AccumulateTile,
    F16KeysToBlock,
    F16RowsToF32,
    Activate,
    SiluMul,
    LayerNorm,
    ExpShiftedSum,
    ScoresF32,
    WeightedSumF32,
    TileStats,
    RescaledSums,
    StoreColumns,
    QuantizeQ8,
    QuantizeActsRow,
    QuantizeQ8K,
    F16ToF32,
    QuantizeRow,
}

impl Kernel {
    pub const ALL: [Kernel; 23] = [
        Kernel::GemmPanels,
        Kernel::GemmF16Panels,
        Kernel::GemmW8A16Panels,
        Kernel::ScoresF16,
        Kernel::WeightedSumF16,
        Kernel::ScoresTile,
        Kernel::AccumulateTile,
        Kernel::F16KeysToBlock,
        Kernel::F16RowsToF32,
        Kernel::Activate,
        Kernel::SiluMul,
        Kernel::LayerNorm,
        Kernel::ExpShiftedSum,
        Kernel::ScoresF32,
        Kernel::WeightedSumF32,
        Kernel::TileStats,
        Kernel::RescaledSums,
        Kernel::StoreColumns,
        Kernel::QuantizeQ8,
        Kernel::QuantizeActsRow,
        Kernel::QuantizeQ8K,
        Kernel::F16ToF32,
        Kernel::QuantizeRow,
    ];
}

impl KernelTable {
    /// Which set provided entry `k`.
    pub fn provider(&self, k: Kernel) -> KernelSet {
        match k {
            Kernel::GemmPanels => self.gemm_panels.by,
            Kernel::GemmF16Panels => self.gemm_f16_panels.by,
            Kernel::GemmW8A16Panels => self.gemm_w8a16_panels.by,
            Kernel::ScoresF16 => self.scores_f16.by,
            Kernel::WeightedSumF16 => self.weighted_sum_f16.by,
            Kernel::ScoresTile => self.scores_tile.by,
            Kernel::AccumulateTile => self.accumulate_tile.by,
            Kernel::F16KeysToBlock => self.f16_keys_to_block.by,
            Kernel::F16RowsToF32 => self.f16_rows_to_f32.by,
            Kernel::Activate => self.activate.by,
            Kernel::SiluMul => self.silu_mul.by,
            Kernel::LayerNorm => self.layer_norm.by,
            Kernel::ExpShiftedSum => self.exp_shifted_sum.by,
            Kernel::ScoresF32 => self.scores_f32.by,
            Kernel::WeightedSumF32 => self.weighted_sum_f32.by,
            Kernel::TileStats => self.tile_stats.by,
            Kernel::RescaledSums => self.rescaled_sums.by,
            Kernel::StoreColumns => self.store_columns.by,
            Kernel::QuantizeQ8 => self.quantize_q8.by,
            Kernel::QuantizeActsRow => self.quantize_acts_row.by,
            Kernel::QuantizeQ8K => self.quantize_q8k.by,
            Kernel::F16ToF32 => self.f16_to_f32.by,
            Kernel::QuantizeRow => self.quantize_row.by,
        }
    }

    /// The scalar reference's table.
    fn scalar() -> KernelTable {
        let by = KernelSet::Scalar;
        KernelTable {
            set: by,
            gemm_panels: Entry {
                f: crate::gemm::gemm_panels_scalar,
                by,
            },
            gemm_f16_panels: Entry {
                f: crate::gemm_f16::gemm_f16_panels_scalar,
                by,
            },
            gemm_w8a16_panels: Entry {
                f: crate::gemm_w8a16::gemm_w8a16_panels_scalar,
                by,
            },
            scores_f16: Entry {
                f: crate::attend::reference::scores_f16,
                by,
            },
            weighted_sum_f16: Entry {
                f: crate::attend::reference::weighted_sum_f16,
                by,
            },
            scores_tile: Entry {
                f: crate::attend_tile::reference::scores_tile,
                by,
            },
            accumulate_tile: Entry {
                f: crate::attend_tile::reference::accumulate_tile,
                by,
            },
            f16_keys_to_block: Entry {
                f: crate::attend_tile::reference::f16_keys_to_block,
                by,
            },
            f16_rows_to_f32: Entry {
                f: crate::attend_tile::reference::f16_rows_to_f32,
                by,
            },
            activate: Entry {
                f: crate::math::reference::activate,
                by,
            },
            silu_mul: Entry {
                f: crate::math::reference::silu_mul,
                by,
            },
            layer_norm: Entry {
                f: crate::math::reference::layer_norm,
                by,
            },
            exp_shifted_sum: Entry {
                f: crate::math::reference::exp_shifted_sum,
                by,
            },
            scores_f32: Entry {
                f: crate::attend_f32::reference::scores,
                by,
            },
            weighted_sum_f32: Entry {
                f: crate::attend_f32::reference::weighted_sum,
                by,
            },
            tile_stats: Entry {
                f: crate::columns::reference::tile_stats,
                by,
            },
            rescaled_sums: Entry {
                f: crate::columns::reference::rescaled_sums,
                by,
            },
            store_columns: Entry {
                f: crate::columns::reference::store_columns,
                by,
            },
            quantize_q8: Entry {
                f: crate::quant::q8_0::quantize_q8_scalar,
                by,
            },
            quantize_acts_row: Entry {
                f: crate::quant::q8_0::quantize_acts_row_scalar,
                by,
            },
            quantize_q8k: Entry {
                f: BlockQ8K::from_f32_scalar,
                by,
            },
            f16_to_f32: Entry {
                f: crate::quant::float::f16_to_f32,
                by,
            },
            quantize_row: Entry {
                f: crate::quant::quantize_row_scalar,
                by,
            },
        }
    }

    /// `set`'s table: the next slower set's with `set`'s own entries.
    /// `None` if the CPU cannot run `set`.
    fn build(set: KernelSet) -> Option<KernelTable> {
        if !set.is_supported() {
            return None;
        }
        match set {
            KernelSet::Scalar => Some(KernelTable::scalar()),
            #[cfg(target_arch = "x86_64")]
            KernelSet::Avx2 => {
                let mut t = KernelTable::build(KernelSet::Scalar)?;
                // SAFETY: `is_supported` checked AVX2, FMA and F16C above.
                unsafe { crate::x86::avx2::override_table(&mut t) };
                t.set = set;
                Some(t)
            }
            #[cfg(target_arch = "x86_64")]
            KernelSet::Avx512 => {
                let mut t = KernelTable::build(KernelSet::Avx2)?;
                // SAFETY: `is_supported` checked AVX2, FMA, F16C and
                // AVX512F/BW/VL/VNNI above.
                unsafe { crate::x86::avx512::override_table(&mut t) };
                t.set = set;
                Some(t)
            }
            #[cfg(target_arch = "aarch64")]
            KernelSet::Neon | KernelSet::Dotprod | KernelSet::I8mm => {
                let slower = match set {
                    KernelSet::Neon => KernelSet::Scalar,
                    KernelSet::Dotprod => KernelSet::Neon,
                    _ => KernelSet::Dotprod,
                };
                let mut t = KernelTable::build(slower)?;
                // SAFETY: `is_supported` checked every feature of `set`
                // above.
                unsafe { crate::aarch64::override_table(set, &mut t) };
                t.set = set;
                Some(t)
            }
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }
}

impl KernelSet {
    /// This set's table (built once), or `None` if the CPU cannot run it.
    pub fn table(self) -> Option<&'static KernelTable> {
        static TABLES: [OnceLock<Option<KernelTable>>; KernelSet::ALL.len()] =
            [const { OnceLock::new() }; KernelSet::ALL.len()];
        let i = KernelSet::ALL.iter().position(|&s| s == self)?;
        TABLES[i].get_or_init(|| KernelTable::build(self)).as_ref()
    }

    /// The entries this set provides itself (what its table must show as
    /// its own; everything else it takes from the slower set).
    pub fn claims(self) -> &'static [Kernel] {
        match self {
            KernelSet::Scalar => &Kernel::ALL,
            KernelSet::Avx2 => &Kernel::ALL,
            KernelSet::Avx512 => avx512_claims(),
            KernelSet::Neon | KernelSet::Dotprod | KernelSet::I8mm => arm_claims(self),
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn avx512_claims() -> &'static [Kernel] {
    crate::x86::avx512::CLAIMS
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_claims() -> &'static [Kernel] {
    &[]
}

#[cfg(target_arch = "aarch64")]
fn arm_claims(set: KernelSet) -> &'static [Kernel] {
    crate::aarch64::claims(set)
}

#[cfg(not(target_arch = "aarch64"))]
fn arm_claims(_: KernelSet) -> &'static [Kernel] {
    &[]
}

/// The active set's table.
#[inline]
pub fn active() -> &'static KernelTable {
    static ACTIVE: OnceLock<&'static KernelTable> = OnceLock::new();
    ACTIVE.get_or_init(|| {
        active_kernel_set()
            .table()
            .expect("the active set is one the CPU supports")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each set's table shows its own code exactly where the set claims
    /// it, the slower set's elsewhere: a fast set never silently runs the
    /// scalar reference (or the slower set's code) where it has its own.
    #[test]
    fn every_set_provides_what_it_claims() {
        for pair in KernelSet::ALL.windows(2) {
            let (slow, fast) = (pair[0], pair[1]);
            let Some(t) = fast.table() else {
                eprintln!(
                    "SKIPPED {}: not supported by this CPU, table not checked",
                    fast.name()
                );
                continue;
            };
            let s = slow.table().expect("a supported set's slower set runs");
            assert_eq!(t.set, fast);
            for k in Kernel::ALL {
                let want = if fast.claims().contains(&k) {
                    fast
                } else {
                    s.provider(k)
                };
                assert_eq!(t.provider(k), want, "{} {k:?}", fast.name());
            }
            eprintln!("{}: own entries {:?}", fast.name(), fast.claims());
        }
        let scalar = KernelSet::Scalar.table().expect("scalar runs everywhere");
        assert!(Kernel::ALL
            .iter()
            .all(|&k| scalar.provider(k) == KernelSet::Scalar));
    }

    /// The fast x86 sets provide every entry themselves (AVX2 all of them,
    /// AVX-512 on top of it): no table entry of theirs is scalar code.
    #[test]
    fn no_x86_table_entry_is_scalar() {
        for set in [KernelSet::Avx2, KernelSet::Avx512] {
            let Some(t) = set.table() else {
                eprintln!("SKIPPED {}: not supported by this CPU", set.name());
                continue;
            };
            for k in Kernel::ALL {
                assert_ne!(t.provider(k), KernelSet::Scalar, "{} {k:?}", set.name());
            }
        }
    }
}
