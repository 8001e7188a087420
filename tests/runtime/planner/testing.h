// Helpers of the planner tests: the published config fixtures (fixtures/README.md names sources).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "infergate/runtime/planner/plan.h"

namespace infergate::runtime::planner::testing {

inline std::string fixture(const std::string& name) {
  return std::string(INFERGATE_PLANNER_FIXTURES) + "/" + name + ".json";
}

inline LoadedModel load(const std::string& name) {
  auto m = load_model(fixture(name));
  EXPECT_TRUE(m.ok()) << name << ": " << (m.ok() ? "" : m.error().to_string());
  return m.ok() ? *m : LoadedModel{};
}

inline model::ModelConfig config(const std::string& name) { return load(name).config; }

}  // namespace infergate::runtime::planner::testing
