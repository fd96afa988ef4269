// KvManager: the engine's bookkeeping of KV memory. Full-attention pages (reference counted, with a
// prefix cache of hashed full blocks and LRU eviction of unreferenced cached pages), sliding-window
// rings (one per running sequence), and ring snapshots taken at cached block boundaries so that a
// prefix-cache hit restores the sliding layers exactly. Not thread-safe (engine thread only).
// Test: tests/unit/engine/kv_manager_test.cpp.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace flint::engine {

// Hash chain over full blocks: block i's hash covers its tokens and block i-1's hash, so equal
// hashes mean equal prefixes (the cache also compares the tokens, so a collision cannot alias).
uint64_t hash_block(uint64_t parent_hash, std::span<const int32_t> tokens);
// Hashes of the first `num_blocks` full blocks of `tokens`.
std::vector<uint64_t> block_hashes(std::span<const int32_t> tokens, int page_size, int num_blocks);

// The hash chain of one growing token sequence (a Sequence's tokens only ever grow), each block
// hashed once: registering block b of a long context then costs one block's hash, not b + 1.
class BlockHashChain {
 public:
  // block_hashes(tokens, page_size, num_blocks), extending the chain from where it stopped.
  std::span<const uint64_t> upto(std::span<const int32_t> tokens, int page_size, int num_blocks);

 private:
  std::vector<uint64_t> hashes_;
};

class KvManager {
 public:
  // Pages [0, num_pages); sequence rings [0, num_seq_rings); snapshot rings after those.
  KvManager(int64_t num_pages, int page_size, int num_seq_rings, int num_snapshot_rings,
            bool enable_prefix_caching, bool needs_ring_snapshots);

  int page_size() const { return page_size_; }
  int64_t num_pages() const { return static_cast<int64_t>(pages_.size()); }
  int64_t num_used_pages() const { return num_used_pages_; }  // referenced by live sequences
  // Pages an allocation may take now: never used, or cached and unreferenced (evictable).
  int64_t num_allocatable_pages() const { return num_pages() - num_used_pages_; }
  int num_used_rings() const { return num_used_rings_; }
  int num_seq_rings() const { return static_cast<int>(ring_used_.size()); }

  // Takes a page (evicting the least recently freed cached page if needed); nullopt when every
  // page is referenced.
  std::optional<int32_t> allocate_page();
  // Drops one reference from each page; unreferenced cached pages stay cached (LRU order).
  void release_pages(std::span<const int32_t> pages);

  std::optional<int32_t> allocate_ring();
  void release_ring(int32_t ring_id);

  struct PrefixHit {
    std::vector<int32_t> pages;  // referenced on return; the caller owns the references
    int32_t snapshot_ring = -1;  // ring to copy into the sequence's ring, or -1 (no sliding state)
    int num_tokens = 0;          // pages.size() * page_size
    int num_chain_tokens = 0;    // tokens of cached full blocks matched (>= num_tokens)
  };
  // A running sequence computed exactly to the end of its block `block_idx`: its ring holds the
  // sliding state there, as a snapshot of that block would.
  struct LiveRing {
    int block_idx;
    int32_t page;  // the sequence's page of block `block_idx`
    int32_t ring;
  };
  // Longest reusable cached prefix of `tokens`, at most `max_blocks` full blocks. With sliding
  // layers a prefix is reusable only up to a block boundary that has a ring snapshot, or a live
  // ring whose page is the cached page of that block (same page, same prefix: the hash chain).
  PrefixHit lookup(std::span<const int32_t> tokens, int max_blocks,
                   std::span<const LiveRing> live = {});
  // Records that `page` holds full block `block_idx` of `tokens` (all of its tokens computed).
  // `chain`: the hashes of blocks 0..block_idx at least (block_hashes / BlockHashChain).
  void register_block(std::span<const int32_t> tokens, int block_idx, int32_t page,
                      std::span<const uint64_t> chain);
  void register_block(std::span<const int32_t> tokens, int block_idx, int32_t page) {
    register_block(tokens, block_idx, page, block_hashes(tokens, page_size_, block_idx + 1));
  }
  // A ring to copy the sequence's ring into, as the snapshot at the end of the block whose chain
  // hash is `hash`; nullopt if there is one already, if that block is not cached, or if no
  // snapshots.
  std::optional<int32_t> reserve_snapshot(uint64_t hash);
  std::optional<int32_t> reserve_snapshot(std::span<const int32_t> tokens, int block_idx) {
    return reserve_snapshot(block_hashes(tokens, page_size_, block_idx + 1).back());
  }

  int64_t num_cached_pages() const { return static_cast<int64_t>(hash_to_page_.size()); }
  int64_t num_snapshots() const { return static_cast<int64_t>(snapshot_of_hash_.size()); }

 private:
  struct Page {
    int32_t ref_count = 0;
    bool cached = false;
    uint64_t hash = 0;
    uint64_t parent_hash = 0;
    std::vector<int32_t> tokens;  // [page_size] the block's tokens when cached
    std::list<int32_t>::iterator lru_it;
    bool in_lru = false;
  };
  void uncache(int32_t page_id);
  void touch_snapshot(uint64_t hash);

  int page_size_;
  bool enable_prefix_caching_;
  bool needs_ring_snapshots_;
  std::vector<Page> pages_;
  std::vector<int32_t> free_pages_;  // never-cached or uncached pages, unreferenced
  std::list<int32_t> evictable_;     // cached unreferenced pages, least recent first
  std::unordered_map<uint64_t, int32_t> hash_to_page_;
  int64_t num_used_pages_ = 0;

  std::vector<bool> ring_used_;  // [num_seq_rings]
  std::vector<int32_t> free_rings_;
  int num_used_rings_ = 0;

  int32_t first_snapshot_ring_;
  std::vector<int32_t> free_snapshot_rings_;
  std::unordered_map<uint64_t, int32_t> snapshot_of_hash_;
  std::unordered_map<int32_t, uint64_t> hash_of_snapshot_;
  std::list<int32_t> snapshot_lru_;  // snapshot rings, least recently used first
  std::unordered_map<int32_t, std::list<int32_t>::iterator> snapshot_lru_it_;
};

}  // namespace flint::engine
