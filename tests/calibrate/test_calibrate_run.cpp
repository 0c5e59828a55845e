// Tests of the calibration sweeps and their assembly (validate/calibrate.hpp) without MPI: the sweeps
// run on the real CPU device with a stand-in communicator (two ranks' collectives done by one
// process), and the fits and the file are checked on synthetic measurements. No test here depends on
// the times measured: only on what was measured, how it is recorded, and the fitted numbers of
// synthetic points (derived as in test_calibration_fit.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "../costmodel/cost_fixtures.hpp"

#include "costmodel/calibration.hpp"
#include "costmodel/catalog.hpp"
#include "costmodel/cost_model.hpp"
#include "validate/calibrate/calibrate.hpp"
#include "validate/cpu/cpu_device.hpp"

using osdp::costmodel::Collective;
using namespace osdp::validate;
using namespace osdp;

namespace {

// Two ranks holding the same data: all-gather copies the shard into both halves, reduce-scatter sums
// the two halves, all-reduce doubles. Host-side reductions see two equal values.
class TwinCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "twin"; }
  std::string version() const override { return "test"; }
  void all_gather(Stream&, const float* shard, float* full, std::size_t e, const std::string&) override {
    std::memcpy(full, shard, e * sizeof(float));
    std::memcpy(full + e, shard, e * sizeof(float));
    ++collectives;
    all_gathers.push_back(e);
  }
  void reduce_scatter(Stream&, const float* full, float* shard, std::size_t e, const std::string&) override {
    for (std::size_t i = 0; i < e; ++i) shard[i] = full[i] + full[e + i];
    ++collectives;
  }
  void all_reduce(Stream&, float* buf, std::size_t e, const std::string&) override {
    for (std::size_t i = 0; i < e; ++i) buf[i] *= 2;
    ++collectives;
  }
  // Both ranks send the same parts: what rank 1 sends to rank 0 is its part for rank 0, this rank's.
  void all_to_all(Stream&, const float* send, const std::vector<std::size_t>& sc, float* recv,
                  const std::vector<std::size_t>& rc, const std::string& what) override {
    check_all_to_all_counts(*this, sc, rc, what);
    std::memcpy(recv, send, rc[0] * sizeof(float));
    std::memcpy(recv + rc[0], send, rc[1] * sizeof(float));
    ++collectives;
  }
  void barrier(const std::string&) override {}
  double max_over_ranks(double x) override { return x; }
  double sum_over_ranks(double x) override { return 2 * x; }
  std::vector<double> all_values(double x) override { return {x, x}; }
  int collectives = 0;
  std::vector<std::size_t> all_gathers;  // elements per rank of each all-gather, in call order
};

CalibrateOptions small_options() {
  CalibrateOptions o = quick_options();
  o.name = "twin";
  o.max_bytes = 64 * 1024;                // 1 KiB .. 64 KiB: 7 sizes per collective
  o.elementwise_max_bytes = 1024 * 1024;  // 64 KiB .. 1 MiB: 5 sizes
  o.gemm_shapes = {{32, 32, 32, 1, "square"},
                   {64, 64, 64, 1, "square"},
                   {128, 128, 128, 1, "square"},
                   {64, 64, 16, 4, "batched", true}};  // also timed adding into C
  o.overlap_shapes = {{64, 64, 64, 1, "square"}};
  o.overlap_bytes = 64 * 1024;
  return o;
}

}  // namespace

