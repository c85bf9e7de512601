#include "cli/chat_template_command.h"

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/arg_parser.h"
#include "core/error.h"
#include "tokenizer/chat_template/chat_template.h"

namespace gemmaserve {
namespace {

constexpr const char* kUsage =
    "usage: gemmaserve render-chat-template --template FILE_OR_TEXT --conversations FILE.json\n"
    "                                       [--bos-token TEXT] [--eos-token TEXT]\n";

nlohmann::ordered_json read_ordered_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open");
  try {
    return nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path + ": malformed JSON: " + e.what());
  }
}

}  // namespace

int run_render_chat_template(const std::vector<std::string>& args, std::ostream& out) {
  ArgParser p;
  p.value("--template").value("--conversations").value("--bos-token").value("--eos-token");
  p.parse(args, 0);
  auto template_arg = p.get("--template");
  auto conversations_path = p.get("--conversations");
  if (!template_arg || !conversations_path)
    throw InputError(std::string("missing flags\n") + kUsage);
  ChatTemplate chat_template =
      ChatTemplate::parse(resolve_chat_template_arg(*template_arg), *template_arg);
  nlohmann::ordered_json conversations = read_ordered_json(*conversations_path);
  if (!conversations.is_array()) throw InputError(*conversations_path + ": expected a list");
  const std::string bos = p.get("--bos-token").value_or("<bos>");
  const std::string eos = p.get("--eos-token").value_or("<eos>");
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const auto& c : conversations) {
    try {
      results.push_back(apply_chat_template(
          chat_template, c.value("messages", nlohmann::ordered_json::array()),
          c.value("tools", nlohmann::ordered_json()), c.value("add_generation_prompt", false),
          c.value("continue_final_message", false), bos, eos,
          c.value("chat_template_kwargs", nlohmann::ordered_json::object())));
    } catch (const InputError& e) {
      results.push_back(nlohmann::ordered_json{{"error", e.what()}});
    }
  }
  out << results.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return 0;
}

int run_render_chat_template_command(const std::vector<std::string>& args) {
  return run_render_chat_template(args, std::cout);
}

}  // namespace gemmaserve
