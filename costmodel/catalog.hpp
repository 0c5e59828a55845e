// Named descriptions under data directories (models/, clusters/, calibrations/). A name is looked up
// along a search path: each directory of $OSDP_DATA_DIR (colon-separated, like PATH; empty entries
// ignored), then the built-in data directory (the source tree's data/ the build came from, else the
// installed share/osdp). The first file NAME.json found wins, so $OSDP_DATA_DIR adds names and shadows
// built-ins of the same name; a directory named twice is searched once.
// A name with a '/' or ending in ".json" is a path to a file instead.
#pragma once

#include <string>
#include <vector>

#include "costmodel/calibration.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/model.hpp"

namespace osdp::costmodel {

// The built-in data directory alone.
std::string builtin_data_dir();
// The search path, first wins: $OSDP_DATA_DIR's directories, then the built-in one (no repeats).
std::vector<std::string> data_dirs();
// The search path as one string, joined by ':' (for messages and result records).
std::string data_dir();

struct CatalogEntry {
  std::string name;
  std::string path;
  std::string dir;                   // the data directory it was found in (one of data_dirs())
  bool builtin = false;              // dir is the built-in data directory
  std::vector<std::string> shadows;  // files of the same name later in the search path, hidden by it
};
// The union over the search path, one entry per name, sorted by name. kind: "models", "clusters" or
// "calibrations". Files are listed, not read: a file that does not parse is still an entry.
std::vector<CatalogEntry> list_catalog(const std::string& kind);

// Resolves NAME|FILE to a file path (throws InputError listing the known names).
std::string resolve(const std::string& kind, const std::string& name_or_path);

ModelSpec load_model(const std::string& name_or_path);
ClusterSpec load_cluster(const std::string& name_or_path);
Calibration load_calibration(const std::string& name_or_path, const ComputeSpec& base);

}  // namespace osdp::costmodel
