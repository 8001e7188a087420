// infergate-operator: parses the command line and runs the operator (see app/operator_app.h).
#include <CLI/CLI.hpp>

#include "infergate/common/log.h"
#include "infergate/operator/app/operator_app.h"

int main(int argc, char** argv) {
  namespace log = infergate::log;
  CLI::App cli{"infergate-operator: deploys InferenceModels from verified artifacts on Kubernetes"};
  infergate::op::app::OperatorOptions options;
  infergate::op::app::add_flags(cli, options);
  std::string log_level = "info", log_format = "text";
  cli.add_option("--log-level", log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
  cli.add_option("--log-format", log_format, "text or json")->check(CLI::IsMember({"text", "json"}));
  CLI11_PARSE(cli, argc, argv);
  log::Level level;
  log::Format format;
  if (log::parse_level(log_level, &level)) log::set_level(level);
  if (log::parse_format(log_format, &format)) log::set_format(format);
  return infergate::op::app::run_operator(options);
}
