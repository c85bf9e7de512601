#include "io/json_file.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace gemmaserve {

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot open (missing file?)");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path.string() + ": malformed JSON: " + e.what());
  }
}

}  // namespace gemmaserve
