// Evaluation suites: the fixed prompts `infergate-runtime eval` and `report` send to a baseline and a
// candidate. A suite is JSON (docs/eval-and-report.md): bundled ones are compiled in (suites/*.json),
// custom ones are read from a file (a ConfigMap in the cluster). Needle tasks are expanded here into
// one task per context length and depth, and chat tasks are rendered to a completion prompt, so that a
// model directory and a server see exactly the same text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"

namespace infergate::runtime::eval {

// What a task exercises, and which metric beyond top-1 agreement and KL it feeds.
enum class TaskKind {
  kSummarisation,  // a long document, then "Summary:"
  kCode,           // code completion
  kChat,           // a multi-turn conversation (rendered as ChatML), the last assistant turn generated
  kNeedle,         // needle retrieval: feeds retrieval_accuracy
  kJson,           // JSON format-following: feeds format_following
  kText,           // any other completion prompt
};
std::string_view task_kind_name(TaskKind k);  // "summarisation", "code", "chat", "needle", "json", "text"

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct Task {
  std::string id;  // unique in the suite (needle tasks: "<id>-<words>w-<depth>pct")
  TaskKind kind = TaskKind::kText;
  std::string prompt;  // the exact completion prompt
  int32_t max_tokens = 32;
  std::string answer;                      // needle: the value hidden in the haystack
  std::vector<std::string> required_keys;  // json: keys the object must have
  int64_t context_words = 0;               // needle: words of haystack
  double depth = 0;                        // needle: where the needle sits, 0 (start) .. 1 (end)
};

struct Suite {
  std::string name;
  std::string description;
  int32_t top_logprobs = 20;  // alternatives asked per generated token (1..20)
  uint64_t seed = 0;          // sent with every request (greedy decoding does not use it)
  std::string perplexity_text;
  std::vector<Task> tasks;

  size_t count(TaskKind k) const;
};

// Suite JSON limits: a file over 8 MiB, more than 1000 tasks (after expansion) or a needle haystack
// over 200,000 words is refused.
inline constexpr size_t kMaxSuiteBytes = 8u << 20;
inline constexpr size_t kMaxTasks = 1000;
inline constexpr int64_t kMaxNeedleWords = 200000;

// Parses and validates a suite; errors name the field ("tasks[3].max_tokens: ...") and the source,
// with reason "InvalidSuite".
Result<Suite> parse_suite(std::string_view json_text, std::string_view source);

// A bundled suite by name ("default", ...), or a suite file: `name_or_path` is taken as a path when it
// contains a '/' or ends in ".json". Unknown names are refused with reason "UnknownSuite", listing the
// bundled ones.
Result<Suite> load_suite(std::string_view name_or_path);
std::vector<std::string> bundled_suite_names();

// ChatML: "<|im_start|>role\ncontent<|im_end|>\n" per message, then "<|im_start|>assistant\n".
std::string render_chat(const std::vector<ChatMessage>& messages);

// The needle prompt: `words` words of `haystack` (its words cycled), `needle` inserted as a sentence at
// the sentence boundary nearest to `depth` x words, then "\n\nQuestion: <question>\nAnswer:".
std::string needle_prompt(std::string_view haystack, std::string_view needle, std::string_view question,
                          int64_t words, double depth);

}  // namespace infergate::runtime::eval
