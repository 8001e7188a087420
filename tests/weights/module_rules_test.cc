// Python re.match patterns over std::regex (checked against Python itself), and compressed-tensors'
// target / ignore entries.
#include "infergate/weights/module_rules.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <fstream>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"
#include "infergate/common/subprocess.h"

namespace infergate::weights {
namespace {

using infergate::testing::refused;

bool matches(std::string_view pattern, std::string_view name) {
  auto p = NamePattern::compile(pattern);
  EXPECT_TRUE(p.ok()) << pattern << ": " << p.error().to_string();
  if (!p.ok()) return false;
  auto m = p->matches(name);
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  return m.ok() && *m;
}

TEST(NamePattern, IsAnchoredAtTheStartOnlyAsPythonReMatch) {
  EXPECT_TRUE(matches("model", "model.layers.0.mlp"));    // a prefix is enough
  EXPECT_FALSE(matches("layers", "model.layers.0.mlp"));  // but it must start there
  EXPECT_TRUE(matches(".*self_attn.*", "model.layers.3.self_attn.q_proj"));
  EXPECT_TRUE(matches(".*mlp.gate$", "model.layers.3.mlp.gate"));
  EXPECT_FALSE(matches(".*mlp.gate$", "model.layers.3.mlp.gate_proj"));
  EXPECT_TRUE(matches(".*mlp.gate", "model.layers.3.mlp.gate_proj"));  // no end anchor: a prefix match
}

TEST(NamePattern, KimiK2ThinkingIgnoreListLeavesOnlyRoutedExpertsQuantized) {
  const std::string dense_mlp = R"(.*mlp\.(gate|up|gate_up|down)_proj.*)";
  EXPECT_TRUE(matches(dense_mlp, "model.layers.0.mlp.gate_proj"));
  EXPECT_TRUE(matches(dense_mlp, "model.layers.0.mlp.down_proj"));
  EXPECT_FALSE(matches(dense_mlp, "model.layers.1.mlp.experts.7.gate_proj"));
  EXPECT_FALSE(matches(dense_mlp, "model.layers.1.mlp.shared_experts.up_proj"));
  EXPECT_TRUE(matches(".*shared_experts.*", "model.layers.1.mlp.shared_experts.up_proj"));
}

TEST(NamePattern, TranslatesWhatEcmaScriptSpellsOtherwise) {
  EXPECT_EQ(*translate_python_regex(R"(\Amodel\.layers\Z)"), R"(^model\.layers$)");
  EXPECT_EQ(*translate_python_regex("a{,3}b"), "a{0,3}b");
  EXPECT_EQ(*translate_python_regex("a{x}"), "a\\{x\\}");  // not a repeat in Python: literal braces
  EXPECT_EQ(*translate_python_regex("[]a]"), "[\\]a]");    // "]" first in a set is a literal
  EXPECT_EQ(*translate_python_regex("[[:a]"), "[\\[:a]");  // no POSIX classes in Python
  EXPECT_EQ(*translate_python_regex("(?P<layer>\\d+)\\-"), "(\\d+)-");
  EXPECT_TRUE(matches("a{,3}b", "aab"));
  EXPECT_TRUE(matches("x{y}", "x{y}"));
}

TEST(NamePattern, RefusesWhatItCannotEvaluateExactlyNamingTheConstruct) {
  for (const char* p :
       {"(?<=a)b", "(?<!a)b", "(?P<n>a)(?P=n)", "(a)\\1", "(?i)mlp", "(?i:mlp)", "(?#c)a", "(?>a)", "a*+",
        "a++", "(?(1)a|b)", "\\Ua", "\\N{DASH}", "\\q", "[\\b]", "a{3,2}", "[abc", "\\07", "caf\xc3\xa9"}) {
    auto r = NamePattern::compile(p);
    ASSERT_FALSE(r.ok()) << p;
    EXPECT_EQ(r.error().reason(), kUnsupportedPattern) << p;
    EXPECT_EQ(r.error().detail("pattern"), p) << p;
  }
  auto lookbehind = NamePattern::compile("(?<=x)y");
  EXPECT_NE(lookbehind.error().message().find("lookbehind"), std::string::npos);
}

TEST(NamePattern, RefusesNamesOutsidePrintableAsciiRatherThanGuess) {
  auto p = *NamePattern::compile(".*");
  EXPECT_TRUE(refused(p.matches("model.caf\xc3\xa9"), "UnsupportedPattern", {"not printable ASCII"}));
  EXPECT_TRUE(refused(p.matches("a\nb"), "UnsupportedPattern", {"not printable ASCII"}));
  EXPECT_TRUE(
      refused(p.matches(std::string(2000, 'a')), "UnsupportedPattern", {"of 2000 bytes is too long"}));
  EXPECT_TRUE(*p.matches("model.layers.0"));
}

// Every supported pattern agrees with Python's re.match on every name (and Python refuses none of them).
TEST(NamePattern, AgreesWithPythonReMatch) {
  const std::vector<std::string> patterns = {".*self_attn.*",
                                             R"(.*mlp\.(gate|up|gate_up|down)_proj.*)",
                                             ".*shared_experts.*",
                                             "lm_head",
                                             ".*mlp.gate$",
                                             R"(model\.layers\.[0-9]+\.mlp\.experts\.\d+\.(gate|up)_proj$)",
                                             R"(.*\.(q|kv)_a_proj.*)",
                                             R"(\Amodel\.layers\.1\Z)",
                                             "model.layers.1",
                                             "(?:model|lm)",
                                             R"(.*experts\.(?!0\.).*)",
                                             "a{,3}",
                                             "a{x}",
                                             "[]a-z]+",
                                             R"([^.]*\.layers)",
                                             R"(\w+\.\W)",
                                             R"(.*\bmlp\b.*)",
                                             "",
                                             "(?P<x>model)\\.",
                                             R"(model\.layers\.\d{1,2}\.)",
                                             ".*(gate|up)_proj",
                                             R"(.*[\d]$)",
                                             "x|model",
                                             R"(.*\.weight\Z)",
                                             "model.layers.1.*?proj",
                                             R"(\s*model)",
                                             R"(.*\x2e0\.)",
                                             "[[:a]+",
                                             R"(.*\-.*)"};
  const std::vector<std::string> names = {"model.layers.0.self_attn.q_proj",
                                          "model.layers.1.mlp.gate",
                                          "model.layers.1.mlp.gate_proj",
                                          "model.layers.10.mlp.experts.0.up_proj",
                                          "model.layers.10.mlp.experts.12.gate_proj",
                                          "model.layers.2.mlp.shared_experts.down_proj",
                                          "lm_head",
                                          "lm_head.weight",
                                          "model.layers.1",
                                          "model.layers.1.",
                                          "model.embed_tokens",
                                          "aaa",
                                          "a{x}",
                                          "b]",
                                          "model.layers.3.self_attn.kv_a_proj_with_mqa",
                                          "x-y",
                                          "",
                                          "[:a"};
  Json pairs = Json::array();
  std::vector<std::pair<std::string, std::string>> cases;
  for (const auto& p : patterns) {
    for (const auto& n : names) {
      pairs.push_back({p, n});
      cases.emplace_back(p, n);
    }
  }
  auto dir = *TempDir::create("re-oracle");
  const auto input = dir.path() / "pairs.json";
  ASSERT_TRUE(write_file_atomic(input, pairs.dump()).ok());
  auto r = run_command({INFERGATE_SYSTEM_PYTHON,
                        std::string(INFERGATE_WEIGHTS_TEST_DIR) + "/re_match_oracle.py", input.string()});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  ASSERT_TRUE(r->status.success()) << r->err;
  auto oracle = parse_json(r->out, "oracle");
  ASSERT_TRUE(oracle.ok() && oracle->is_array() && oracle->size() == cases.size()) << r->out;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& [p, n] = cases[i];
    ASSERT_TRUE((*oracle)[i].is_boolean()) << "Python refuses " << p;
    auto compiled = NamePattern::compile(p);
    ASSERT_TRUE(compiled.ok()) << p << ": " << compiled.error().to_string();
    auto m = compiled->matches(n);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    EXPECT_EQ(*m, (*oracle)[i].get<bool>()) << "re.match(r'" << p << "', '" << n << "')";
  }
}

TEST(ModuleRule, TellsExactNamesPatternsAndTheLinearClassApart) {
  auto linear = *ModuleRule::parse("Linear");
  EXPECT_EQ(linear.kind(), ModuleRule::Kind::kLinearClass);
  EXPECT_TRUE(*linear.matches("model.layers.0.mlp.gate_proj", true));
  EXPECT_FALSE(*linear.matches("model.layers.0.mlp.gate", false));
  auto exact = *ModuleRule::parse("lm_head");
  EXPECT_EQ(exact.kind(), ModuleRule::Kind::kExact);
  EXPECT_TRUE(*exact.matches("lm_head", true));
  EXPECT_FALSE(*exact.matches("lm_head_2", true));
  auto pattern = *ModuleRule::parse("re:.*self_attn.*");
  EXPECT_EQ(pattern.kind(), ModuleRule::Kind::kPattern);
  EXPECT_TRUE(*pattern.matches("model.layers.0.self_attn.o_proj", true));
  auto other_class = ModuleRule::parse("DeepseekV3MoE");
  ASSERT_FALSE(other_class.ok());
  EXPECT_EQ(other_class.error().reason(), kUnsupportedPattern);
}

TEST(ModuleRules, ReportsTheFirstRuleThatSelectsAModule) {
  auto rules = *ModuleRules::parse({"lm_head", "re:.*self_attn.*", "re:.*attn.*"});
  auto m = rules.first_match("model.layers.0.self_attn.q_proj", true);
  ASSERT_TRUE(m.ok());
  ASSERT_NE(*m, nullptr);
  EXPECT_EQ((*m)->text(), "re:.*self_attn.*");
  EXPECT_EQ(*rules.first_match("model.layers.0.mlp.experts.0.up_proj", true), nullptr);
  EXPECT_TRUE(contains_any("model.layers.0.mlp.gate", {"gate"}));
  EXPECT_FALSE(contains_any("model.layers.0.mlp.up_proj", {"gate", ""}));
}

}  // namespace
}  // namespace infergate::weights
