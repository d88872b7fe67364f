// Starting `kvtier serve` for auto: addresses (client/auto_start.h).
#include "client/auto_start.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

#include "kvtier/service.h"

extern char** environ;

namespace kvtier::client {

namespace {

bool Executable(const std::string& p) { return !p.empty() && ::access(p.c_str(), X_OK) == 0; }

std::string Dirname(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

// The kvtier program: as configured, $KVTIER_BIN, beside this library (or
// the program it is linked into), or on PATH.
std::string ServeProgram(const ServiceClientOptions& o) {
  if (!o.serve_program.empty()) return o.serve_program;
  if (const char* env = std::getenv("KVTIER_BIN"); env != nullptr && Executable(env)) return env;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&ServeProgram), &info) != 0 && info.dli_fname != nullptr) {
    const std::string dir = Dirname(info.dli_fname);
    for (const std::string& c : {dir + "/kvtier", dir + "/../bin/kvtier"})
      if (Executable(c)) return c;
  }
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    std::stringstream ss(path);
    std::string d;
    while (std::getline(ss, d, ':'))
      if (Executable(d + "/kvtier")) return d + "/kvtier";
  }
  return "";
}

}  // namespace

Result<std::shared_ptr<std::atomic<bool>>> StartService(const std::string& dir, const std::string& socket,
                                                        const ServiceClientOptions& o) {
  const std::string program = ServeProgram(o);
  if (program.empty())
    return Status::NotFound("auto: no kvtier program to start a service with (set KVTIER_BIN or "
                            "Options::client.serve_program)");
  std::vector<std::string> args = {program, "serve", dir, "--socket", socket, "--idle-exit",
                                   std::to_string(o.idle_exit_s)};
  std::stringstream extra(o.serve_args);
  for (std::string a; extra >> a;) args.push_back(a);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  const std::string log = dir + "/" + kServiceLogName;
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0640);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  // A session of its own: no terminal's signals, no engine's process group.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  pid_t pid = 0;
  const int err = ::posix_spawn(&pid, program.c_str(), &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (err != 0) return Status::FromErrno(err, "auto: starting " + program + " serve " + dir);
  // Reap it whenever it leaves, so it never lingers as a zombie.
  auto exited = std::make_shared<std::atomic<bool>>(false);
  std::thread([pid, exited] {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    exited->store(true);
  }).detach();
  return exited;
}

}  // namespace kvtier::client
