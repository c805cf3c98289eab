//! Hostile input: wrong lengths give errors, unsupported types give errors,
//! and no byte pattern or float value makes (de)quantization panic.

use ferrite_kernels::quant::{
    as_blocks, dequantize, quantize, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K,
    BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1, GgmlType, QuantError, QuantOp,
    ALL_TYPES,
};

/// A small deterministic generator (xorshift64*), so the test needs no crates.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn block_structs_match_the_type_table() {
    use std::mem::size_of;
    let sizes = [
        (GgmlType::Q4_0, size_of::<BlockQ4_0>()),
        (GgmlType::Q4_1, size_of::<BlockQ4_1>()),
        (GgmlType::Q5_0, size_of::<BlockQ5_0>()),
        (GgmlType::Q5_1, size_of::<BlockQ5_1>()),
        (GgmlType::Q8_0, size_of::<BlockQ8_0>()),
        (GgmlType::Q8_1, size_of::<BlockQ8_1>()),
        (GgmlType::Q2K, size_of::<BlockQ2K>()),
        (GgmlType::Q3K, size_of::<BlockQ3K>()),
        (GgmlType::Q4K, size_of::<BlockQ4K>()),
        (GgmlType::Q5K, size_of::<BlockQ5K>()),
        (GgmlType::Q6K, size_of::<BlockQ6K>()),
        (GgmlType::Q8K, size_of::<BlockQ8K>()),
    ];
    for (t, size) in sizes {
        assert_eq!(t.type_size(), size, "{t}");
    }
}

#[test]
fn unsupported_types_are_errors() {
    for t in ALL_TYPES {
        let mut values = vec![0.0f32; t.block_size()];
        let mut bytes = vec![0u8; t.type_size()];
        let d = dequantize(t, &bytes, &mut values);
        assert_eq!(d.is_ok(), t.can_dequantize(), "{t}: {d:?}");
        if !t.can_dequantize() {
            assert_eq!(
                d,
                Err(QuantError::Unsupported {
                    ty: t,
                    op: QuantOp::Dequantize
                })
            );
        }
        let q = quantize(t, &values, &mut bytes);
        assert_eq!(q.is_ok(), t.can_quantize(), "{t}: {q:?}");
        if !t.can_quantize() {
            assert_eq!(
                q,
                Err(QuantError::Unsupported {
                    ty: t,
                    op: QuantOp::Quantize
                })
            );
        }
        assert!(!t.can_quantize() || t.can_dequantize(), "{t}");
    }
}

#[test]
fn bad_lengths_are_errors() {
    for t in ALL_TYPES.into_iter().filter(|t| t.can_dequantize()) {
        let (bs, ts) = (t.block_size(), t.type_size());
        for blocks in [0usize, 1, 3] {
            let n = blocks * bs;
            // Exact sizes work, including zero blocks.
            assert_eq!(
                dequantize(t, &vec![0; blocks * ts], &mut vec![0.0; n]),
                Ok(()),
                "{t}"
            );
            // One byte too many or too few.
            let mut wrong = vec![blocks * ts + 1];
            if blocks > 0 {
                wrong.push(blocks * ts - 1);
            }
            for len in wrong {
                let e = dequantize(t, &vec![0; len], &mut vec![0.0; n]);
                let want = QuantError::ByteLength {
                    ty: t,
                    values: n,
                    expected: Some(blocks * ts),
                    actual: len,
                };
                assert_eq!(e, Err(want), "{t}");
            }
            // A partial block of values.
            if bs > 1 {
                let e = dequantize(t, &vec![0; blocks * ts], &mut vec![0.0; n + 1]);
                assert_eq!(
                    e,
                    Err(QuantError::PartialBlock {
                        ty: t,
                        values: n + 1
                    }),
                    "{t}"
                );
            }
        }
        if t.can_quantize() {
            let e = quantize(t, &vec![0.0; bs], &mut vec![0; ts + 1]);
            assert!(
                matches!(e, Err(QuantError::ByteLength { .. })),
                "{t}: {e:?}"
            );
            if bs > 1 {
                let e = quantize(t, &vec![0.0; bs + 1], &mut vec![0; ts]);
                assert!(
                    matches!(e, Err(QuantError::PartialBlock { .. })),
                    "{t}: {e:?}"
                );
            }
        }
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    for t in ALL_TYPES {
        for _ in 0..50 {
            let len = (rng.next() % 1200) as usize;
            let bytes = rng.bytes(len);
            let mut values = vec![0.0f32; (rng.next() % 1100) as usize];
            let _ = dequantize(t, &bytes, &mut values);
            // And the matching length, so the decoders really run.
            let blocks = bytes.len() / t.type_size();
            let mut values = vec![0.0f32; blocks * t.block_size()];
            let r = dequantize(t, &bytes[..blocks * t.type_size()], &mut values);
            assert_eq!(r.is_ok(), t.can_dequantize(), "{t}");
        }
        // All ones: NaN scales everywhere.
        let bytes = vec![0xff; 4 * t.type_size()];
        let mut values = vec![0.0f32; 4 * t.block_size()];
        let _ = dequantize(t, &bytes, &mut values);
    }
}

#[test]
fn odd_floats_never_panic() {
    let odd = [
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        1e-45,
        -1e-40,
        0.0,
        -0.0,
        1e30,
    ];
    let mut rng = Rng(42);
    for t in ALL_TYPES.into_iter().filter(|t| t.can_quantize()) {
        // Two super-blocks: whole blocks for every type.
        let n = 512;
        for _ in 0..40 {
            let x: Vec<f32> = (0..n)
                .map(|_| match rng.next() % 4 {
                    0 => odd[(rng.next() % odd.len() as u64) as usize],
                    1 => f32::from_bits(rng.next() as u32),
                    _ => (rng.next() % 2001) as f32 / 1000.0 - 1.0,
                })
                .collect();
            let mut q = vec![0u8; t.bytes_for(n as u64).unwrap() as usize];
            quantize(t, &x, &mut q).expect("lengths are right");
            let mut y = vec![0.0f32; n];
            dequantize(t, &q, &mut y).expect("lengths are right");
        }
        // Whole blocks of one odd value each.
        for &v in &odd {
            let x = vec![v; n];
            let mut q = vec![0u8; t.bytes_for(n as u64).unwrap() as usize];
            quantize(t, &x, &mut q).expect("lengths are right");
        }
    }
}

#[test]
fn blocks_can_be_viewed_at_any_address() {
    let mut rng = Rng(7);
    let bytes = rng.bytes(1 + 3 * 18);
    // Offset 1: deliberately not aligned to anything.
    let blocks = as_blocks::<BlockQ4_0>(&bytes[1..]).expect("whole blocks");
    assert_eq!(blocks.len(), 3);
    assert_eq!(blocks[2].d, [bytes[1 + 36], bytes[1 + 37]]);
    assert_eq!(blocks[2].qs[..], bytes[1 + 38..]);
    assert!(as_blocks::<BlockQ4_0>(&bytes).is_none());
    assert_eq!(as_blocks::<BlockQ8K>(&[]).map(<[_]>::len), Some(0));
}
