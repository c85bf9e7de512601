#include "parallel/rank_launch.h"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "core/logging.h"

namespace gemmaserve {
namespace {

std::vector<char*> c_argv(std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (std::string& a : argv) out.push_back(a.data());
  out.push_back(nullptr);
  return out;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

}  // namespace

std::vector<std::string> mpirun_argv(int ranks, const std::string& program,
                                     const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"mpirun", "-n", std::to_string(ranks), "--bind-to", "none"};
  if (ranks > static_cast<int>(std::thread::hardware_concurrency())) {
    argv.push_back("--oversubscribe");
  }
  argv.push_back(program);
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

void set_mpirun_environment() {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
}

void exec_self_under_mpirun(int ranks) {
  set_mpirun_environment();
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string a; std::getline(in, a, '\0');) args.push_back(a);
  if (!args.empty()) args.erase(args.begin());  // the program itself
  // The resolved path: mpirun's children would read /proc/self/exe as their own binary.
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) throw std::runtime_error("cannot resolve /proc/self/exe");
  std::vector<std::string> argv =
      mpirun_argv(ranks, std::string(self, static_cast<size_t>(len)), args);
  std::vector<char*> cargv = c_argv(argv);
  execvp(cargv[0], cargv.data());
  throw std::runtime_error(std::string("cannot start mpirun for the ranks: ") +
                           std::strerror(errno) + " (install openmpi-bin)");
}

int run_under_mpirun(int ranks, const std::string& program, const std::vector<std::string>& args,
                     int timeout_seconds) {
  set_mpirun_environment();
  std::vector<std::string> argv = mpirun_argv(ranks, program, args);
  if (timeout_seconds > 0) {
    argv.insert(argv.begin() + 1, {"--timeout", std::to_string(timeout_seconds)});
  }
  std::vector<char*> cargv = c_argv(argv);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    execvp(cargv[0], cargv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid on mpirun failed");
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

bool restrict_to_rank_cpus() {
  const int local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  const int local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  if (local_size <= 1) return true;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return false;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  const int C = static_cast<int>(cpus.size());
  if (local_size > C) {
    GS_LOG_INFO << local_size << " ranks share " << C << " CPUs: threads run unpinned";
    return false;
  }
  cpu_set_t mine;
  CPU_ZERO(&mine);
  for (int i = local_rank * C / local_size; i < (local_rank + 1) * C / local_size; ++i) {
    CPU_SET(cpus[static_cast<size_t>(i)], &mine);
  }
  if (sched_setaffinity(0, sizeof(mine), &mine) != 0) return false;
  return true;
}

int allowed_cpu_count() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    return static_cast<int>(std::thread::hardware_concurrency());
  }
  return CPU_COUNT(&allowed);
}

int mpirun_rank() { return env_int("OMPI_COMM_WORLD_RANK", 0); }
int mpirun_size() { return env_int("OMPI_COMM_WORLD_SIZE", 1); }

}  // namespace gemmaserve
