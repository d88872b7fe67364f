// Opening a served store: "unix:PATH" connects; "auto:DIR" connects to the
// service of DIR, starting `kvtier serve DIR` when none answers.
//
// Why auto: works this way (docs/service.md): every process of an engine
// (DP replicas, TP ranks, LMCache's per-GPU workers) is given the same
// folder; whichever comes first starts a service that is a process of its
// own, not a child that dies with it, so no rank's exit takes the store
// from the others. The service leaves once it has had no client for
// idle_exit_s; the next client starts another. Two clients starting one at
// once is harmless: the store's lock admits one service, the other exits,
// and both clients connect to the one that listens. A service started while
// the last one is still leaving finds the lock held and exits: the client
// starts another until one listens or its connect timeout passes.
#include <chrono>
#include <thread>

#include "client/auto_start.h"
#include "client/service_store.h"

namespace kvtier::client {

Result<std::unique_ptr<Store>> OpenServiceStore(const std::string& target, const Options& options) {
  const bool is_unix = target.rfind("unix:", 0) == 0, is_auto = target.rfind("auto:", 0) == 0;
  if (!is_unix && !is_auto) return Status::NotFound("not a service address: " + target);
  std::string path = target.substr(5);
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path.empty()) return Status::InvalidArgument("empty service address: " + target);
  const std::string socket = is_unix ? path : path + "/" + kServiceSocketName;
  auto store = std::make_unique<ServiceStore>(target, socket, options, is_auto ? path : "");
  Status st = store->Connect();
  if (st.ok() || !is_auto || st.code() != Code::kNotFound) {
    if (!st.ok()) return st;
    return std::unique_ptr<Store>(std::move(store));
  }
  auto exited = StartService(path, socket, options.client);
  if (!exited.ok()) return exited.status();
  const Clock::time_point until = Clock::now() + std::chrono::milliseconds(options.client.connect_timeout_ms);
  Clock::time_point started = Clock::now();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    store = std::make_unique<ServiceStore>(target, socket, options, is_auto ? path : "");
    st = store->Connect();
    if (st.ok()) return std::unique_ptr<Store>(std::move(store));
    if (Clock::now() >= until)
      return st.WithContext("auto: the service started for " + path + " did not answer within " +
                            std::to_string(options.client.connect_timeout_ms) + " ms (see " + path +
                            "/" + kServiceLogName + ")");
    // The service started here left without listening: most often one that
    // was leaving (idle) still held the store's lock, and refused it. Start
    // another, at most every 200 ms (its log says why each one left).
    if ((*exited)->load() && Clock::now() - started >= std::chrono::milliseconds(200)) {
      exited = StartService(path, socket, options.client);
      if (!exited.ok()) return exited.status();
      started = Clock::now();
    }
  }
}

}  // namespace kvtier::client
