// The calibration sweeps on a backend (see calibrate.hpp for the measurement habit); the fits and the
// file are in calibration_fit.cpp.
//
// What each sweep times, and what the cost model prices it with:
//   collectives: each of costmodel::kCollectives (all_gather / reduce_scatter / all_reduce /
//     all_to_all) of a full buffer S (S/N per rank; an all-to-all's S/N for each rank) on the comm
//     stream; collective_s, t = A (N-1) alpha + A (N-1)/N S beta (costmodel/collective.hpp).
//   elementwise: Device::touch of S/8 floats (read and write each: 8 bytes moved per element, as the
//     executor spends an IR elementwise kernel of S bytes); kernel_s, t = overhead + S / bandwidth.
//   adam: Device::adam on n parameters; optimizer_s prices 2 (w + o) + g = 28 B per fp32 parameter,
//     which is what the kernel moves (reads w, g, m, v; writes w, m, v: 7 floats). Fitted like the
//     elementwise sweep and reported beside it; the calibration keeps the elementwise bandwidth.
//   gemm: Device::gemm [m x k] x [k x n] x count; kernel_s, t = overhead + flops / (peak d/(d + d_half)).
//   gemm-accumulate: the shapes a split's partial sums run (GemmShape::accumulates), C += A B; against
//     the same shape's gemm point, what adding into C costs: CostModel::accumulate_s, bytes(C) / bandwidth.
//   overlap: GEMMs alone, then with all-gathers of overlap_bytes running on the comm stream for the
//     whole batch; interference = median of with / alone.
#include "validate/calibrate/calibrate.hpp"
#include "validate/calibrate/sweeper.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <Eigen/Core>

#include "costmodel/provenance.hpp"
#include "costmodel/units.hpp"
#include "costmodel/workload.hpp"