TEST_CASE("run_calibration measures every point once, in order, and frees its memory", "[calibrate][run]") {
  CpuDevice device;
  TwinCommunicator comm;
  std::vector<CalibrationProgress> seen;
  const costmodel::CalibrationRun run = run_calibration(
      device, comm, small_options(), [&](const CalibrationProgress& p) { seen.push_back(p); });

  // 4 x 7 collective sizes + 5 touches + 5 Adam sizes + 4 GEMMs + 1 adding into C + 1 overlap shape.
  REQUIRE(run.measurements.size() == 44);
  std::vector<CalibrationProgress> points, passes;
  for (const auto& p : seen) (p.pass == 0 ? points : passes).push_back(p);
  REQUIRE(points.size() == 44);
  for (std::size_t i = 0; i < points.size(); ++i) {
    CHECK(points[i].index == static_cast<int>(i) + 1);
    CHECK(points[i].total == 44);
    CHECK(points[i].sweep == run.measurements[i].sweep);
  }
  // Each of the 8 interleaved sweeps (four collectives, elementwise, Adam, GEMM, adding into C) reports the
  // end of every pass but its last (quick options: 3 repetitions, so passes 1 and 2 of 3), before any of its
  // points.
  const int reps = small_options().repeats;
  REQUIRE(reps == 3);
  REQUIRE(passes.size() == static_cast<std::size_t>(8 * (reps - 1)));
  for (std::size_t i = 0; i < passes.size(); ++i) {
    const int pass = static_cast<int>(i) % (reps - 1) + 1;
    CHECK(passes[i].pass == pass);
    CHECK(passes[i].label.find(fmt::format("pass {} of {}", pass, reps)) == 0);
    CHECK(passes[i].seconds > 0);
  }
  CHECK(passes[0].sweep == "all-gather");
  CHECK(passes[0].index == 0);
  std::vector<double> ag;
  for (const auto& m : run.measurements) {
    CHECK(m.seconds > 0);
    CHECK(m.min_s <= m.seconds);
    CHECK(m.seconds <= m.max_s);
    CHECK(m.repeats >= 1);
    CHECK(m.batch >= 1);
    if (m.sweep == "all-gather") ag.push_back(m.bytes);
    if (m.sweep == "adam") CHECK(std::fmod(m.bytes, 28.0) == 0.0);        // whole parameters of 28 B
    if (m.sweep == "elementwise") CHECK(std::fmod(m.bytes, 8.0) == 0.0);  // whole elements of 8 B
  }
  CHECK(ag == std::vector<double>{1024, 2048, 4096, 8192, 16384, 32768, 65536});
  CHECK(run.measurements.back().sweep == "overlap");
  const auto& added = run.measurements[run.measurements.size() - 2];
  CHECK(added.sweep == "gemm-accumulate");
  CHECK((added.m == 64 && added.n == 64 && added.k == 16 && added.count == 4));
  CHECK(run.accumulate.points == 1);
  CHECK(run.calibration.compute->accumulate_bandwidth_bytes_per_s > 0);
  CHECK(run.measurements.back().with_comm_s > 0);
  CHECK(comm.collectives > 0);
  CHECK(device.memory().current_bytes == 0);
  CHECK(device.memory().allocations == 0);

  // Fitted and recorded.
  CHECK(run.world == 2);
  for (std::size_t c = 0; c < 3; ++c) CHECK_FALSE(run.collectives[c].empty());
  REQUIRE(run.calibration.compute.has_value());
  CHECK(run.calibration.compute->fp32_flops_per_s > 0);
  REQUIRE(run.interference.has_value());
  CHECK(*run.interference >= 1.0);
  const auto& p = run.calibration.provenance;
  CHECK(p.at("world_size") == 2);
  CHECK(p.at("backend") == "twin");
  CHECK(p.at("backend_version") == "test");
  CHECK(p.at("options").at("max_bytes") == 65536.0);
  for (const char* k : {"host", "date", "machine", "device", "compiler", "eigen", "fit"})
    CHECK(p.contains(k));
  CHECK(p.at("gemm_operands").at("values").get<std::string>().find("uniform in [-1, 1)") !=
        std::string::npos);
  CHECK(run.calibration.name == "twin");
}

