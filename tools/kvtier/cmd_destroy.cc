// kvtier destroy DIR --yes: remove a store, its shared-memory RAM tier
// included (Store::Destroy). `rm -r DIR` would leave that tier's /dev/shm
// file holding memory until reboot.
#include <iostream>

#include "commands.h"

namespace kvtier::cli {

namespace {

struct Destroy {
  StoreArgs a;
  bool yes = false;
};

int Run(const Destroy& in) {
  auto d = Store::Describe(in.a.dir);
  if (!d.ok()) return Fail("destroy", kExitCannotOpen, "cannot open store " + in.a.dir + ": " + d.status().ToString());
  if (!in.yes)
    return Fail("destroy", kExitUsage,
                "this removes store " + d->store_id + " in " + in.a.dir + " and its RAM tier, every block in them; "
                "run again with --yes to do it");
  Status st = Store::Destroy(in.a.dir);
  if (!st.ok()) {
    const int code = st.code() == Code::kBusy || st.code() == Code::kNotFound ? kExitCannotOpen : kExitProblems;
    return Fail("destroy", code, st.ToString());
  }
  if (in.a.json) {
    PrintJson({{"dir", in.a.dir}, {"store_id", d->store_id}, {"destroyed", true}});
  } else {
    std::cout << "destroyed store " << d->store_id << " in " << in.a.dir << " (segments, index, RAM tier)\n";
  }
  return kExitOk;
}

}  // namespace

Command AddDestroy(CLI::App& root) {
  auto in = std::make_shared<Destroy>();
  CLI::App* sub = root.add_subcommand("destroy", "Remove a store and its shared-memory RAM tier (takes the lock)");
  AddDirArg(sub, &in->a);
  sub->add_flag("--yes", in->yes, "Really remove every block of the store");
  AddJsonFlag(sub, &in->a.json);
  return {sub, [in] { return Run(*in); }};
}

}  // namespace kvtier::cli
