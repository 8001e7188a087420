// Suite parsing, validation, needle expansion and chat rendering.
#include "infergate/runtime/eval/suite.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "infergate/common/fs.h"
#include "infergate/common/json.h"

namespace infergate::runtime::eval {

// bundled_suites.cc (generated from suites/*.json).
const std::vector<std::pair<std::string_view, std::string_view>>& bundled_suite_texts();

namespace {

Error suite_error(std::string_view source, std::string message) {
  return invalid_argument("suite " + std::string(source) + ": " + message).with_reason("InvalidSuite");
}

Result<TaskKind> parse_kind(std::string_view s) {
  for (TaskKind k : {TaskKind::kSummarisation, TaskKind::kCode, TaskKind::kChat, TaskKind::kNeedle,
                     TaskKind::kJson, TaskKind::kText}) {
    if (task_kind_name(k) == s) return k;
  }
  return invalid_argument("unknown kind '" + std::string(s) +
                          "' (expected summarisation, code, chat, needle, json or text)");
}

bool valid_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j > i) out.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

bool ends_sentence(const std::string& w) {
  return !w.empty() && (w.back() == '.' || w.back() == '!' || w.back() == '?');
}

Result<std::string> required_text(const Json& t, std::string_view key, const std::string& path) {
  INFERGATE_ASSIGN_OR_RETURN(std::string s, json_string(t, key, path));
  if (s.empty()) return invalid_argument(json_path(path, key) + ": must not be empty");
  return s;
}

Status parse_task(const Json& t, const std::string& path, const Suite& suite, int32_t default_max_tokens,
                  std::vector<Task>* out) {
  if (!t.is_object()) return invalid_argument(path + ": expected an object");
  static const std::set<std::string> known = {"id",         "kind",          "prompt",        "messages",
                                              "max_tokens", "required_keys", "haystack",      "needle",
                                              "question",   "answer",        "context_words", "depths"};
  for (const auto& [k, v] : t.items()) {
    if (!known.count(k)) return invalid_argument(json_path(path, k) + ": unknown field");
  }
  Task task;
  INFERGATE_ASSIGN_OR_RETURN(task.id, json_string(t, "id", path));
  if (!valid_id(task.id)) {
    return invalid_argument(json_path(path, "id") + ": '" + task.id +
                            "' must be 1-64 characters of letters, digits, '-', '_' or '.'");
  }
  INFERGATE_ASSIGN_OR_RETURN(std::string kind, json_string(t, "kind", path));
  auto k = parse_kind(kind);
  if (!k.ok()) return std::move(k).error().context(json_path(path, "kind"));
  task.kind = *k;
  INFERGATE_ASSIGN_OR_RETURN(int64_t max_tokens, json_int_or(t, "max_tokens", default_max_tokens, path));
  if (max_tokens < 1 || max_tokens > 4096) {
    return invalid_argument(json_path(path, "max_tokens") + ": must be between 1 and 4096, got " +
                            std::to_string(max_tokens));
  }
  task.max_tokens = static_cast<int32_t>(max_tokens);
  auto forbid = [&](std::string_view key) -> Status {
    if (t.contains(key)) {
      return invalid_argument(json_path(path, key) + ": not used by a '" + kind + "' task");
    }
    return ok_status();
  };

  if (task.kind == TaskKind::kChat) {
    INFERGATE_RETURN_IF_ERROR(forbid("prompt"));
    INFERGATE_ASSIGN_OR_RETURN(const Json* msgs, json_array(t, "messages", path));
    if (msgs->empty()) return invalid_argument(json_path(path, "messages") + ": must not be empty");
    std::vector<ChatMessage> messages;
    for (size_t i = 0; i < msgs->size(); ++i) {
      const std::string mpath = json_path(path, "messages") + "[" + std::to_string(i) + "]";
      const Json& m = (*msgs)[i];
      if (!m.is_object()) return invalid_argument(mpath + ": expected an object");
      ChatMessage msg;
      INFERGATE_ASSIGN_OR_RETURN(msg.role, json_string(m, "role", mpath));
      if (msg.role != "system" && msg.role != "user" && msg.role != "assistant") {
        return invalid_argument(mpath + ".role: '" + msg.role + "' (expected system, user or assistant)");
      }
      INFERGATE_ASSIGN_OR_RETURN(msg.content, json_string(m, "content", mpath));
      messages.push_back(std::move(msg));
    }
    if (messages.back().role != "user") {
      return invalid_argument(json_path(path, "messages") +
                              ": the last message must be the user's (the assistant's reply is generated)");
    }
    task.prompt = render_chat(messages);
  } else if (task.kind == TaskKind::kNeedle) {
    INFERGATE_RETURN_IF_ERROR(forbid("prompt"));
    INFERGATE_ASSIGN_OR_RETURN(std::string haystack, required_text(t, "haystack", path));
    INFERGATE_ASSIGN_OR_RETURN(std::string needle, required_text(t, "needle", path));
    INFERGATE_ASSIGN_OR_RETURN(std::string question, required_text(t, "question", path));
    INFERGATE_ASSIGN_OR_RETURN(task.answer, required_text(t, "answer", path));
    if (needle.find(task.answer) == std::string::npos) {
      return invalid_argument(json_path(path, "answer") + ": '" + task.answer +
                              "' does not occur in the needle");
    }
    if (haystack.find(task.answer) != std::string::npos) {
      return invalid_argument(json_path(path, "haystack") + ": contains the answer '" + task.answer +
                              "' (the needle must be the only place it appears)");
    }
    if (split_words(haystack).empty())
      return invalid_argument(json_path(path, "haystack") + ": has no words");
    INFERGATE_ASSIGN_OR_RETURN(const Json* lengths, json_array(t, "context_words", path));
    INFERGATE_ASSIGN_OR_RETURN(const Json* depths, json_array(t, "depths", path));
    if (lengths->empty()) return invalid_argument(json_path(path, "context_words") + ": must not be empty");
    if (depths->empty()) return invalid_argument(json_path(path, "depths") + ": must not be empty");
    for (size_t i = 0; i < lengths->size(); ++i) {
      const Json& l = (*lengths)[i];
      const std::string lpath = json_path(path, "context_words") + "[" + std::to_string(i) + "]";
      if (!l.is_number_integer()) return invalid_argument(lpath + ": expected an integer");
      const int64_t words = l.get<int64_t>();
      if (words < 1 || words > kMaxNeedleWords) {
        return invalid_argument(lpath + ": must be between 1 and " + std::to_string(kMaxNeedleWords) +
                                ", got " + std::to_string(words));
      }
      for (size_t j = 0; j < depths->size(); ++j) {
        const Json& d = (*depths)[j];
        const std::string dpath = json_path(path, "depths") + "[" + std::to_string(j) + "]";
        if (!d.is_number()) return invalid_argument(dpath + ": expected a number");
        const double depth = d.get<double>();
        if (!(depth >= 0.0 && depth <= 1.0)) {
          return invalid_argument(dpath + ": must be between 0 and 1");
        }
        Task n = task;
        n.context_words = words;
        n.depth = depth;
        char suffix[64];
        std::snprintf(suffix, sizeof suffix, "-%lldw-%dpct", static_cast<long long>(words),
                      static_cast<int>(std::lround(depth * 100)));
        n.id = task.id + suffix;
        n.prompt = needle_prompt(haystack, needle, question, words, depth);
        out->push_back(std::move(n));
      }
    }
    return ok_status();
  } else {
    for (const char* key :
         {"messages", "haystack", "needle", "question", "answer", "context_words", "depths"}) {
      INFERGATE_RETURN_IF_ERROR(forbid(key));
    }
    INFERGATE_ASSIGN_OR_RETURN(task.prompt, required_text(t, "prompt", path));
  }
  if (task.kind == TaskKind::kJson) {
    if (t.contains("required_keys")) {
      INFERGATE_ASSIGN_OR_RETURN(const Json* keys, json_array(t, "required_keys", path));
      for (size_t i = 0; i < keys->size(); ++i) {
        if (!(*keys)[i].is_string()) {
          return invalid_argument(json_path(path, "required_keys") + "[" + std::to_string(i) +
                                  "]: expected a string");
        }
        task.required_keys.push_back((*keys)[i].get<std::string>());
      }
    }
  } else {
    INFERGATE_RETURN_IF_ERROR(forbid("required_keys"));
  }
  (void)suite;
  out->push_back(std::move(task));
  return ok_status();
}

}  // namespace

