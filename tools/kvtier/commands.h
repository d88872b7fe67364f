// The subcommands of `kvtier`, one per cmd_<name>.cc. Each adds itself to the
// root app and returns the Command that main() runs when it was parsed.
#ifndef KVTIER_TOOLS_KVTIER_COMMANDS_H_
#define KVTIER_TOOLS_KVTIER_COMMANDS_H_

#include "cli.h"

namespace kvtier::cli {

Command AddInfo(CLI::App& root);
Command AddNs(CLI::App& root);
Command AddLs(CLI::App& root);
Command AddGet(CLI::App& root);
Command AddShow(CLI::App& root);
Command AddPut(CLI::App& root);
Command AddVerify(CLI::App& root);
Command AddRepair(CLI::App& root);
Command AddDestroy(CLI::App& root);  // cmd_destroy.cc
Command AddShm(CLI::App& root);      // cmd_shm.cc
Command AddEvict(CLI::App& root);
Command AddShare(CLI::App& root);  // cmd_share.cc
Command AddRm(CLI::App& root);
Command AddExport(CLI::App& root);
Command AddImport(CLI::App& root);
Command AddStats(CLI::App& root);
Command AddDemo(CLI::App& root);
Command AddBench(CLI::App& root);
Command AddRemoteBench(CLI::App& root);  // cmd_remote_bench.cc
Command AddServe(CLI::App& root);        // cmd_serve.cc

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_COMMANDS_H_
