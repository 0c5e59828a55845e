// Closed-form oracle and property tests of the cost model's memory (costmodel::CostModel). The expected
// values are written here from the formulas of DESIGN.md section 4 and REFERENCE.md, on the synthetic
// cluster of cost_fixtures.hpp (8 ranks):
//   memory: shards + DP-held gathered weights + activations (persistent) and one gathered slice +
//     one slice's gradient + workspace + recomputed activations (transient).
#include <cstddef>
#include <vector>

#include <catch2/catch.hpp>

#include "cost_fixtures.hpp"
#include "costmodel/catalog.hpp"
#include "costmodel/choice.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/cost_model.hpp"
#include "costmodel/workload.hpp"

using namespace osdp::costmodel;
using namespace osdp::costmodel::cost_fixtures;

// ---------------------------------------------------------------------------------------------------
// Memory.

// A hand-made operator with an odd parameter count so that the ceilings show: a 10 x 100 weight and
// one bias, P = 1001; saves 5000 B per sample, keeps 1000 B (its input) when checkpointed, 700 B of
// backward workspace. N = 8, b = 3.
//   ceil(P/8) = 126, ceil(P/4) = 251.
//   fp32 (w, g, o) = (4, 4, 8): shards (w+g+o) ceil(P/N) = 16 x 126 = 2016; activations 3 x 5000 = 15000.
//   DP:          persistent 2016 + 4 x 1001 + 15000 = 21020      transient 4 x 1001 + 2100 = 6104
//   ZDP:         persistent 2016 + 15000 = 17016                 transient 4004 + 4004 + 2100 = 10108
//   split4:1zdp: persistent 2016 + 3 x 4 x 251 + 15000 = 20028   transient 1004 + 1004 + 2100 = 4108
//   split4:0zdp: persistent 2016 + 4 x 4 x 251 + 15000 = 21032   transient 1004 + 2100 = 3104
//   split4:4zdp: persistent 17016                                transient 4108
//   REPLICATE:   persistent 16 x 1001 + 15000 = 31016            transient 2100
//   checkpointed: activations 3 x 1000 = 3000, and 3 x (5000 - 1000) = 12000 recomputed in backward:
//   DP+ckpt:     persistent 2016 + 4004 + 3000 = 9020            transient 6104 + 12000 = 18104
//   ZDP+ckpt:    persistent 2016 + 3000 = 5016                   transient 10108 + 12000 = 22108
//   REPL+ckpt:   persistent 16016 + 3000 = 19016                 transient 2100 + 12000 = 14100
//   mixed (2, 2, 12): shards 16 x 126 = 2016 again;
//   DP:          persistent 2016 + 2002 + 15000 = 19018          transient 2002 + 2100 = 4102
//   ZDP:         persistent 17016                                transient 2002 + 2002 + 2100 = 6104
//   tied (fp32): the full gradient g P = 4004 lives through the backward, so it is persistent, and
//                no slice gradient is transient:
//   DP:          persistent 21020 + 4004 = 25024                 transient 2100
//   ZDP:         persistent 17016 + 4004 = 21020                 transient 4004 + 2100 = 6104
//   REPLICATE:   persistent 31016 (its gradient is already whole) transient 2100
TEST_CASE("memory of a hand-made operator: shards, held weights, activations, ceilings", "[cost]") {
  Operator op;
  op.name = "toy";
  op.weights = {Weight{"w", 10, 100, true}, Weight{"b", 1, 1, false}};
  op.saved_bytes_per_sample = 5000;
  op.input_bytes_per_sample = 1000;
  op.workspace_bytes_per_sample = 700;
  op.checkpointable = true;
  REQUIRE(op.parameters() == 1001);
  const PrecisionBytes fp32 = precision_bytes(Precision::kFp32);
  const PrecisionBytes mixed = precision_bytes(Precision::kMixed);
  for (const Tier tier : {Tier::kPaper, Tier::kExtended}) {
    CAPTURE(to_string(tier));
    const CostModel m(synthetic_cluster(), nullptr, Precision::kFp32, CostOptions{tier});
    const auto check = [&](const Choice& ch, const PrecisionBytes& B, double persistent, double transient) {
      CAPTURE(ch.label());
      const ChoiceCost c = m.cost(op, ch, 3, B);
      CHECK(c.persistent_bytes == persistent);
      CHECK(c.transient_bytes == transient);
    };
    check(dp(), fp32, 21020, 6104);
    check(zdp(), fp32, 17016, 10108);
    check(split(4, 1), fp32, 20028, 4108);
    check(split(4, 0), fp32, 21032, 3104);
    check(split(4, 4), fp32, 17016, 4108);
    check(replicate(), fp32, 31016, 2100);
    check(dp(true), fp32, 9020, 18104);
    check(zdp(true), fp32, 5016, 22108);
    check(replicate(true), fp32, 19016, 14100);
    check(dp(), mixed, 19018, 4102);
    check(zdp(), mixed, 17016, 6104);

    op.tied_gradient = true;
    check(dp(), fp32, 25024, 2100);
    check(zdp(), fp32, 21020, 6104);
    check(replicate(), fp32, 31016, 2100);
    op.tied_gradient = false;

    // An operator that cannot be checkpointed ignores the request.
    op.checkpointable = false;
    check(dp(true), fp32, 21020, 6104);
    check(zdp(true), fp32, 17016, 10108);
    op.checkpointable = true;
  }
}