namespace osdp::validate {
namespace {

using costmodel::Collective;

// Device memory for the duration of a scope.
class Buffer {
 public:
  Buffer(Device& d, std::size_t elems, std::string_view what)
      : d_(d), elems_(std::max<std::size_t>(elems, 1)), p_(d.allocate(elems_ * sizeof(float), what)) {}
  ~Buffer() { d_.deallocate(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* get() const { return p_; }
  // Fills on the compute stream and waits (allocations come uninitialised; denormals would be slow).
  void fill(float v) {
    Stream& s = d_.compute_stream();
    s.enqueue([this, &s, v] { d_.fill(s, p_, elems_, v); });
    s.synchronize();
  }
  // Fills with operand_pattern(seed) repeated: GEMMs are timed on values like a step's, not on
  // constants. (On an H200 a bf16 GEMM ran 13% faster on zeros than on random data, and on one H200
  // the GEMM-bound tasks of a step took 4-10% longer than the calibration's timed shapes on constants;
  // data/results/gpu/h200-1gpu-2026-11-29.)
  void fill_pattern(std::uint64_t seed) {
    const std::vector<float> pattern = operand_pattern(std::min<std::size_t>(elems_, kPatternFloats), seed);
    Stream& s = d_.compute_stream();
    s.enqueue([this, &s, &pattern] {
      for (std::size_t at = 0; at < elems_; at += pattern.size())
        d_.upload(s, pattern.data(), p_ + at, std::min(pattern.size(), elems_ - at));
    });
    s.synchronize();
  }

 private:
  Device& d_;
  std::size_t elems_;
  float* p_;
};

// Sizes from lo to hi, `steps` per doubling, rounded to a multiple of `quantum`, distinct.
std::vector<double> sizes(double lo, double hi, int steps, double quantum) {
  std::vector<double> out;
  steps = std::max(1, steps);
  for (int i = 0;; ++i) {
    const double s = lo * std::pow(2.0, static_cast<double>(i) / steps);
    if (s > hi * (1 + 1e-12)) break;
    const double q = std::max(quantum, std::round(s / quantum) * quantum);
    if (out.empty() || q > out.back()) out.push_back(q);
  }
  return out;
}

std::vector<double> collective_sizes(const CalibrateOptions& o, int world) {
  return sizes(o.min_bytes, o.max_bytes, o.steps_per_doubling, 4.0 * world);
}
std::vector<double> kernel_sizes(const CalibrateOptions& o, double quantum) {
  return sizes(o.elementwise_min_bytes, o.elementwise_max_bytes, o.steps_per_doubling, quantum);
}

// Operations of a timed batch each work on fresh memory, as in a training step (whose operands were
// last touched long before, or just written by other kernels), not on the same cache-resident
// buffer: successive calls rotate over this many disjoint slots of at least kColdBytes in all.
constexpr double kColdBytes = 64.0 * 1024 * 1024;
std::size_t cold_slots(double bytes_per_op, std::size_t capacity_elems, std::size_t elems_per_op) {
  const auto want = static_cast<std::size_t>(std::ceil(kColdBytes / std::max(bytes_per_op, 1.0)));
  const std::size_t fit = elems_per_op == 0 ? 1 : capacity_elems / elems_per_op;
  return std::max<std::size_t>(1, std::min(want, fit));
}

// One collective of `e` floats per rank: all-gather shard -> full, reduce-scatter full -> shard,
// all-reduce of full (N e floats) in place, all-to-all of full (e floats for each rank) into `other`.
void run_collective(Communicator& comm, Stream& s, Collective c, float* shard, float* full, float* other,
                    std::size_t e, const std::string& what) {
  switch (c) {
    case Collective::kAllToAll: {
      const std::vector<std::size_t> counts(static_cast<std::size_t>(comm.size()), e);
      comm.all_to_all(s, full, counts, other, counts, what);
      return;
    }
    case Collective::kAllGather:
      comm.all_gather(s, shard, full, e, what);
      return;
    case Collective::kReduceScatter:
      comm.reduce_scatter(s, full, shard, e, what);
      return;
    case Collective::kAllReduce:
      comm.all_reduce(s, full, e * static_cast<std::size_t>(comm.size()), what);
      return;
  }
}

// One point per size, timed in passes (Sweeper::points), each recorded with its size; `call(bytes,
// k)` makes the k-th call of a size (calls rotate over cold copies by k).
void sized_sweep(Sweeper& sw, Stream& s, const std::string& sweep, const std::vector<double>& sizes,
                 std::vector<costmodel::Measurement>& out,
                 const std::function<void(double bytes, std::size_t k)>& call) {
  std::vector<std::size_t> calls(sizes.size(), 0);
  std::vector<Sweeper::Op> ops;
  for (std::size_t i = 0; i < sizes.size(); ++i) ops.emplace_back([&, i] { call(sizes[i], calls[i]++); });
  std::vector<costmodel::Measurement> ms =
      sw.points(s, ops, sweep, [&](std::size_t i) { return costmodel::format_bytes(sizes[i]); });
  for (std::size_t i = 0; i < ms.size(); ++i) {
    ms[i].bytes = sizes[i];
    out.push_back(ms[i]);
  }
}

// Every collective over `comm` (the job's communicator, or one ring of it: every rank sweeps its
// own ring at once; the times are the max over the job), each sweep named costmodel::level_sweep.
void sweep_collectives(Sweeper& sw, Communicator& comm, costmodel::RingLevel level,
                       std::vector<costmodel::Measurement>& out) {
  Device& dev = sw.dev_;
  const int n = comm.size();
  const std::vector<double> all = collective_sizes(sw.o_, n);
  const auto max_elems = static_cast<std::size_t>(all.back() / 4);
  Buffer full(dev, max_elems, "calibrate: full buffer"), shard(dev, max_elems / n, "calibrate: shard");
  Buffer other(dev, max_elems, "calibrate: all-to-all receive buffer");
  full.fill(0.0f);  // zeros: repeated all-reduces stay finite
  other.fill(0.0f);
  shard.fill(0.0f);
  Stream& s = dev.comm_stream();
  // Untimed: the transport's first messages set up connections and buffers.
  s.enqueue([&] {
    for (int i = 0; i < 20; ++i) {
      comm.all_gather(s, shard.get(), full.get(), 1, "calibrate warm-up all-gather");
      comm.reduce_scatter(s, full.get(), shard.get(), 1, "calibrate warm-up reduce-scatter");
      comm.all_reduce(s, full.get(), static_cast<std::size_t>(n), "calibrate warm-up all-reduce");
    }
  });
  s.synchronize();
  for (const costmodel::CollectiveKind& kind : costmodel::kCollectives) {
    const Collective c = kind.kind;
    const std::string sweep = costmodel::level_sweep(kind, level);
    const std::string what = fmt::format("calibrate {}", sweep);
    sized_sweep(sw, s, sweep, all, out, [&](double bytes, std::size_t call) {
      const auto e = static_cast<std::size_t>(bytes / 4 / n);
      const std::size_t k = call % cold_slots(bytes, max_elems / n, e);
      run_collective(comm, s, c, shard.get() + k * e, full.get() + k * e * n, other.get() + k * e * n, e,
                     what);
    });
  }
}

// The bytes that timed kernels rotate their operands over where a step leaves them cold (Adam's
// moments, every GEMM's operands): twice the device's last-level cache (CpuDevice: /sys's largest
// data cache; CudaDevice: the L2), at least kColdBytes where the device does not say.
double cold_pool_bytes(const Device& dev) {
  return std::max(kColdBytes, 2.0 * static_cast<double>(dev.cache_bytes()));
}

void sweep_kernels(Sweeper& sw, std::vector<costmodel::Measurement>& out) {
  Device& dev = sw.dev_;
  Stream& s = dev.compute_stream();
  const std::vector<double> touch = kernel_sizes(sw.o_, 8.0);
  {
    Buffer y(dev, static_cast<std::size_t>(touch.back() / 8), "calibrate: elementwise");
    y.fill(1.0f);
    const auto capacity = static_cast<std::size_t>(touch.back() / 8);
    sized_sweep(sw, s, "elementwise", touch, out, [&](double bytes, std::size_t call) {
      const auto n = static_cast<std::size_t>(bytes / 8);
      dev.touch(s, y.get() + call % cold_slots(bytes / 2, capacity, n) * n, n);
    });
  }
  // Adam's moments were last touched a whole step earlier, with the rest of the step's data passing
  // through the cache since: its calls rotate over a pool of at least twice the device's largest
  // cache (kColdBytes where the device does not say), not one that cache holds. (On a CPU with a
  // 480 MiB L3, Adam over a 64 MiB pool ran at 26-38 GB/s, over 256 MiB or more at 14-16 GB/s, and
  // in a training step at 15-16 GB/s.)
  const std::vector<double> adam = kernel_sizes(sw.o_, costmodel::kAdamBytesPerParam);
  const auto max_n = static_cast<std::size_t>(adam.back() / costmodel::kAdamBytesPerParam);
  const double cold = cold_pool_bytes(dev);
  const std::size_t pool_n =
      std::max(max_n, static_cast<std::size_t>(std::ceil(cold / (4.0 * sizeof(float)))));
  Buffer w(dev, pool_n, "calibrate: adam w"), g(dev, pool_n, "calibrate: adam g"),
      m1(dev, pool_n, "calibrate: adam m"), v(dev, pool_n, "calibrate: adam v");
  w.fill(0.1f);
  g.fill(0.01f);
  m1.fill(0.0f);
  v.fill(0.0f);
  sized_sweep(sw, s, "adam", adam, out, [&](double bytes, std::size_t call) {
    const auto n = static_cast<std::size_t>(bytes / costmodel::kAdamBytesPerParam);
    const std::size_t o = call % std::max<std::size_t>(1, pool_n / std::max<std::size_t>(n, 1)) * n;
    dev.adam(s, w.get() + o, g.get() + o, m1.get() + o, v.get() + o, n, AdamParams{});
  });
}

// The call of one GEMM shape over `copies` sets of operands laid one after another from a, b and c
// (next() moves the call to the following set: cold operands).
struct GemmCall {
  std::size_t copies, sa, sb, sc, at = 0;
  float *a, *b, *c;
  Gemm g;
  GemmCall(const GemmShape& sh, GemmMath math, std::size_t n_copies)
      : copies(n_copies),
        sa(static_cast<std::size_t>(sh.count * sh.m * sh.k)),
        sb(static_cast<std::size_t>(sh.count * sh.k * sh.n)),
        sc(static_cast<std::size_t>(sh.count * sh.m * sh.n)) {
    g.math = math;
    g.m = sh.m, g.n = sh.n, g.k = sh.k, g.lda = sh.k, g.ldb = sh.n, g.ldc = sh.n;
    g.batch = sh.count, g.stride_a = sh.m * sh.k, g.stride_b = sh.k * sh.n, g.stride_c = sh.m * sh.n;
  }
  // Elements of A, B and C that the copies take.
  std::size_t elems_a() const { return copies * sa; }
  std::size_t elems_b() const { return copies * sb; }
  std::size_t elems_c() const { return copies * sc; }
  void place(float* pa, float* pb, float* pc) { a = pa, b = pb, c = pc, at = 0, g.a = a, g.b = b, g.c = c; }
  const Gemm& next() {
    at = (at + 1) % copies;
    g.a = a + at * sa, g.b = b + at * sb, g.c = c + at * sc;
    return g;
  }
};

// Operand memory that every call of a sweep draws from, as large as the largest needs, filled.
struct GemmPool {
  Buffer a, b, c;
  GemmPool(Device& d, const std::vector<GemmCall>& calls)
      : a(d, max_of(calls, &GemmCall::elems_a), "calibrate: gemm A"),
        b(d, max_of(calls, &GemmCall::elems_b), "calibrate: gemm B"),
        c(d, max_of(calls, &GemmCall::elems_c), "calibrate: gemm C") {
    a.fill_pattern(1);
    b.fill_pattern(2);
    c.fill(0.0f);
  }
  static std::size_t max_of(const std::vector<GemmCall>& calls, std::size_t (GemmCall::*elems)() const) {
    std::size_t m = 1;
    for (const GemmCall& call : calls) m = std::max(m, (call.*elems)());
    return m;
  }
};

std::string shape_label(const GemmShape& sh) {
  return sh.count > 1 ? fmt::format("{}x{}x{} x{}", sh.m, sh.n, sh.k, sh.count)
                      : fmt::format("{}x{}x{}", sh.m, sh.n, sh.k);
}

costmodel::Measurement gemm_measurement(const GemmShape& sh, const costmodel::Measurement& m,
                                        const char* sweep) {
  costmodel::Measurement r = m;
  r.sweep = sweep;
  r.m = sh.m, r.n = sh.n, r.k = sh.k, r.count = sh.count;
  r.bytes = costmodel::GemmPoint{sh.m, sh.n, sh.k, sh.count, 0}.bytes();
  return r;
}

// beta 0: C = A B (the "gemm" sweep); beta 1: C += A B ("gemm-accumulate").
void sweep_gemms(Sweeper& sw, const std::vector<GemmShape>& shapes, float beta, const char* sweep,
                 std::vector<costmodel::Measurement>& out) {
  if (shapes.empty()) return;
  Device& dev = sw.dev_;
  Stream& s = dev.compute_stream();
  // Each call takes the next of as many copies of its operands as fill the cold pool: in a step a
  // GEMM's weights and activations were last touched many kernels earlier. (16 copies of at most
  // 64 MiB in all left a 1 MiB GEMM's operands in a 50 MB L2; in a step the halves of a split took
  // 13-22% longer than they had timed.)
  const double cold = cold_pool_bytes(dev);
  std::vector<GemmCall> calls;
  for (const GemmShape& sh : shapes) {
    const double bytes = std::max(1.0, costmodel::GemmPoint{sh.m, sh.n, sh.k, sh.count, 0}.bytes());
    calls.emplace_back(sh, sw.o_.gemm_math, static_cast<std::size_t>(std::ceil(cold / bytes)));
    calls.back().g.beta = beta;
  }
  GemmPool pool(dev, calls);
  std::vector<Sweeper::Op> ops;
  for (GemmCall& call : calls) {
    call.place(pool.a.get(), pool.b.get(), pool.c.get());
    ops.emplace_back([&dev, &s, &call] { dev.gemm(s, call.next()); });
  }
  const std::vector<costmodel::Measurement> ms =
      sw.points(s, ops, sweep, [&](std::size_t i) { return shape_label(shapes[i]); });
  for (std::size_t i = 0; i < ms.size(); ++i) out.push_back(gemm_measurement(shapes[i], ms[i], sweep));
}

// GEMMs alone, then beside enough all-gathers on the comm stream to cover the whole batch (checked on
// every rank; the all-gather count doubles and the repetition is redone, up to 3 times, if one rank's
// were too few).
void sweep_overlap(Sweeper& sw, const std::vector<GemmShape>& shapes,
                   std::vector<costmodel::Measurement>& out) {
  Device& dev = sw.dev_;
  Communicator& comm = sw.comm_;
  const int n = comm.size();
  Stream& ps = dev.compute_stream();
  Stream& cs = dev.comm_stream();
  const auto e = static_cast<std::size_t>(std::max(1.0, std::round(sw.o_.overlap_bytes / 4 / n)));
  Buffer full(dev, e * n, "calibrate: overlap full"), shard(dev, e, "calibrate: overlap shard");
  full.fill(0.0f);
  shard.fill(0.0f);
  auto ag = [&] { comm.all_gather(cs, shard.get(), full.get(), e, "calibrate overlap all-gather"); };
  const double t_ag = sw.point(cs, ag).seconds;
  for (const GemmShape& sh : shapes) {
    std::vector<GemmCall> call{GemmCall(sh, sw.o_.gemm_math, 1)};
    GemmPool pool(dev, call);
    call[0].place(pool.a.get(), pool.b.get(), pool.c.get());
    auto gemm = [&] { dev.gemm(ps, call[0].g); };
    costmodel::Measurement m = gemm_measurement(sh, sw.point(ps, gemm), "overlap");
    const int iters = static_cast<int>(
        std::clamp(std::ceil(std::max(sw.o_.batch_target_s, 3 * t_ag) / m.seconds), 1.0, 1000.0));
    int n_ag = static_cast<int>(std::ceil(2.5 * iters * m.seconds / t_ag)) + 1;
    int doublings = 0;  // at most 3: the slowdown would then be above 20, beyond what matters
    std::vector<double> t;
    for (int r = -sw.o_.warmup; r < m.repeats;) {
      comm.barrier("calibrate overlap");
      const auto gate_comm = dev.hold(cs);
      const auto gate_compute = dev.hold(ps);
      const EventPtr c0 = cs.record();
      cs.enqueue([&ag, n_ag] {
        for (int i = 0; i < n_ag; ++i) ag();
      });
      const EventPtr c1 = cs.record();
      ps.wait(c0);
      const EventPtr e0 = ps.record();
      ps.enqueue([&gemm, iters] {
        for (int i = 0; i < iters; ++i) gemm();
      });
      const EventPtr e1 = ps.record();
      gate_comm->open();
      gate_compute->open();
      e1->synchronize();
      c1->synchronize();
      const bool covered = c1->seconds_since(*e0) >= e1->seconds_since(*e0);
      const double with = comm.max_over_ranks(e1->seconds_since(*e0) / iters);
      if (comm.sum_over_ranks(covered ? 0.0 : 1.0) > 0 && doublings < 3) {
        n_ag *= 2;
        ++doublings;
        continue;
      }
      if (r++ >= 0) t.push_back(with);
    }
    m.with_comm_s = costmodel::median(t);
    out.push_back(m);
    sw.report(m.sweep, shape_label(sh), m.with_comm_s);
  }
}

std::vector<GemmShape> default_overlap_shapes(bool quick) {
  if (quick) return {{128, 128, 128, 1, "square"}};
  return {{512, 512, 512, 1, "square"}, {1024, 1024, 1024, 1, "square"}, {1024, 1024, 64, 1, "skinny"}};
}

std::string compiler() {
#if defined(__clang__)
  return fmt::format("clang {}", __clang_version__);
#elif defined(__GNUC__)
  return fmt::format("gcc {}", __VERSION__);
#else
  return "unknown";
#endif
}

}  // namespace

costmodel::CalibrationRun run_calibration(Device& device, Communicator& comm, const CalibrateOptions& o,
                                          const ProgressFn& progress, const MeasuredFn& measured) {
  const auto load_at_start = costmodel::load_average();
  const auto start = std::chrono::steady_clock::now();
  const int world = comm.size();
  const bool comm_thread = &device.comm_stream() != &device.compute_stream();
  const bool overlap = comm_thread && world >= 2;
  const std::vector<GemmShape> gemms = o.collectives_only      ? std::vector<GemmShape>{}
                                       : o.gemm_shapes.empty() ? generic_gemm_shapes(o.quick)
                                                               : o.gemm_shapes;
  std::vector<GemmShape> accumulates;
  for (const GemmShape& sh : gemms)
    if (sh.accumulates) accumulates.push_back(sh);
  const std::vector<GemmShape> overlaps = !overlap || o.collectives_only ? std::vector<GemmShape>{}
                                          : o.overlap_shapes.empty()     ? default_overlap_shapes(o.quick)
                                                                         : o.overlap_shapes;
  // The rings of nodes of per_node ranks that have two ranks or more: (level name, ring size).
  std::vector<std::pair<costmodel::RingLevel, int>> rings;
  if (o.per_node > 0) {
    if (world % o.per_node != 0)
      throw UsageError(fmt::format("nodes of {} ranks do not divide the job's {} ranks", o.per_node, world));
    if (o.per_node >= 2) rings.emplace_back(costmodel::RingLevel::kIntra, o.per_node);
    if (world / o.per_node >= 2) rings.emplace_back(costmodel::RingLevel::kInter, world / o.per_node);
  }
  std::size_t collective_points = world >= 2 ? collective_sizes(o, world).size() : 0;
  for (const auto& [level, size] : rings) collective_points += collective_sizes(o, size).size();
  const std::size_t kernels =
      o.collectives_only ? 0
                         : kernel_sizes(o, 8).size() + kernel_sizes(o, costmodel::kAdamBytesPerParam).size();
  const int total = static_cast<int>(costmodel::kCollectives.size() * collective_points + kernels +
                                     gemms.size() + accumulates.size() + overlaps.size());
  Sweeper sw(device, comm, o, progress, total);
  costmodel::CalibrationRun run;
  run.world = world;
  run.per_node = o.per_node;
  if (world >= 2) sweep_collectives(sw, comm, costmodel::RingLevel::kWorld, run.measurements);
  for (const auto& [level, size] : rings)
    sweep_collectives(sw, comm.ring(level, o.per_node), level, run.measurements);
  if (!o.collectives_only) sweep_kernels(sw, run.measurements);
  sweep_gemms(sw, gemms, 0.0f, "gemm", run.measurements);
  sweep_gemms(sw, accumulates, 1.0f, "gemm-accumulate", run.measurements);
  if (!overlaps.empty()) sweep_overlap(sw, overlaps, run.measurements);
  if (measured && comm.rank() == 0) measured(run);
  costmodel::fit_measurements(run, o.name, o.segments);
  run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  nlohmann::json& p = run.calibration.provenance;
  const nlohmann::json machine = costmodel::machine(world, 1);
  p["host"] = machine["hostname"];
  p["date"] = costmodel::utc_now();
  p["machine"] = machine;
  // machine.load_average: the load when the sweeps began (taken now it would hold their own load).
  if (load_at_start) p["machine"]["load_average"] = *load_at_start;
  p["backend"] = comm.backend();
  p["backend_version"] = comm.version();
  p["device"] = device.name();
  p["world_size"] = world;
  p["compiler"] = compiler();
  p["eigen"] = fmt::format("{}.{}.{}", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION);
  if (!o.tool_version.empty()) p["tool_version"] = o.tool_version;
  p["options"] = o.to_json();
  p["wall_s"] = run.wall_s;
  p["gemm_operands"] =
      gemm_operands_provenance(cold_pool_bytes(device), static_cast<double>(device.cache_bytes()));
  if (o.collectives_only) p["compute"] = "not measured: collectives only (osdp calibrate --compute emulate)";
  p["interference"] = o.collectives_only ? "not measured: collectives only"
                      : overlap          ? "measured"
                      : comm_thread      ? "not measured: one rank"
                                         : "not measured: no separate comm stream";
  for (const auto& [k, v] : o.extra_provenance.items()) p[k] = v;
  return run;
}

}  // namespace osdp::validate
