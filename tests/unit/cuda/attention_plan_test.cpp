// How the decode attention launch is planned on the host (no device needed): the split count and
// whether the splits merge in a thread-block cluster. Partner: kernels/decode_attention.cu.
#include <gtest/gtest.h>

#include "backends/cuda/kernels/decode_attention.h"

namespace flint::cuda {
namespace {

constexpr int kH200Sms = 132;

TEST(DecodeAttentionPlan, SplitsFillTheSmsButKeepAtLeast128KeysEach) {
  // Batch 1, 4 KV heads: 33 blocks per head fit the SMs; 1024 keys allow only 8 splits.
  EXPECT_EQ(decode_attention_splits(1, 4, 1024, kH200Sms), 8);
  EXPECT_EQ(decode_attention_splits(1, 4, 513, kH200Sms), 5);
  EXPECT_EQ(decode_attention_splits(1, 4, 32768, kH200Sms), 33);
  EXPECT_EQ(decode_attention_splits(8, 4, 1024, kH200Sms), 4);
  EXPECT_EQ(decode_attention_splits(64, 4, 100000, kH200Sms), 1);
  EXPECT_EQ(decode_attention_splits(1, 1, 1 << 20, 1000), kAttentionMaxSplits);
}

TEST(DecodeAttentionPlan, ClustersOnlyForFewSplitsInASmallGrid) {
  // Batch 1 on Flint's shapes: full layers at 1K (8 splits) and sliding layers (5) use clusters.
  EXPECT_TRUE(decode_attention_uses_cluster(1, 4, 8, kH200Sms));
  EXPECT_TRUE(decode_attention_uses_cluster(1, 4, 5, kH200Sms));
  EXPECT_TRUE(decode_attention_uses_cluster(2, 4, 8, kH200Sms));  // 64 blocks <= 66
  // One split needs no merge; more than 8 splits exceed the portable cluster size.
  EXPECT_FALSE(decode_attention_uses_cluster(1, 4, 1, kH200Sms));
  EXPECT_FALSE(decode_attention_uses_cluster(1, 4, 9, kH200Sms));
  EXPECT_FALSE(decode_attention_uses_cluster(1, 4, 33, kH200Sms));
  // Batch 8 at 1K: 128 blocks in clusters of 4 do not all fit in one wave (measured slower).
  EXPECT_FALSE(decode_attention_uses_cluster(8, 4, 4, kH200Sms));
  EXPECT_FALSE(decode_attention_uses_cluster(3, 4, 6, kH200Sms));  // 72 blocks > 66
}

}  // namespace
}  // namespace flint::cuda
