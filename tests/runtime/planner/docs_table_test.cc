// docs/capacity-planning.md's "what fits where" table is exactly what `plan-table` prints for the
// fixtures today, so the docs cannot drift from the planner.
#include <gtest/gtest.h>

#include <algorithm>

#include "infergate/common/fs.h"
#include "testing.h"

namespace infergate::runtime::planner {
namespace {

const char* const kFixtures[] = {"kimi-k2",          "deepseek-v3", "glm-4.5",
                                 "glm-4-9b-chat-hf", "llama-3-70b", "qwen2.5-72b"};

TEST(DocsTable, CapacityPlanningTableMatchesThePlanner) {
  std::vector<LoadedModel> models;
  for (const char* f : kFixtures) models.push_back(testing::load(f));
  auto table = fit_table_markdown(models, 32768, 16);
  ASSERT_TRUE(table.ok()) << table.error().to_string();
  auto doc = read_file(std::string(INFERGATE_SOURCE_DIR) + "/docs/capacity-planning.md");
  ASSERT_TRUE(doc.ok()) << doc.error().to_string();
  const std::string begin = "<!-- fit-table:begin -->\n", end = "<!-- fit-table:end -->";
  const size_t b = doc->find(begin), e = doc->find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(doc->substr(b + begin.size(), e - b - begin.size()), *table)
      << "regenerate with: infergate-runtime plan-table --config tests/runtime/planner/fixtures/{kimi-k2,"
         "deepseek-v3,glm-4.5,glm-4-9b-chat-hf,llama-3-70b,qwen2.5-72b}.json";
}

TEST(DocsTable, EveryRowHasACellPerCatalogueGpu) {
  auto table = fit_table_markdown({testing::load("glm-4-9b-chat-hf")}, 32768, 16);
  ASSERT_TRUE(table.ok());
  size_t rows = 0, pos = 0;
  while ((pos = table->find("| glm-4-9b-chat-hf |", pos)) != std::string::npos) {
    const size_t eol = table->find('\n', pos);
    const std::string row = table->substr(pos, eol - pos);
    EXPECT_EQ(std::count(row.begin(), row.end(), '|'), static_cast<long>(5 + gpu_catalog().size())) << row;
    ++rows;
    pos = eol;
  }
  EXPECT_EQ(rows, 12u) << "3 weight formats x 4 KV dtypes";
}

}  // namespace
}  // namespace infergate::runtime::planner
