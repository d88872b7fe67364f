#include "capi/json_config.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

namespace kvtier::capi {

using nlohmann::json;

namespace {

Status TypeError(const std::string& key, const char* expected) {
  return Status::InvalidArgument("option '" + key + "' must be " + expected);
}

Status GetBool(const std::string& key, const json& v, bool* out) {
  if (!v.is_boolean()) return TypeError(key, "true or false");
  *out = v.get<bool>();
  return Status::OK();
}

template <typename T>
Status GetUnsigned(const std::string& key, const json& v, T* out) {
  uint64_t x = 0;
  if (v.is_number_unsigned()) {
    x = v.get<uint64_t>();
  } else if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    x = static_cast<uint64_t>(v.get<int64_t>());
  } else if (v.is_number_float() && v.get<double>() >= 0 && std::floor(v.get<double>()) == v.get<double>() &&
             v.get<double>() < 1.8e19) {
    x = static_cast<uint64_t>(v.get<double>());
  } else {
    return TypeError(key, "a non-negative integer");
  }
  if (x > std::numeric_limits<T>::max()) return TypeError(key, "a smaller integer");
  *out = static_cast<T>(x);
  return Status::OK();
}

// An integer of at least -1 (-1: the option's automatic choice).
Status GetAutoInt(const std::string& key, const json& v, int32_t* out) {
  if (!v.is_number_integer() || v.get<int64_t>() < -1 || v.get<int64_t>() > std::numeric_limits<int32_t>::max())
    return TypeError(key, "an integer of at least -1 (-1: automatic)");
  *out = static_cast<int32_t>(v.get<int64_t>());
  return Status::OK();
}

Status GetDouble(const std::string& key, const json& v, double* out) {
  if (!v.is_number()) return TypeError(key, "a number");
  *out = v.get<double>();
  return Status::OK();
}

Status GetString(const std::string& key, const json& v, std::string* out) {
  if (v.is_null()) {
    out->clear();
    return Status::OK();
  }
  if (!v.is_string()) return TypeError(key, "a string");
  *out = v.get<std::string>();
  return Status::OK();
}

}  // namespace

Result<json> ParseObject(std::string_view text, std::string_view what) {
  if (text.empty()) return json::object();
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument(std::string(what) + " is not valid JSON");
  if (!j.is_object()) return Status::InvalidArgument(std::string(what) + " must be a JSON object");
  return j;
}

static Status SetRemoteOption(RemoteTierOptions* r, const std::string& k, const json& v) {
  const std::string n = "remote." + k;  // as errors name it
  if (k == "enabled") return GetBool(n, v, &r->enabled);
  if (k == "ceph_conf") return GetString(n, v, &r->ceph_conf);
  if (k == "pool") return GetString(n, v, &r->pool);
  if (k == "client_id") return GetString(n, v, &r->client_id);
  if (k == "rados_namespace") return GetString(n, v, &r->rados_namespace);
  if (k == "budget_bytes") return GetUnsigned(n, v, &r->budget_bytes);
  if (k == "read_deadline_ms") return GetUnsigned(n, v, &r->read_deadline_ms);
  if (k == "poll_interval_ms") return GetUnsigned(n, v, &r->poll_interval_ms);
  if (k == "object_bytes") return GetUnsigned(n, v, &r->object_bytes);
  if (k == "upload_write_bytes") return GetUnsigned(n, v, &r->upload_write_bytes);
  if (k == "op_timeout_ms") return GetUnsigned(n, v, &r->op_timeout_ms);
  if (k == "admit_to_ram") return GetBool(n, v, &r->admit_to_ram);
  if (k == "orphan_sweep_interval_ms") return GetUnsigned(n, v, &r->orphan_sweep_interval_ms);
  if (k == "orphan_grace_ms") return GetUnsigned(n, v, &r->orphan_grace_ms);
  if (k == "close_upload_timeout_ms") return GetUnsigned(n, v, &r->close_upload_timeout_ms);
  return Status::NotFound("unknown option '" + n + "'");
}

