// KvManager: page and ring pools, the full-block prefix cache and the ring snapshots.
// Test: tests/unit/engine/kv_manager_test.cpp.
#include "engine/kv_manager.h"

#include <algorithm>

#include "core/check.h"

namespace flint::engine {
namespace {

uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace

uint64_t hash_block(uint64_t parent_hash, std::span<const int32_t> tokens) {
  uint64_t h = mix64(parent_hash ^ 0x9e3779b97f4a7c15ull);
  for (int32_t t : tokens) h = mix64(h ^ static_cast<uint32_t>(t)) + 0x632be59bd9b4e019ull;
  return h;
}

std::vector<uint64_t> block_hashes(std::span<const int32_t> tokens, int page_size, int num_blocks) {
  BlockHashChain chain;
  const std::span<const uint64_t> h = chain.upto(tokens, page_size, num_blocks);
  return std::vector<uint64_t>(h.begin(), h.end());
}

std::span<const uint64_t> BlockHashChain::upto(std::span<const int32_t> tokens, int page_size,
                                               int num_blocks) {
  FLINT_CHECK(num_blocks >= 0 && int64_t(num_blocks) * page_size <= int64_t(tokens.size()),
              "kv: {} blocks of {} tokens from {} tokens", num_blocks, page_size, tokens.size());
  while (hashes_.size() < size_t(num_blocks)) {
    const uint64_t parent = hashes_.empty() ? 0 : hashes_.back();
    hashes_.push_back(hash_block(parent, tokens.subspan(hashes_.size() * page_size, page_size)));
  }
  return std::span<const uint64_t>(hashes_).first(size_t(num_blocks));
}

KvManager::KvManager(int64_t num_pages, int page_size, int num_seq_rings, int num_snapshot_rings,
                     bool enable_prefix_caching, bool needs_ring_snapshots)
    : page_size_(page_size),
      enable_prefix_caching_(enable_prefix_caching),
      needs_ring_snapshots_(needs_ring_snapshots),
      pages_(num_pages),
      ring_used_(num_seq_rings, false),
      first_snapshot_ring_(num_seq_rings) {
  FLINT_CHECK(num_pages > 0 && page_size > 0 && num_seq_rings > 0, "kv: bad sizes");
  free_pages_.reserve(num_pages);
  for (int64_t p = num_pages - 1; p >= 0; --p) free_pages_.push_back(static_cast<int32_t>(p));
  for (int r = num_seq_rings - 1; r >= 0; --r) free_rings_.push_back(r);
  for (int r = num_snapshot_rings - 1; r >= 0; --r)
    free_snapshot_rings_.push_back(first_snapshot_ring_ + r);
}

std::optional<int32_t> KvManager::allocate_page() {
  int32_t id;
  if (!free_pages_.empty()) {
    id = free_pages_.back();
    free_pages_.pop_back();
  } else if (!evictable_.empty()) {
    id = evictable_.front();
    uncache(id);
  } else {
    return std::nullopt;
  }
  Page& p = pages_[id];
  FLINT_CHECK(p.ref_count == 0 && !p.cached, "kv: page {} allocated while in use", id);
  p.ref_count = 1;
  ++num_used_pages_;
  return id;
}

void KvManager::uncache(int32_t id) {
  Page& p = pages_[id];
  FLINT_CHECK(p.cached, "kv: page {} is not cached", id);
  if (p.in_lru) {
    evictable_.erase(p.lru_it);
    p.in_lru = false;
  }
  hash_to_page_.erase(p.hash);
  p.cached = false;
  p.tokens.clear();
}

void KvManager::release_pages(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    Page& p = pages_[id];
    FLINT_CHECK(p.ref_count > 0, "kv: page {} released more often than referenced", id);
    if (--p.ref_count > 0) continue;
    --num_used_pages_;
    if (p.cached) {
      p.lru_it = evictable_.insert(evictable_.end(), id);
      p.in_lru = true;
    } else {
      free_pages_.push_back(id);
    }
  }
}

std::optional<int32_t> KvManager::allocate_ring() {
  if (free_rings_.empty()) return std::nullopt;
  int32_t r = free_rings_.back();
  free_rings_.pop_back();
  ring_used_[r] = true;
  ++num_used_rings_;
  return r;
}

void KvManager::release_ring(int32_t r) {
  FLINT_CHECK(r >= 0 && r < num_seq_rings() && ring_used_[r], "kv: ring {} is not in use", r);
  ring_used_[r] = false;
  free_rings_.push_back(r);
  --num_used_rings_;
}

void KvManager::touch_snapshot(uint64_t hash) {
  int32_t ring = snapshot_of_hash_.at(hash);
  snapshot_lru_.erase(snapshot_lru_it_.at(ring));
  snapshot_lru_it_[ring] = snapshot_lru_.insert(snapshot_lru_.end(), ring);
}

KvManager::PrefixHit KvManager::lookup(std::span<const int32_t> tokens, int max_blocks,
                                       std::span<const LiveRing> live) {
  PrefixHit hit;
  if (!enable_prefix_caching_) return hit;
  max_blocks = std::min<int>(max_blocks, static_cast<int>(tokens.size()) / page_size_);
  std::vector<int32_t> chain;
  int usable = 0;  // blocks usable: all of the chain without sliding layers, else up to a snapshot
  int32_t snapshot = -1;
  uint64_t parent = 0;
  for (int b = 0; b < max_blocks; ++b) {
    auto block = tokens.subspan(static_cast<size_t>(b) * page_size_, page_size_);
    uint64_t h = hash_block(parent, block);
    auto it = hash_to_page_.find(h);
    if (it == hash_to_page_.end()) break;
    const Page& p = pages_[it->second];
    if (p.parent_hash != parent || !std::equal(block.begin(), block.end(), p.tokens.begin())) break;
    chain.push_back(it->second);
    if (!needs_ring_snapshots_) {
      usable = b + 1;
    } else if (auto s = snapshot_of_hash_.find(h); s != snapshot_of_hash_.end()) {
      usable = b + 1;
      snapshot = s->second;
      touch_snapshot(h);
    }
    parent = h;
  }
  if (needs_ring_snapshots_) {
    // A live ring past the last snapshot: checked once per running sequence, not once per block.
    for (const LiveRing& r : live) {
      if (r.block_idx >= usable && r.block_idx < static_cast<int>(chain.size()) &&
          chain[r.block_idx] == r.page) {
        usable = r.block_idx + 1;
        snapshot = r.ring;
      }
    }
  }
  hit.num_chain_tokens = static_cast<int>(chain.size()) * page_size_;
  chain.resize(usable);
  for (int32_t id : chain) {
    Page& p = pages_[id];
    if (p.ref_count++ == 0) {
      ++num_used_pages_;
      if (p.in_lru) {
        evictable_.erase(p.lru_it);
        p.in_lru = false;
      }
    }
  }
  hit.num_tokens = usable * page_size_;
  hit.pages = std::move(chain);
  hit.snapshot_ring = needs_ring_snapshots_ ? snapshot : -1;
  return hit;
}

void KvManager::register_block(std::span<const int32_t> tokens, int block_idx, int32_t page_id,
                               std::span<const uint64_t> chain) {
  if (!enable_prefix_caching_) return;
  Page& p = pages_[page_id];
  FLINT_CHECK(p.ref_count > 0, "kv: registering unreferenced page {}", page_id);
  FLINT_CHECK(block_idx >= 0 && chain.size() > size_t(block_idx),
              "kv: block {} registered with {} chain hashes", block_idx, chain.size());
  if (p.cached) return;  // came from the cache already
  uint64_t h = chain[block_idx];
  if (hash_to_page_.count(h)) return;  // an identical block is cached already: keep that one
  p.cached = true;
  p.hash = h;
  p.parent_hash = block_idx == 0 ? 0 : chain[block_idx - 1];
  auto block = tokens.subspan(static_cast<size_t>(block_idx) * page_size_, page_size_);
  p.tokens.assign(block.begin(), block.end());
  hash_to_page_[h] = page_id;
}

std::optional<int32_t> KvManager::reserve_snapshot(uint64_t h) {
  if (!enable_prefix_caching_ || !needs_ring_snapshots_) return std::nullopt;
  if (free_snapshot_rings_.empty() && snapshot_lru_.empty()) return std::nullopt;
  if (!hash_to_page_.count(h) || snapshot_of_hash_.count(h)) return std::nullopt;
  int32_t ring;
  if (!free_snapshot_rings_.empty()) {
    ring = free_snapshot_rings_.back();
    free_snapshot_rings_.pop_back();
  } else {
    ring = snapshot_lru_.front();
    snapshot_lru_.pop_front();
    snapshot_lru_it_.erase(ring);
    snapshot_of_hash_.erase(hash_of_snapshot_.at(ring));
    hash_of_snapshot_.erase(ring);
  }
  snapshot_of_hash_[h] = ring;
  hash_of_snapshot_[ring] = h;
  snapshot_lru_it_[ring] = snapshot_lru_.insert(snapshot_lru_.end(), ring);
  return ring;
}

}  // namespace flint::engine
