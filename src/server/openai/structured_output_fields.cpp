#include "server/openai/structured_output_fields.h"

#include <vector>

#include "server/shared/api_error.h"

namespace gemmaserve {

namespace {

using nlohmann::ordered_json;

struct Constraint {
  std::string field;  // where it came from, for errors
  StructuredOutputRequest value;
};

// One kind's value as the engine's spec; `field` names it in errors.
StructuredOutputRequest read_kind(const std::string& kind, const ordered_json& v,
                                  const std::string& field) {
  StructuredOutputRequest r;
  if (kind == "json_object") {
    if (!v.is_boolean()) throw bad_request(field + ": Input should be a valid boolean", field);
    r.json_object = v.get<bool>();
    return r;
  }
  r.kind = kind;
  if (kind == "json") {
    // A schema object, or its text (vLLM accepts both).
    if (v.is_string()) {
      r.spec = v.get<std::string>();
    } else if (v.is_object() || v.is_boolean()) {
      r.spec = v.dump();
    } else {
      throw bad_request(field + ": Input should be a valid dictionary or string", field);
    }
  } else if (kind == "choice") {
    if (!v.is_array() || v.empty()) {
      throw bad_request(field + ": Input should be a non-empty list of strings", field);
    }
    for (const auto& c : v) {
      if (!c.is_string()) {
        throw bad_request(field + ": Input should be a non-empty list of strings", field);
      }
    }
    r.spec = v.dump();
  } else {
    if (!v.is_string()) throw bad_request(field + ": Input should be a valid string", field);
    r.spec = v.get<std::string>();
  }
  return r;
}

}  // namespace

StructuredOutputRequest parse_structured_output_fields(RequestFields& f) {
  std::vector<Constraint> found;
  StructuredOutputRequest options;  // the whitespace options, whatever field sets the constraint
  if (const auto* rf = f.raw("response_format")) {
    const std::string type = rf->is_object() && rf->contains("type") && (*rf)["type"].is_string()
                                 ? (*rf)["type"].get<std::string>()
                                 : "";
    if (type == "json_object") {
      StructuredOutputRequest object;
      object.json_object = true;
      found.push_back({"response_format", object});
    } else if (type == "json_schema") {
      const auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object()) {
        throw bad_request("response_format: json_schema must be given with type json_schema",
                          "response_format");
      }
      if (!js->contains("name") || !(*js)["name"].is_string()) {
        throw bad_request("response_format.json_schema.name: Field required", "response_format");
      }
      // vLLM reads the schema under "schema" (its alias) or "json_schema".
      const auto schema = js->contains("schema") ? js->find("schema") : js->find("json_schema");
      if (schema == js->end() || schema->is_null()) {
        throw bad_request("response_format.json_schema.schema: Field required", "response_format");
      }
      found.push_back({"response_format", read_kind("json", *schema, "response_format")});
    } else if (type == "structural_tag") {
      throw ApiError(501, "NotImplementedError",
                     "response_format 'structural_tag' is not supported by gemmaserve yet.");
    } else if (type != "text") {
      throw bad_request(
          "response_format: 'type' must be one of text, json_object, json_schema, "
          "structural_tag",
          "response_format");
    }
  }
  if (const auto* so = f.raw("structured_outputs")) {
    if (!so->is_object()) {
      throw bad_request("structured_outputs: Input should be a valid dictionary",
                        "structured_outputs");
    }
    if (so->contains("structural_tag") && !(*so)["structural_tag"].is_null()) {
      throw ApiError(501, "NotImplementedError",
                     "structured_outputs.structural_tag is not supported by gemmaserve yet.");
    }
    int count = 0;
    for (const char* kind : {"json", "regex", "choice", "grammar", "json_object"}) {
      const auto it = so->find(kind);
      if (it == so->end() || it->is_null()) continue;
      ++count;
      found.push_back(
          {"structured_outputs", read_kind(kind, *it, std::string("structured_outputs.") + kind)});
    }
    if (const auto it = so->find("disable_any_whitespace"); it != so->end() && !it->is_null()) {
      if (!it->is_boolean()) {
        throw bad_request(
            "structured_outputs.disable_any_whitespace: Input should be a valid boolean",
            "structured_outputs");
      }
      options.disable_any_whitespace = it->get<bool>();
    }
    if (const auto it = so->find("whitespace_pattern"); it != so->end() && !it->is_null()) {
      if (!it->is_string()) {
        throw bad_request("structured_outputs.whitespace_pattern: Input should be a valid string",
                          "structured_outputs");
      }
      options.whitespace_pattern = it->get<std::string>();
    }
    if (count == 0) {
      throw bad_request(
          "You must use one kind of structured outputs constraint but none are specified.",
          "structured_outputs");
    }
  }
  for (const auto& [field, kind] : {std::pair<const char*, const char*>{"guided_json", "json"},
                                    {"guided_regex", "regex"},
                                    {"guided_choice", "choice"},
                                    {"guided_grammar", "grammar"}}) {
    if (const auto* v = f.raw(field)) found.push_back({field, read_kind(kind, *v, field)});
  }
  if (const auto* p = f.raw("guided_whitespace_pattern"); p != nullptr && !p->is_null()) {
    if (!p->is_string()) {
      throw bad_request("guided_whitespace_pattern: Input should be a valid string",
                        "guided_whitespace_pattern");
    }
    options.whitespace_pattern = p->get<std::string>();
  }
  if (found.size() > 1) {
    std::string fields;
    for (const Constraint& c : found) fields += (fields.empty() ? "" : ", ") + c.field;
    throw bad_request(
        "You can only use one kind of structured outputs constraint but multiple are specified "
        "(" +
            fields + ").",
        found.front().field);
  }
  StructuredOutputRequest r = found.empty() ? StructuredOutputRequest{} : found.front().value;
  r.disable_any_whitespace = options.disable_any_whitespace;
  r.whitespace_pattern = options.whitespace_pattern;
  return r;
}

}  // namespace gemmaserve
