// `gemmaserve render-chat-template` (hidden): renders a chat template for each conversation in a
// JSON file, for comparing with Hugging Face's rendering (tools/render_chat_template.py).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace gemmaserve {

// render-chat-template --template FILE_OR_TEXT --conversations FILE.json
//                      [--bos-token TEXT] [--eos-token TEXT]
//   FILE.json is a list of {name, messages, tools?, add_generation_prompt?,
//   continue_final_message?, chat_template_kwargs?}; prints a JSON array with, per conversation,
//   the rendered string or {"error": message}.
int run_render_chat_template_command(const std::vector<std::string>& args);
int run_render_chat_template(const std::vector<std::string>& args, std::ostream& out);

}  // namespace gemmaserve
