// PeerMemory: a client's own memory, read by the service with
// process_vm_readv, so that a put from memory the client never registered
// costs one copy on the host (into the service's RAM tier) instead of two
// (into the client's staging, then out of it).
//
// Which process is read is settled once, at hello: the client names an
// address holding a random probe, and the service reads it from the pid
// SO_PEERCRED gave. Only a match proves that the pid is the client (not a
// process of another pid namespace, nor one that reused the pid). A pidfd
// taken before the probe is checked before every read afterwards, so that a
// client gone since is never confused with a process that took its pid.
//
// The kernel decides who may read: the same user (or CAP_SYS_PTRACE), and
// under Yama's ptrace_scope 1 only a process the client named with
// PR_SET_PTRACER (the client does, for its service). Where it refuses, the
// probe fails and puts go through staging as before.
//
// Thread safety: immutable after Open; Read may run on any thread.
#ifndef KVTIER_SRC_WIRE_PEER_MEMORY_H_
#define KVTIER_SRC_WIRE_PEER_MEMORY_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "kvtier/status.h"
#include "kvtier/store.h"
#include "wire/socket_io.h"

namespace kvtier::wire {

class PeerMemory {
 public:
  // The client `pid` whose memory at `probe_address` holds `probe`: an error
  // (the reason, for the service's log) where it cannot be read or differs.
  static Result<std::unique_ptr<PeerMemory>> Open(pid_t pid, uint64_t probe_address, std::string_view probe);

  // Reads `remote` (addresses in the client) in order into `local`, whose
  // sizes add up to the same total. IOError when the client is gone or any
  // byte could not be read (EFAULT: an address it does not map).
  [[nodiscard]] Status Read(std::span<const Fragment> remote, std::span<const MutableFragment> local) const;

 private:
  PeerMemory(pid_t pid, UniqueFd pidfd) : pid_(pid), pidfd_(std::move(pidfd)) {}
  bool Alive() const;
  const pid_t pid_;
  const UniqueFd pidfd_;
};

}  // namespace kvtier::wire

#endif  // KVTIER_SRC_WIRE_PEER_MEMORY_H_
