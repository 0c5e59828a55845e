#include "costmodel/cluster.hpp"

#include <fmt/format.h>

#include "costmodel/error.hpp"
#include "costmodel/json_reader.hpp"

namespace osdp::costmodel {
namespace {

LinkSpec read_link(JsonReader r) {
  LinkSpec l;
  l.alpha_s = r.quantity("alpha", UnitKind::kSeconds, bounds::kLatency);
  l.bandwidth_bytes_per_s = r.quantity("bandwidth", UnitKind::kBytesPerSecond, bounds::kLinkBandwidth);
  r.finish();
  return l;
}

nlohmann::json link_json(const LinkSpec& l) {
  return {{"alpha", l.alpha_s}, {"bandwidth", l.bandwidth_bytes_per_s}};
}

}  // namespace

ComputeSpec read_compute_fields(JsonReader& r, const ComputeSpec& base) {
  ComputeSpec c = base;
  c.fp32_flops_per_s =
      r.quantity_or("fp32_flops", UnitKind::kFlopsPerSecond, bounds::kFlopRate, c.fp32_flops_per_s);
  c.bf16_flops_per_s =
      r.quantity_or("bf16_flops", UnitKind::kFlopsPerSecond, bounds::kFlopRate, c.bf16_flops_per_s);
  c.gemm_efficiency = r.number_or("gemm_efficiency", bounds::kGemmEfficiency, c.gemm_efficiency);
  c.gemm_half_efficiency_dim = r.number_or("gemm_half_efficiency_dim", 0.0, 1e9, c.gemm_half_efficiency_dim);
  c.memory_bandwidth_bytes_per_s = r.quantity_or("memory_bandwidth", UnitKind::kBytesPerSecond,
                                                 bounds::kMemoryBandwidth, c.memory_bandwidth_bytes_per_s);
  c.kernel_overhead_s =
      r.quantity_or("kernel_overhead", UnitKind::kSeconds, bounds::kKernelOverhead, c.kernel_overhead_s);
  c.optimizer_bandwidth_bytes_per_s =
      r.quantity_or("optimizer_bandwidth", UnitKind::kBytesPerSecond, bounds::kMemoryBandwidth,
                    c.optimizer_bandwidth_bytes_per_s);
  c.accumulate_bandwidth_bytes_per_s =
      r.quantity_or("accumulate_bandwidth", UnitKind::kBytesPerSecond, bounds::kMemoryBandwidth,
                    c.accumulate_bandwidth_bytes_per_s);
  c.replicate_overhead_s = r.quantity_or("replicate_overhead", UnitKind::kSeconds, bounds::kReplicateOverhead,
                                         c.replicate_overhead_s);
  c.replicate_bandwidth_bytes_per_s =
      r.quantity_or("replicate_bandwidth", UnitKind::kBytesPerSecond, bounds::kMemoryBandwidth,
                    c.replicate_bandwidth_bytes_per_s);
  return c;
}

nlohmann::json compute_json(const ComputeSpec& c) {
  nlohmann::json j = {{"fp32_flops", c.fp32_flops_per_s},
                      {"bf16_flops", c.bf16_flops_per_s},
                      {"gemm_efficiency", c.gemm_efficiency},
                      {"gemm_half_efficiency_dim", c.gemm_half_efficiency_dim},
                      {"memory_bandwidth", c.memory_bandwidth_bytes_per_s},
                      {"kernel_overhead", c.kernel_overhead_s}};
  if (c.optimizer_bandwidth_bytes_per_s > 0) j["optimizer_bandwidth"] = c.optimizer_bandwidth_bytes_per_s;
  if (c.accumulate_bandwidth_bytes_per_s > 0) j["accumulate_bandwidth"] = c.accumulate_bandwidth_bytes_per_s;
  if (c.replicate_bandwidth_bytes_per_s > 0) {
    j["replicate_overhead"] = c.replicate_overhead_s;
    j["replicate_bandwidth"] = c.replicate_bandwidth_bytes_per_s;
  }
  return j;
}

ClusterSpec read_cluster(const nlohmann::json& doc, const std::string& file, const std::string& pointer) {
  JsonReader r(doc, file, pointer);
  r.expect_kind(FileKind::kCluster);
  r.expect_schema_version(1);
  ClusterSpec c;
  c.name = r.name("name");
  c.description = r.string_or("description", "");
  c.source = r.string_or("source", "");
  c.nodes = static_cast<int>(r.integer("nodes", 1, 1 << 20));
  c.devices_per_node = static_cast<int>(r.integer("devices_per_node", 1, 1 << 16));
  if (static_cast<std::int64_t>(c.nodes) * c.devices_per_node > (std::int64_t{1} << 24))
    r.fail("devices_per_node", fmt::format("{} nodes x {} devices is more than the {} ranks osdp models",
                                           c.nodes, c.devices_per_node, std::int64_t{1} << 24));
  {
    JsonReader d = r.object("device");
    c.device_name = d.name("name");
    c.memory_bytes = d.quantity("memory", UnitKind::kBytes, bounds::kDeviceMemory);
    c.reserve_bytes = d.quantity_or("reserve", UnitKind::kBytes, 0.0, c.memory_bytes, 0.0);
    c.compute = read_compute_fields(d, ComputeSpec{});
    d.finish();
  }
  {
    JsonReader links = r.object("links");
    c.intra = read_link(links.object("intra"));
    if (auto inter = links.object_if("inter")) c.inter = read_link(*inter);
    if (c.nodes > 1 && !c.inter) links.fail("inter", "required when \"nodes\" > 1 (the link between nodes)");
    links.finish();
  }
  if (auto o = r.object_if("overlap")) {
    c.overlap.enabled = o->boolean_or("enabled", true);
    c.overlap.interference = o->number_or("interference", 1.0, 100.0, 1.0);
    o->finish();
  }
  c.calibration = r.string_or("calibration", "");
  r.finish();
  return c;
}

nlohmann::json to_json(const ClusterSpec& c) {
  nlohmann::json j;
  j["schema_version"] = 1;
  j["name"] = c.name;
  if (!c.description.empty()) j["description"] = c.description;
  if (!c.source.empty()) j["source"] = c.source;
  j["nodes"] = c.nodes;
  j["devices_per_node"] = c.devices_per_node;
  nlohmann::json d = compute_json(c.compute);
  d["name"] = c.device_name;
  d["memory"] = c.memory_bytes;
  d["reserve"] = c.reserve_bytes;
  j["device"] = d;
  j["links"] = {{"intra", link_json(c.intra)}};
  if (c.inter) j["links"]["inter"] = link_json(*c.inter);
  j["overlap"] = {{"enabled", c.overlap.enabled}, {"interference", c.overlap.interference}};
  if (!c.calibration.empty()) j["calibration"] = c.calibration;
  return j;
}

ClusterSpec resized(ClusterSpec c, int world_size) {
  if (world_size <= 0 || world_size == c.world_size()) return c;
  if (c.inter) {
    if (world_size % c.devices_per_node != 0)
      throw UsageError(fmt::format("world size {} is not a whole number of {}-device nodes of cluster \"{}\"",
                                   world_size, c.devices_per_node, c.name));
    c.nodes = world_size / c.devices_per_node;
  } else {
    c.nodes = 1;
    c.devices_per_node = world_size;
  }
  c.name = fmt::format("{}@{}", c.name, world_size);
  return c;
}

}  // namespace osdp::costmodel
