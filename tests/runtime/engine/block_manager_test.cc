// The block manager: exact bytes from the kernels' page formats, budgets, allocation and freeing.
#include "infergate/engine/block_manager.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include "infergate/kernels/formats.h"

namespace infergate::runtime::engine {
namespace {

using infergate::testing::refused;

KvSpec spec(KvCacheDtype d, int32_t layers = 32) { return {d, layers, 8, 128, kBlockTokens}; }

TEST(KvBytes, BlockBytesAreTheKernelsPageBytesTimesLayers) {
  for (KvCacheDtype d : {KvCacheDtype::kF16, KvCacheDtype::kBF16, KvCacheDtype::kFp8, KvCacheDtype::kInt8,
                         KvCacheDtype::kInt4, KvCacheDtype::kInt4Kivi}) {
    auto b = kv_bytes(spec(d));
    ASSERT_TRUE(b.ok());
    const kernels::KvPageLayout l{*kernel_kv_dtype(d), 16, 8, 128};
    EXPECT_EQ(b->page_bytes, kernels::kv_page_bytes(l)) << kv_cache_dtype_name(d);
    EXPECT_EQ(b->block_bytes, 32 * kernels::kv_page_bytes(l));
    EXPECT_EQ(b->staging_bytes, 32 * kernels::kv_staging_bytes(l));
  }
  // Pinned: a Llama-3-8B-like layer.
  EXPECT_EQ(kv_bytes(spec(KvCacheDtype::kF16, 1))->page_bytes, 65536);
  EXPECT_EQ(kv_bytes(spec(KvCacheDtype::kInt8, 1))->page_bytes, 33280);
  EXPECT_EQ(kv_bytes(spec(KvCacheDtype::kInt4Kivi, 1))->staging_bytes, 32768);
  EXPECT_DOUBLE_EQ(kv_bytes(spec(KvCacheDtype::kF16, 1))->bytes_per_token(), 4096.0);
  EXPECT_EQ(kv_bytes(spec(KvCacheDtype::kF32, 1))->page_bytes, 2 * 8 * 16 * 128 * 4);
}

TEST(KvBytes, RefusesANonPositiveShapeNamingTheField) {
  auto b = kv_bytes({KvCacheDtype::kF16, 0, 8, 128, 16});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().detail("field"), "num_layers");
}

TEST(KvBytes, BudgetReservesStagingPerSequenceThenCountsWholeBlocks) {
  const KvSpec s = spec(KvCacheDtype::kInt4Kivi, 2);
  const KvBytes b = *kv_bytes(s);
  const int64_t budget = 4 * b.staging_bytes + 10 * b.block_bytes + b.block_bytes - 1;
  EXPECT_EQ(*blocks_for_budget(s, budget, 4), 10);
  EXPECT_EQ(*blocks_for_budget(s, 3 * b.staging_bytes, 4), 0);
  EXPECT_EQ(*kv_pool_bytes(s, 10, 4), 10 * b.block_bytes + 4 * b.staging_bytes);
  EXPECT_EQ(blocks_for_tokens(0), 0);
  EXPECT_EQ(blocks_for_tokens(16), 1);
  EXPECT_EQ(blocks_for_tokens(17), 2);
}

TEST(KvBytes, Int8HoldsNearlyTwiceAndInt4NearlyFourTimesTheTokensOfFp16) {
  const int64_t budget = int64_t{1} << 30;
  const double f16 = static_cast<double>(*blocks_for_budget(spec(KvCacheDtype::kF16), budget, 16));
  EXPECT_GE(*blocks_for_budget(spec(KvCacheDtype::kInt8), budget, 16) / f16, 1.9);
  EXPECT_GE(*blocks_for_budget(spec(KvCacheDtype::kInt4), budget, 16) / f16, 3.1);
}

TEST(BlockManager, AllocatesAndFreesWholeBlocksPerSequence) {
  auto bm = BlockManager::create(spec(KvCacheDtype::kF16, 2), 10, 3);
  ASSERT_TRUE(bm.ok());
  EXPECT_EQ(bm->total_blocks(), 10);
  ASSERT_TRUE(bm->add_sequence(1).ok());
  EXPECT_EQ(bm->blocks_needed(1, 33), 3);
  ASSERT_TRUE(bm->reserve(1, 33).ok());
  EXPECT_EQ(bm->block_table(1).size(), 3u);
  EXPECT_EQ(bm->free_blocks(), 7);
  ASSERT_TRUE(bm->reserve(1, 48).ok());  // still 3 blocks
  EXPECT_EQ(bm->free_blocks(), 7);
  EXPECT_EQ(bm->blocks_needed(1, 49), 1);
  bm->free_sequence(1);
  EXPECT_EQ(bm->free_blocks(), 10);
  EXPECT_FALSE(bm->has_sequence(1));
  EXPECT_EQ(bm->slot(1), -1);
}

TEST(BlockManager, ReserveIsAllOrNothing) {
  auto bm = BlockManager::create(spec(KvCacheDtype::kInt8, 2), 4, 2);
  ASSERT_TRUE(bm->add_sequence(7).ok());
  ASSERT_TRUE(bm->reserve(7, 16).ok());
  Status s = bm->reserve(7, 16 * 5);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().reason(), "OutOfKvBlocks");
  EXPECT_EQ(bm->block_table(7).size(), 1u);
  EXPECT_EQ(bm->free_blocks(), 3);
  EXPECT_TRUE(bm->can_allocate(3));
  EXPECT_FALSE(bm->can_allocate(4));
}

