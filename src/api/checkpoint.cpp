// checkpoint.h over dist/shard_checkpoint.h (one process, no communicator).
#include "leantune/checkpoint.h"

#include "api/guard.h"
#include "dist/shard_checkpoint.h"

namespace leantune {

std::string export_sharded_checkpoint(const std::string& checkpoint, const std::string& out_dir) {
  return detail::guard([&] { return lt::export_sharded_checkpoint(checkpoint, out_dir); });
}

std::string consolidate_sharded_checkpoint(const std::string& checkpoint, const std::string& out_dir) {
  return detail::guard([&] {
    const std::string dir = lt::find_sharded_checkpoint(checkpoint);
    lt::consolidate_checkpoint(dir, out_dir);
    return dir;
  });
}

}  // namespace leantune
