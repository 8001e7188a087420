// The chat-template interpreter on the shapes real templates use.
#include "infergate/runtime/server/chat_template.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

namespace infergate::runtime::server {
namespace {

using infergate::testing::refused;

std::string render(std::string_view src, std::vector<ChatMessage> msgs, bool gen = true,
                   std::string bos = "<s>") {
  auto t = ChatTemplate::compile(src);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().to_string());
  if (!t.ok()) return "";
  auto out = t->render({std::move(msgs), gen, bos, "</s>"});
  EXPECT_TRUE(out.ok()) << (out.ok() ? "" : out.error().to_string());
  return out.ok() ? *out : "";
}

TEST(ChatTemplate, RendersChatMl) {
  auto out = ChatTemplate::chatml().render({{{"system", "be brief"}, {"user", "hi"}}, true, "", ""});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(
      *out,
      "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_TRUE(ChatTemplate::chatml().is_fallback());
}

// Llama-3's template (its structure: set, loop.index0, trim filter, whitespace control).
TEST(ChatTemplate, RendersALlama3StyleTemplate) {
  const char* src =
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
      "'<|start_header_id|>' + "
      "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if "
      "loop.index0 == 0 %}"
      "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if "
      "add_generation_prompt %}"
      "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
  EXPECT_EQ(render(src, {{"user", "  hello  "}}, true, "<|begin_of_text|>"),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Qwen2.5's template shape: '-' whitespace control, tools branch, elif chains, namespace-free loop.
TEST(ChatTemplate, RendersAQwenStyleTemplateWithWhitespaceControl) {
  const char* src =
      "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n{%- else %}\n    {%- if messages[0]['role'] == "
      "'system' %}\n"
      "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
      "        {{- '<|im_start|>system\\nYou are Qwen.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n"
      "{%- for message in messages %}\n    {%- if (message.role == \"user\") or (message.role == \"system\" "
      "and not loop.first) %}\n"
      "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
      "    {%- elif message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role + '\\n' + "
      "message.content + "
      "'<|im_end|>\\n' }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n"
      "    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n";
  EXPECT_EQ(render(src, {{"user", "hi"}, {"assistant", "yo"}, {"user", "ok"}}),
            "<|im_start|>system\nYou are "
            "Qwen.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n"
            "<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, SupportsNamespacesSlicesFiltersAndLoopControl) {
  const char* src =
      "{% set ns = namespace(found=false, n=0) %}{% for m in messages[1:] %}{% if m.role == 'user' %}"
      "{% set ns.n = ns.n + 1 %}{% endif %}{% if loop.last %}{% set ns.found = true %}{% endif %}{% endfor %}"
      "{{ ns.n }}|{{ ns.found }}|{{ messages | length }}|{{ messages[-1].content | upper }}|"
      "{{ {'a': [1, 'x']} | tojson }}|{{ 'a,b' .split(',') | join('+') }}|{{ x | default('d') }}|"
      "{{ 'yes' if messages[0].content.startswith('S') else 'no' }}|{{ 7 // 2 }}{{ 7 % 3 }}|"
      "{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif "
      "%}{{ i }}{% endfor %}"
      "{# a comment #}|{{ x is defined }}{{ messages is not none }}";
  EXPECT_EQ(render(src, {{"system", "Sys"}, {"user", "a"}, {"assistant", "b"}, {"user", "last"}}),
            "2|True|4|LAST|{\"a\": [1, \"x\"]}|a+b|d|yes|31|02|FalseTrue");
}

TEST(ChatTemplate, TrimBlocksAndLstripBlocksAsHuggingFaceConfiguresJinja) {
  const char* src =
      "{% for m in messages %}\n  {% if true %}\n[{{ m.content }}]\n  {% endif %}\n{% endfor %}\n";
  EXPECT_EQ(render(src, {{"user", "a"}, {"user", "b"}}), "[a]\n[b]\n");
}

TEST(ChatTemplate, RaiseExceptionBecomesARenderError) {
  auto t = ChatTemplate::compile(
      "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation must start with user') }}{% endif "
      "%}ok");
  ASSERT_TRUE(t.ok());
  auto out = t->render({{{"assistant", "x"}}, true, "", ""});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().reason(), "ChatTemplateError");
  EXPECT_NE(out.error().message().find("Conversation must start with user"), std::string::npos);
  EXPECT_TRUE(t->render({{{"user", "x"}}, true, "", ""}).ok());
}

TEST(ChatTemplate, RefusesUnsupportedConstructsWithTheirName) {
  auto macro = ChatTemplate::compile("{% macro f(x) %}{{ x }}{% endmacro %}");
  ASSERT_FALSE(macro.ok());
  EXPECT_EQ(macro.error().reason(), "UnsupportedChatTemplate");
  EXPECT_NE(macro.error().message().find("macro"), std::string::npos);
  auto broken = ChatTemplate::compile("{% if x %}no end");
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.error().reason(), "InvalidChatTemplate");
  auto unclosed = ChatTemplate::compile("{{ x ");
  ASSERT_TRUE(refused(unclosed, "InvalidChatTemplate", {"unclosed '{{' at offset 0"}));
}

}  // namespace
}  // namespace infergate::runtime::server