TEST_CASE("the timed GEMMs' operands: uniform in [-1, 1), as a step's data, not constants", "[calibrate]") {
  const std::size_t n = std::size_t{1} << 16;
  const std::vector<float> a = operand_pattern(n, 1), again = operand_pattern(n, 1),
                           b = operand_pattern(n, 2);
  REQUIRE(a.size() == n);
  CHECK(a == again);  // deterministic
  CHECK(a != b);      // A and B differ
  double sum = 0, sq = 0;
  for (const float v : a) {
    REQUIRE(v >= -1.0f);
    REQUIRE(v < 1.0f);
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  // Uniform on [-1, 1): mean 0 and variance 1/3; the sample mean's sigma is sqrt(1/3 / n) = 0.00226,
  // the sample variance's sqrt((1/5 - 1/9) / n) = 0.00116. Bounds at about 4.5 sigma.
  CHECK(std::abs(sum / n) < 0.01);
  CHECK(std::abs(sq / n - 1.0 / 3.0) < 0.005);
  // 24 random bits per value: nearly all distinct (n^2 / 2^25 = 128 collisions expected).
  CHECK(std::set<float>(a.begin(), a.end()).size() > n - 400);
  CHECK(operand_pattern(kPatternFloats + 7, 1).size() == kPatternFloats + 7);
}

TEST_CASE("a sweep's points are timed in passes, not one point's repetitions back to back",
          "[calibrate][run]") {
  // Interleaving is what spreads a slow spell of the machine over every point: after the first
  // pass, the smallest all-gather (1 KiB: 128 floats per rank of 2) is timed again after the
  // largest (64 KiB: 8192 floats). Back to back, every call of a size would come before the next
  // size's first.
  CpuDevice device;
  TwinCommunicator comm;
  run_calibration(device, comm, small_options());
  const std::vector<std::size_t>& e = comm.all_gathers;
  const auto largest = std::find(e.begin(), e.end(), std::size_t{8192});
  REQUIRE(largest != e.end());
  CHECK(std::find(largest, e.end(), std::size_t{128}) != e.end());
}

TEST_CASE("without a separate comm stream there is no overlap sweep", "[calibrate][run]") {
  CpuDeviceOptions one;
  one.comm_thread = false;
  CpuDevice device(one);
  TwinCommunicator comm;
  const costmodel::CalibrationRun run = run_calibration(device, comm, small_options());
  CHECK(run.measurements.size() == 43);
  CHECK_FALSE(run.interference.has_value());
  CHECK_FALSE(run.calibration.interference.has_value());
}

namespace {

// Measurements of a machine with known coefficients, as run_calibration records them:
// collectives on 2 ranks from 1 KiB to 256 MiB, alpha 5 us and 2 GB/s up to 64 KiB, then 40 us and
// 4 GB/s; touches with overhead 2 us at 20 GB/s; Adam at 10 GB/s; GEMMs at 80 GFLOP/s, d_half 24;
// GEMMs 1.5x slower beside all-gathers; those from 256 up also timed adding into C, 4 d^2 B at 5 GB/s
// more.
std::vector<costmodel::Measurement> synthetic_measurements() {
  std::vector<costmodel::Measurement> ms;
  auto add = [&](const char* sweep, double bytes, double t) {
    costmodel::Measurement m;
    m.sweep = sweep;
    m.bytes = bytes;
    m.seconds = m.min_s = m.max_s = t;
    m.repeats = m.batch = 1;
    ms.push_back(m);
  };
  for (const char* c : {"all-gather", "reduce-scatter", "all-reduce", "all-to-all"}) {
    const double a = std::string(c) == "all-reduce" ? 2 : 1;
    for (double s = 1024; s <= 268435456; s *= 2)
      add(c, s, s <= 65536 ? a * (5e-6 + s / 2 / 2e9) : a * (40e-6 + s / 2 / 4e9));
  }
  for (double b = 65536; b <= 268435456; b *= 2) add("elementwise", b, 2e-6 + b / 20e9);
  for (double b = 65536; b <= 268435456; b *= 2) add("adam", b, 2e-6 + b / 10e9);
  for (const std::int64_t d : {64, 128, 256, 512, 1024}) {
    costmodel::Measurement m;
    m.sweep = "gemm";
    m.m = m.n = m.k = d;
    m.count = 1;
    const double dd = static_cast<double>(d);
    m.seconds = 2e-6 + 2 * dd * dd * dd / (80e9 * dd / (dd + 24));
    ms.push_back(m);
    if (d >= 256) {  // adding into C: 4 d^2 B more at 5 GB/s
      costmodel::Measurement a = m;
      a.sweep = "gemm-accumulate";
      a.seconds = a.min_s = a.max_s = m.seconds + 4 * dd * dd / 5e9;
      ms.push_back(a);
    }
    if (d == 256) {
      m.sweep = "overlap";
      m.with_comm_s = 1.5 * m.seconds;
      ms.push_back(m);
    }
  }
  return ms;
}

}  // namespace

TEST_CASE("costmodel::fit_measurements recovers the coefficients into the calibration", "[calibrate][fit]") {
  costmodel::CalibrationRun run;
  run.world = 2;
  run.measurements = synthetic_measurements();
  CalibrateOptions o;
  o.name = "synthetic";
  costmodel::fit_measurements(run, o.name, o.segments);
  const auto& cal = run.calibration;
  CHECK(cal.name == "synthetic");
  for (const auto* segs : {&cal.allgather, &cal.reducescatter, &cal.allreduce, &cal.alltoall}) {
    REQUIRE(segs->size() == 2);
    CHECK((*segs)[0].up_to_bytes == 65536.0);
    CHECK((*segs)[0].alpha_s == Approx(5e-6).epsilon(1e-9));
    CHECK((*segs)[0].beta_s_per_byte == Approx(1 / 2e9).epsilon(1e-9));
    CHECK((*segs)[1].up_to_bytes == std::numeric_limits<double>::infinity());
    CHECK((*segs)[1].alpha_s == Approx(40e-6).epsilon(1e-9));
    CHECK((*segs)[1].beta_s_per_byte == Approx(1 / 4e9).epsilon(1e-9));
  }
  REQUIRE(cal.compute.has_value());
  CHECK(cal.compute->kernel_overhead_s == Approx(2e-6).epsilon(1e-9));
  CHECK(cal.compute->memory_bandwidth_bytes_per_s == Approx(20e9).epsilon(1e-9));
  CHECK(cal.compute->fp32_flops_per_s == Approx(80e9).epsilon(1e-9));
  CHECK(cal.compute->bf16_flops_per_s == cal.compute->fp32_flops_per_s);
  CHECK(cal.compute->gemm_efficiency == 1.0);
  CHECK(cal.compute->gemm_half_efficiency_dim == Approx(24).epsilon(1e-9));
  CHECK(run.adam.bandwidth_bytes_per_s == Approx(10e9).epsilon(1e-9));
  CHECK(run.accumulate.points == 3);
  CHECK(cal.compute->accumulate_bandwidth_bytes_per_s == Approx(5e9).epsilon(1e-9));
  CHECK(cal.provenance.at("fit").at("accumulate").at("points") == 3);
  REQUIRE(cal.interference.has_value());
  CHECK(*cal.interference == Approx(1.5));
  CHECK(cal.provenance.at("fit").at("allgather").size() == 2);

  // The file reads back as the same calibration, with each segment's residual beside it.
  const nlohmann::json doc = costmodel::to_json(run.calibration);
  CHECK(doc.at("collectives").at("allreduce").at(1).contains("residual_rms"));
  const osdp::costmodel::Calibration back = osdp::costmodel::read_calibration(doc, "synthetic.json", {});
  REQUIRE(back.allreduce.size() == 2);
  REQUIRE(back.alltoall.size() == 2);
  CHECK(back.alltoall[1].alpha_s == Approx(40e-6).epsilon(1e-9));
  CHECK(back.allreduce[0].up_to_bytes == 65536.0);
  CHECK(back.allreduce[1].alpha_s == Approx(40e-6).epsilon(1e-9));
  CHECK(back.compute->fp32_flops_per_s == Approx(80e9).epsilon(1e-9));
  CHECK(back.compute->accumulate_bandwidth_bytes_per_s == Approx(5e9).epsilon(1e-9));
  CHECK(back.interference == cal.interference);

  const std::string csv = costmodel::measurements_csv(run);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == static_cast<long>(run.measurements.size()) + 1);
  CHECK(csv.rfind("sweep,bytes,m,n,k,count,seconds", 0) == 0);
  // Each repetition's time, in the order timed, space-separated in the last column.
  CHECK(csv.find(",with_comm_s,times_s\n") != std::string::npos);
  costmodel::CalibrationRun timed;
  timed.measurements.push_back(run.measurements.front());
  timed.measurements[0].times_s = {0.00125, 0.001, 0.0015};
  const std::string one = costmodel::measurements_csv(timed);
  CHECK(one.substr(one.size() - std::string(",0.00125 0.001 0.0015\n").size()) == ",0.00125 0.001 0.0015\n");
}

