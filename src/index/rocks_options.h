// The RocksDB options of the block index: one place for what the store asks
// of RocksDB (background jobs, WAL handling, compression, filters, block
// cache), with the reasons beside each choice.
#ifndef KVTIER_SRC_INDEX_ROCKS_OPTIONS_H_
#define KVTIER_SRC_INDEX_ROCKS_OPTIONS_H_

#include <rocksdb/cache.h>
#include <rocksdb/options.h>

#include <cstdint>
#include <memory>

#include "index/index.h"

namespace kvtier {

rocksdb::DBOptions MakeDBOptions(const IndexOpenOptions& o);
// point_lookups: a column family read by Get/MultiGet (filters, hash index)
// rather than only range-scanned.
rocksdb::ColumnFamilyOptions MakeCfOptions(const std::shared_ptr<rocksdb::Cache>& cache, bool point_lookups,
                                           uint64_t write_buffer_bytes);

}  // namespace kvtier

#endif  // KVTIER_SRC_INDEX_ROCKS_OPTIONS_H_