TEST(BlockManager, NeverFragmentsAfterInterleavedFrees) {
  auto bm = BlockManager::create(spec(KvCacheDtype::kF16, 1), 12, 6);
  for (SeqId id = 1; id <= 6; ++id) {
    ASSERT_TRUE(bm->add_sequence(id).ok());
    ASSERT_TRUE(bm->reserve(id, 32).ok());
  }
  EXPECT_EQ(bm->free_blocks(), 0);
  for (SeqId id : {2, 4, 6}) bm->free_sequence(id);
  // The six scattered blocks serve one sequence of 96 tokens.
  ASSERT_TRUE(bm->add_sequence(9).ok());
  ASSERT_TRUE(bm->reserve(9, 96).ok());
  EXPECT_EQ(bm->free_blocks(), 0);
  std::vector<int32_t> all;
  for (SeqId id : {1, 3, 5, 9}) {
    for (int32_t b : bm->block_table(id)) all.push_back(b);
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a block is owned twice";
  EXPECT_EQ(all.size(), 12u);
}

TEST(BlockManager, SlotsAreLimitedAndReturnedOnFree) {
  auto bm = BlockManager::create(spec(KvCacheDtype::kInt4Kivi, 1), 8, 2);
  ASSERT_TRUE(bm->add_sequence(1).ok());
  ASSERT_TRUE(bm->add_sequence(2).ok());
  EXPECT_NE(bm->slot(1), bm->slot(2));
  Status s = bm->add_sequence(3);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().reason(), "NoSequenceSlot");
  EXPECT_TRUE(refused(bm->add_sequence(1), "", {"sequence 1 already holds a slot"}));
  bm->free_sequence(1);
  EXPECT_EQ(bm->free_sequence_slots(), 1);
  EXPECT_TRUE(bm->add_sequence(3).ok());
}

TEST(BlockManager, ReleasingBlocksKeepsTheSlot) {
  auto bm = BlockManager::create(spec(KvCacheDtype::kF16, 1), 8, 2);
  ASSERT_TRUE(bm->add_sequence(1).ok());
  ASSERT_TRUE(bm->reserve(1, 40).ok());
  const int32_t slot = bm->slot(1);
  bm->release_blocks(1);
  EXPECT_EQ(bm->free_blocks(), 8);
  EXPECT_EQ(bm->slot(1), slot);
}

TEST(BlockManager, RefusesAnEmptyPool) {
  auto bm = BlockManager::create(spec(KvCacheDtype::kF16, 1), 0, 2);
  ASSERT_FALSE(bm.ok());
  EXPECT_EQ(bm.error().reason(), "KvBudgetTooSmall");
}

}  // namespace
}  // namespace infergate::runtime::engine
