// Golden experiment: a reduced version of the seed paper's Figure 5 setting (a narrow & deep GPT
// under a loose, a tight and a too-small memory limit on one 8-GPU server standing in for its
// 8 x TITAN RTX on PCIe 3.0; strategies fsdp, osdp-ref, exact without splitting, exact with
// splitting), run through experiments::read_experiment / expand /
// run_unit, its fields compared within a named tolerance to values derived by hand below from the
// formulas stated in costmodel/cost_model.hpp, costmodel/cluster.hpp and costmodel/workload.hpp.
// Nothing here was copied from a run.
//
// ---- Setup (files written to a temporary directory by the test) --------------------------------
// Cluster: one node of N = 8 devices, reserve R = 1 MB = 1e6 B; compute model trivial to derive:
//   fp32 peak F = 1 TFLOP/s, gemm_efficiency 1 and gemm_half_efficiency_dim 0 (a GEMM runs at F
//   whatever its shape), kernel_overhead 0, memory bandwidth 1e30 B/s (bytes never bind: an
//   elementwise kernel or the Adam step takes < 1e-21 s, below double precision of the step time);
//   ring link alpha = 1 us per step, bandwidth 10 GB/s (beta = 1e-10 s/B); overlap disabled.
// Model "golden-nd" (narrow & deep): L = 2 layers, hidden h = 256, heads a = 4, ffn f = 1024,
//   sequence s = 128, vocabulary V = 1000, untied embeddings, fp32 (w = g = 4, o = 8, e = 4 bytes),
//   dropout on (1-byte masks).
// Experiment: tier "paper", prefetch 0 (step time = plain sum of compute and communication), fixed
//   batch b = 2, checkpointing off, memory axis {31 MB, 29.5 MB, 20 MB}; strategies fsdp, osdp-ref,
//   exact (split_max 1), exact+split (split_max 4); evaluators analytic and sim.
//
// ---- Operators (forward order: embedding, attention0, mlp0, attention1, mlp1, head) ------------
// Parameters P:
//   embedding  token table hV + position table sh        = 256000 + 32768          = 288768
//   attention  4h^2 + 6h                                  = 262144 + 1536           = 263680
//   mlp        2hf + f + 3h                               = 524288 + 1024 + 768     = 526080
//   head       final LN 2h + LM head hV                   = 512 + 256000            = 256512
//   total      288768 + 2 x 263680 + 2 x 526080 + 256512                            = 2124800
// Flops per sample (a GEMM is 2mnk; a weight GEMM's backward is dX and dW, twice its forward;
// attention's scores Q K^T and A V are a GEMMs of s x s x d, d = h/a, i.e. 2 s^2 h each, and each
// has two backward GEMMs of the same size; elementwise kernels cost no time here):
//   attention  fwd QKV 6sh^2 + scores 2s^2h + AV 2s^2h + proj 2sh^2
//                  = 50331648 + 8388608 + 8388608 + 16777216 = 83886080;  fwd + bwd = 3 x = 251658240
//   mlp        fwd fc1 2shf + fc2 2shf = 134217728;                          fwd + bwd = 402653184
//   head       fwd logits 2shV = 65536000;                                  fwd + bwd = 196608000
//   embedding  lookup only: 0
// Compute per step (paper tier: b gamma, gamma = flops per sample / F):
//   attention 2 x 251.65824 us = 503.31648 us;  mlp 2 x 402.653184 us = 805.306368 us;
//   head 2 x 196.608 us = 393.216 us;  embedding 0
//   C = 2 x 503.31648 + 2 x 805.306368 + 393.216 = 3010.461696 us (every plan: with efficiency 1
//   a GEMM cut into n slices costs n x (its flops / n) / F, the same; summing the slices moves
//   bytes only).
// Ring collectives (all-gather = reduce-scatter): (N-1) alpha + (N-1)/N S beta, S = 4P bytes:
//   c = 7 us + (7/8)(4P)(1e-10 s) = 7 us + 0.35 P ns
//   c_emb = 7 + 101.0688 = 108.0688 us    c_att = 7 + 92.288 = 99.288 us
//   c_mlp = 7 + 184.128 = 191.128 us      c_head = 7 + 89.7792 = 96.7792 us
//   sum over the six operators: 108.0688 + 2 x 99.288 + 2 x 191.128 + 96.7792 = 785.68 us
// Choice comm (n slices, k of them ZDP, slice collectives 7 us + c_bw / n where c_bw = c - 7 us):
//   DP 2 collectives (2c), ZDP 3 (3c), split (n, k): (2n + k) x 7 us + (2 + k/n) c_bw,
//   REPLICATE one all-reduce = 2c (the same time as DP in the paper tier).
//
// ---- Memory (cost_model.hpp; peak = R + sum persistent + max transient) ------------------------
// Saved activations per sample: attention e(6sh + 2as^2) + (as^2 + sh) = 1310720 + 98304 = 1409024;
//   mlp e(2sh + 2sf) + sh = 1310720 + 32768 = 1343488; head keeps the final LN input and the softmax
//   probabilities e(sh + sV) = 643072; embedding keeps its dropout mask sh = 32768.
// Backward workspace per sample: attention e(as^2 + 3sh) = 655360 (score gradients, dQ dK dV);
//   mlp e 2sf = 1048576 (gradients of the fc1 and GeLU outputs); head e sV = 512000 (the logits'
//   gradient); embedding 0.
// Shard (w+g+o) ceil(P/N) = 16 ceil(P/8): emb 577536, att 527360, mlp 1052160, head 513024.
// Gathered weight S = wP: emb 1155072, att 1054720, mlp 2104320, head 1026048 (sum 8499200).
// Persistent, ZDP = shard + b saved: emb 643072, att 3345408, mlp 3739136, head 1799168;
//   sum over the six = 643072 + 2 x 3345408 + 2 x 3739136 + 1799168 = 16611328.
//   DP adds S: sum = 16611328 + 8499200 = 25110528.
// Transient, DP = b workspace + gP (n slices: gP/n): emb 1155072, att 2365440, mlp 4201472,
//   head 2050048; ZDP adds wP (n slices: wP/n): emb 2310144, att 3420160, mlp 6305792, head 3076096.
//   fsdp peak  = 1e6 + 16611328 + 6305792 = 23917120
//   all-DP peak = 1e6 + 25110528 + 4201472 = 30312000
//
// ---- What each strategy must pick --------------------------------------------------------------
// REPLICATE is never useful under a binding limit: against DP on the same operator it takes the same
// time (2c) and 16P - 6P = 10P more persistent bytes while its transient is only gP = 4P lower, so
// any plan holding a REPLICATE is at least 6 x 256512 = 1539072 B above the same plan with DP there:
// optimal times are reached without it, and each plan below leaves less slack than that under its
// limit (at most 688000 B), so no REPLICATE variant of it fits and ties none.
// fsdp (all ZDP, wherever it fits): T = C + 3 x 785.68 = 5367.501696 us, peak 23917120.
// Loose limit 31 MB (>= the all-DP peak 30312000, < 30312000 + 1539072):
//   exact, exact+split: every operator at its fastest, 2c, which only DP (unsplit) and REPLICATE
//   reach; a REPLICATE does not fit, so all DP: T = C + 2 x 785.68 = 4581.821696 us, peak 30312000;
//   speedup over fsdp 5367.501696 / 4581.821696.
//   osdp-ref (its MiB knapsack, strategy.hpp): budget floor((31e6 - 1e6 - 6305792) / MiB) = 22 MiB,
//   the largest transient of its space (mlp ZDP) set aside; blocks rounded up to whole MiB:
//     embedding DP 2 / ZDP 1; layer (attention, mlp) DD 10 (10243584 B), DZ 8 (8139264), ZD 9
//     (9188864), ZZ 7 (7084544); head DP 3 / ZDP 2. All ZDP takes 17 MiB; 5 MiB buy time back:
//     embedding DP (1 MiB, -c_emb), a layer's DZ (1, -c_att), ZD (2, -c_mlp), DD (3, -c_att -c_mlp),
//     head DP (1, -c_head). The best 5 MiB: DD + DZ + embedding = 290.416 + 99.288 + 108.0688 =
//     497.7728 us (next: DD + embedding + head and ZD + DZ + embedding + head, 495.264).
//     T = 5367.501696 - 497.7728 = 4869.728896 us; ZDP on one mlp and the head:
//     peak = 30312000 - 2104320 - 1026048 + (6305792 - 4201472) = 29285952.
// Tight limit 29.5 MB (the all-DP peak exceeds it by 812000 B):
//   exact: the cheapest way to free 812000 B from all-DP. A split is not offered; REPLICATE only adds
//   memory; a ZDP operator frees S, except an mlp, whose ZDP transient becomes the maximum
//   (+2104320 = S_mlp, net 0) unless both go ZDP (382.256 us). Cheapest: the head ZDP (96.7792 us,
//   frees 1026048 >= 812000; attention would cost 99.288). T = 4581.821696 + 96.7792 =
//   4678.600896 us, peak 30312000 - 1026048 = 29285952.
//   exact+split: any split costs at least 2 x 7 us (n = 2, k = 0), one with a ZDP slice more than
//   28 us (n = 2, k = 1: 21 us + c_bw / 2), and a split DP frees memory only by lowering the
//   largest transient, which both mlps hold:
//   splitting both mlps in two DP slices (4 x 7 us = 28 us, the cheapest change that frees anything)
//   lowers it to 2097152 + 2104320 / 2 = 3149312 (every other transient is below), freeing 1052160 B.
//   T = 4581.821696 + 28 = 4609.821696 us, peak 30312000 - 1052160 = 29259840.
//   osdp-ref: budget floor((29.5e6 - 1e6 - 6305792) / MiB) = 21 MiB, 4 MiB above all ZDP; best:
//   both layers DZ + embedding + head DP = 2 x 99.288 + 108.0688 + 96.7792 = 403.424 us (next:
//   DD + embedding, 398.4848). T = 5367.501696 - 403.424 = 4964.077696 us,
//   peak = 1e6 + 16611328 + 1155072 + 2 x 1054720 + 1026048 + 6305792 = 28207680.
// Too small 20 MB: nothing fits; min_fit_bytes is the smallest peak the strategy's space reaches:
//   fsdp and exact: all ZDP, 23917120 (a lower maximum transient needs both mlps DP: +2 x 2104320
//   persistent to save 2104320 transient).
//   exact+split: all ZDP with the maximum transient lowered by splitting: mlp ZDP in 4 slices has
//   2097152 + 2 x 2104320 / 4 = 3149312, attention in 2 slices 1310720 + 2 x 1054720 / 2 = 2365440,
//   head 3076096 and embedding 2310144 unsplit are below; no choice with a smaller mlp transient
//   (split DP, REPLICATE) costs less persistent than it saves: 1e6 + 16611328 + 3149312 = 20760640.
//   osdp-ref: R + the transient set aside + all-ZDP blocks in whole MiB (1 + 7 + 7 + 2 = 17 MiB):
//   1e6 + 6305792 + 17825792 = 25131584.
//
// ---- Simulated evaluation ----------------------------------------------------------------------
// Time: with prefetch 0 and overlap off every task runs after the previous one, so the simulated
// step is the analytic sum; the simulator rounds each ring step to a picosecond (here alpha + chunk
// beta and every compute task are whole picoseconds anyway), so the two agree within 1 ps per ring
// step: 7 steps per all-gather or reduce-scatter.
// Peak (buffer lifetimes as sim/README.md states them; the analytic peak is only a bound): resident
// shards + optimizer states 16 x 2124800 / 8 = 4249600 and the reserve throughout; activations from an
// operator's forward to the end of its backward (b saved, 12361728 in all, the head's 1286144); DP
// weights from their forward gather to the end of their backward, ZDP weights during one forward or
// backward; during a backward its gradient and workspace. Serial tasks, so the peak is a backward
// (11075584 = 12361728 - 1286144 activations left once the head's backward ends; 3264512 = the
// embedding's and both attentions' weights, 1155072 + 2 x 1054720; 7473152 = 8499200 - 1026048):
//   fsdp: mlp1's backward, after the head's: 1e6 + 4249600 + (12361728 - 1286144) + 6305792
//     = 22630976 (the head's own backward: 1e6 + 16611328 + 3076096 = 20687424, less).
//   all DP, and exact at 29.5 MB with or without splitting (the head's backward holds every
//   gathered weight either way): the head's backward, 1e6 + 16611328 + 8499200 + 1026048 +
//   1024000 = 28160576 (mlp1's next: 1e6 + 4249600 + 11075584 + 7473152 + 4201472, less).
//   osdp-ref at 29.5 MB: mlp1's backward with the embedding's and both attentions' weights kept:
//     1e6 + 4249600 + 11075584 + 3264512 + 6305792 = 25895488.
//   osdp-ref at 31 MB: its two plans (mlp0 or mlp1 ZDP) tie in the analytic model, and the replay
//     tells them apart: mlp1 ZDP peaks in its backward, 1e6 + 4249600 + 11075584 + 5368832 +
//     6305792 = 27999808; mlp0 ZDP in the head's, 1e6 + 16611328 + 5368832 + 3076096 = 26056256.
//     Either is right.