// GPT-2 XL layer-0 attention, N = 8, b = 2: P = 10,249,600 = 8 x 1,281,200 = 4 x 2,562,400.
//   fp32 (4, 4, 8):  shards 16 x 1,281,200 = 20,499,200; gathered weights w P = 40,998,400;
//                    a slice w P/4 = g P/4 = 10,249,600.
//   mixed (2, 2, 12): shards 16 x 1,281,200 = 20,499,200; w P = 20,499,200; w P/4 = 5,124,800.
// Activations from the operator (their values are checked in test_workload.cpp).
TEST_CASE("memory of a real attention operator: DP, ZDP, split, REPLICATE, checkpointed", "[cost]") {
  ModelSpec spec = load_model("gpt2-1.5b");
  for (const Precision prec : {Precision::kFp32, Precision::kMixed}) {
    CAPTURE(to_string(prec));
    spec.precision = prec;
    const Workload w = lower(spec);
    const Operator& att = find_op(w, "layer0.attention");
    const CostModel m(synthetic_cluster(), nullptr, prec, CostOptions{});
    const double wb = prec == Precision::kFp32 ? 4 : 2;  // w = g
    const double shards = 20'499'200, full = wb * 10'249'600, quarter = wb * 2'562'400;
    const double b = 2, saved = b * att.saved_bytes_per_sample, input = b * att.input_bytes_per_sample;
    const double ws = b * att.workspace_bytes_per_sample;
    const auto check = [&](const Choice& ch, double persistent, double transient) {
      CAPTURE(ch.label());
      const ChoiceCost c = m.cost(att, ch, 2, w.bytes);
      CHECK(c.persistent_bytes == Approx(persistent).epsilon(kRel));
      CHECK(c.transient_bytes == Approx(transient).epsilon(kRel));
    };
    check(dp(), shards + full + saved, full + ws);
    check(zdp(), shards + saved, 2 * full + ws);
    check(split(4, 1), shards + 3 * quarter + saved, 2 * quarter + ws);
    check(split(4, 3), shards + quarter + saved, 2 * quarter + ws);
    check(replicate(), 16 * 10'249'600.0 + saved, ws);
    check(dp(true), shards + full + input, full + ws + saved - input);
    check(zdp(true), shards + input, 2 * full + ws + saved - input);
    check(split(4, 1, true), shards + 3 * quarter + input, 2 * quarter + ws + saved - input);
    check(replicate(true), 16 * 10'249'600.0 + input, ws + saved - input);
  }
}

// The tied embedding of GPT-2 XL: P = V h + s h + 2h = 80,411,200 + 1,638,400 + 3,200 = 82,052,800,
// ceil(P/8) = 10,256,600; fp32. Its full gradient (g P) is persistent, none is transient.
TEST_CASE("memory of the tied embedding keeps its whole gradient", "[cost]") {
  const Workload w = lower(load_model("gpt2-1.5b"));
  const Operator& emb = w.operators.front();
  REQUIRE(emb.parameters() == 82'052'800);
  REQUIRE(emb.tied_gradient);
  const CostModel m(synthetic_cluster(), nullptr, Precision::kFp32, CostOptions{});
  const double P = 82'052'800, shards = 16 * 10'256'600.0, b = 2;
  const double saved = b * emb.saved_bytes_per_sample, ws = b * emb.workspace_bytes_per_sample;
  const ChoiceCost d = m.cost(emb, dp(), 2, w.bytes);
  CHECK(d.persistent_bytes == Approx(shards + 4 * P + saved + 4 * P).epsilon(kRel));
  CHECK(d.transient_bytes == Approx(ws).epsilon(kRel));
  const ChoiceCost z = m.cost(emb, zdp(), 2, w.bytes);
  CHECK(z.persistent_bytes == Approx(shards + saved + 4 * P).epsilon(kRel));
  CHECK(z.transient_bytes == Approx(4 * P + ws).epsilon(kRel));
  const ChoiceCost s = m.cost(emb, split(4, 2), 2, w.bytes);  // P / 4 = 20,513,200
  CHECK(s.persistent_bytes == Approx(shards + 2 * 4 * 20'513'200.0 + saved + 4 * P).epsilon(kRel));
  // The head's forward and backward are adjacent: both ZDP slices stay gathered together.
  CHECK(s.transient_bytes == Approx(2 * 4 * 20'513'200.0 + ws).epsilon(kRel));
  const ChoiceCost r = m.cost(emb, replicate(), 2, w.bytes);
  CHECK(r.persistent_bytes == Approx(16 * P + saved).epsilon(kRel));
  CHECK(r.transient_bytes == Approx(ws).epsilon(kRel));
}

