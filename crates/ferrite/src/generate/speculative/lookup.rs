//! Prompt lookup: guess that the text goes on as it did after the last
//! earlier occurrence of its final few tokens (the idea of llama.cpp's
//! `llama-lookup` / `ngram-simple`). No second model; it pays off when the
//! output quotes its input (code edits, extraction, repeated structure).

use super::Drafter;
use crate::Error;

/// Matches the last `n` tokens of the sequence (`n` from `max_n` down to
/// `min_n`, the longest match first) against the earlier sequence, the
/// most recent occurrence first, and proposes what followed it.
#[derive(Clone, Debug)]
pub struct PromptLookup {
    min_n: usize,
    max_n: usize,
}

impl Default for PromptLookup {
    /// Matches of 3, then 2 tokens (a single token matches too often to
    /// guess well).
    fn default() -> Self {
        PromptLookup::new(2, 3)
    }
}

impl PromptLookup {
    /// Keys of `min_n..=max_n` tokens (both at least 1).
    pub fn new(min_n: usize, max_n: usize) -> PromptLookup {
        let min_n = min_n.max(1);
        PromptLookup {
            min_n,
            max_n: max_n.max(min_n),
        }
    }

    /// Where the continuation of the last `n` tokens' most recent earlier
    /// occurrence starts, if any.
    fn find(context: &[u32], n: usize) -> Option<usize> {
        let len = context.len();
        if len <= n {
            return None;
        }
        let key = &context[len - n..];
        (0..len - n)
            .rev()
            .find(|&j| &context[j..j + n] == key)
            .map(|j| j + n)
    }
}

impl Drafter for PromptLookup {
    fn propose(&mut self, context: &[u32], max: usize, out: &mut Vec<u32>) -> Result<(), Error> {
        if max == 0 {
            return Ok(());
        }
        let Some(from) = (self.min_n..=self.max_n)
            .rev()
            .find_map(|n| Self::find(context, n))
        else {
            return Ok(());
        };
        // Copy what followed, reading on into the tokens copied so far when
        // the occurrence runs up to the end (a repeating pattern goes on).
        let start = out.len();
        for i in 0..max {
            let at = from + i;
            let t = match context.get(at) {
                Some(&t) => t,
                None => out[start + at - context.len()],
            };
            out.push(t);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn propose(l: &mut PromptLookup, ctx: &[u32], max: usize) -> Vec<u32> {
        let mut out = Vec::new();
        l.propose(ctx, max, &mut out).unwrap();
        out
    }

    #[test]
    fn proposes_what_followed_the_longest_most_recent_match() {
        let mut l = PromptLookup::default();
        // "1 2 3" occurred before, followed by 4 5 6.
        assert_eq!(propose(&mut l, &[1, 2, 3, 4, 5, 6, 9, 1, 2, 3], 3), [4, 5, 6]);
        // The 3-token key [7, 2, 3] does not occur; [2, 3] does, most
        // recently followed by 8.
        assert_eq!(
            propose(&mut l, &[2, 3, 4, 0, 2, 3, 8, 7, 2, 3], 2),
            [8, 7]
        );
        assert_eq!(propose(&mut l, &[1, 2, 3], 4), Vec::<u32>::new(), "no match");
        assert_eq!(propose(&mut l, &[5, 5], 0), Vec::<u32>::new());
        assert_eq!(propose(&mut l, &[], 4), Vec::<u32>::new());
    }

    #[test]
    fn a_repeating_pattern_goes_on() {
        let mut l = PromptLookup::new(1, 2);
        assert_eq!(propose(&mut l, &[1, 2, 1, 2], 5), [1, 2, 1, 2, 1]);
        assert_eq!(propose(&mut l, &[7, 7], 3), [7, 7, 7]);
    }
}
