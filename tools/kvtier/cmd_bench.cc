// kvtier bench [ARGS...]: runs the benchmark binary kvtier-bench that is
// installed next to this executable, passing every argument through;
// `kvtier bench --service [ARGS...]` runs kvtier-service-bench instead, and
// `kvtier bench --host [ARGS...]` kvtier-host-bench (the host load path).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct Bench {
  CLI::App* app = nullptr;
};

int Run(const Bench& in) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return Fail("bench", kExitProblems, std::string("cannot find this executable: ") + std::strerror(errno));
  std::string dir(self, static_cast<size_t>(n));
  dir.resize(dir.rfind('/'));
  std::vector<std::string> args = in.app->remaining();
  std::string name_only = "kvtier-bench";
  if (!args.empty() && (args[0] == "--service" || args[0] == "--host")) {
    name_only = "kvtier-" + args[0].substr(2) + "-bench";
    args.erase(args.begin());
  }
  const std::string bench = dir + "/" + name_only;
  if (::access(bench.c_str(), X_OK) != 0) {
    return Fail("bench", kExitUsage, bench + " not found (" + std::strerror(errno) +
                                         "): build it with `cmake --build <build dir> --target " + name_only + "`");
  }
  std::vector<char*> argv;
  std::string name = name_only;
  argv.push_back(name.data());
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(bench.c_str(), argv.data());
  return Fail("bench", kExitProblems, "cannot run " + bench + ": " + std::strerror(errno));
}

}  // namespace

Command AddBench(CLI::App& root) {
  auto in = std::make_shared<Bench>();
  CLI::App* sub = root.add_subcommand("bench", "Run the benchmark harness kvtier-bench (arguments are passed through)");
  sub->prefix_command();  // everything after `bench` goes to kvtier-bench
  in->app = sub;
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