#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "experiments/experiment.hpp"
#include "experiments/run.hpp"
#include "temp_dir.hpp"

namespace {

using namespace osdp;
using experiments::Evaluation;
using experiments::UnitResult;

constexpr double kRel = 1e-12;   // relative tolerance of every derived value (sums of ~20 doubles)
constexpr double kTick = 1e-12;  // the simulator's time step: one picosecond
constexpr int kRingSteps = 7;    // N - 1 steps per all-gather or reduce-scatter
constexpr double kUs = 1e-6;
constexpr int kN = 8;
constexpr int kBatch = 2;

// Derived above.
constexpr double kCompute_us = 3010.461696;    // C
constexpr double kCommSum_us = 785.68;         // sum of c over the six operators
constexpr double kFsdpStep_us = 5367.501696;   // C + 3 x 785.68
constexpr double kAllDpStep_us = 4581.821696;  // C + 2 x 785.68
constexpr double kFsdpPeak = 23917120;
constexpr double kAllDpPeak = 30312000;
constexpr double kFsdpSimPeak = 22630976;
constexpr double kAllDpSimPeak = 28160576;

// One row of the experiment's output: what the derivation says it must hold.
struct Expected {
  const char* memory;
  const char* label;
  bool feasible;
  double time_us;             // feasible rows
  double peak_bytes;          // feasible rows
  int collectives;            // all-gathers and reduce-scatters of the plan (feasible rows)
  double min_fit_bytes;       // infeasible rows
  double sim_peak_bytes = 0;  // feasible rows
  double sim_peak_tie = 0;    // another right answer where two plans tie (0: none)
};

// In the experiment's output order: memory values as listed, strategies innermost.
const std::vector<Expected> kRows = {
    // Loose limit: fsdp 3 collectives per operator; exact and exact+split all DP (2 per operator);
    // osdp-ref DP except one mlp and the head.
    {"31MB", "fsdp", true, kFsdpStep_us, kFsdpPeak, 18, 0, kFsdpSimPeak},
    {"31MB", "osdp-ref", true, 4869.728896, 29285952, 14, 0, 26056256, 27999808},
    {"31MB", "exact", true, kAllDpStep_us, kAllDpPeak, 12, 0, kAllDpSimPeak},
    {"31MB", "exact+split", true, kAllDpStep_us, kAllDpPeak, 12, 0, kAllDpSimPeak},
    // Tight limit: exact makes the head ZDP; exact+split cuts both mlps in two DP slices (4
    // collectives each); osdp-ref DP except the two mlps.
    {"29.5MB", "fsdp", true, kFsdpStep_us, kFsdpPeak, 18, 0, kFsdpSimPeak},
    {"29.5MB", "osdp-ref", true, 4964.077696, 28207680, 14, 0, 25895488},
    {"29.5MB", "exact", true, 4678.600896, 29285952, 13, 0, kAllDpSimPeak},
    {"29.5MB", "exact+split", true, 4609.821696, 29259840, 16, 0, kAllDpSimPeak},
    // Too small: nothing fits.
    {"20MB", "fsdp", false, 0, 0, 0, kFsdpPeak},
    {"20MB", "osdp-ref", false, 0, 0, 0, 25131584},
    {"20MB", "exact", false, 0, 0, 0, kFsdpPeak},
    {"20MB", "exact+split", false, 0, 0, 0, 20760640},
};

bool near(double actual, double expected, double rel = kRel) {
  return std::abs(actual - expected) <= rel * std::abs(expected);
}

nlohmann::json cluster_json() {
  return {{"schema_version", 1},
          {"name", "golden-8"},
          {"description", "8 devices with a compute model that is trivial to derive"},
          {"nodes", 1},
          {"devices_per_node", 8},
          {"device",
           {{"name", "ideal"},
            {"memory", "24GiB"},
            {"reserve", "1MB"},
            {"fp32_flops", "1TFLOP/s"},
            {"gemm_efficiency", 1.0},
            {"gemm_half_efficiency_dim", 0},
            {"memory_bandwidth", 1e30},
            {"kernel_overhead", "0s"}}},
          {"links", {{"intra", {{"alpha", "1us"}, {"bandwidth", "10GB/s"}}}}},
          {"overlap", {{"enabled", false}, {"interference", 1.0}}}};
}

nlohmann::json model_json() {
  return {{"schema_version", 1},
          {"name", "golden-nd"},
          {"description", "narrow & deep, reduced: 2 layers at hidden 256"},
          {"seq", 128},
          {"vocab", 1000},
          {"layers", 2},
          {"hidden", 256},
          {"heads", 4},
          {"ffn", 1024},
          {"tied_embeddings", false},
          {"precision", "fp32"},
          {"dropout", true}};
}

nlohmann::json experiment_json(const std::string& model, const std::string& cluster, const std::string& out) {
  return {{"schema_version", 1},
          {"name", "golden-fig5"},
          {"description", "the seed paper's Figure 5 setting, reduced so that every field has a closed form"},
          {"base",
           {{"model", model},
            {"cluster", cluster},
            {"world_size", 8},
            {"split_max", 1},
            {"checkpoint", "off"},
            {"prefetch", 0},
            {"tier", "paper"},
            {"batch", kBatch},
            // the paper's setting: data parallelism only (one stage, one micro-batch, TP 1)
            {"pp", 1},
            {"tp", 1},
            {"micro_batches", 1}}},
          {"axes", {{"memory", {"31MB", "29.5MB", "20MB"}}}},
          {"strategies",
           {{{"label", "fsdp"}, {"strategy", "fsdp"}},
            {{"label", "osdp-ref"}, {"strategy", "osdp-ref"}},
            {{"label", "exact"}, {"strategy", "exact"}},
            {{"label", "exact+split"}, {"strategy", "exact"}, {"split_max", 4}}}},
          {"baseline", "fsdp"},
          {"evaluators", {"analytic", "sim"}},
          {"output", out}};
}

struct Golden {
  std::vector<experiments::Unit> units;
  std::vector<UnitResult> results;
};

// The experiment runs once; every test case reads its rows.
const Golden& golden() {
  static const Golden g = [] {
    const experiments::testing::TempDir dir("osdp_test_golden_");
    const std::string cluster = dir.write("golden-8.json", cluster_json());
    const std::string model = dir.write("golden-nd.json", model_json());
    const auto doc = experiment_json(model, cluster, (dir.path / "results").string());
    const auto e = experiments::read_experiment(doc, "golden-fig5.json");
    Golden out;
    out.units = experiments::expand(e);
    for (const auto& u : out.units) out.results.push_back(experiments::run_unit(u, e));
    return out;
  }();
  return g;
}

const Evaluation& evaluation(const UnitResult& r, const std::string& name) {
  for (const auto& e : r.evaluations)
    if (e.evaluator == experiments::evaluator_named(name)) return e;
  FAIL("no evaluation \"" << name << "\" in row " << r.index);
  throw std::logic_error("unreachable");
}

const UnitResult& row(const std::string& memory, const std::string& label) {
  const Golden& g = golden();
  for (std::size_t i = 0; i < g.units.size(); ++i)
    if (g.units[i].config.memory == memory && g.units[i].strategy.label == label) return g.results[i];
  FAIL("no row " << label << " at " << memory);
  throw std::logic_error("unreachable");
}

const Expected& expected(const std::string& memory, const std::string& label) {
  for (const auto& x : kRows)
    if (memory == x.memory && label == x.label) return x;
  FAIL("no expected row " << label << " at " << memory);
  throw std::logic_error("unreachable");
}

void check_row(const Expected& x) {
  INFO(x.label << " at " << x.memory);
  const UnitResult& r = row(x.memory, x.label);
  CHECK(r.strategy == x.label);
  CHECK(r.model == "golden-nd");
  CHECK(r.world_size == kN);
  REQUIRE(r.feasible == x.feasible);
  const Evaluation& a = evaluation(r, "analytic");
  const Evaluation& s = evaluation(r, "sim");
  CHECK(a.feasible == x.feasible);
  CHECK(s.feasible == x.feasible);
  if (!x.feasible) {
    CHECK(r.min_fit_bytes > 0);
    CHECK(r.min_fit_bytes > r.memory_limit_bytes);
    CHECK(near(r.min_fit_bytes, x.min_fit_bytes));
    CHECK(r.candidates.empty());
    return;
  }
  CHECK(r.batch_size == kBatch);
  CHECK(r.min_fit_bytes == 0);
  CHECK(near(a.time_s, x.time_us * kUs));
  CHECK(near(a.throughput, kN * kBatch / (x.time_us * kUs)));
  CHECK(near(a.peak_bytes, x.peak_bytes));
  CHECK(a.peak_bytes <= r.memory_limit_bytes);
  REQUIRE(r.candidates.size() == 1);
  CHECK(r.candidates[0].batch == kBatch);
  CHECK(near(r.candidates[0].time_s, x.time_us * kUs));
}

}  // namespace

