// kvtier remote-bench [ARGS...]: runs kvtier_remote_bench (the shared tier on
// Ceph against `rados bench`, bench/remote/) found next to this executable,
// passing every argument through. Built only where librados is installed.
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "commands.h"

namespace kvtier::cli {

namespace {

int RunRemoteBench(CLI::App* app) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return Fail("remote-bench", kExitProblems, std::string("cannot find this executable: ") + std::strerror(errno));
  std::string dir(self, static_cast<size_t>(n));
  dir.resize(dir.rfind('/'));
  const std::string bench = dir + "/kvtier_remote_bench";
  if (::access(bench.c_str(), X_OK) != 0) {
    return Fail("remote-bench", kExitUsage,
                bench + " not found (" + std::strerror(errno) +
                    "): it is built where librados is installed, with `cmake --build <build dir> --target "
                    "kvtier_remote_bench`");
  }
  std::vector<std::string> args = app->remaining();
  std::vector<char*> argv;
  std::string name = "kvtier_remote_bench";
  argv.push_back(name.data());
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(bench.c_str(), argv.data());
  return Fail("remote-bench", kExitProblems, "cannot run " + bench + ": " + std::strerror(errno));
}

}  // namespace

Command AddRemoteBench(CLI::App& root) {
  CLI::App* sub = root.add_subcommand(
      "remote-bench", "Shared tier on Ceph vs rados bench: run kvtier_remote_bench (arguments are passed through)");
  sub->prefix_command();
  sub->set_help_flag();  // --help goes to the bench, which prints its own usage
  return {sub, [sub] { return RunRemoteBench(sub); }};
}

}  // namespace kvtier::cli
