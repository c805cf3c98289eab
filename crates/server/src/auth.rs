//! The API key: stored as its SHA-256 and compared with a request's key
//! in constant time (both digests are always compared in full, so timing
//! reveals neither the key's length nor how much of it matched).

use sha2::{Digest, Sha256};

/// The SHA-256 of a key.
pub fn key_hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Whether `given` hashes to `want`, compared in constant time.
pub fn key_matches(given: &str, want: &[u8; 32]) -> bool {
    let got = key_hash(given);
    let diff = got.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_only_themselves() {
        let want = key_hash("sk-secret");
        assert!(key_matches("sk-secret", &want));
        assert!(!key_matches("sk-secreT", &want));
        assert!(!key_matches("", &want));
    }
}
