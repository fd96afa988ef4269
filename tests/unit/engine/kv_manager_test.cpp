// KvManager: page reference counts, the hashed prefix cache with LRU eviction, rings and snapshots.
#include "engine/kv_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

namespace flint::engine {
namespace {

std::vector<int32_t> seq(int n, int start) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(KvManager, PagesAreExhaustedAndReturned) {
  KvManager kv(5, 4, 2, 0, false, false);
  std::set<int32_t> got;
  for (int i = 0; i < 5; ++i) got.insert(*kv.allocate_page());
  EXPECT_EQ(got.size(), 5u);
  EXPECT_FALSE(kv.allocate_page());
  EXPECT_EQ(kv.num_used_pages(), 5);
  std::vector<int32_t> two = {*got.begin(), *std::next(got.begin())};
  kv.release_pages(two);
  EXPECT_EQ(kv.num_used_pages(), 3);
  EXPECT_EQ(kv.num_allocatable_pages(), 2);
  auto r0 = kv.allocate_ring(), r1 = kv.allocate_ring();
  EXPECT_TRUE(r0 && r1);
  EXPECT_FALSE(kv.allocate_ring());
  kv.release_ring(*r0);
  EXPECT_EQ(kv.allocate_ring(), r0);
}

TEST(KvManager, PrefixHitSharesPagesAndComparesTokens) {
  KvManager kv(8, 4, 2, 0, true, /*needs_ring_snapshots=*/false);
  const auto toks = seq(10, 100);
  std::vector<int32_t> pages = {*kv.allocate_page(), *kv.allocate_page(), *kv.allocate_page()};
  kv.register_block(toks, 0, pages[0]);
  kv.register_block(toks, 1, pages[1]);
  auto hit = kv.lookup(toks, 2);
  EXPECT_EQ(hit.pages, (std::vector<int32_t>{pages[0], pages[1]}));
  EXPECT_EQ(hit.num_tokens, 8);
  EXPECT_EQ(kv.num_used_pages(), 3);  // shared, not copied
  kv.release_pages(hit.pages);
  auto other = toks;
  other[5] = 7;  // second block differs
  EXPECT_EQ(kv.lookup(other, 2).num_tokens, 4);
  kv.release_pages(std::vector<int32_t>{pages[0]});
  EXPECT_EQ(kv.lookup(toks, 1).num_tokens, 4);  // a lookup never goes past max_blocks
  kv.release_pages(std::vector<int32_t>{pages[0]});
  kv.release_pages(pages);
  EXPECT_EQ(kv.num_used_pages(), 0);
  EXPECT_EQ(kv.num_cached_pages(), 2);
  EXPECT_EQ(kv.lookup(toks, 2).num_tokens, 8);  // cached pages survive their owner
}

TEST(KvManager, EvictsLeastRecentlyFreedCachedPages) {
  KvManager kv(4, 2, 1, 0, true, false);
  const auto a = seq(4, 0), b = seq(4, 50);
  std::vector<int32_t> pa = {*kv.allocate_page(), *kv.allocate_page()};
  kv.register_block(a, 0, pa[0]);
  kv.register_block(a, 1, pa[1]);
  kv.release_pages(pa);
  std::vector<int32_t> pb = {*kv.allocate_page(), *kv.allocate_page()};  // the never-used pages
  kv.register_block(b, 0, pb[0]);
  kv.register_block(b, 1, pb[1]);
  kv.release_pages(pb);
  EXPECT_EQ(kv.num_cached_pages(), 4);
  auto p = kv.allocate_page();  // evicts a's first block, the oldest
  EXPECT_EQ(*p, pa[0]);
  EXPECT_EQ(kv.lookup(a, 2).num_tokens, 0);
  auto hb = kv.lookup(b, 2);
  EXPECT_EQ(hb.num_tokens, 4);
}

TEST(KvManager, SlidingModelsReuseOnlyUpToASnapshot) {
  KvManager kv(8, 4, 2, /*num_snapshot_rings=*/1, true, /*needs_ring_snapshots=*/true);
  const auto toks = seq(13, 0);
  std::vector<int32_t> pages;
  for (int b = 0; b < 3; ++b) {
    pages.push_back(*kv.allocate_page());
    kv.register_block(toks, b, pages[b]);
  }
  auto miss = kv.lookup(toks, 3);
  EXPECT_EQ(miss.num_tokens, 0);
  EXPECT_EQ(miss.num_chain_tokens, 12);
  auto snap = kv.reserve_snapshot(toks, 1);  // ring state after 8 tokens
  ASSERT_TRUE(snap);
  EXPECT_EQ(*snap, 2);                         // snapshot rings follow the sequence rings
  EXPECT_FALSE(kv.reserve_snapshot(toks, 1));  // already there
  auto hit = kv.lookup(toks, 3);
  EXPECT_EQ(hit.num_tokens, 8);
  EXPECT_EQ(hit.snapshot_ring, 2);
  kv.release_pages(hit.pages);
  auto snap2 = kv.reserve_snapshot(toks, 2);  // the only snapshot ring is recycled (LRU)
  ASSERT_TRUE(snap2);
  auto hit2 = kv.lookup(toks, 3);
  EXPECT_EQ(hit2.num_tokens, 12);
  EXPECT_EQ(hit2.snapshot_ring, 2);
  kv.release_pages(hit2.pages);
  EXPECT_EQ(kv.lookup(toks, 2).num_tokens, 0);  // the 8-token snapshot is gone
}

TEST(KvManager, BlockHashesChain) {
  const auto a = seq(8, 0);
  auto b = a;
  b[0] = 99;  // changes the first block, hence every later hash
  auto ha = block_hashes(a, 4, 2), hb = block_hashes(b, 4, 2);
  EXPECT_NE(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]);
  EXPECT_EQ(ha[1], hash_block(ha[0], std::span<const int32_t>(a).subspan(4, 4)));
}

// A growing sequence's chain hashes, extended a block at a time (and from an empty chain straight
// to many blocks), equal block_hashes over the same tokens; registering through them makes the
// same prefix cache as registering through the tokens alone.
TEST(BlockHashChain, ExtendsToTheHashesOfTheWholePrefix) {
  std::vector<int32_t> toks;
  BlockHashChain grown, jumped;
  for (int b = 0; b < 9; ++b) {
    for (int i = 0; i < 4; ++i) toks.push_back(1000 + 37 * b + i * i);
    auto got = grown.upto(toks, 4, b + 1);
    const auto want = block_hashes(toks, 4, b + 1);
    ASSERT_EQ(std::vector<uint64_t>(got.begin(), got.end()), want) << "after block " << b;
  }
  auto all = jumped.upto(toks, 4, 9);
  EXPECT_EQ(std::vector<uint64_t>(all.begin(), all.end()), block_hashes(toks, 4, 9));
  EXPECT_EQ(jumped.upto(toks, 4, 3).size(), 3u);  // a shorter view of the same chain
  EXPECT_EQ(jumped.upto(toks, 4, 3).back(), block_hashes(toks, 4, 3).back());
  EXPECT_DEATH(jumped.upto(toks, 4, 10), "10 blocks of 4 tokens from 36 tokens");

  KvManager kv(16, 4, 2, 0, true, /*needs_ring_snapshots=*/false);
  std::vector<int32_t> pages;
  BlockHashChain chain;
  for (int b = 0; b < 9; ++b) {
    pages.push_back(*kv.allocate_page());
    kv.register_block(toks, b, pages.back(), chain.upto(toks, 4, b + 1));
  }
  auto hit = kv.lookup(toks, 9);
  EXPECT_EQ(hit.pages, pages);
  EXPECT_EQ(hit.num_tokens, 36);
}

}  // namespace
}  // namespace flint::engine