std::string_view task_kind_name(TaskKind k) {
  switch (k) {
    case TaskKind::kSummarisation: return "summarisation";
    case TaskKind::kCode: return "code";
    case TaskKind::kChat: return "chat";
    case TaskKind::kNeedle: return "needle";
    case TaskKind::kJson: return "json";
    case TaskKind::kText: return "text";
  }
  return "text";
}

size_t Suite::count(TaskKind k) const {
  return static_cast<size_t>(
      std::count_if(tasks.begin(), tasks.end(), [k](const Task& t) { return t.kind == k; }));
}

std::string render_chat(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  out += "<|im_start|>assistant\n";
  return out;
}

std::string needle_prompt(std::string_view haystack, std::string_view needle, std::string_view question,
                          int64_t words, double depth) {
  const std::vector<std::string> source = split_words(haystack);
  std::vector<std::string> text;
  text.reserve(static_cast<size_t>(words));
  for (int64_t i = 0; i < words; ++i) text.push_back(source[static_cast<size_t>(i) % source.size()]);
  // Candidate insertion points: before word 0, after the last word, and after every sentence end.
  const double target = depth * static_cast<double>(words);
  size_t best = 0;
  double best_dist = target;
  for (size_t i = 1; i <= text.size(); ++i) {
    if (i == text.size() || ends_sentence(text[i - 1])) {
      const double dist = std::fabs(static_cast<double>(i) - target);
      if (dist < best_dist) {
        best = i;
        best_dist = dist;
      }
    }
  }
  std::string out;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == best) {
      if (!out.empty()) out += ' ';
      out += needle;
    }
    if (i < text.size()) {
      if (!out.empty()) out += ' ';
      out += text[i];
    }
  }
  out += "\n\nQuestion: ";
  out += question;
  out += "\nAnswer:";
  return out;
}