// A job of 8 ranks in nodes of 4: besides the world sweeps, each collective on the rings within a node
// (4 ranks: alpha 2 us, 50 GB/s) and across nodes (2 ranks: alpha 30 us, 1 GB/s), timed by the ring
// formula at the ring's own size. The fit recovers each level's pair only when it uses that size (the
// world's 8 would give other figures), and the file carries them in its "levels" block.
TEST_CASE("costmodel::fit_measurements fits the rings within a node and across nodes",
          "[calibrate][fit][groups]") {
  costmodel::CalibrationRun run;
  run.world = 8;
  run.per_node = 4;
  for (const auto& m : synthetic_measurements())
    if (!costmodel::collective_from_string(m.sweep)) run.measurements.push_back(m);
  struct Truth {
    costmodel::RingLevel level;
    int ranks;
    double alpha, bandwidth;
  };
  for (const Truth t : {Truth{costmodel::RingLevel::kIntra, 4, 2e-6, 50e9},
                        Truth{costmodel::RingLevel::kInter, 2, 30e-6, 1e9}})
    for (const auto& kind : costmodel::kCollectives)
      for (double bytes = 4096; bytes <= 64.0 * 1024 * 1024; bytes *= 4) {
        costmodel::Measurement m;
        m.sweep = costmodel::level_sweep(kind, t.level);
        m.bytes = bytes;
        m.seconds = costmodel::collective_model_s(kind.kind, t.ranks, t.alpha, 1 / t.bandwidth, bytes);
        run.measurements.push_back(m);
      }
  costmodel::fit_measurements(run, "levels");
  const auto& cal = run.calibration;
  CHECK(cal.allgather.empty());  // no world sweep was given
  CHECK(cal.per_node == 4);
  for (const auto& [level, alpha, bandwidth] :
       {std::tuple{&cal.intra, 2e-6, 50e9}, std::tuple{&cal.inter, 30e-6, 1e9}})
    for (const auto& kind : costmodel::kCollectives) {
      const auto& segs = level->segments(kind.kind);
      REQUIRE(segs.size() == 1);
      CHECK(segs[0].alpha_s == Approx(alpha).epsilon(1e-9));
      CHECK(segs[0].beta_s_per_byte == Approx(1 / bandwidth).epsilon(1e-9));
    }
  const nlohmann::json doc = costmodel::to_json(run.calibration);
  CHECK(doc.at("levels").at("per_node") == 4);
  CHECK(doc.at("levels").at("inter").at("allreduce").at(0).contains("residual_rms"));
  const auto back = osdp::costmodel::read_calibration(doc, "levels.json", {});
  REQUIRE(back.inter.allreduce.size() == 1);
  CHECK(back.inter.allreduce[0].alpha_s == Approx(30e-6).epsilon(1e-9));
  CHECK(cal.provenance.at("fit").at("levels").at("intra").size() == 4);
}