// ---------------------------------------------------------------------------------------------------
// Properties of the memory, over every kind of operator and every choice.

// Splitting never increases the transient: with k = 0 (all DP) only the slice gradient g ceil(P/n)
// is transient; with k > 0 one gathered slice w ceil(P/n) too; both shrink as n grows. (Not for a
// checkpointed operator, whose recompute holds all k ZDP slices, k w ceil(P/n), nor a tied head:
// there splitting with the same share of ZDP slices, k/n = kf/fine, never costs more.)
// More ZDP slices never increase the persistent bytes ((n - k) w ceil(P/n) held), so ZDP <= DP;
// checkpointing keeps the input instead of every saved activation (input <= saved).
TEST_CASE("memory properties: splitting, ZDP and checkpointing never cost memory", "[cost]") {
  const CostModel m(synthetic_cluster(), nullptr, Precision::kFp32, CostOptions{});
  for (const auto& op : sample_operators()) {
    const PrecisionBytes B = precision_bytes(
        op.kind == OperatorKind::kProjection || op.kind == OperatorKind::kHead ? Precision::kMixed
                                                                               : Precision::kFp32);
    const std::vector<int> ns = op.splits(16);
    for (const bool ckpt : {false, true}) {
      for (const int b : {1, 3}) {
        CAPTURE(op.name, ckpt, b);
        const auto cost = [&](int n, int k) { return m.cost(op, split(n, k, ckpt), b, B); };
        CHECK(cost(1, 1).persistent_bytes <= cost(1, 0).persistent_bytes);
        for (std::size_t i = 0; i < ns.size(); ++i) {
          const int n = ns[i];
          for (int k = 1; k <= n; ++k) {
            CAPTURE(n, k);
            CHECK(cost(n, k).persistent_bytes <= cost(n, k - 1).persistent_bytes);
          }
          for (std::size_t j = i + 1; j < ns.size(); ++j) {
            const int fine = ns[j];
            CAPTURE(n, fine);
            CHECK(cost(fine, 0).transient_bytes <= cost(n, 0).transient_bytes);
            const bool all_slices = (ckpt && op.checkpointable) || op.tied_gradient;
            for (int k = 1; k <= n; ++k)
              for (int kf = 1; kf <= fine; ++kf)
                if (!all_slices || kf * n == k * fine)
                  CHECK(cost(fine, kf).transient_bytes <= cost(n, k).transient_bytes);
          }
        }
      }
    }
    for (const Choice& ch : all_choices(op)) {
      if (ch.checkpoint) continue;
      Choice with = ch;
      with.checkpoint = true;
      CAPTURE(op.name, ch.label());
      CHECK(m.cost(op, with, 4, B).persistent_bytes <= m.cost(op, ch, 4, B).persistent_bytes);
      // Memory does not depend on the links or on the tier.
      const CostModel paper(synthetic_cluster(), nullptr, Precision::kFp32, CostOptions{Tier::kPaper});
      CHECK(paper.cost(op, ch, 4, B).persistent_bytes == m.cost(op, ch, 4, B).persistent_bytes);
      CHECK(paper.cost(op, ch, 4, B).transient_bytes == m.cost(op, ch, 4, B).transient_bytes);
    }
  }
}

// A checkpointed operator split 4 ways with 2 ZDP slices: its recompute reuses the backward gather,
// so both ZDP slices are held together (2 w ceil(P/4)); gathering again for the recompute
// (checkpoint_regather) holds one slice at a time (w ceil(P/4)) and costs 2 more all-gathers.
TEST_CASE("checkpoint regather trades a gather per ZDP slice for one slice held at a time", "[cost]") {
  const Workload w = lower(load_model("gpt2-1.5b"));
  const Operator& att = w.operators[1];
  REQUIRE(att.kind == OperatorKind::kAttention);
  const double Ps = std::ceil(static_cast<double>(att.parameters()) / 4);
  CostOptions regather;
  regather.checkpoint_regather = true;
  const CostModel reuse_model(synthetic_cluster(), nullptr, Precision::kFp32, CostOptions{});
  const CostModel regather_model(synthetic_cluster(), nullptr, Precision::kFp32, regather);
  const ChoiceCost reuse = reuse_model.cost(att, split(4, 2, true), 2, w.bytes);
  const ChoiceCost again = regather_model.cost(att, split(4, 2, true), 2, w.bytes);
  CHECK(reuse.transient_bytes - again.transient_bytes == Approx(4 * Ps).epsilon(kRel));
  CHECK(reuse.persistent_bytes == again.persistent_bytes);
  // Two extra all-gathers of w Ps each, with overlap off (the synthetic cluster): time adds up.
  const double ag = reuse_model.collective_s(Collective::kAllGather, 4 * Ps);
  CHECK(again.comm_s - reuse.comm_s == Approx(2 * ag).epsilon(kRel));
}