TEST_CASE("golden: the derivation adds up", "[golden]") {
  // The composite values above, from their parts (guards the arithmetic of the comments).
  CHECK(near(kCompute_us, 2 * 503.31648 + 2 * 805.306368 + 393.216));
  CHECK(near(kCommSum_us, 108.0688 + 2 * 99.288 + 2 * 191.128 + 96.7792));
  CHECK(near(kFsdpStep_us, kCompute_us + 3 * kCommSum_us));
  CHECK(near(kAllDpStep_us, kCompute_us + 2 * kCommSum_us));
  CHECK(near(expected("31MB", "osdp-ref").time_us, kFsdpStep_us - (99.288 + 191.128) - 99.288 - 108.0688));
  CHECK(near(expected("29.5MB", "osdp-ref").time_us, kFsdpStep_us - 2 * 99.288 - 108.0688 - 96.7792));
  CHECK(near(expected("29.5MB", "exact").time_us, kAllDpStep_us + 96.7792));
  CHECK(near(expected("29.5MB", "exact+split").time_us, kAllDpStep_us + 4 * 7));
  CHECK(near(kFsdpPeak, 1e6 + 16611328 + 6305792));
  CHECK(near(kAllDpPeak, 1e6 + 16611328 + 8499200 + 4201472));
  CHECK(near(kFsdpSimPeak, 1e6 + 4249600 + (12361728 - 1286144) + 6305792));
  CHECK(near(kAllDpSimPeak, 1e6 + 16611328 + 8499200 + 1026048 + 1024000));
}

