// Reading JSON files with errors that name the file.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>

namespace gemmaserve {

// Parses a JSON file; throws InputError "<path>: cannot open" or "<path>: malformed JSON: ...".
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace gemmaserve
