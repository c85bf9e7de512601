// Gemma 4's tool-argument syntax ({key:<|"|>text<|"|>,n:42,flag:true,list:[...]}) converted to
// the JSON text vLLM's gemma4 tool parser returns (Python json.dumps, ensure_ascii=False).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/python_text.h"  // python_json_quote, python_float_repr

namespace gemmaserve {

// JSON for an unquoted value, as vLLM's _parse_gemma4_value reads it: true/false; null, none, nil
// (any case) as null; Python int() syntax (sign, leading zeros, '_' between digits) as an exact
// integer of any size; a number with '.' as Python float() reads it, printed with repr. Unlike
// vLLM, an exponent without '.' (1e-05, what Python prints for small floats) is also a float.
// Anything else, including out-of-range floats, becomes a JSON string of the trimmed text.
std::string gemma4_bare_value_to_json(std::string_view raw);

// Converts the argument text of one call, after the '{' of call:NAME{, to JSON incrementally.
// Output is final when returned: the pieces concatenate to the finished JSON, and a piece never
// holds text that later input could change (a bare value is withheld until its terminator, a
// string's text until it is known not to start a <|"|> delimiter or end mid-character).
// Lenient like vLLM: unquoted keys up to ':', keys in <|"|> too, stray commas skipped, missing
// commas tolerated, '' for a key without a value; finish() closes whatever is still open.
// Duplicate keys are kept in order (vLLM's dict keeps the last value).
class Gemma4ArgsToJson {
 public:
  std::string feed(std::string_view text);
  // Ends the input (at <tool_call|> or the end of output): flushes and closes open structures.
  std::string finish();
  // True once the '}' matching the call's '{' has been seen; later input is ignored.
  bool closed() const { return mode_ == Mode::kDone; }

 private:
  enum class Mode {
    kExpectKey,
    kKey,
    kQuotedKey,
    kExpectColon,
    kExpectValue,
    kString,
    kBare,
    kAfterValue,
    kDone,
  };
  struct Frame {
    bool is_object = true;
    int count = 0;  // members/elements written so far
  };

  // Consumes pending_ as far as it is decided; with `final` nothing is held back.
  void run(bool final);
  bool in_object() const { return !stack_.empty() && stack_.back().is_object; }
  void begin_output();
  void begin_member(std::string_view raw_key);
  void begin_element();
  void open_container(bool is_object);
  void close_container();
  void end_bare_value();
  void after_value();

  std::vector<Frame> stack_{Frame{}};
  Mode mode_ = Mode::kExpectKey;
  std::string pending_;  // input not yet consumed
  std::string token_;    // key or bare value being collected
  std::string out_;      // output produced by the current feed()/finish()
  bool opened_ = false;  // the top-level '{' was written
  bool warned_ = false;  // text after the closing '}' was logged once
};

// Whole-text convenience: `text` is the argument text after call:NAME{ (its closing '}' included
// or not); returns the complete JSON object.
std::string gemma4_args_to_json(std::string_view text);

}  // namespace gemmaserve
