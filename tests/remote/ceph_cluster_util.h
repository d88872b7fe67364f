// A one-node Ceph cluster for the shared-tier tests: the one named by
// $KVTIER_CEPH_CONF (shared, e.g. started once by CI), or a private one
// started with tools/ceph_one_node.sh on a free port and stopped at the end.
#ifndef KVTIER_TESTS_REMOTE_CEPH_CLUSTER_UTIL_H_
#define KVTIER_TESTS_REMOTE_CEPH_CLUSTER_UTIL_H_

#include <sys/types.h>

#include <string>

namespace kvtier::testing {

class CephCluster {
 public:
  // Empty when the Ceph binaries are installed; else why the tests skip.
  static std::string Unavailable();
  // Starts a private cluster (pool "kvtier"). Empty conf() on failure,
  // with error() saying why.
  static CephCluster StartPrivate();
  // The cluster named by $KVTIER_CEPH_CONF, not owned.
  static CephCluster FromEnv();

  CephCluster() = default;
  CephCluster(CephCluster&& o) noexcept;
  CephCluster& operator=(CephCluster&& o) noexcept;
  ~CephCluster();

  const std::string& conf() const { return conf_; }
  const std::string& error() const { return error_; }
  bool owned() const { return owned_; }
  // The OSD's pid (from the run folder next to ceph.conf), or -1.
  pid_t OsdPid() const;
  void Stop();

 private:
  std::string dir_, conf_, error_;
  bool owned_ = false;
};

// The cluster of this test process (set up by the global environment).
CephCluster& TheCluster();

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_REMOTE_CEPH_CLUSTER_UTIL_H_
