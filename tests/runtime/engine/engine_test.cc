// The Engine's step API: batching, mixed prefill and decode, chunked prefill, preemption and
// recompute, stops, cancellation, and the refusals.
#include "infergate/engine/engine.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include "infergate/common/json.h"
#include "testing.h"

namespace infergate::runtime::engine {
namespace {

using infergate::testing::refused;
using namespace testing;
namespace m = infergate::runtime::model;

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = make_model(dir_.path() / "llama", small_options()); }
  TempDir dir_ = temp_dir();
  std::filesystem::path model_;
  const std::vector<int32_t> a_ = {5, 200, 31, 7, 99, 12, 150, 3, 8};
  const std::vector<int32_t> b_ = {44, 2,   19, 250, 77, 61, 13, 90, 18, 101,
                                   6,  201, 45, 300, 1,  9,  55, 23, 87, 15};
  const std::vector<int32_t> c_ = {123};
};

TEST_F(EngineTest, ABatchOfDifferentLengthsGivesTheTokensEachSequenceGetsAlone) {
  auto e = make_engine(model_, {});
  ASSERT_TRUE(e);
  const auto alone_a = greedy(*e, a_, 12), alone_b = greedy(*e, b_, 12), alone_c = greedy(*e, c_, 12);
  EXPECT_EQ(e->blocks().used_blocks(), 0);
  SeqId ia = *e->add_sequence(a_, greedy_params(12));
  SeqId ib = *e->add_sequence(b_, greedy_params(12));
  SeqId ic = *e->add_sequence(c_, greedy_params(12));
  auto together = run_together(*e, {ia, ib, ic});
  EXPECT_EQ(together[0], alone_a);
  EXPECT_EQ(together[1], alone_b);
  EXPECT_EQ(together[2], alone_c);
  EXPECT_EQ(e->blocks().used_blocks(), 0) << "finished sequences free their blocks";
}

