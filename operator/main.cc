// infergate-operator: parses the command line and runs the operator (see app/operator_app.h), or,
// with `local`, the same reconciler on this machine (see local/local_app.h).
#include <CLI/CLI.hpp>
#include <iostream>

#include "infergate/common/log.h"
#include "infergate/operator/app/operator_app.h"
#include "infergate/operator/local/local_app.h"

int main(int argc, char** argv) {
  namespace log = infergate::log;
  namespace local = infergate::op::local;
  CLI::App cli{"infergate-operator: deploys InferenceModels from verified artifacts on Kubernetes"};
  infergate::op::app::OperatorOptions options;
  infergate::op::app::add_flags(cli, options);
  std::string log_level = "info", log_format = "text";
  cli.add_option("--log-level", log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
  cli.add_option("--log-format", log_format, "text or json")->check(CLI::IsMember({"text", "json"}));

  CLI::App* local_cmd = cli.add_subcommand(
      "local", "run the same reconciler, stages and gates on this machine: pods are local processes");
  local_cmd->require_subcommand(1);
  local_cmd->fallthrough();
  local::RunOptions run_options;
  CLI::App* run_cmd = local_cmd->add_subcommand(
      "run", "watch a directory of InferenceModel YAML and serve each model until interrupted");
  run_cmd->fallthrough();
  local::add_run_flags(*run_cmd, run_options);
  local::GetOptions get_options;
  CLI::App* get_cmd = local_cmd->add_subcommand(
      "get", "print models, pods, endpoints, events or refused manifests as tables");
  get_cmd->fallthrough();
  local::add_get_flags(*get_cmd, get_options);

  CLI11_PARSE(cli, argc, argv);
  log::Level level;
  log::Format format;
  if (log::parse_level(log_level, &level)) log::set_level(level);
  if (log::parse_format(log_format, &format)) log::set_format(format);
  if (run_cmd->parsed()) return local::run_local(run_options);
  if (get_cmd->parsed()) return local::get_local(get_options, std::cout, std::cerr);
  return infergate::op::app::run_operator(options);
}
