// kvtier share DIR --ceph-conf F --rados-ns NS: seal the open segment and
// upload every sealed one to the shared tier, waiting up to --timeout (takes
// the lock). For a node about to go away, or to share blocks now rather than
// when the segment fills.
#include <chrono>
#include <iostream>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct Share {
  StoreArgs a;
  std::string timeout = "60";
};

int Run(Share& in) {
  double seconds = 0;
  try {
    seconds = std::stod(in.timeout);
  } catch (const std::exception&) {
    return Fail("share", kExitUsage, "--timeout: '" + in.timeout + "' is not a number of seconds");
  }
  if (seconds <= 0) return Fail("share", kExitUsage, "--timeout must be > 0 seconds");
  in.a.remote.enabled = true;
  in.a.remote.close_upload_timeout_ms = 0;  // this command does the waiting
  int rc = kExitOk;
  auto store = OpenStore("share", in.a, OpenMode::kWrite, &rc);
  if (!store) return rc;
  const Stats before = store->GetStats();
  const auto t0 = std::chrono::steady_clock::now();
  Status st = store->ShareNow(std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Stats after = store->GetStats();
  Status cs = store->Close();
  const uint64_t uploaded = after.remote_uploads - before.remote_uploads;
  if (in.a.json) {
    PrintJson({{"dir", in.a.dir}, {"ok", st.ok()}, {"segments_uploaded", uploaded},
               {"bytes_uploaded", after.remote_upload_bytes - before.remote_upload_bytes},
               {"connected", after.remote_connected}, {"seconds", secs},
               {"error", st.ok() ? std::string() : st.ToString()}});
  } else if (st.ok()) {
    std::cout << "shared: " << uploaded << " segment(s) uploaded in " << secs << " s\n";
  }
  if (!st.ok()) {
    return Fail("share", kExitProblems,
                in.a.dir + ": " + st.ToString() +
                    (after.remote_connected ? "" : " (not connected to the cluster: check --ceph-conf and --pool)"));
  }
  if (!cs.ok()) return Fail("share", kExitProblems, in.a.dir + ": closing: " + cs.ToString());
  return kExitOk;
}

}  // namespace

Command AddShare(CLI::App& root) {
  auto in = std::make_shared<Share>();
  CLI::App* sub = root.add_subcommand(
      "share", "Shared tier: seal the open segment and upload every sealed one, waiting up to --timeout (takes the lock)");
  AddDirArg(sub, &in->a);
  sub->add_option("--ceph-conf", in->a.remote.ceph_conf, "ceph.conf of the cluster (default: librados' search)");
  sub->add_option("--pool", in->a.remote.pool, "RADOS pool")->capture_default_str();
  sub->add_option("--client-id", in->a.remote.client_id, "Ceph client id (client.<id>)")->capture_default_str();
  sub->add_option("--rados-ns", in->a.remote.rados_namespace, "RADOS namespace the nodes share")->required();
  sub->add_option("--timeout", in->timeout, "Seconds to wait for the uploads")->capture_default_str();
  AddJsonFlag(sub, &in->a.json);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
