#include "store/block_sink.h"

namespace kvtier {

// Every Store made by Store::Open is also a BlockSink (StoreImpl).
BlockSink* BlockSinkOf(Store* store) { return dynamic_cast<BlockSink*>(store); }

}  // namespace kvtier
