// The scheduler over a real engine on the tiny model: preemption under a tiny KV budget completes
// everything with the same greedy output as an unconstrained run; FIFO; cancel frees blocks.
#include "infergate/runtime/server/scheduler.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>

#include "testing.h"

namespace infergate::runtime::server {
namespace {

std::unique_ptr<engine::Engine> load(int32_t slots, int64_t num_blocks, int64_t max_context = 512,
                                     engine::KvCacheDtype kv = engine::KvCacheDtype::kF16) {
  engine::EngineConfig c;
  c.model_dir = testing::tiny_model();
  c.kv_dtype = kv;
  c.max_context = max_context;
  c.max_sequences = slots;
  c.num_blocks = num_blocks;
  c.threads = 1;
  auto e = engine::load_engine(c);
  EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.error().to_string());
  return e.ok() ? std::move(e->engine) : nullptr;
}

struct Collected {
  std::mutex mu;
  std::condition_variable cv;
  // Keyed by the submitting test's own index (the callback may run before submit() returns).
  std::map<size_t, std::vector<int32_t>> tokens;
  std::map<size_t, engine::FinishReason> finish;
  std::vector<size_t> first_token_order;
  size_t done = 0;

  EventCallback callback(size_t index) {
    return [this, index](const RequestEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      auto& t = tokens[index];
      if (t.empty() && !ev.tokens.empty()) first_token_order.push_back(index);
      for (const auto& g : ev.tokens) t.push_back(g.token);
      if (ev.final) {
        finish[index] = ev.finish;
        ++done;
        cv.notify_all();
      }
    };
  }
  bool wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(120), [&] { return done >= n; });
  }
};

std::vector<std::vector<int32_t>> prompts(int n) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p;
    for (int k = 0; k < 20 + 7 * i; ++k) p.push_back(1 + (k * 37 + i * 101) % 250);
    out.push_back(p);
  }
  return out;
}

std::vector<std::vector<int32_t>> run_all(std::unique_ptr<engine::Engine> e, int n, int max_tokens,
                                          SchedulerStats* stats_out, int32_t concurrency) {
  Metrics metrics;
  SchedulerOptions so;
  so.max_concurrency = concurrency;
  so.prefill_chunk = 32;  // chunked prefill exercised too
  Scheduler s(std::move(e), so, &metrics);
  Collected c;
  auto ps = prompts(n);
  for (int i = 0; i < n; ++i) {
    engine::SamplingParams sp;
    sp.max_tokens = max_tokens;
    sp.ignore_eos = true;  // every sequence runs to max_tokens: the most blocks
    auto sub = s.submit(ps[static_cast<size_t>(i)], sp, c.callback(static_cast<size_t>(i)));
    EXPECT_FALSE(sub.refused);
  }
  EXPECT_TRUE(c.wait(static_cast<size_t>(n)));
  EXPECT_TRUE(s.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  *stats_out = s.stats();
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    EXPECT_EQ(c.finish[i], engine::FinishReason::kLength);
    out.push_back(c.tokens[i]);
  }
  return out;
}

TEST(Scheduler, PreemptionUnderATinyKvBudgetGivesTheSameGreedyOutput) {
  const int n = 6, max_tokens = 80;
  // Unconstrained: every sequence fits at once.
  SchedulerStats big{}, tiny{};
  auto want = run_all(load(n, 0), n, max_tokens, &big, n);
  EXPECT_EQ(big.preemptions, 0);
  // 16 blocks (256 tokens) for six sequences of up to 135 tokens each (9 blocks): preemption is forced.
  auto got = run_all(load(n, 16, 256), n, max_tokens, &tiny, n);
  EXPECT_GT(tiny.preemptions, 0);
  EXPECT_EQ(tiny.blocks_used, 0) << "blocks leaked";
  EXPECT_EQ(tiny.running, 0);
  EXPECT_EQ(tiny.waiting, 0);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].size(), static_cast<size_t>(max_tokens));
    EXPECT_EQ(got[i], want[i]) << "request " << i << " differs after preemption and recompute";
  }
}

TEST(Scheduler, AdmitsInArrivalOrderUnderMaxConcurrency) {
  Metrics metrics;
  SchedulerOptions so;
  so.max_concurrency = 1;
  Scheduler s(load(4, 0), so, &metrics);
  Collected c;
  auto ps = prompts(4);
  for (size_t i = 0; i < 4; ++i) {
    engine::SamplingParams sp;
    sp.max_tokens = 5;
    sp.ignore_eos = true;
    EXPECT_FALSE(s.submit(ps[i], sp, c.callback(i)).refused);
  }
  ASSERT_TRUE(c.wait(4));
  std::lock_guard<std::mutex> lock(c.mu);
  EXPECT_EQ(c.first_token_order, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(s.stats().max_running_seen, 1);
}

TEST(Scheduler, RefusesWhatTheEngineWouldRefuseAndAFullQueue) {
  Metrics metrics;
  SchedulerOptions so;
  so.max_waiting = 0;
  Scheduler s(load(2, 0), so, &metrics);
  engine::SamplingParams sp;
  sp.max_tokens = 600;  // beyond the 512-token context
  auto too_long = s.submit({1, 2, 3}, sp, {});
  ASSERT_TRUE(too_long.refused);
  EXPECT_EQ(too_long.refused->kind, SubmitRefusal::kInvalid);
  EXPECT_EQ(too_long.refused->error.reason(), "ContextTooLong");
  sp.max_tokens = 4;
  auto oov = s.submit({1, 99999}, sp, {});
  ASSERT_TRUE(oov.refused);
  EXPECT_EQ(oov.refused->error.reason(), "TokenOutOfRange");
  auto full = s.submit({1, 2}, sp, {});
  ASSERT_TRUE(full.refused);
  EXPECT_EQ(full.refused->kind, SubmitRefusal::kQueueFull);
  s.drain();
  auto draining = s.submit({1, 2}, sp, {});
  ASSERT_TRUE(draining.refused);
  EXPECT_EQ(draining.refused->kind, SubmitRefusal::kDraining);
}

TEST(Scheduler, CancelFreesTheBlocksAtOnce) {
  Metrics metrics;
  Scheduler s(load(2, 0, 4096), SchedulerOptions{}, &metrics);
  Collected c;
  engine::SamplingParams sp;
  sp.max_tokens = 4000;
  sp.ignore_eos = true;
  auto sub = s.submit(prompts(1)[0], sp, c.callback(0));
  const RequestId id = sub.id;
  // Wait until it runs and holds blocks, then cancel.
  for (int i = 0; i < 2000 && s.stats().blocks_used == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GT(s.stats().blocks_used, 0);
  s.cancel(id);
  ASSERT_TRUE(c.wait(1));
  EXPECT_EQ(c.finish[0], engine::FinishReason::kCancelled);
  EXPECT_LT(c.tokens[0].size(), 4000u);
  ASSERT_TRUE(s.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  for (int i = 0; i < 100 && s.stats().blocks_used != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(s.stats().blocks_used, 0);
  EXPECT_DOUBLE_EQ(metrics.errors_total("cancelled"), 1);
}

}  // namespace
}  // namespace infergate::runtime::server
