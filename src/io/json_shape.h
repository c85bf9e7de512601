// The shape of JSON text (nesting depth, widest object) read in one pass without parsing: the
// cheap check before parsing text a client sent into nlohmann's ordered_json.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gemmaserve {

// ordered_json finds each new key of an object by a linear search, so an object of n members
// costs n^2 / 2 comparisons to parse: 300,000 logit_bias entries took minutes.
inline constexpr size_t kMaxJsonObjectMembers = 10000;
// The same cost summed over every object of one text: four objects of the widest size.
inline constexpr uint64_t kMaxJsonKeyComparisons =
    4 * (uint64_t{kMaxJsonObjectMembers} * kMaxJsonObjectMembers / 2);

struct JsonShape {
  int depth = 0;                 // the deepest bracket nesting
  size_t widest_object = 0;      // the most members one object has
  uint64_t key_comparisons = 0;  // the sum of n * (n - 1) / 2 over objects of n members
};

// Brackets and commas outside strings; the text need not be valid JSON.
JsonShape json_shape(std::string_view text);

}  // namespace gemmaserve