TEST_CASE("golden: the reduced Figure 5 experiment expands to memory x strategy units", "[golden]") {
  const Golden& g = golden();
  REQUIRE(g.units.size() == kRows.size());
  REQUIRE(g.results.size() == kRows.size());
  for (std::size_t i = 0; i < kRows.size(); ++i) {
    INFO("unit " << i);
    CHECK(g.units[i].index == static_cast<int>(i));
    CHECK(g.results[i].index == static_cast<int>(i));
    CHECK(g.units[i].config.memory == kRows[i].memory);
    CHECK(g.units[i].strategy.label == kRows[i].label);
    CHECK(g.units[i].config.batch == kBatch);
    CHECK(g.units[i].config.tier == "paper");
    CHECK(g.units[i].config.prefetch == 0);
  }
  CHECK(near(row("31MB", "fsdp").memory_limit_bytes, 31e6));
  CHECK(near(row("29.5MB", "fsdp").memory_limit_bytes, 29.5e6));
  CHECK(near(row("20MB", "fsdp").memory_limit_bytes, 20e6));
}

TEST_CASE("golden: fsdp is 3 collectives per operator plus compute at every limit that fits", "[golden]") {
  for (const char* memory : {"31MB", "29.5MB"}) check_row(expected(memory, "fsdp"));
}

