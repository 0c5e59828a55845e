// Built-in descriptions under data/ (models/, clusters/, calibrations/), found through
// $OSDP_DATA_DIR, else the source tree's data/ the build came from, else the installed share/osdp.
// A name with a '/' or ending in ".json" is a path to a file instead.
#pragma once

#include <string>
#include <vector>

#include "costmodel/calibration.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/model.hpp"

namespace osdp::costmodel {

std::string data_dir();

struct CatalogEntry {
  std::string name;
  std::string path;
};
// Sorted by name. kind: "models", "clusters" or "calibrations".
std::vector<CatalogEntry> list_catalog(const std::string& kind);

// Resolves NAME|FILE to a file path (throws InputError listing the known names).
std::string resolve(const std::string& kind, const std::string& name_or_path);

ModelSpec load_model(const std::string& name_or_path);
ClusterSpec load_cluster(const std::string& name_or_path);
Calibration load_calibration(const std::string& name_or_path, const ComputeSpec& base);

}  // namespace osdp::costmodel