// The torch backend's "replicate-copies" points (a REPLICATE module's step beyond its unsharded twin's
// and its in-place gradient reduction): 0.8 ms + S at 6 GB/s from 64 KiB to 256 MiB. The fit puts them
// in the compute block, the file keeps them, and a cost model built on the file prices a REPLICATE
// operator of 1 MiB of weights at that line; a calibration without those points (MPI, NCCL) prices
// nothing.
TEST_CASE("costmodel::fit_measurements fits a REPLICATE module's runtime copies", "[calibrate][fit]") {
  costmodel::CalibrationRun run;
  run.world = 2;
  run.measurements = synthetic_measurements();
  for (double s = 65536; s <= 268435456; s *= 2) {
    costmodel::Measurement m;
    m.sweep = costmodel::kReplicateSweep;
    m.bytes = s;
    m.seconds = m.min_s = m.max_s = 0.8e-3 + s / 6e9;
    m.repeats = m.batch = 1;
    run.measurements.push_back(m);
  }
  costmodel::fit_measurements(run, "fsdp2");
  CHECK(run.replicate.points == 13);
  CHECK(run.replicate.residual_rms < 1e-9);
  REQUIRE(run.calibration.compute.has_value());
  CHECK(run.calibration.compute->replicate_overhead_s == Approx(0.8e-3).epsilon(1e-9));
  CHECK(run.calibration.compute->replicate_bandwidth_bytes_per_s == Approx(6e9).epsilon(1e-9));
  CHECK(run.calibration.provenance.at("fit").at("replicate").at("points") == 13);
  const nlohmann::json doc = costmodel::to_json(run.calibration);
  CHECK(doc.at("compute").at("replicate_overhead") == run.calibration.compute->replicate_overhead_s);
  const costmodel::Calibration back = costmodel::read_calibration(doc, "fsdp2.json", {});
  const costmodel::CostModel priced(costmodel::cost_fixtures::synthetic_cluster(), &back,
                                    costmodel::Precision::kFp32, costmodel::CostOptions{});
  CHECK(priced.replicate_s(1048576.0) == Approx(0.8e-3 + 1048576.0 / 6e9).epsilon(1e-9));

  costmodel::CalibrationRun mpi;
  mpi.world = 2;
  mpi.measurements = synthetic_measurements();
  costmodel::fit_measurements(mpi, "mpi");
  CHECK(mpi.replicate.points == 0);
  CHECK_FALSE(costmodel::to_json(mpi.calibration).at("compute").contains("replicate_overhead"));
  const costmodel::Calibration plain =
      costmodel::read_calibration(costmodel::to_json(mpi.calibration), "m.json", {});
  CHECK(costmodel::CostModel(costmodel::cost_fixtures::synthetic_cluster(), &plain,
                             costmodel::Precision::kFp32, costmodel::CostOptions{})
            .replicate_s(1048576.0) == 0.0);
}

