#include "io/json_shape.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace gemmaserve {

JsonShape json_shape(std::string_view text) {
  JsonShape shape;
  // Per open container: whether it is an object, and its commas so far.
  std::vector<std::pair<bool, size_t>> open;
  bool in_string = false, escaped = false;
  const auto close = [&](const std::pair<bool, size_t>& container) {
    const uint64_t n = container.second + 1;
    if (container.first) shape.key_comparisons += n * (n - 1) / 2;
  };
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      open.emplace_back(c == '{', 0);
      shape.depth = std::max(shape.depth, static_cast<int>(open.size()));
      if (c == '{') shape.widest_object = std::max<size_t>(shape.widest_object, 1);
    } else if (c == ']' || c == '}') {
      if (!open.empty()) close(open.back());
      if (!open.empty()) open.pop_back();
    } else if (c == ',' && !open.empty() && open.back().first) {
      shape.widest_object = std::max(shape.widest_object, ++open.back().second + 1);
    }
  }
  for (const auto& container : open) close(container);  // unclosed: parsed up to the end
  return shape;
}

}  // namespace gemmaserve
