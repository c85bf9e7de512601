// `gemmaserve make-test-model`: writes a random-weight Gemma 4 checkpoint with a real variant's
// tensor names and shapes (or the tiny every-code-path config), streaming so size is no limit.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace gemmaserve {

// args exclude the program and subcommand names. Exit codes: 0 done, 1 failure (e.g. not
// enough disk space), 2 bad flags.
int run_make_test_model_command(const std::vector<std::string>& args);

// Removes the files of an earlier checkpoint in dir (config.json, model.safetensors, shards,
// the index, .partial leftovers) so a new one is not mixed with them.
void remove_old_checkpoint_files(const std::filesystem::path& dir);

// Throws InputError when `bytes` more would not fit on the filesystem holding `dir` (or its
// nearest existing parent), keeping `reserve` bytes free.
void check_free_disk_space(const std::filesystem::path& dir, uint64_t bytes,
                           uint64_t reserve = uint64_t{256} << 20);

}  // namespace gemmaserve