static Status SetClientOption(ServiceClientOptions* c, const std::string& k, const json& v) {
  const std::string n = "client." + k;
  if (k == "staging_bytes") return GetUnsigned(n, v, &c->staging_bytes);
  if (k == "copy_threads") return GetUnsigned(n, v, &c->copy_threads);
  if (k == "read_lent_tier") return GetBool(n, v, &c->read_lent_tier);
  if (k == "service_reads_memory") return GetBool(n, v, &c->service_reads_memory);
  if (k == "op_timeout_ms") return GetUnsigned(n, v, &c->op_timeout_ms);
  if (k == "connect_timeout_ms") return GetUnsigned(n, v, &c->connect_timeout_ms);
  if (k == "reply_spin_us") return GetAutoInt(n, v, &c->reply_spin_us);
  if (k == "client_name") return GetString(n, v, &c->client_name);
  if (k == "serve_program") return GetString(n, v, &c->serve_program);
  if (k == "idle_exit_s") return GetUnsigned(n, v, &c->idle_exit_s);
  if (k == "serve_args") return GetString(n, v, &c->serve_args);
  return Status::NotFound("unknown option '" + n + "'");
}

// The "client" object: ServiceClientOptions by field name.
static Status ClientFromJson(const json& v, ServiceClientOptions* c) {
  if (!v.is_object()) return TypeError("client", "an object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    Status st = SetClientOption(c, it.key(), it.value());
    if (st.IsNotFound()) return Status::InvalidArgument(st.message());
    KVTIER_RETURN_IF_ERROR(st);
  }
  return Status::OK();
}

// The "remote" object: RemoteTierOptions by field name.
static Status RemoteFromJson(const json& v, RemoteTierOptions* r) {
  if (!v.is_object()) return TypeError("remote", "an object");
  for (auto it = v.begin(); it != v.end(); ++it) {
    Status st = SetRemoteOption(r, it.key(), it.value());
    if (st.IsNotFound()) return Status::InvalidArgument(st.message());
    KVTIER_RETURN_IF_ERROR(st);
  }
  return Status::OK();
}

