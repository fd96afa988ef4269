// Where a token row's K/V live in the cache: the per-row step metadata that the KV-writing and
// attention kernels share (device arrays, filled from model::StepInput).
#pragma once

#include <cstdint>

namespace flint::cuda {

// Full layers: K and V are each [num_pages * page_size, num_kv_heads, head_dim] bf16 and position
// p of sequence s is slot block_table[s][p / page_size] * page_size + p % page_size.
// Sliding layers: K and V are each [num_rings * window, num_kv_heads, head_dim] bf16 and position
// p of sequence s is slot ring_ids[s] * window + p % window.
// Keys of the sequence's new tokens (positions >= seq_len - num_new) are read from this step's
// K/V rows, not the cache: the cache is written after attention (kv_cache_write), so a prefill
// chunk longer than the window never overwrites a ring slot that one of its own rows still reads.
struct TokenKv {
  const int32_t* positions = nullptr;        // [num_tokens] absolute position of each row
  const int32_t* seq_idx = nullptr;          // [num_tokens] the row's sequence
  const int32_t* slot_mapping = nullptr;     // [num_tokens] full-layer slot of each row
  const int32_t* ring_ids = nullptr;         // [num_seqs]
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1] rows of each sequence in this step
  const int32_t* seq_lens = nullptr;         // [num_seqs] context length after this step
  const int32_t* block_table = nullptr;      // [num_seqs, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  int page_size = 16;
  int window = 0;  // keys a sliding query sees, itself included
};

}  // namespace flint::cuda
