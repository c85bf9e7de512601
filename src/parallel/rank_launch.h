// Starting and placing the ranks of one model on this host: the mpirun command line that
// re-executes a program as N ranks (the "mp" executor backend) and each rank's CPU share.
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

// argv of Debian's `mpirun` running `program args...` as `ranks` processes on this host:
// oversubscribed when ranks outnumber the CPUs, no MPI binding (each rank pins its own
// threads). Environment settings the ranks need (run as root, see mpirun_environment) are
// not part of it.
std::vector<std::string> mpirun_argv(int ranks, const std::string& program,
                                     const std::vector<std::string>& args);

// Sets the variables mpirun needs here: OpenMPI refuses to run as root (CI, containers)
// without OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1. Existing values win.
void set_mpirun_environment();

// Replaces this process with mpirun_argv(ranks, this program, this process's own arguments);
// throws only when the exec fails (mpirun missing).
[[noreturn]] void exec_self_under_mpirun(int ranks);

// Runs mpirun_argv(...) as a child and returns its exit status (128 + signal when killed);
// mpirun ends the job after `timeout_seconds` (0 = never).
int run_under_mpirun(int ranks, const std::string& program, const std::vector<std::string>& args,
                     int timeout_seconds = 0);

// Restricts this process to its share of the CPUs it may use: local rank r of n gets CPUs
// [r*C/n, (r+1)*C/n) of the C allowed ones, so the thread pools of ranks on one host never
// share a CPU. Returns false (and changes nothing) when ranks outnumber the CPUs: they run
// unpinned. Local rank and size come from OpenMPI's OMPI_COMM_WORLD_LOCAL_* variables.
bool restrict_to_rank_cpus();

// CPUs this process may run on (after restrict_to_rank_cpus, its share).
int allowed_cpu_count();

// This process's rank and the rank count as mpirun set them (0 and 1 outside mpirun).
int mpirun_rank();
int mpirun_size();

}  // namespace gemmaserve