Status SetOption(Options* o, const std::string& k, const json& v) {
  if (k == "create_if_missing") return GetBool(k, v, &o->create_if_missing);
  if (k == "error_if_exists") return GetBool(k, v, &o->error_if_exists);
  if (k == "read_only") return GetBool(k, v, &o->read_only);
  if (k == "group_access") return GetBool(k, v, &o->group_access);
  if (k == "segment_size_bytes") return GetUnsigned(k, v, &o->segment_size_bytes);
  if (k == "capacity_bytes") return GetUnsigned(k, v, &o->capacity_bytes);
  if (k == "reinsert_hot_blocks") return GetBool(k, v, &o->reinsert_hot_blocks);
  if (k == "reinsert_max_fraction") return GetDouble(k, v, &o->reinsert_max_fraction);
  if (k == "reinsert_min_hits") return GetUnsigned(k, v, &o->reinsert_min_hits);
  if (k == "hot_region_fraction") return GetDouble(k, v, &o->hot_region_fraction);
  if (k == "reclaim_window_fraction") return GetDouble(k, v, &o->reclaim_window_fraction);
  if (k == "punch_holes") return GetBool(k, v, &o->punch_holes);
  if (k == "write_budget_bytes_per_day") return GetUnsigned(k, v, &o->write_budget_bytes_per_day);
  if (k == "admit_on_second_put") return GetBool(k, v, &o->admit_on_second_put);
  if (k == "second_put_window") return GetUnsigned(k, v, &o->second_put_window);
  if (k == "use_direct_io") return GetBool(k, v, &o->use_direct_io);
  if (k == "queue_depth") return GetUnsigned(k, v, &o->queue_depth);
  if (k == "read_threads") return GetUnsigned(k, v, &o->read_threads);
  if (k == "read_on_caller_thread") return GetBool(k, v, &o->read_on_caller_thread);
  if (k == "max_write_chunk_bytes") return GetUnsigned(k, v, &o->max_write_chunk_bytes);
  if (k == "zero_copy_min_bytes") return GetUnsigned(k, v, &o->zero_copy_min_bytes);
  if (k == "dense_record_max_bytes") return GetUnsigned(k, v, &o->dense_record_max_bytes);
  if (k == "write_queue_bytes") return GetUnsigned(k, v, &o->write_queue_bytes);
  if (k == "group_commit_bytes") return GetUnsigned(k, v, &o->group_commit_bytes);
  if (k == "max_pending_reads") return GetUnsigned(k, v, &o->max_pending_reads);
  if (k == "max_payload_bytes") return GetUnsigned(k, v, &o->max_payload_bytes);
  if (k == "checkpoint_interval_bytes") return GetUnsigned(k, v, &o->checkpoint_interval_bytes);
  if (k == "ram_tier_bytes") return GetUnsigned(k, v, &o->ram_tier_bytes);
  if (k == "ram_tier_shared_memory") return GetBool(k, v, &o->ram_tier_shared_memory);
  if (k == "ram_tier_prefault") return GetBool(k, v, &o->ram_tier_prefault);
  if (k == "ram_tier_chunk_bytes") return GetUnsigned(k, v, &o->ram_tier_chunk_bytes);
  if (k == "verify_ram_hits") return GetBool(k, v, &o->verify_ram_hits);
  if (k == "ram_copy_threads") return GetUnsigned(k, v, &o->ram_copy_threads);
  if (k == "ram_streaming_copy_min_bytes") return GetUnsigned(k, v, &o->ram_streaming_copy_min_bytes);
  if (k == "ram_split_copy_min_bytes") return GetUnsigned(k, v, &o->ram_split_copy_min_bytes);
  if (k == "ram_copy_spin_us") return GetUnsigned(k, v, &o->ram_copy_spin_us);
  if (k == "zero_copy_small_pages") return GetBool(k, v, &o->zero_copy_small_pages);
  if (k == "remote") return RemoteFromJson(v, &o->remote);
  if (k == "client") return ClientFromJson(v, &o->client);
  if (k == "io_backend") {
    std::string b;
    KVTIER_RETURN_IF_ERROR(GetString(k, v, &b));
    if (b == "auto" || b.empty()) o->io_backend = IoBackend::kAuto;
    else if (b == "io_uring") o->io_backend = IoBackend::kIoUring;
    else if (b == "posix") o->io_backend = IoBackend::kPosix;
    else return TypeError(k, "\"auto\", \"io_uring\" or \"posix\"");
    return Status::OK();
  }
  return Status::NotFound("unknown option '" + k + "'");
}

Status OptionsFromJson(const json& obj, Options* o) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    Status st = SetOption(o, it.key(), it.value());
    if (st.IsNotFound()) return Status::InvalidArgument(st.message());
    KVTIER_RETURN_IF_ERROR(st);
  }
  return Status::OK();
}

Status SetSpecField(NamespaceSpec* s, const std::string& k, const json& v) {
  if (k == "name") return GetString(k, v, &s->name);
  if (k == "model_id") return GetString(k, v, &s->model_id);
  if (k == "model_revision") return GetString(k, v, &s->model_revision);
  if (k == "weights_fingerprint") return GetString(k, v, &s->weights_fingerprint);
  if (k == "tokenizer") return GetString(k, v, &s->tokenizer);
  if (k == "adapter") return GetString(k, v, &s->adapter);
  if (k == "dtype") return GetString(k, v, &s->dtype);
  if (k == "layout") return GetString(k, v, &s->layout);
  if (k == "block_tokens") return GetUnsigned(k, v, &s->block_tokens);
  if (k == "block_bytes") return GetUnsigned(k, v, &s->block_bytes);
  if (k == "tp_rank") return GetUnsigned(k, v, &s->tp_rank);
  if (k == "tp_size") return GetUnsigned(k, v, &s->tp_size);
  if (k == "hash_scheme") return GetString(k, v, &s->hash_scheme);
  if (k == "hash_seed") return GetUnsigned(k, v, &s->hash_seed);
  if (k == "tenant_salt") return GetString(k, v, &s->tenant_salt);
  return Status::NotFound("unknown namespace field '" + k + "'");
}

