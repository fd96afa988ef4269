// StepInput: one forward step over a flattened batch, and the KV-cache contract shared by the CPU
// and CUDA backends and the engine. The engine fills it; backends only read it.
// docs/ARCHITECTURE.md ("KV cache") describes the layout in full.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace flint::model {

// Sizes of the KV cache a backend allocates. Full-attention layers store K and V for every
// position in pages of `page_size` tokens: per full layer, K and V are each
// [num_pages, page_size, num_kv_heads, head_dim]. Sliding layers keep a ring per sequence slot: per
// sliding layer, K and V are each [num_rings, sliding_window, num_kv_heads, head_dim], and position
// p of a sequence lives in ring slot p % sliding_window.
struct KvCacheSpec {
  int64_t num_pages = 0;
  int64_t page_size = 16;
  int64_t num_rings = 0;  // at most this many sequences in flight at once
  DType dtype = DType::kBF16;
};

// One step. Tokens of a sequence are contiguous and in position order; a sequence contributes
// either a prefill chunk (several tokens) or one decode token. For sequence s:
//   tokens [query_start_loc[s], query_start_loc[s+1]) are new this step, at positions
//   seq_lens[s] - num_new .. seq_lens[s] - 1; positions before that are already in the cache.
// Attention for a new token reads the earlier positions from the cache and the new ones from this
// step; the backend writes the new K/V into the cache (slot_mapping for full layers, ring slot
// position % sliding_window in ring ring_ids[s] for sliding layers) so that the next step sees
// them.
struct StepInput {
  std::vector<int32_t> token_ids;        // [num_tokens]
  std::vector<int32_t> positions;        // [num_tokens] absolute position in its sequence
  std::vector<int32_t> query_start_loc;  // [num_seqs + 1] prefix sums of new tokens per sequence
  std::vector<int32_t> seq_lens;         // [num_seqs] context length after this step
  std::vector<int32_t> ring_ids;         // [num_seqs] the sliding-window ring each sequence owns
  std::vector<int32_t> block_table;      // [num_seqs, max_blocks_per_seq] full-layer page ids
  int32_t max_blocks_per_seq = 0;
  std::vector<int32_t> slot_mapping;    // [num_tokens] page_id * page_size + offset
  std::vector<int32_t> logits_indices;  // [num_logits] token rows whose logits are returned

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(seq_lens.size()); }
};

}  // namespace flint::model
