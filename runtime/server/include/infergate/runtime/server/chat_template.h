// Chat templates: the Jinja `chat_template` of tokenizer_config.json, rendered by a small interpreter
// of the Jinja subset real Llama-3, Qwen2 and GLM-4 templates use (text, {{ }}, {% if/elif/else %},
// {% for %} with loop.*, {% set %} including namespace() attributes, whitespace control with '-' and
// Hugging Face's trim_blocks/lstrip_blocks, string/list/dict literals, subscripts and slices,
// + - * / % ~, comparisons, and/or/not, in, `is` tests, filters (trim, length, tojson, upper, lower,
// default, join, first, last, string, int, replace, items, list, safe), string and dict methods
// (strip, startswith, endswith, split, get, items, ...), raise_exception() and strftime_now()).
//
// A template that uses something outside the subset is refused when it is compiled (reason
// "UnsupportedChatTemplate", naming the construct); the server then falls back to ChatML
// (`<|im_start|>role\ncontent<|im_end|>\n` ... `<|im_start|>assistant\n`) and says so in its log.
// raise_exception() in a template becomes an error the API reports as a 400.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "infergate/common/result.h"
#include "infergate/runtime/server/api.h"

namespace infergate::runtime::server {

struct ChatTemplateContext {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
};

class ChatTemplate {
 public:
  // Compiles a template. Errors: reason "UnsupportedChatTemplate" (or "InvalidChatTemplate" for
  // malformed Jinja), with the offending construct and its offset in the message.
  static Result<ChatTemplate> compile(std::string_view source);
  // The ChatML fallback.
  static ChatTemplate chatml();

  // Renders. Errors: reason "ChatTemplateError" (raise_exception, a type error in the template).
  Result<std::string> render(const ChatTemplateContext& context) const;
  bool is_fallback() const { return fallback_; }

  struct Program;

 private:
  std::shared_ptr<const Program> program_;
  bool fallback_ = false;
};

}  // namespace infergate::runtime::server