Status SpecFromJson(const json& obj, NamespaceSpec* spec) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    Status st = SetSpecField(spec, it.key(), it.value());
    if (st.IsNotFound()) return Status::InvalidArgument(st.message());
    KVTIER_RETURN_IF_ERROR(st);
  }
  return Status::OK();
}

std::string GpuStatsToJson(const gpu::TransferStats& s, int device) {
  json j = {{"device", device},
            {"method", gpu::CopyMethodName(s.method)},
            {"blocks_to_device", s.blocks_to_device},
            {"bytes_to_device", s.bytes_to_device},
            {"blocks_from_device", s.blocks_from_device},
            {"bytes_from_device", s.bytes_from_device},
            {"ram_hits", s.ram_hits},
            {"disk_reads", s.disk_reads},
            {"misses", s.misses},
            {"copies", s.copies},
            {"batch_calls", s.batch_calls},
            {"loop_calls", s.loop_calls},
            {"kernel_calls", s.kernel_calls},
            {"gpu_hashed_blocks", s.gpu_hashed_blocks},
            {"ram_hits_verified_on_device", s.ram_hits_verified_on_device},
            {"ram_hits_reloaded", s.ram_hits_reloaded},
            {"pointer_queries", s.pointer_queries},
            {"ram_tier_pinned", s.ram_tier_pinned},
            {"ram_tier_regions", s.ram_tier_regions},
            {"ram_tier_regions_pinned", s.ram_tier_regions_pinned},
            {"through_service", s.through_service},
            {"staging_shared_with_service", s.staging_shared_with_service},
            {"ram_tier_lent", s.ram_tier_lent},
            {"batch_api", s.batch_api},
            {"last_put_call_ms", s.last_put_call_ms},
            {"last_put_enqueue_ms", s.last_put_enqueue_ms},
            {"last_put_copy_ms", s.last_put_copy_ms},
            {"last_get_call_ms", s.last_get_call_ms},
            {"last_get_enqueue_ms", s.last_get_enqueue_ms},
            {"last_get_copy_ms", s.last_get_copy_ms},
            {"last_get_hash_tail_ms", s.last_get_hash_tail_ms}};
  return j.dump();
}