TEST_CASE("golden: under the loose limit exact picks all-DP with or without splitting, osdp-ref less",
          "[golden]") {
  for (const char* label : {"exact", "exact+split", "osdp-ref"}) check_row(expected("31MB", label));
  // Speedup over the baseline: 5367.501696 / 4581.821696 (one collective per operator saved).
  const double speedup = evaluation(row("31MB", "exact"), "analytic").throughput /
                         evaluation(row("31MB", "fsdp"), "analytic").throughput;
  CHECK(near(speedup, kFsdpStep_us / kAllDpStep_us));
}

TEST_CASE("golden: under the tight limit DP does not fit and each strategy gives up the least", "[golden]") {
  for (const char* label : {"fsdp", "osdp-ref", "exact", "exact+split"}) check_row(expected("29.5MB", label));
  // All-DP's peak is above the limit, and splitting beats not splitting.
  CHECK(kAllDpPeak > row("29.5MB", "exact").memory_limit_bytes);
  CHECK(evaluation(row("29.5MB", "exact+split"), "analytic").throughput >
        evaluation(row("29.5MB", "exact"), "analytic").throughput);
}

TEST_CASE("golden: when memory is too small every row is infeasible and says what would fit", "[golden]") {
  for (const char* label : {"fsdp", "osdp-ref", "exact", "exact+split"}) check_row(expected("20MB", label));
}

TEST_CASE("golden: the simulator replays each plan in the analytic time, peaking where its buffers say",
          "[golden]") {
  for (const auto& x : kRows) {
    if (!x.feasible) continue;
    INFO(x.label << " at " << x.memory);
    const UnitResult& r = row(x.memory, x.label);
    const Evaluation& a = evaluation(r, "analytic");
    const Evaluation& s = evaluation(r, "sim");
    CHECK(std::abs(s.time_s - a.time_s) <= x.collectives * kRingSteps * kTick);
    CHECK(near(s.time_s, x.time_us * kUs));
    CHECK(near(s.throughput, kN * kBatch / s.time_s));
    if (x.sim_peak_tie > 0)
      CHECK((near(s.peak_bytes, x.sim_peak_bytes) || near(s.peak_bytes, x.sim_peak_tie)));
    else
      CHECK(near(s.peak_bytes, x.sim_peak_bytes));
    // The analytic peak (every persistent byte plus the largest transient) bounds the replay's.
    CHECK(s.peak_bytes <= a.peak_bytes * (1 + kRel));
  }
}
