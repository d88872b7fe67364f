// Starting the service of an auto: address (docs/service.md, "auto:DIR"):
// `kvtier serve DIR` as a process of its own session, its output appended
// to DIR's service log, reaped by a detached thread when it leaves. Used
// when a client opens the address and when it finds the service gone.
#ifndef KVTIER_SRC_CLIENT_AUTO_START_H_
#define KVTIER_SRC_CLIENT_AUTO_START_H_

#include <atomic>
#include <memory>
#include <string>

#include "kvtier/service.h"
#include "kvtier/status.h"

namespace kvtier::client {

// Starts `kvtier serve DIR --socket SOCKET --idle-exit o.idle_exit_s` plus
// o.serve_args; the program is o.serve_program, else $KVTIER_BIN, else the
// `kvtier` beside this library, else on PATH (NotFound without one). The
// flag turns true when that process has left. Thread-safe.
Result<std::shared_ptr<std::atomic<bool>>> StartService(const std::string& dir, const std::string& socket,
                                                        const ServiceClientOptions& o);

}  // namespace kvtier::client

#endif  // KVTIER_SRC_CLIENT_AUTO_START_H_
