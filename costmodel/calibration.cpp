#include "costmodel/calibration.hpp"

#include <fmt/format.h>

#include "costmodel/bounds.hpp"
#include "costmodel/json_reader.hpp"

namespace osdp::costmodel {
namespace {

std::vector<Segment> read_segments(JsonReader& parent, std::string_view key) {
  std::vector<Segment> out;
  if (!parent.has(key)) {
    parent.raw(key);
    return out;
  }
  auto items = parent.objects(key);
  for (std::size_t i = 0; i < items.size(); ++i) {
    JsonReader& s = items[i];
    Segment seg{};
    const bool last = i + 1 == items.size();
    seg.up_to_bytes = last ? s.quantity_or("up_to", UnitKind::kBytes, 1.0, kInf, kInf)
                           : s.quantity("up_to", UnitKind::kBytes, 1.0, kInf);
    if (!out.empty() && seg.up_to_bytes <= out.back().up_to_bytes)
      s.fail("up_to", "segments must be sorted by increasing \"up_to\"");
    seg.alpha_s = s.quantity("alpha", UnitKind::kSeconds, bounds::kLatency);
    seg.beta_s_per_byte = 1.0 / s.quantity("bandwidth", UnitKind::kBytesPerSecond, bounds::kLinkBandwidth);
    seg.residual = s.number_or("residual_rms", 0.0, 10.0, 0.0);  // the fit's; prices the intervals
    s.finish();
    out.push_back(seg);
  }
  out.back().up_to_bytes = kInf;
  return out;
}

nlohmann::json segments_json(const std::vector<Segment>& segs) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& s : segs) {
    nlohmann::json j{{"alpha", s.alpha_s}, {"bandwidth", 1.0 / s.beta_s_per_byte}};
    if (s.up_to_bytes != kInf) j["up_to"] = s.up_to_bytes;
    j["residual_rms"] = s.residual;
    a.push_back(j);
  }
  return a;
}

}  // namespace

namespace {

// The segments of collective c in anything with allgather, reducescatter, allreduce and alltoall members.
template <typename Holder>
auto& segments_of(Holder& h, Collective c) {
  switch (c) {
    case Collective::kAllGather:
      return h.allgather;
    case Collective::kReduceScatter:
      return h.reducescatter;
    case Collective::kAllReduce:
      return h.allreduce;
    case Collective::kAllToAll:
      return h.alltoall;
  }
  return h.allgather;
}

}  // namespace

const std::vector<Segment>& Calibration::segments(Collective c) const {
  return segments_of(*this, c);
}

std::vector<Segment>& Calibration::segments(Collective c) {
  return segments_of(*this, c);
}

const std::vector<Segment>& LevelSegments::segments(Collective c) const {
  return segments_of(*this, c);
}

std::vector<Segment>& LevelSegments::segments(Collective c) {
  return segments_of(*this, c);
}

Calibration read_calibration(const nlohmann::json& doc, const std::string& file, const ComputeSpec& base,
                             const std::string& pointer) {
  JsonReader r(doc, file, pointer);
  r.expect_kind(FileKind::kCalibration);
  r.expect_schema_version(1);
  Calibration cal;
  cal.name = r.name("name");
  if (const auto* p = r.raw("provenance")) {
    if (!p->is_object()) r.fail("provenance", "expected an object (host, date, backend, versions, ...)");
    cal.provenance = *p;
  }
  if (auto c = r.object_if("collectives")) {
    for (const CollectiveKind& k : kCollectives) cal.segments(k.kind) = read_segments(*c, k.key);
    c->finish();
  }
  if (auto l = r.object_if("levels")) {
    cal.per_node = static_cast<int>(l->integer("per_node", 1, 1 << 20));
    for (auto [key, level] : {std::pair{"intra", &cal.intra}, std::pair{"inter", &cal.inter}})
      if (auto c = l->object_if(key)) {
        for (const CollectiveKind& k : kCollectives) level->segments(k.kind) = read_segments(*c, k.key);
        c->finish();
      }
    l->finish();
  }
  if (auto c = r.object_if("compute")) {
    cal.compute = read_compute_fields(*c, base);
    c->finish();
  }
  if (auto o = r.object_if("overlap")) {
    cal.interference = o->number("interference", 1.0, 100.0);
    o->finish();
  }
  if (r.has("gemm_times")) {
    for (auto& g : r.objects("gemm_times")) {
      GemmTime t;
      t.m = g.integer("m", 1, std::int64_t{1} << 40);
      t.n = g.integer("n", 1, std::int64_t{1} << 40);
      t.k = g.integer("k", 1, std::int64_t{1} << 40);
      t.count = g.integer_or("count", 1, std::int64_t{1} << 40, 1);
      t.seconds = g.quantity("time", UnitKind::kSeconds, 0.0, 3600.0);
      g.finish();
      cal.gemm_times.push_back(t);
    }
  }
  r.finish();
  return cal;
}

nlohmann::json to_json(const Calibration& cal) {
  nlohmann::json j;
  j["schema_version"] = 1;
  j["name"] = cal.name;
  j["provenance"] = cal.provenance;
  nlohmann::json c = nlohmann::json::object();
  for (const CollectiveKind& k : kCollectives)
    if (!cal.segments(k.kind).empty()) c[k.key] = segments_json(cal.segments(k.kind));
  j["collectives"] = c;
  if (cal.per_node > 0) {
    nlohmann::json levels{{"per_node", cal.per_node}};
    for (auto [key, level] : {std::pair{"intra", &cal.intra}, std::pair{"inter", &cal.inter}}) {
      nlohmann::json l = nlohmann::json::object();
      for (const CollectiveKind& k : kCollectives)
        if (!level->segments(k.kind).empty()) l[k.key] = segments_json(level->segments(k.kind));
      if (!l.empty()) levels[key] = l;
    }
    j["levels"] = levels;
  }
  if (cal.compute) j["compute"] = compute_json(*cal.compute);
  if (cal.interference) j["overlap"] = {{"interference", *cal.interference}};
  if (!cal.gemm_times.empty()) {
    nlohmann::json g = nlohmann::json::array();
    for (const auto& t : cal.gemm_times)
      g.push_back({{"m", t.m}, {"n", t.n}, {"k", t.k}, {"count", t.count}, {"time", t.seconds}});
    j["gemm_times"] = g;
  }
  return j;
}

}  // namespace osdp::costmodel