Result<Suite> parse_suite(std::string_view json_text, std::string_view source) {
  if (json_text.size() > kMaxSuiteBytes) {
    return suite_error(source, "larger than " + std::to_string(kMaxSuiteBytes) + " bytes");
  }
  auto parsed = parse_json(json_text, source);
  if (!parsed.ok()) return std::move(parsed).error().with_reason("InvalidSuite");
  const Json& j = *parsed;
  auto body = [&]() -> Result<Suite> {
    if (!j.is_object()) return invalid_argument("expected a JSON object");
    static const std::set<std::string> known = {"name",       "description",     "top_logprobs", "seed",
                                                "max_tokens", "perplexity_text", "tasks"};
    for (const auto& [k, v] : j.items()) {
      if (!known.count(k)) return invalid_argument(k + ": unknown field");
    }
    Suite s;
    INFERGATE_ASSIGN_OR_RETURN(s.name, json_string(j, "name"));
    if (!valid_id(s.name)) {
      return invalid_argument("name: '" + s.name +
                              "' must be 1-64 characters of letters, digits, '-', '_' or '.'");
    }
    INFERGATE_ASSIGN_OR_RETURN(s.description, json_string_or(j, "description", ""));
    INFERGATE_ASSIGN_OR_RETURN(int64_t top, json_int_or(j, "top_logprobs", 20));
    if (top < 1 || top > 20) {
      return invalid_argument("top_logprobs: must be between 1 and 20, got " + std::to_string(top));
    }
    s.top_logprobs = static_cast<int32_t>(top);
    INFERGATE_ASSIGN_OR_RETURN(int64_t seed, json_int_or(j, "seed", 0));
    if (seed < 0) return invalid_argument("seed: must not be negative");
    s.seed = static_cast<uint64_t>(seed);
    INFERGATE_ASSIGN_OR_RETURN(int64_t max_tokens, json_int_or(j, "max_tokens", 32));
    if (max_tokens < 1 || max_tokens > 4096) {
      return invalid_argument("max_tokens: must be between 1 and 4096, got " + std::to_string(max_tokens));
    }
    INFERGATE_ASSIGN_OR_RETURN(s.perplexity_text, required_text(j, "perplexity_text", ""));
    INFERGATE_ASSIGN_OR_RETURN(const Json* tasks, json_array(j, "tasks"));
    if (tasks->empty()) return invalid_argument("tasks: must not be empty");
    for (size_t i = 0; i < tasks->size(); ++i) {
      INFERGATE_RETURN_IF_ERROR(parse_task((*tasks)[i], "tasks[" + std::to_string(i) + "]", s,
                                           static_cast<int32_t>(max_tokens), &s.tasks));
      if (s.tasks.size() > kMaxTasks) {
        return invalid_argument("tasks: more than " + std::to_string(kMaxTasks) + " tasks after expansion");
      }
    }
    std::set<std::string> ids;
    for (const auto& t : s.tasks) {
      if (!ids.insert(t.id).second) return invalid_argument("tasks: the id '" + t.id + "' is used twice");
    }
    return s;
  };
  auto s = body();
  if (!s.ok()) {
    Error e = std::move(s).error();
    return suite_error(source, e.message());
  }
  return s;
}

std::vector<std::string> bundled_suite_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : bundled_suite_texts()) names.emplace_back(name);
  return names;
}

Result<Suite> load_suite(std::string_view name_or_path) {
  const bool is_path = name_or_path.find('/') != std::string_view::npos ||
                       (name_or_path.size() > 5 && name_or_path.substr(name_or_path.size() - 5) == ".json");
  if (is_path) {
    auto text = read_file(std::filesystem::path(name_or_path), kMaxSuiteBytes);
    if (!text.ok()) return std::move(text).error().context("reading suite").with_reason("SuiteUnreadable");
    return parse_suite(*text, name_or_path);
  }
  for (const auto& [name, text] : bundled_suite_texts()) {
    if (name == name_or_path) return parse_suite(text, name);
  }
  std::string known;
  for (const auto& n : bundled_suite_names()) known += (known.empty() ? "" : ", ") + n;
  return not_found("unknown suite '" + std::string(name_or_path) + "' (bundled: " + known +
                   "; a file path must contain '/' or end in .json)")
      .with_reason("UnknownSuite");
}

}  // namespace infergate::runtime::eval
