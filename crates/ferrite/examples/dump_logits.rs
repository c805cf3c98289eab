//! Writes all-position logits of a token id list as raw f32 (debugging aid
//! for comparing with llama.cpp): dump_logits MODEL IDS_FILE OUT
use ferrite::models::decoder::Logits;
use ferrite::models::open_causal_lm;
use ferrite::parallel::Threads;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ids: Vec<u32> = std::fs::read_to_string(&args[2])
        .unwrap()
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    let (_f, model) = open_causal_lm(std::path::Path::new(&args[1])).unwrap();
    let mut st = model.new_state(ids.len(), Threads::new(2)).unwrap();
    let mut logits = Vec::new();
    model
        .forward(&ids, &mut st, Logits::All, &mut logits)
        .unwrap();
    let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&args[3], bytes).unwrap();
}
