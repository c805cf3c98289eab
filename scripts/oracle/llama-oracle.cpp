// llama-oracle: a small program of ours, linked against llama.cpp's library
// (built by scripts/build-llamacpp.sh), that records what llama.cpp
// computes for a token sequence, for ferrite's golden files.
//
//   llama-oracle logits MODEL IDS_FILE OUT.f32 [UBATCH]
//       Evaluates the token ids (whitespace-separated in IDS_FILE) in one
//       batch and writes every position's logits as raw little-endian f32
//       (n_tokens x n_vocab). With UBATCH, llama.cpp computes the batch in
//       pieces of that many tokens (1: one token at a time, as generation
//       does), which takes other kernel paths: how much that changes the
//       logits measures llama.cpp's own numerical noise.
//   llama-oracle greedy MODEL IDS_FILE N
//       Feeds the prompt ids, then generates N tokens greedily (argmax), one
//       decode call per token as llama-completion does. Prints one line per
//       generated token: "id top1_id top1_logit top2_id top2_logit".
//
// Threads: 2. KV cache: llama.cpp's default (f16). Flash attention: off.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

static std::vector<llama_token> read_ids(const char * path) {
    std::ifstream in(path);
    std::vector<llama_token> ids;
    long v;
    while (in >> v) ids.push_back((llama_token) v);
    return ids;
}

static void top2(const float * l, int n, int & a, int & b) {
    a = 0; b = -1;
    for (int i = 1; i < n; i++) {
        if (l[i] > l[a]) { b = a; a = i; }
        else if (b < 0 || l[i] > l[b]) { b = i; }
    }
}

int main(int argc, char ** argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s logits|greedy MODEL IDS_FILE OUT|N [UBATCH]\n", argv[0]);
        return 2;
    }
    const bool greedy = strcmp(argv[1], "greedy") == 0;
    std::vector<llama_token> ids = read_ids(argv[3]);
    const int n_gen = greedy ? atoi(argv[4]) : 0;

    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(argv[2], mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[2]); return 1; }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) (ids.size() + n_gen + 16);
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = (!greedy && argc > 5) ? (uint32_t) atoi(argv[5]) : cp.n_ctx;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create context\n"); return 1; }

    llama_batch batch = llama_batch_init((int32_t) cp.n_ctx, 0, 1);
    batch.n_tokens = (int32_t) ids.size();
    for (size_t i = 0; i < ids.size(); i++) {
        batch.token[i] = ids[i];
        batch.pos[i] = (llama_pos) i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = !greedy || i + 1 == ids.size();
    }
    if (llama_decode(ctx, batch) != 0) { fprintf(stderr, "decode failed\n"); return 1; }

    if (!greedy) {
        FILE * out = fopen(argv[4], "wb");
        for (size_t i = 0; i < ids.size(); i++) {
            fwrite(llama_get_logits_ith(ctx, (int32_t) i), sizeof(float), n_vocab, out);
        }
        fclose(out);
    } else {
        llama_pos pos = (llama_pos) ids.size();
        int last = (int) ids.size() - 1;
        for (int g = 0; g < n_gen; g++) {
            const float * l = llama_get_logits_ith(ctx, last);
            int a, b;
            top2(l, n_vocab, a, b);
            printf("%d %d %.9g %d %.9g\n", a, a, l[a], b, l[b]);
            batch.n_tokens = 1;
            batch.token[0] = a;
            batch.pos[0] = pos++;
            batch.n_seq_id[0] = 1;
            batch.seq_id[0][0] = 0;
            batch.logits[0] = true;
            last = 0;
            if (llama_decode(ctx, batch) != 0) { fprintf(stderr, "decode failed\n"); return 1; }
        }
    }
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
