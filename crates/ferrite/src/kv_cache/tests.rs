//! Unit tests of the paged KV cache (`super`).
use super::*;

#[test]
fn truncation_keeps_nothing_past_the_rewind_limit() {
    let mut cache = KvCache::new(4, 100, &[100, 10]);
    cache.set_max_rewind(5);
    cache.len = 40;
    assert_eq!(cache.truncate(50), 40);
    assert_eq!(cache.truncate(36), 36);
    cache.len = 38;
    // 40 positions were written: going back to 35 drops 5, to 34 six.
    assert_eq!(cache.truncate(35), 35);
    assert_eq!(cache.truncate(34), 0);
    cache.len = 20;
    assert_eq!(cache.truncate(15), 15);
    let mut unlimited = KvCache::new(4, 100, &[100]);
    unlimited.layers[0].store(3, &[1.0; 4], &[2.0; 4]);
    unlimited.len = 4;
    let f = unlimited.fork();
    assert_eq!(f.layers[0].key(3), unlimited.layers[0].key(3));
    assert_eq!(f.layers[0].value(3), unlimited.layers[0].value(3));
    assert_eq!(f.len, 4);
    unlimited.len = 90;
    assert_eq!(unlimited.truncate(1), 1);
}

#[test]
fn stored_rows_copy_bit_exactly_and_only_what_is_held() {
    for ty in [KvType::F16, KvType::F32] {
        // Layer 1 is a ring of 4 slots.
        let mut a = KvCache::with_type(3, 8, &[8, 4], ty);
        for p in 0..6 {
            let k = [p as f32 + 0.1, -1e-9, 65504.0 * 2.0];
            let v = [f32::MIN_POSITIVE, p as f32, -0.0];
            for l in &mut a.layers {
                l.store(p, &k, &v);
            }
        }
        assert!(
            a.stored_rows(0, 0).is_none(),
            "nothing counted as written yet"
        );
        a.len = 6;
        assert!(a.stored_rows(0, 6).is_none());
        assert!(a.stored_rows(2, 0).is_none());
        // The ring holds positions 2..6 only.
        assert!(a.stored_rows(1, 1).is_none());
        assert!(a.stored_rows(1, 2).is_some());
        let mut b = KvCache::with_type(3, 8, &[8, 8], ty);
        for p in 0..6 {
            let l = if p < 2 { 0 } else { 1 };
            for layer in 0..=l {
                let (k, v) = a.stored_rows(layer, p).unwrap();
                assert_eq!(k.len(), b.layers[layer].row_bytes());
                let (k, v) = (k.to_vec(), v.to_vec());
                b.layers[layer].store_raw(p, &k, &v);
            }
        }
        b.len = 6;
        for p in 0..6 {
            assert_eq!(b.stored_rows(0, p), a.stored_rows(0, p));
        }
        for p in 2..6 {
            assert_eq!(b.stored_rows(1, p), a.stored_rows(1, p));
        }
    }
}

/// Forks share blocks until one side stores into them; blocks come
/// from the pool and go back to it; runs follow the blocks in
/// position order, around the ring too.
#[test]
fn blocks_are_shared_copied_on_write_and_returned_to_the_pool() {
    let pool = KvPool::new();
    let block = 2 * KV_BLOCK * 4 * 2;
    let mut a = KvCache::in_pool(4, 64, &[64, 20], KvType::F16, &pool);
    for p in 0..20 {
        for l in &mut a.layers {
            l.store(p, &[p as f32; 4], &[-(p as f32); 4]);
        }
    }
    a.len = 20;
    // Two blocks per layer.
    assert_eq!(pool.bytes(), 4 * block);
    let mut b = a.fork();
    assert_eq!(pool.bytes(), 4 * block, "a fork copies nothing");
    b.layers[0].store(20, &[9.0; 4], &[9.0; 4]);
    // Position 20 is in block 1: copied, then written.
    assert_eq!(pool.bytes(), 5 * block);
    assert_eq!(a.layers[0].key(19), b.layers[0].key(19));
    assert_ne!(a.layers[0].key(20), b.layers[0].key(20));
    assert!(Arc::ptr_eq(
        &a.layers[0].block(0).unwrap(),
        &b.layers[0].block(0).unwrap()
    ));
    // Runs: one per block, position order; the ring of 20 slots holds
    // position 20 in slot 0.
    let mut runs = Vec::new();
    a.layers[0].key_runs(3..20, 1, &mut runs);
    assert_eq!(runs.iter().map(|r| r.n).collect::<Vec<_>>(), [13, 4]);
    assert_eq!(&runs[0].bytes[..2], &a.layers[0].key(3)[2..4]);
    assert_eq!(&runs[1].bytes[..2], &a.layers[0].key(16)[2..4]);
    b.layers[1].store(20, &[7.0; 4], &[7.0; 4]);
    runs.clear();
    b.layers[1].value_runs(5..21, 0, &mut runs);
    assert_eq!(runs.iter().map(|r| r.n).collect::<Vec<_>>(), [11, 4, 1]);
    assert_eq!(&runs[2].bytes[..8], b.layers[1].value(20));
    assert_eq!(&runs[1].bytes[..8], b.layers[1].value(16));
    // A block shared into another cache reads the same.
    let mut c = KvCache::in_pool(4, 64, &[64, 20], KvType::F16, &pool);
    c.layers[0].share_block(0, a.layers[0].block(0).unwrap());
    assert_eq!(c.layers[0].key(7), a.layers[0].key(7));
    drop((a, b));
    assert_eq!(pool.bytes(), block, "c holds one block");
    drop(c);
    assert_eq!(pool.bytes(), 0);
}

