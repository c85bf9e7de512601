// Request bodies -> JSON: the nesting limit and decode errors every route shares.
#include "server/http/request_body.h"

#include <gtest/gtest.h>

#include <string>

#include "server/shared/api_error.h"

namespace gemmaserve {
namespace {

std::string body_error(const std::string& text) {
  try {
    parse_json_request_body(text);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.type(), "BadRequestError");
    return e.what();
  }
  return "";
}

std::string nested(int depth) {
  return std::string(static_cast<size_t>(depth), '[') +
         std::string(static_cast<size_t>(depth), ']');
}

TEST(RequestBody, DeeplyNestedJsonIsA400BeforeParsing) {
  EXPECT_EQ(body_error(nested(129)), "JSON nesting deeper than 128 levels is not accepted");
  EXPECT_EQ(body_error("{\"messages\": " + nested(1000000) + "}"),
            "JSON nesting deeper than 128 levels is not accepted");
  EXPECT_EQ(body_error(nested(128)), "");
  // Brackets inside strings do not count.
  EXPECT_EQ(body_error("{\"a\": \"" + std::string(1000, '[') + "\\\"\"}"), "");
}

TEST(RequestBody, ObjectsWithTooManyMembersAreA400BeforeParsing) {
  // ordered_json parses an object of n members in n^2 time: 300,000 took minutes.
  auto object = [](int members) {
    std::string s = "{\"logit_bias\": {";
    for (int i = 0; i < members; ++i) s += (i ? ",\"" : "\"") + std::to_string(i) + "\": 1";
    return s + "}}";
  };
  EXPECT_EQ(body_error(object(300000)),
            "JSON objects with more than 10000 members are not accepted");
  EXPECT_EQ(body_error(object(10001)),
            "JSON objects with more than 10000 members are not accepted");
  EXPECT_EQ(body_error(object(10000)), "");
  // Arrays cost one append per element: not limited here.
  std::string array = "[0";
  for (int i = 0; i < 200000; ++i) array += ",1";
  EXPECT_EQ(body_error(array + "]"), "");
}

TEST(RequestBody, MalformedJsonIsA400) {
  EXPECT_EQ(body_error("{\"a\": }"),
            "JSON decode error: [json.exception.parse_error.101] parse error at line 1, column 7: "
            "syntax error while parsing value - unexpected '}'; expected '[', '{', or a literal");
  const JsonShape shape = json_shape("{\"a\": [1, {\"b\": [], \"c\": 2}], \"d\": \"{,,}\"}");
  EXPECT_EQ(shape.depth, 4);
  EXPECT_EQ(shape.widest_object, 2u);
  EXPECT_EQ(shape.key_comparisons, 2u);  // two objects of two members: one comparison each
}

TEST(RequestBody, ManyWideObjectsAreA400BeforeParsing) {
  // Each object under the member cap, but their parse cost adds up: 800 objects of 10,000 keys
  // would take as long as the 300,000-member one.
  std::string wide = "{";
  for (int i = 0; i < 10000; ++i) wide += (i ? ",\"" : "\"") + std::to_string(i) + "\": 0";
  wide += "}";
  auto body = [&](int objects) {
    std::string s = "{\"messages\": [";
    for (int i = 0; i < objects; ++i) s += (i ? "," : "") + wide;
    return s + "]}";
  };
  EXPECT_EQ(body_error(body(800)),
            "JSON objects this large in all are not accepted (parsing their 39996000000 key "
            "comparisons exceeds 200000000)");
  EXPECT_EQ(body_error(body(5)),
            "JSON objects this large in all are not accepted (parsing their 249975000 key "
            "comparisons exceeds 200000000)");
  EXPECT_EQ(body_error(body(4)), "");
  // Unclosed objects count as far as the parser would read them.
  EXPECT_EQ(json_shape(wide.substr(0, wide.size() - 1)).key_comparisons, 49995000u);
}

}  // namespace
}  // namespace gemmaserve
