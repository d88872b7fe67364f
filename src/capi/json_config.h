// JSON forms of Options, NamespaceSpec and Stats, shared by the C ABI and
// the LMCache connector. Parsing never throws: bad input is an
// InvalidArgument naming the key and what was expected.
#ifndef KVTIER_CAPI_JSON_CONFIG_H_
#define KVTIER_CAPI_JSON_CONFIG_H_

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "kvtier/cuda.h"
#include "kvtier/namespace.h"
#include "kvtier/options.h"
#include "kvtier/status.h"
#include "kvtier/store.h"

namespace kvtier::capi {

// Parses text as a JSON object (empty text = {}).
Result<nlohmann::json> ParseObject(std::string_view text, std::string_view what);

// Sets one Options field from `value`. NotFound when `key` names no field
// (so callers can try other tables), InvalidArgument for a wrong type.
Status SetOption(Options* o, const std::string& key, const nlohmann::json& value);
// Every key must name an Options field.
Status OptionsFromJson(const nlohmann::json& obj, Options* o);

// Same shape for NamespaceSpec fields (names as in kvtier/namespace.h).
Status SetSpecField(NamespaceSpec* spec, const std::string& key, const nlohmann::json& value);
Status SpecFromJson(const nlohmann::json& obj, NamespaceSpec* spec);

std::string StatsToJson(const Stats& s);
// The GPU path's counters, with the device it serves.
std::string GpuStatsToJson(const gpu::TransferStats& s, int device);

}  // namespace kvtier::capi

#endif  // KVTIER_CAPI_JSON_CONFIG_H_
