// Label selector parsing and matching.
#include "infergate/operator/cache/label_selector.h"

#include <algorithm>

namespace infergate::op::cache {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t'; }
bool ends_token(char c) { return c == ',' || is_space(c) || c == '=' || c == '!' || c == '(' || c == ')'; }

}  // namespace

Result<LabelSelector> LabelSelector::parse(std::string_view text) {
  LabelSelector sel;
  size_t i = 0;
  auto skip = [&] {
    while (i < text.size() && is_space(text[i])) ++i;
  };
  auto token = [&] {
    size_t s = i;
    while (i < text.size() && !ends_token(text[i])) ++i;
    return std::string(text.substr(s, i - s));
  };
  auto bad = [&](const std::string& why) {
    return invalid_argument("label selector \"" + std::string(text.substr(0, 256)) + "\": " + why);
  };
  skip();
  while (i < text.size()) {
    Req r;
    if (text[i] == '!') {
      ++i;
      skip();
      r.key = token();
      r.op = Req::kNotExists;
    } else {
      r.key = token();
      skip();
      if (i >= text.size() || text[i] == ',') {
        r.op = Req::kExists;
      } else if (text[i] == '=') {
        i += (i + 1 < text.size() && text[i + 1] == '=') ? 2 : 1;
        skip();
        r.op = Req::kEq;
        r.values.push_back(token());
      } else if (text[i] == '!' && i + 1 < text.size() && text[i + 1] == '=') {
        i += 2;
        skip();
        r.op = Req::kNe;
        r.values.push_back(token());
      } else {
        std::string op = token();
        if (op != "in" && op != "notin") return bad("unknown operator \"" + op + "\"");
        r.op = op == "in" ? Req::kIn : Req::kNotIn;
        skip();
        if (i >= text.size() || text[i] != '(') return bad("expected '(' after " + op);
        ++i;
        for (;;) {
          skip();
          r.values.push_back(token());
          skip();
          if (i < text.size() && text[i] == ',') {
            ++i;
          } else if (i < text.size() && text[i] == ')') {
            ++i;
            break;
          } else {
            return bad("unterminated value set");
          }
        }
      }
    }
    if (r.key.empty()) return bad("empty key");
    sel.reqs_.push_back(std::move(r));
    skip();
    if (i < text.size()) {
      if (text[i] != ',') return bad("expected ',' at offset " + std::to_string(i));
      ++i;
      skip();
      if (i >= text.size()) return bad("trailing ','");
    }
  }
  return sel;
}

bool LabelSelector::matches(const Json& object) const {
  const Json* labels = nullptr;
  if (auto m = object.find("metadata"); m != object.end() && m->is_object()) {
    if (auto l = m->find("labels"); l != m->end() && l->is_object()) labels = &*l;
  }
  for (const auto& r : reqs_) {
    const Json* v = nullptr;
    if (labels) {
      auto it = labels->find(r.key);
      if (it != labels->end() && it->is_string()) v = &*it;
    }
    bool has = v != nullptr;
    const std::string empty;
    const std::string& value = has ? v->get_ref<const std::string&>() : empty;
    bool in = std::find(r.values.begin(), r.values.end(), value) != r.values.end();
    switch (r.op) {
      case Req::kEq:
        if (!has || value != r.values[0]) return false;
        break;
      case Req::kNe:
        if (has && value == r.values[0]) return false;
        break;
      case Req::kIn:
        if (!has || !in) return false;
        break;
      case Req::kNotIn:
        if (has && in) return false;
        break;
      case Req::kExists:
        if (!has) return false;
        break;
      case Req::kNotExists:
        if (has) return false;
        break;
    }
  }
  return true;
}

}  // namespace infergate::op::cache