std::string StatsToJson(const Stats& s) {
  json j = {
      {"puts", s.puts},
      {"put_bytes", s.put_bytes},
      {"puts_not_admitted", s.puts_not_admitted},
      {"puts_failed", s.puts_failed},
      {"gets", s.gets},
      {"hits_ram", s.hits_ram},
      {"hits_disk", s.hits_disk},
      {"misses", s.misses},
      {"bytes_read_ram", s.bytes_read_ram},
      {"bytes_read_disk", s.bytes_read_disk},
      {"get_deadline_misses", s.get_deadline_misses},
      {"checksum_failures", s.checksum_failures},
      {"stale_entries_dropped", s.stale_entries_dropped},
      {"lookups", s.lookups},
      {"contains", s.contains},
      {"removes", s.removes},
      {"touches", s.touches},
      {"device_bytes_written", s.device_bytes_written},
      {"device_bytes_read", s.device_bytes_read},
      {"zero_copy_put_bytes", s.zero_copy_put_bytes},
      {"direct_read_bytes", s.direct_read_bytes},
      {"disk_reads_timed", s.disk_reads_timed},
      {"disk_read_queue_ns", s.disk_read_queue_ns},
      {"disk_read_index_ns", s.disk_read_index_ns},
      {"disk_read_device_ns", s.disk_read_device_ns},
      {"disk_read_finish_ns", s.disk_read_finish_ns},
      {"puts_timed", s.puts_timed},
      {"put_encode_ns", s.put_encode_ns},
      {"put_queue_ns", s.put_queue_ns},
      {"put_place_ns", s.put_place_ns},
      {"put_write_ns", s.put_write_ns},
      {"put_sync_ns", s.put_sync_ns},
      {"put_commit_ns", s.put_commit_ns},
      {"small_page_copies", s.small_page_copies},
      {"registered_writes", s.registered_writes},
      {"remote_connected", s.remote_connected},
      {"hits_remote", s.hits_remote},
      {"bytes_read_remote", s.bytes_read_remote},
      {"remote_misses", s.remote_misses},
      {"remote_deadline_misses", s.remote_deadline_misses},
      {"remote_checksum_failures", s.remote_checksum_failures},
      {"remote_uploads", s.remote_uploads},
      {"remote_upload_bytes", s.remote_upload_bytes},
      {"remote_upload_retries", s.remote_upload_retries},
      {"remote_uploads_skipped", s.remote_uploads_skipped},
      {"remote_admitted_to_ram", s.remote_admitted_to_ram},
      {"remote_orphans_removed", s.remote_orphans_removed},
      {"remote_segments_imported", s.remote_segments_imported},
      {"remote_objects_deleted", s.remote_objects_deleted},
      {"remote_uploads_deleted", s.remote_uploads_deleted},
      {"syncs", s.syncs},
      {"group_commits", s.group_commits},
      {"write_amplification", s.write_amplification},
      {"evictions", s.evictions},
      {"capacity_configured_bytes", s.capacity_configured_bytes},
      {"disk_full_events", s.disk_full_events},
      {"evicted_blocks", s.evicted_blocks},
      {"evicted_bytes", s.evicted_bytes},
      {"reinsertions", s.reinsertions},
      {"reinserted_bytes", s.reinserted_bytes},
      {"reinserted_from_ram", s.reinserted_from_ram},
      {"reclaims_not_oldest", s.reclaims_not_oldest},
      {"capacity_bytes", s.capacity_bytes},
      {"used_bytes", s.used_bytes},
      {"blocks_estimate", s.blocks_estimate},
      {"index_sst_bytes", s.index_sst_bytes},
      {"index_memtable_bytes", s.index_memtable_bytes},
      {"index_written_bytes", s.index_written_bytes},
      {"lookup_map_ready", s.lookup_map_ready},
      {"lookup_map_entries", s.lookup_map_entries},
      {"index_writes_refused", s.index_writes_refused},
      {"segments_total", s.segments_total},
      {"segments_sealed", s.segments_sealed},
      {"segments_hot", s.segments_hot},
      {"segments_free", s.segments_free},
      {"segment_entries_ignored", s.segment_entries_ignored},
      {"recovered_from_crash", s.recovered_from_crash},
      {"recovery_scanned_bytes", s.recovery_scanned_bytes},
      {"recovery_reindexed", s.recovery_reindexed},
      {"recovery_torn_bytes", s.recovery_torn_bytes},
      {"open_seconds", s.open_seconds},
      {"io_backend", s.io_backend},
      {"ram_capacity_bytes", s.ram_capacity_bytes},
      {"ram_used_bytes", s.ram_used_bytes},
      {"ram_payload_bytes", s.ram_payload_bytes},
      {"ram_prefaulted_bytes", s.ram_prefaulted_bytes},
      {"ram_blocks", s.ram_blocks},
      {"ram_evictions", s.ram_evictions},
      {"ram_evicted_bytes", s.ram_evicted_bytes},
      {"ram_adopted_blocks", s.ram_adopted_blocks},
      {"ram_adopt_dropped", s.ram_adopt_dropped},
      {"ram_checksum_failures", s.ram_checksum_failures},
      {"ram_shared_memory", s.ram_shared_memory},
  };
  // Non-finite doubles would be written as null; keep them numbers.
  if (!std::isfinite(s.write_amplification)) j["write_amplification"] = 0.0;
  return j.dump();
}

}  // namespace kvtier::capi