TEST_CASE("a segment whose time does not grow with size is written as 1 PB/s", "[calibrate][fit]") {
  costmodel::CalibrationRun run;
  run.world = 2;
  for (auto& m : synthetic_measurements())
    if (m.sweep != "all-gather") run.measurements.push_back(m);
  for (double s = 1024; s <= 8192; s *= 2) {
    costmodel::Measurement m;
    m.sweep = "all-gather";
    m.bytes = s;
    m.seconds = 3e-6;
    run.measurements.push_back(m);
  }
  costmodel::fit_measurements(run, "flat");
  REQUIRE(run.collectives[0].size() == 1);
  CHECK(run.collectives[0][0].alpha_s == Approx(3e-6).epsilon(1e-9));
  CHECK(run.calibration.allgather[0].beta_s_per_byte >= 1e-15);
  const auto back = osdp::costmodel::read_calibration(costmodel::to_json(run.calibration), "flat.json", {});
  CHECK(1 / back.allgather[0].beta_s_per_byte <= 1e15 * (1 + 1e-12));
}

TEST_CASE("the GEMM shapes of a model's IR, distinct and capped", "[calibrate]") {
  const auto model = osdp::costmodel::load_model("nd-48x1024");
  const auto shapes = model_gemm_shapes({model}, {1, 2}, 8e9);
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>> seen;
  bool qkv = false;
  for (const auto& s : shapes) {
    CHECK(s.flops() <= 8e9);
    CHECK(seen.insert({s.m, s.n, s.k, s.count}).second);
    // The QKV projection at batch 1: [seq x hidden] x [hidden x 3 hidden], 6.4 GFLOP.
    if (s.m == 1024 && s.n == 3072 && s.k == 1024 && s.count == 1) qkv = true;
  }
  CHECK(qkv);
  // Timed adding into C: the MLP's second GEMM cut in two along its 4096 ffn columns (a partial sum,
  // [1024 x 1024 x 2048] at batch 1), not a whole GEMM (the QKV projection) nor a slice cut along n
  // (the MLP's first GEMM's half, [1024 x 2048 x 1024]).
  const auto accumulates = [&](std::int64_t m, std::int64_t n, std::int64_t k) {
    for (const auto& s : shapes)
      if (s.m == m && s.n == n && s.k == k && s.count == 1) return s.accumulates ? 1 : 0;
    return -1;
  };
  CHECK(accumulates(1024, 1024, 2048) == 1);
  CHECK(accumulates(1024, 3072, 1024) == 0);
  CHECK(accumulates(1024, 2048, 1024) == 0);
  // The LM head [1024 x 50257 x 1024] (105 GFLOP) is left out.
  for (const auto& s : shapes) CHECK(s.n != 50257);
  CHECK_FALSE(shapes.empty());
  CHECK(generic_gemm_shapes(true).size() < generic_gemm_shapes(false).size());
}

TEST_CASE("a fitted bandwidth under the file's 1 MB/s limit is an error, not an unreadable file",
          "[calibrate][fit]") {
  // All-gather at 2 ranks moves (N-1)/N S = S/2 per rank in the ring's one step, so adding S/2 x
  // 1e-5 s per byte to every time gives beta = 1e-5 s/B on top of the fast link: under 100 kB/s.
  costmodel::CalibrationRun run;
  run.world = 2;
  for (auto& m : synthetic_measurements()) {
    if (m.sweep == "all-gather") m.seconds += 0.5 * m.bytes * 1e-5;
    run.measurements.push_back(m);
  }
  CHECK_THROWS_WITH(costmodel::fit_measurements(run, "noisy"), Catch::Contains("all-gather") &&
                                                                   Catch::Contains("bandwidth") &&
                                                                   Catch::Contains("1 MB/s"));
}

TEST_CASE("a fitted alpha above the file's 1 s limit is an error, not an unreadable file",
          "[calibrate][fit]") {
  costmodel::CalibrationRun run;
  run.world = 2;
  for (auto& m : synthetic_measurements()) {
    if (m.sweep == "all-gather") m.seconds += 2.0;  // t = 2 s + ... : alpha ~ 2 s on 2 ranks
    run.measurements.push_back(m);
  }
  CHECK_THROWS_WITH(costmodel::fit_measurements(run, "slow"),
                    Catch::Contains("alpha") && Catch::Contains("1 s"));
}
