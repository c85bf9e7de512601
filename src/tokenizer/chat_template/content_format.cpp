#include "tokenizer/chat_template/content_format.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/chat_template/ast.h"

namespace gemmaserve {
namespace {

using jinja::Body;
using jinja::Expr;
using jinja::ExprKind;
using jinja::Stmt;
using jinja::StmtKind;

// vLLM asserts these are plain names; a failed assert makes detection fall back to "string".
struct TargetNotAName {};

bool is_var_access(const Expr* e, const std::string& var) {
  return e != nullptr && e->kind == ExprKind::kName && e->name == var;
}

bool is_attr_access(const Expr* e, const std::string& var, const std::string& key) {
  if (e == nullptr || e->args.empty() || !is_var_access(e->args[0].get(), var)) return false;
  if (e->kind == ExprKind::kGetAttr) return e->name == key;
  if (e->kind != ExprKind::kGetItem || e->args.size() < 2) return false;
  const Expr* arg = e->args[1].get();
  return arg->kind == ExprKind::kLiteral && arg->value.is_string() && arg->value.as_string() == key;
}

// `var`, `var[a:b]`, `var | filter`, `var is test` (or `var.key` / `var['key']` so wrapped).
bool is_var_or_elems_access(const Expr* e, const std::string& var, const std::string* key) {
  if (e == nullptr) return false;
  if (e->kind == ExprKind::kFilter || e->kind == ExprKind::kTest || e->kind == ExprKind::kSlice) {
    return !e->args.empty() && is_var_or_elems_access(e->args[0].get(), var, key);
  }
  return key ? is_attr_access(e, var, *key) : is_var_access(e, var);
}

std::string target_name(const Stmt& s) {
  if (s.unpack || !s.attr.empty() || s.targets.size() != 1) throw TargetNotAName{};
  return s.targets[0];
}

// Every statement of kind `kind`, in document order (jinja2's find_all).
void collect(const Body& body, StmtKind kind, std::vector<const Stmt*>& out) {
  for (const auto& s : body) {
    if (s->kind == kind) out.push_back(s.get());
    for (const Body& inner : s->bodies) collect(inner, kind, out);
  }
}

// `messages` and every variable set from it (`set loop_messages = messages[1:]`), transitively.
std::vector<std::string> messages_aliases(const std::vector<const Stmt*>& sets) {
  std::vector<std::string> names = {"messages"};
  for (size_t i = 0; i < names.size(); ++i) {
    for (const Stmt* s : sets) {
      if (!is_var_or_elems_access(s->expr.get(), names[i], nullptr)) continue;
      const std::string lhs = target_name(*s);
      // vLLM revisits names and would loop forever on `a = b; b = a`; each is walked once here.
      if (std::find(names.begin(), names.end(), lhs) == names.end()) names.push_back(lhs);
    }
  }
  return names;
}

bool loops_over_message_content(const Body& body) {
  std::vector<const Stmt*> sets;
  std::vector<const Stmt*> loops;
  collect(body, StmtKind::kSet, sets);
  collect(body, StmtKind::kFor, loops);
  const std::vector<std::string> messages = messages_aliases(sets);
  std::vector<std::string> message_vars;  // `for message in <messages>` targets
  for (const Stmt* loop : loops) {
    for (const std::string& var : messages) {
      if (is_var_or_elems_access(loop->expr.get(), var, nullptr)) {
        message_vars.push_back(target_name(*loop));
        break;
      }
    }
  }
  const std::string content = "content";
  for (const Stmt* loop : loops) {
    for (const std::string& var : message_vars) {
      if (is_var_or_elems_access(loop->expr.get(), var, &content)) {
        target_name(*loop);
        return true;
      }
    }
  }
  return false;
}

}  // namespace

ChatContentFormat detect_content_format(const Body& body) {
  try {
    return loops_over_message_content(body) ? ChatContentFormat::kOpenAi
                                            : ChatContentFormat::kString;
  } catch (const TargetNotAName&) {
    return ChatContentFormat::kString;
  }
}

std::optional<ChatContentFormat> parse_content_format_option(std::string_view option) {
  if (option == "auto") return std::nullopt;
  if (option == "string") return ChatContentFormat::kString;
  if (option == "openai") return ChatContentFormat::kOpenAi;
  throw InputError("chat template content format must be one of 'auto', 'string', 'openai', got '" +
                   std::string(option) + "'");
}

std::string_view content_format_name(ChatContentFormat format) {
  return format == ChatContentFormat::kOpenAi ? "openai" : "string";
}

}  // namespace gemmaserve
