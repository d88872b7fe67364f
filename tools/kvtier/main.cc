// kvtier: offline inspection, verification, repair and operations on a store.
// See docs/tools.md.
#include <iostream>

#include "commands.h"

int main(int argc, char** argv) {
  using namespace kvtier::cli;
  CLI::App app{"kvtier: inspect, verify, repair and operate a kvtier KV-block store", "kvtier"};
  app.require_subcommand(1);
  app.footer(
      "Exit codes:\n"
      "  0  ok\n"
      "  1  problems found (verify), or the operation failed (unknown namespace or key,\n"
      "     I/O error, corrupt archive)\n"
      "  2  usage error (bad arguments)\n"
      "  3  cannot open the store (missing, not a store, busy, corrupt superblock)\n"
      "  75 serve stopped so that its supervisor starts it again (its index refuses\n"
      "     writes until the store is reopened)\n"
      "Read-only commands (info ns ls get show verify export stats) work while another\n"
      "process has the store open. Keys are given and printed as hex.");
  std::vector<Command> commands = {
      AddInfo(app),   AddNs(app),     AddLs(app),    AddGet(app),    AddShow(app),
      AddPut(app),    AddVerify(app), AddRepair(app), AddDestroy(app), AddShm(app), AddEvict(app), AddShare(app), AddRm(app),
      AddExport(app), AddImport(app), AddStats(app), AddDemo(app),   AddBench(app), AddRemoteBench(app), AddServe(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  for (const Command& c : commands) {
    if (c.app->parsed()) return c.run();
  }
  return kExitUsage;
}