/// A cache of one-position blocks (an encoder-decoder hypothesis'):
/// a fork copies no row, the next position adds one row, rewriting a
/// shared position copies that row only; both sides read their own.
#[test]
fn one_position_blocks_fork_without_copying_rows() {
    let row = 2 * 3 * 4;
    let mut a = KvCache::rows(3, 2);
    let pool = a.layers[0].pool.clone();
    let kv = |p: usize| ([p as f32, 1.5, -0.0], [-(p as f32), f32::MIN_POSITIVE, 7.0]);
    for p in 0..5 {
        let (k, v) = kv(p);
        for l in &mut a.layers {
            l.store(p, &k, &v);
        }
    }
    a.len = 5;
    assert_eq!(pool.bytes(), 2 * 5 * row);
    let mut b = a.fork();
    assert_eq!(pool.bytes(), 2 * 5 * row, "a fork copies nothing");
    b.layers[1].store(5, &[9.0; 3], &[8.0; 3]);
    assert_eq!(pool.bytes(), 2 * 5 * row + row, "one new row");
    b.layers[0].store(2, &[4.0; 3], &[3.0; 3]);
    assert_eq!(pool.bytes(), 2 * 5 * row + 2 * row, "one row copied");
    for p in 0..5 {
        let (k, v) = kv(p);
        assert_eq!(a.layers[0].key_f32(p), k);
        assert_eq!(a.layers[0].value_f32(p), v);
        assert_eq!(b.layers[1].key_f32(p), k);
    }
    assert_eq!(b.layers[0].key_f32(2), [4.0; 3]);
    assert_eq!(b.layers[0].value_f32(2), [3.0; 3]);
    assert_eq!(b.layers[1].value_f32(5), [8.0; 3]);
    // Rewriting a row no one shares writes it in place.
    b.layers[1].store(5, &[1.0; 3], &[1.0; 3]);
    assert_eq!(pool.bytes(), 2 * 5 * row + 2 * row);
    assert_eq!(b.layers[1].key_f32(5), [1.0; 3]);
    drop((a, b));
    assert_eq!(pool.bytes(), 0);
}

/// A prompt's whole blocks, taken with `prefix_block` and shared into an
/// empty cache with `share_prefix`, read back as the same bits with no
/// copy; the calls refuse what they cannot do (partial blocks, a ring
/// layer, a cache already started, another model's shape).
#[test]
fn prefix_blocks_share_whole_blocks_and_refuse_the_rest() {
    let layer = |p: usize, l: usize| ([p as f32 + l as f32 * 0.5; 4], [-(p as f32); 4]);
    let mut full = KvCache::new(4, 64, &[64, 64]);
    for p in 0..40 {
        let (k0, v0) = layer(p, 0);
        let (k1, v1) = layer(p, 1);
        full.push(&[(&k0, &v0), (&k1, &v1)]);
    }
    assert_eq!(full.len(), 40);
    assert_eq!(full.prefix_block_bytes(), 2 * KV_BLOCK * 2 * 4 * 2);
    // Blocks 0 and 1 are whole; block 2 (positions 32..48) is not.
    let blocks: Vec<_> = (0..2).map(|b| full.prefix_block(b).unwrap()).collect();
    assert!(full.prefix_block(2).is_none());
    assert_eq!(blocks[0].bytes(), full.prefix_block_bytes());

    let pool_before = full.layers[0].pool.bytes();
    let mut c = KvCache::new(4, 64, &[64, 64]);
    assert_eq!(c.share_prefix(&blocks), 32);
    assert_eq!(c.len(), 32);
    assert_eq!(full.layers[0].pool.bytes(), pool_before, "shared, not copied");
    assert_eq!(c.layers[0].pool.bytes(), 0, "no block of its own yet");
    for l in 0..2 {
        for p in 0..32 {
            assert_eq!(c.stored_rows(l, p), full.stored_rows(l, p));
        }
    }
    // Not again: the cache is no longer empty.
    assert_eq!(c.share_prefix(&blocks), 0);
    // A ring layer (window shorter than the context) neither gives nor takes.
    let mut ring = KvCache::new(4, 64, &[64, 16]);
    assert!(!ring.keeps_every_position());
    assert_eq!(ring.share_prefix(&blocks), 0);
    assert_eq!(ring.len(), 0);
    // Another model's shape (wider rows, or one layer) is refused whole.
    assert_eq!(KvCache::new(8, 64, &[64, 64]).share_prefix(&blocks), 0);
    assert_eq!(KvCache::new(4, 64, &[64]).share_prefix(&blocks), 0);
    // More blocks than the context holds.
    assert_eq!(KvCache::new(4, 16, &[16, 16]).share_prefix(&blocks), 0);
}