TEST_F(EngineTest, ASequenceJoiningMidwayIsPrefilledInTheSameStepAsOthersDecode) {
  auto e = make_engine(model_, {});
  const auto alone_a = greedy(*e, a_, 10), alone_b = greedy(*e, b_, 6);
  SeqId ia = *e->add_sequence(a_, greedy_params(10));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(e->step(std::vector<StepRequest>{{ia, 0}}).ok());
  SeqId ib = *e->add_sequence(b_, greedy_params(6));
  auto r = e->step(std::vector<StepRequest>{{ia, 0}, {ib, 0}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->updates[0].tokens_computed, 1);
  EXPECT_EQ(r->updates[1].tokens_computed, static_cast<int64_t>(b_.size()));
  auto rest = run_together(*e, {ia, ib});
  EXPECT_EQ(rest[0], alone_a);
  EXPECT_EQ(rest[1], alone_b);
}

TEST_F(EngineTest, ChunkedPrefillSamplesOnlyAfterTheLastChunkAndMatchesOnePrefill) {
  auto e = make_engine(model_, {});
  const auto alone = greedy(*e, b_, 8);
  SeqId id = *e->add_sequence(b_, greedy_params(8));
  auto r1 = e->step(std::vector<StepRequest>{{id, 7}});
  ASSERT_TRUE(r1.ok());
  EXPECT_FALSE(r1->updates[0].token.has_value());
  EXPECT_EQ(e->sequence(id)->computed, 7);
  auto r2 = e->step(std::vector<StepRequest>{{id, 7}});
  EXPECT_FALSE(r2->updates[0].token.has_value());
  auto r3 = e->step(std::vector<StepRequest>{{id, 7}});
  ASSERT_TRUE(r3->updates[0].token.has_value());
  EXPECT_EQ(r3->updates[0].tokens_computed, 6);
  EXPECT_EQ(run_together(*e, {id})[0], alone);

  auto whole = e->score(b_, 0), chunked = e->score(b_, 5);
  ASSERT_TRUE(whole.ok() && chunked.ok());
  for (size_t i = 0; i < whole->size(); ++i) ASSERT_NEAR((*whole)[i], (*chunked)[i], 1e-3) << i;
}

class PreemptTest : public EngineTest, public ::testing::WithParamInterface<KvCacheDtype> {};

TEST_P(PreemptTest, APreemptedSequenceIsRecomputedAndContinuesWithIdenticalOutput) {
  auto e = make_engine(model_, {WeightFormat::kF16, GetParam()});
  ASSERT_TRUE(e);
  SamplingParams p;
  p.max_tokens = 24;
  p.ignore_eos = true;
  p.temperature = 0.8;
  p.seed = 99;
  SeqId ref = *e->add_sequence(b_, p);
  const auto want = run_together(*e, {ref})[0];
  SeqId id = *e->add_sequence(b_, p);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(e->step(std::vector<StepRequest>{{id, 0}}).ok());
  const int64_t used = e->blocks().used_blocks();
  EXPECT_GT(used, 0);
  ASSERT_TRUE(e->preempt(id).ok());
  EXPECT_EQ(e->blocks().used_blocks(), 0);
  EXPECT_EQ(e->sequence(id)->status, SequenceStatus::kWaiting);
  EXPECT_EQ(e->sequence(id)->computed, 0);
  EXPECT_EQ(e->sequence(id)->output.size(), 6u) << "the prefill step samples the first token";
  EXPECT_EQ(e->blocks_needed(id), blocks_for_tokens(static_cast<int64_t>(b_.size()) + 6));
  EXPECT_TRUE(e->needs_slot(id));
  EXPECT_EQ(run_together(*e, {id})[0], want);
  EXPECT_EQ(e->sequence(id)->preemptions, 1);
}

INSTANTIATE_TEST_SUITE_P(KvDtypes, PreemptTest,
                         ::testing::Values(KvCacheDtype::kF16, KvCacheDtype::kInt8, KvCacheDtype::kInt4Kivi),
                         [](const auto& p) {
                           std::string n(kv_cache_dtype_name(p.param));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST_F(EngineTest, AStepThatDoesNotFitRunsNothingAndLeaksNothing) {
  auto e = make_engine(model_, {.max_sequences = 2, .max_context = 64, .num_blocks = 2});
  ASSERT_TRUE(e);
  SeqId ib = *e->add_sequence(b_, greedy_params(4));  // 20 tokens: 2 blocks
  SeqId ia = *e->add_sequence(a_, greedy_params(4));  // 1 block
  EXPECT_EQ(e->blocks_needed(ib), 2);
  EXPECT_FALSE(e->can_step(ib) && e->can_step(ia) && e->blocks().free_blocks() >= 3);
  auto r = e->step(std::vector<StepRequest>{{ib, 0}, {ia, 0}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "OutOfKvBlocks");
  EXPECT_EQ(e->blocks().used_blocks(), 0);
  EXPECT_EQ(e->sequence(ia)->status, SequenceStatus::kWaiting);
  EXPECT_TRUE(e->step(std::vector<StepRequest>{{ib, 0}}).ok());
  EXPECT_FALSE(e->can_step(ia));
  ASSERT_TRUE(e->cancel(ib).ok());
  EXPECT_EQ(e->blocks().used_blocks(), 0) << "cancel frees at once";
  EXPECT_EQ(e->sequence(ib)->finish, FinishReason::kCancelled);
  EXPECT_TRUE(e->can_step(ia));
  EXPECT_TRUE(refused(e->step(std::vector<StepRequest>{{ib, 0}}), "", {"sequence 1 has finished"}))
      << "a finished sequence cannot step";
  e->release(ib);
  EXPECT_EQ(e->sequence(ib), nullptr);
}

TEST_F(EngineTest, StopTokenLengthAndZeroMaxTokensFinishWithTheirReasons) {
  auto e = make_engine(model_, {});
  const auto alone = greedy(*e, a_, 6);
  SamplingParams p = greedy_params(6);
  p.stop_token_ids = {alone[3]};
  auto r = generate(*e, a_, p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kStopToken);
  const size_t first = static_cast<size_t>(std::find(alone.begin(), alone.end(), alone[3]) - alone.begin());
  EXPECT_EQ(r->tokens.size(), first + 1);
  EXPECT_EQ(finish_reason_name(r->finish), "stop");

  auto len = generate(*e, a_, greedy_params(5));
  EXPECT_EQ(len->finish, FinishReason::kLength);
  EXPECT_EQ(len->tokens.size(), 5u);
  EXPECT_EQ(finish_reason_name(len->finish), "length");

  auto zero = generate(*e, a_, greedy_params(0));
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->tokens.size(), 0u);
  EXPECT_EQ(zero->finish, FinishReason::kLength);
}

TEST_F(EngineTest, EosEndsGenerationUnlessIgnored) {
  auto e = make_engine(model_, {});
  const auto alone = greedy(*e, a_, 8);
  // Make the model's EOS list include a token greedy decoding produces.
  SamplingParams p;
  p.max_tokens = 8;
  p.stop_token_ids = {};
  auto with_eos = generate(*e, a_, p);
  ASSERT_TRUE(with_eos.ok());
  for (const auto& t : with_eos->tokens) {
    const auto& eos = e->info().eos_token_ids;
    if (std::find(eos.begin(), eos.end(), t.token) != eos.end()) {
      EXPECT_EQ(with_eos->finish, FinishReason::kStopToken);
    }
  }
  EXPECT_FALSE(e->info().eos_token_ids.empty());
}

TEST_F(EngineTest, StopStringsCutTheTextAndNeverStreamAPrefixOfOne) {
  auto e = make_engine(model_, {});
  auto full = generate(*e, a_, greedy_params(30));
  ASSERT_TRUE(full.ok());
  const std::string& text = full->text;
  ASSERT_GT(text.size(), 12u);
  // A stop string that starts in the middle of the text.
  const std::string stop = text.substr(text.size() / 2, 3);
  const size_t at = text.find(stop);
  SamplingParams p = greedy_params(30);
  p.stop_strings = {stop, "\x01never"};
  std::string streamed;
  auto r = generate(*e, a_, p, [&](std::string_view piece) { streamed += piece; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kStopString);
  EXPECT_EQ(r->text, text.substr(0, at));
  EXPECT_EQ(streamed, r->text);
}

TEST_F(EngineTest, StreamedTextConcatenatesToTheWholeText) {
  auto e = make_engine(model_, {});
  std::string streamed;
  int pieces = 0;
  auto r = generate(*e, b_, greedy_params(20), [&](std::string_view s) {
    streamed += s;
    ++pieces;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(streamed, r->text);
  EXPECT_GT(pieces, 1);
  std::vector<int32_t> ids;
  for (const auto& t : r->tokens) ids.push_back(t.token);
  EXPECT_EQ(*e->model().tokenizer().decode(ids, true), r->text);
}

TEST_F(EngineTest, SeededSamplingIsReproducibleAndSeedsDiffer) {
  auto e = make_engine(model_, {});
  SamplingParams p;
  p.max_tokens = 20;
  p.ignore_eos = true;
  p.temperature = 1.5;
  p.top_k = 50;
  p.top_p = 0.95;
  p.seed = 1;
  auto x = generate(*e, a_, p), y = generate(*e, a_, p);
  p.seed = 2;
  auto z = generate(*e, a_, p);
  std::vector<int32_t> tx, ty, tz;
  for (const auto& t : x->tokens) tx.push_back(t.token);
  for (const auto& t : y->tokens) ty.push_back(t.token);
  for (const auto& t : z->tokens) tz.push_back(t.token);
  EXPECT_EQ(tx, ty);
  EXPECT_NE(tx, tz);
}

TEST_F(EngineTest, LogprobsReportTheChosenTokenAndTheTopK) {
  auto e = make_engine(model_, {});
  SamplingParams p = greedy_params(5);
  p.top_logprobs = 4;
  auto r = generate(*e, a_, p);
  ASSERT_TRUE(r.ok());
  for (const auto& t : r->tokens) {
    ASSERT_EQ(t.top.size(), 4u);
    EXPECT_EQ(t.top[0].token, t.token);
    EXPECT_FLOAT_EQ(t.top[0].logprob, t.logprob);
    EXPECT_LE(t.logprob, 0.0f);
    for (size_t i = 1; i < t.top.size(); ++i) EXPECT_LE(t.top[i].logprob, t.top[i - 1].logprob);
  }
}

// The prompt's logprobs as teacher forcing gives them: log_softmax(score(prompt)[i - 1])[prompt[i]].
std::vector<double> scored_prompt_logprobs(Engine& e, const std::vector<int32_t>& prompt) {
  auto logits = e.score(prompt);
  EXPECT_TRUE(logits.ok());
  const size_t v = static_cast<size_t>(e.vocab());
  std::vector<double> out, row(v);
  for (size_t i = 1; i < prompt.size(); ++i) {
    log_softmax(std::span<const float>(*logits).subspan((i - 1) * v, v), row);
    out.push_back(row[static_cast<size_t>(prompt[i])]);
  }
  return out;
}

TEST_F(EngineTest, PromptLogprobsEqualTeacherForcingInOneOrManyChunksAndSurviveAPreemption) {
  auto e = make_engine(model_, {});
  ASSERT_TRUE(e);
  const std::vector<double> want = scored_prompt_logprobs(*e, b_);
  ASSERT_EQ(want.size(), b_.size() - 1);
  for (int32_t chunk : {0, 1, 3, 7, 19, 20}) {
    SamplingParams p = greedy_params(3);
    p.prompt_logprobs = 2;
    SeqId id = *e->add_sequence(b_, p);
    std::vector<GeneratedToken> streamed;
    bool preempted = false;
    for (int guard = 0; guard < 100 && e->sequence(id)->status != SequenceStatus::kFinished; ++guard) {
      auto r = e->step(std::vector<StepRequest>{{id, chunk}});
      ASSERT_TRUE(r.ok()) << r.error().to_string();
      const auto& got = r->updates[0].prompt_logprobs;
      streamed.insert(streamed.end(), got.begin(), got.end());
      // Once, halfway through the prompt: the recompute must not report prompt tokens again.
      if (!preempted && e->sequence(id)->computed >= 10 && e->sequence(id)->output.empty()) {
        ASSERT_TRUE(e->preempt(id).ok());
        preempted = true;
      }
    }
    const SequenceState& st = *e->sequence(id);
    ASSERT_EQ(st.prompt_logprobs.size(), want.size()) << "chunk " << chunk;
    ASSERT_EQ(streamed.size(), want.size()) << "chunk " << chunk;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(st.prompt_logprobs[i].token, b_[i + 1]);
      EXPECT_NEAR(st.prompt_logprobs[i].logprob, want[i], 1e-4) << "chunk " << chunk << " position " << i + 1;
      EXPECT_EQ(streamed[i].token, st.prompt_logprobs[i].token);
      ASSERT_EQ(st.prompt_logprobs[i].top.size(), 2u);
      EXPECT_GE(st.prompt_logprobs[i].top[0].logprob, st.prompt_logprobs[i].top[1].logprob);
      EXPECT_GE(st.prompt_logprobs[i].top[0].logprob, st.prompt_logprobs[i].logprob);
    }
    // Generation is unchanged by asking for prompt logprobs.
    std::vector<int32_t> out;
    for (const auto& t : st.output) out.push_back(t.token);
    EXPECT_EQ(out, greedy(*e, b_, 3)) << "chunk " << chunk;
    e->release(id);
  }
  EXPECT_EQ(e->blocks().used_blocks(), 0);
}

TEST_F(EngineTest, ZeroMaxTokensWithPromptLogprobsScoresThePromptAndGeneratesNothing) {
  auto e = make_engine(model_, {.max_context = 20});
  ASSERT_TRUE(e);
  const std::vector<double> want = scored_prompt_logprobs(*e, b_);  // b_ fills the whole context
  SamplingParams p = greedy_params(0);
  p.prompt_logprobs = 0;
  SeqId id = *e->add_sequence(b_, p);
  auto r = e->step(std::vector<StepRequest>{{id, 0}});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->updates[0].finish, FinishReason::kLength);
  EXPECT_FALSE(r->updates[0].token.has_value());
  ASSERT_EQ(r->updates[0].prompt_logprobs.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(r->updates[0].prompt_logprobs[i].logprob, want[i], 1e-4);
    EXPECT_TRUE(r->updates[0].prompt_logprobs[i].top.empty());
  }
  EXPECT_TRUE(e->sequence(id)->output.empty());
  EXPECT_EQ(e->blocks().used_blocks(), 0);
}

TEST_F(EngineTest, RefusesPromptLogprobsOutsideTheirRange) {
  auto e = make_engine(model_, {});
  SamplingParams p = greedy_params(1);
  p.prompt_logprobs = 21;
  auto r = e->add_sequence(a_, p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().detail("field"), "prompt_logprobs");
  p.prompt_logprobs = -2;
  EXPECT_TRUE(refused(e->add_sequence(a_, p), "InvalidSamplingParameter", {"prompt_logprobs", "got -2"}));
}

TEST_F(EngineTest, RefusesPromptPlusMaxTokensBeyondTheContext) {
  auto e = make_engine(model_, {.max_context = 32});
  auto r = e->add_sequence(b_, greedy_params(13));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "ContextTooLong");
  EXPECT_TRUE(e->add_sequence(b_, greedy_params(12)).ok());
  auto bad = e->add_sequence({5, 320}, greedy_params(1));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().reason(), "TokenOutOfRange");
  EXPECT_TRUE(refused(e->add_sequence({}, greedy_params(1)), "EmptyPrompt"));
  SamplingParams neg = greedy_params(1);
  neg.temperature = -1;
  EXPECT_TRUE(refused(e->add_sequence(a_, neg), "InvalidSamplingParameter", {"temperature", "got -1"}));
}

TEST_F(EngineTest, RefusesAContextLongerThanTheModelSupports) {
  auto model = open_model(model_);
  auto b = make_cpu_backend(model, {});
  ASSERT_TRUE(b.ok());
  EngineOptions o;
  o.max_context = 4097;
  auto e = Engine::create(model, std::move(*b), o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().reason(), "ContextTooLong");
  EXPECT_NE(e.error().message().find("4096"), std::string::npos);
}

TEST_F(EngineTest, RefusesAWeightFormatTheCheckpointIsNotIn) {
  auto model = open_model(model_);
  CpuBackendOptions o;
  o.weight_format = WeightFormat::kInt8;
  auto b = make_cpu_backend(model, o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().reason(), "WeightFormatMismatch");
  EXPECT_NE(b.error().message().find("quantize"), std::string::npos);
  auto q = quantize(model_, dir_.path() / "int4", m::WeightFormat::kInt4);
  o.weight_format = WeightFormat::kF16;
  auto b2 = make_cpu_backend(open_model(q), o);
  ASSERT_FALSE(b2.ok());
  EXPECT_EQ(b2.error().reason(), "WeightFormatMismatch");
  o.weight_format = WeightFormat::kInt4;
  EXPECT_TRUE(make_cpu_backend(open_model(q), o).ok());
}

TEST_F(EngineTest, ConvertsADenseCheckpointBetweenFp16AndBf16AtLoad) {
  auto f16 = make_engine(model_, {WeightFormat::kF16});
  auto bf16 = make_engine(model_, {WeightFormat::kBF16});
  ASSERT_TRUE(f16 && bf16);
  EXPECT_EQ(bf16->info().weight_format, WeightFormat::kBF16);
  auto x = f16->score(a_), y = bf16->score(a_);
  ASSERT_TRUE(x.ok() && y.ok());
  double max = 0;
  for (size_t i = 0; i < x->size(); ++i) max = std::max(max, std::abs(double((*x)[i]) - (*y)[i]));
  EXPECT_GT(max, 0.0) << "bf16 rounding changes something";
  EXPECT_LT(max, 0.5);
}

// Edits config.json of a copy of the model.
TEST_F(EngineTest, RefusesAMissingTensorNamingIt) {
  auto d = with_config(model_, dir_.path() / "more-layers", [](Json& j) { j["num_hidden_layers"] = 3; });
  Error e = load_error(d);
  EXPECT_EQ(e.reason(), "MissingTensor");
  EXPECT_NE(e.message().find("model.layers.2."), std::string::npos) << e.to_string();
}

TEST_F(EngineTest, RefusesATensorOfTheWrongShapeForTheConfig) {
  auto d = with_config(model_, dir_.path() / "narrow", [](Json& j) { j["intermediate_size"] = 96; });
  Error e = load_error(d);
  EXPECT_EQ(e.reason(), "TensorShapeMismatch") << e.to_string();
  EXPECT_NE(e.message().find("mlp"), std::string::npos) << e.to_string();
}

TEST_F(EngineTest, RefusesAnUnknownArchitectureNamingIt) {
  auto d = with_config(model_, dir_.path() / "foo", [](Json& j) { j["architectures"] = {"FooForCausalLM"}; });
  Error e = load_error(d);
  EXPECT_NE(e.message().find("FooForCausalLM"), std::string::npos) << e.to_string();
}

TEST_F(EngineTest, RefusesAnUnknownKvDtypeAndWeightFormat) {
  auto kv = parse_kv_cache_dtype("int3");
  ASSERT_FALSE(kv.ok());
  EXPECT_EQ(kv.error().reason(), "UnknownKvCacheDtype");
  EXPECT_NE(kv.error().message().find("int3"), std::string::npos);
  auto wf = parse_weight_format("int2");
  ASSERT_FALSE(wf.ok());
  EXPECT_EQ(wf.error().reason(), "UnknownWeightFormat");
  EXPECT_EQ(*parse_kv_cache_dtype("fp8-e4m3"), KvCacheDtype::kFp8);
  EXPECT_EQ(*parse_kv_cache_dtype("int4-kivi"), KvCacheDtype::kInt4Kivi);
  EXPECT_EQ(*parse_weight_format("f16"), WeightFormat::kF16);
}

TEST_F(EngineTest, RefusesAContextBeyondMistralsSlidingWindow) {
  auto d = with_config(model_, dir_.path() / "mistral", [](Json& j) {
    j["architectures"] = {"MistralForCausalLM"};
    j["model_type"] = "mistral";
    j["sliding_window"] = 128;
  });
  EngineConfig c;
  c.model_dir = d;
  c.max_context = 129;
  auto r = load_engine(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().reason(), "ContextTooLong");
  c.max_context = 128;
  EXPECT_TRUE(load_engine(c).ok());
}

TEST_F(EngineTest, ReportsWeightAndKvBytes) {
  auto e = make_engine(model_, {.max_sequences = 2, .max_context = 64});
  const auto& c = e->model().config();
  // f16 weights used in place: 2 bytes per linear parameter, plus fp32 norms and the f16 embeddings.
  EXPECT_GT(e->info().weight_bytes, 0);
  EXPECT_EQ(e->info().kv_bytes,
            *kv_pool_bytes({KvCacheDtype::kF16, static_cast<int32_t>(c.num_hidden_layers),
                            static_cast<int32_t>(c.num_key_value_heads), static_cast<int32_t>(c.head_dim)},
                           2 * 4, 2));
  EXPECT_EQ(e->blocks().total_blocks(), 8);
}

}  // namespace
}  // namespace infergate::runtime::engine
