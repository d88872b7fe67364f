// Shared pieces of the kvtier command: exit codes, opening a store the way a
// subcommand needs it, namespace and key arguments, sizes, tables, progress.
//
// Every subcommand lives in its own cmd_<name>.cc and exposes one Add<Name>
// function (declared in commands.h) that adds its CLI11 subcommand and returns
// the code that runs it. Errors are printed to stderr as "kvtier <cmd>: ..."
// naming the path and the cause; stdout carries only results (tables, JSON,
// payload bytes), so it can be piped.
#ifndef KVTIER_TOOLS_KVTIER_CLI_H_
#define KVTIER_TOOLS_KVTIER_CLI_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "kvtier/store.h"

namespace kvtier::cli {

// Process exit codes (also in `kvtier --help` and docs/tools.md).
enum Exit : int {
  kExitOk = 0,          // done, nothing wrong
  kExitProblems = 1,    // problems found, or the operation failed (unknown key or namespace, I/O error, bad archive)
  kExitUsage = 2,       // bad arguments
  kExitCannotOpen = 3,  // the store could not be opened (missing, not a store, busy, corrupt superblock)
  kExitRestart = 75,    // serve stopped for its supervisor to start it again (EX_TEMPFAIL: the index needs a reopen)
};

// A parsed subcommand and the code that runs it once parsing succeeded.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

// Arguments most subcommands share.
struct StoreArgs {
  std::string dir;
  bool json = false;
  // Only for subcommands that may create a store.
  std::string segment_size = "256M";
  std::string capacity;  // empty: the library default (8 GiB)
  RemoteTierOptions remote;  // the shared tier (kvtier share)
};

void AddDirArg(CLI::App* app, StoreArgs* a);
void AddJsonFlag(CLI::App* app, bool* json);
void AddCreateOptions(CLI::App* app, StoreArgs* a);

enum class OpenMode {
  kReadOnly,  // no lock, nothing written; works while another process holds the store
  kWrite,     // takes the lock; the store must exist
  kCreate,    // takes the lock; creates the store when the folder holds none
};

// Opens the store for subcommand `cmd`. On failure prints why (with the Busy
// hint for writing modes) and sets *exit_code to kExitCannotOpen (or
// kExitUsage for a bad --segment-size/--capacity) and returns null.
std::unique_ptr<Store> OpenStore(const std::string& cmd, const StoreArgs& a, OpenMode mode,
                                 int* exit_code);

// Prints "kvtier <cmd>: <msg>" to stderr and returns code.
int Fail(const std::string& cmd, int code, const std::string& msg);

// Resolves --ns (display name or 16 hex digits). Prints the error and returns
// false when there is no such namespace.
bool ResolveNamespace(const std::string& cmd, Store* store, const std::string& name, NamespaceId* id);

// Keys on the command line are hex (engine hashes are binary).
std::string ToHex(std::string_view bytes);
Status ParseHexKey(std::string_view hex, std::string* out);

// "1G", "512M", "64MiB", "4096", "1.5G" -> bytes (binary units).
Result<uint64_t> ParseSize(std::string_view text);
// 1536 -> "1.50 KiB".
std::string FormatBytes(uint64_t n);
std::string FormatRate(double bytes_per_second);
std::string FormatAge(uint64_t unix_ms);  // "3m12s ago"
std::string FormatTime(uint64_t unix_ms);  // ISO-8601 UTC
uint64_t NowUnixMs();

// Column-aligned text table. Columns listed in `right` are right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> headers, std::vector<size_t> right = {});
  void Add(std::vector<std::string> row);
  std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<size_t> right_;
  std::vector<std::vector<std::string>> rows_;
};

// A progress bar with rate and ETA on stderr, drawn only when stderr is a
// terminal (KVTIER_PROGRESS=always|never overrides). Not thread-safe: call
// Update from one thread at a time.
class Progress {
 public:
  // What Update counts: bytes (shown as sizes and a byte rate) or items
  // (plain counts and items per second).
  enum class Unit : uint8_t { kBytes, kItems };
  explicit Progress(std::string label, Unit unit = Unit::kBytes);
  ~Progress();
  void Update(uint64_t done, uint64_t total);
  void Finish();  // draws the final state and ends the line
  bool enabled() const { return enabled_; }

 private:
  void Draw(bool final);
  std::string label_;
  Unit unit_;
  bool enabled_ = false, finished_ = false;
  uint64_t done_ = 0, total_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// The store's namespaces with their block and byte counts, which walks the
// whole index: a progress bar ("counting blocks") while it does.
Result<std::vector<NamespaceInfo>> ListNamespacesCounted(Store& store);

// Prints a JSON document on stdout.
void PrintJson(const nlohmann::json& j);
nlohmann::json SpecToJson(const NamespaceSpec& spec);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_KVTIER_CLI_H_
