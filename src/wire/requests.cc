#include "wire/requests.h"

#include "format/record.h"

namespace kvtier::wire {

void Encode(WireWriter& w, const HelloRequest& r) {
  w.Bytes(r.client_name);
  w.U64(r.staging_bytes);
  w.U64(r.probe_address);
  w.Bytes(r.probe);
}
void Encode(WireWriter& w, const RegisterRegionRequest& r) { w.U64(r.bytes); }
void Encode(WireWriter& w, const RegionRequest& r) { w.U32(r.region); }
void Encode(WireWriter& w, const SpecRequest& r) { w.Bytes(r.spec.Encode()); }
void Encode(WireWriter& w, const NameRequest& r) { w.Bytes(r.name); }
void Encode(WireWriter& w, const NamespaceRequest& r) { w.U64(r.ns); }
void Encode(WireWriter& w, const PutRequest& r) {
  w.U64(r.ns);
  w.Bytes(r.key);
  w.U8(r.blocking ? 1 : 0);
  w.I64(r.start_by_ns);
  w.Fragments(r.payload);
}
void Encode(WireWriter& w, const GetRequest& r) {
  w.U64(r.ns);
  w.Bytes(r.key);
  w.I64(r.deadline_ns);
  w.I64(r.start_by_ns);
  w.Fragments(r.out);
}
void Encode(WireWriter& w, const GetBatchRequest& r) {
  w.U64(r.ns);
  w.I64(r.deadline_ns);
  w.U32(static_cast<uint32_t>(r.items.size()));
  for (const GetBatchRequest::Item& it : r.items) {
    w.Bytes(it.key);
    w.Fragments(it.out);
  }
}
void Encode(WireWriter& w, const KeyRequest& r) {
  w.U64(r.ns);
  w.Bytes(r.key);
}
void Encode(WireWriter& w, const LookupRequest& r) {
  w.U64(r.ns);
  w.U32(static_cast<uint32_t>(r.keys.size()));
  for (const std::string& k : r.keys) w.Bytes(k);
}
void Encode(WireWriter& w, const ListBlocksRequest& r) {
  w.U64(r.ns);
  w.Bytes(r.prefix);
  w.Bool(r.has_after);
  w.U64(r.after_ns);
  w.Bytes(r.after);
  w.U32(r.max);
}
void Encode(WireWriter& w, const U64Request& r) { w.U64(r.value); }
void Encode(WireWriter& w, const VerifyRequest& r) { w.Bool(r.deep); }
void Encode(WireWriter& w, const ListNamespacesRequest& r) { w.Bool(r.counts); }

namespace {
// A key of 1..kMaxKeyBytes bytes.
std::string Key(WireReader& r) {
  std::string k = r.String(format::kMaxKeyBytes);
  if (k.empty()) r.Fail();
  return k;
}
}  // namespace

Status Parse(std::string_view body, HelloRequest* out) {
  WireReader r(body);
  out->client_name = r.String(kMaxClientName);
  out->staging_bytes = r.U64();
  out->probe_address = r.U64();
  out->probe = r.String(kMaxProbeBytes);
  return r.Finish("hello");
}
Status Parse(std::string_view body, RegisterRegionRequest* out) {
  WireReader r(body);
  out->bytes = r.U64();
  return r.Finish("register_region");
}
Status Parse(std::string_view body, RegionRequest* out) {
  WireReader r(body);
  out->region = r.U32();
  return r.Finish("unregister_region");
}
Status Parse(std::string_view body, SpecRequest* out) {
  WireReader r(body);
  const std::string_view bytes = r.Bytes(kMaxSpecBytes);
  KVTIER_RETURN_IF_ERROR(r.Finish("register_namespace"));
  auto spec = NamespaceSpec::Decode(bytes);
  if (!spec.ok()) return Status::InvalidArgument("malformed register_namespace message: " + spec.status().message());
  KVTIER_RETURN_IF_ERROR(spec->Validate());
  out->spec = std::move(spec).value();
  return Status::OK();
}
Status Parse(std::string_view body, NameRequest* out) {
  WireReader r(body);
  out->name = r.String(kMaxNameBytes);
  return r.Finish("find_namespace");
}
Status Parse(std::string_view body, NamespaceRequest* out) {
  WireReader r(body);
  out->ns = r.U64();
  return r.Finish("remove_namespace");
}
Status Parse(std::string_view body, PutRequest* out) {
  WireReader r(body);
  out->ns = r.U64();
  out->key = Key(r);
  const uint8_t flags = r.U8();
  if (flags > 1) r.Fail();
  out->blocking = flags == 1;
  out->start_by_ns = r.I64();
  if (out->start_by_ns < -1) r.Fail();
  out->payload = r.Fragments();
  if (out->payload.empty()) r.Fail();
  return r.Finish("put");
}
Status Parse(std::string_view body, GetRequest* out) {
  WireReader r(body);
  out->ns = r.U64();
  out->key = Key(r);
  out->deadline_ns = r.I64();
  if (out->deadline_ns < -1) r.Fail();
  out->start_by_ns = r.I64();
  if (out->start_by_ns < -1) r.Fail();
  out->out = r.Fragments();
  if (out->out.empty()) r.Fail();
  return r.Finish("get");
}
Status Parse(std::string_view body, GetBatchRequest* out) {
  WireReader r(body);
  out->ns = r.U64();
  out->deadline_ns = r.I64();
  if (out->deadline_ns < -1) r.Fail();
  // An item is at least a 1-byte key and one fragment.
  const uint32_t n = r.Count(kMaxBatchGets, 4 + 1 + 4 + 4 + 8 + 8);
  if (n == 0) r.Fail();
  out->items.clear();
  out->items.reserve(n);
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    GetBatchRequest::Item it;
    it.key = Key(r);
    it.out = r.Fragments();
    if (it.out.empty()) r.Fail();
    out->items.push_back(std::move(it));
  }
  return r.Finish("get_batch");
}
Status Parse(std::string_view body, KeyRequest* out) {
  WireReader r(body);
  out->ns = r.U64();
  out->key = Key(r);
  return r.Finish("keyed request");
}
Status Parse(std::string_view body, LookupRequest* out) {
  WireReader r(body);
  out->ns = r.U64();
  const uint32_t n = r.Count(kMaxBatchKeys, 4);
  out->keys.clear();
  out->keys.reserve(n);
  for (uint32_t i = 0; i < n && r.ok(); ++i) out->keys.push_back(Key(r));
  return r.Finish("key list");
}
Status Parse(std::string_view body, ListBlocksRequest* out) {
  WireReader r(body);
  out->ns = r.U64();
  out->prefix = r.String(format::kMaxKeyBytes);
  out->has_after = r.Bool();
  out->after_ns = r.U64();
  out->after = r.String(format::kMaxKeyBytes);
  out->max = r.U32();
  if (out->max == 0 || out->max > kMaxListPage) r.Fail();
  return r.Finish("list_blocks");
}
Status Parse(std::string_view body, U64Request* out) {
  WireReader r(body);
  out->value = r.U64();
  return r.Finish("request");
}
Status Parse(std::string_view body, VerifyRequest* out) {
  WireReader r(body);
  out->deep = r.Bool();
  return r.Finish("verify");
}
Status Parse(std::string_view body, ListNamespacesRequest* out) {
  WireReader r(body);
  out->counts = r.Bool();
  return r.Finish("list_namespaces");
}
Status ParseEmpty(std::string_view body, const char* what) {
  WireReader r(body);
  return r.Finish(what);
}

}  // namespace kvtier::wire
