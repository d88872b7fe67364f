#include "index/rocks_options.h"

#include <rocksdb/convenience.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>

#include <algorithm>

namespace kvtier {
namespace {

rocksdb::CompressionType ChooseCompression() {
  static const rocksdb::CompressionType kType = [] {
    const auto supported = rocksdb::GetSupportedCompressions();
    return std::find(supported.begin(), supported.end(), rocksdb::kLZ4Compression) !=
                   supported.end()
               ? rocksdb::kLZ4Compression
               : rocksdb::kNoCompression;
  }();
  return kType;
}

}  // namespace

rocksdb::DBOptions MakeDBOptions(const IndexOpenOptions& o) {
  rocksdb::DBOptions d;
  d.create_if_missing = o.create_if_missing && !o.read_only;
  d.create_missing_column_families = !o.read_only;
  d.max_background_jobs = 2;
  // Deletes obsolete files in the background instead of in the caller's Write.
  d.avoid_unnecessary_blocking_io = true;
  d.keep_log_file_num = 2;
  d.max_log_file_size = 8u << 20;
  // kvtier writes the index without RocksDB's WAL (index.h: the segments
  // are the log, and recovery re-indexes what a crash took from the
  // memtables). Without a WAL, only a flush that commits every column
  // family at one cut of the writes keeps entries, segment rows and the
  // checkpoint consistent with each other after a crash.
  d.atomic_flush = true;
  // A store written by an older kvtier may still have a WAL: DB::Open
  // replays it into memtables and by default writes them out as SST files
  // before it returns. Keep the replayed memtables (and the WAL behind them)
  // instead; they are flushed later like any other.
  d.avoid_flush_during_recovery = true;
  d.stats_dump_period_sec = 0;
  d.stats_persist_period_sec = 0;
  d.persist_stats_to_disk = false;
  return d;
}

// point_lookups: the default column family is read by Get/MultiGet, mostly
// for keys that may be absent, so it gets whole-key bloom filters (in the SST
// files and in the memtable) and hash-indexed data blocks. by_segment is only
// range-scanned, so filters would be memory spent for nothing.
rocksdb::ColumnFamilyOptions MakeCfOptions(const std::shared_ptr<rocksdb::Cache>& cache,
                                           bool point_lookups, uint64_t write_buffer_bytes) {
  rocksdb::ColumnFamilyOptions cf;
  cf.write_buffer_size = std::max<uint64_t>(write_buffer_bytes, 1u << 20);
  cf.compression = ChooseCompression();
  rocksdb::BlockBasedTableOptions t;
  t.block_cache = cache;
  if (point_lookups) {
    t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
    t.whole_key_filtering = true;
    t.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
    // The in-block hash index finds a key's restart interval; the key is then
    // found by decoding the interval's keys one by one. Random 32-byte keys
    // share little beyond 'K'+ns, so short intervals cost little space, and
    // MultiGet in bench/index_bench.cc ran 5-30% faster than with 16.
    t.block_restart_interval = 4;
    cf.memtable_whole_key_filtering = true;
    cf.memtable_prefix_bloom_size_ratio = 0.02;
  }
  cf.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return cf;
}

}  // namespace kvtier
