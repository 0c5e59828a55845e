#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "costmodel/bounds.hpp"
#include "costmodel/error.hpp"
#include "search/batch_solver.hpp"
#include "search/solvers.hpp"

namespace osdp::search {
namespace {

using costmodel::Choice;
using costmodel::kInf;

SolverOutcome outcome_from(const BatchCosts& costs, Instance inst, Solution sol,
                           const std::vector<std::vector<int>>& item_to_choice) {
  SolverOutcome o;
  o.instance = std::move(inst);
  o.solution = std::move(sol);
  if (o.solution.feasible) {
    for (std::size_t g = 0; g < costs.ops.size(); ++g)
      o.choices.push_back(costs.ops[g].choices()[item_to_choice[g][o.solution.chosen[g]]]);
  }
  return o;
}

Item item_of(const PricedOperator& po, int i) {
  const auto& c = po.costs()[i];
  return {c.time_s, c.persistent_bytes, c.transient_bytes};
}

std::string label_of(const PricedOperator& po, int i) {
  return po.labels() ? (*po.labels())[i] : po.choices()[i].label();
}

// Identity mapping: group g item i is operator g choice i.
std::vector<std::vector<int>> identity_map(const BatchCosts& costs) {
  std::vector<std::vector<int>> m(costs.ops.size());
  for (std::size_t g = 0; g < costs.ops.size(); ++g) {
    m[g].resize(costs.ops[g].choices().size());
    for (std::size_t i = 0; i < m[g].size(); ++i) m[g][i] = static_cast<int>(i);
  }
  return m;
}

class ExactSolver : public BatchSolver {
 public:
  std::string name() const override { return "exact"; }
  std::string summary() const override {
    return "optimum of the analytic model over DP/ZDP/REPLICATE, splits and checkpointing per operator";
  }
  SpaceOptions space(const SpaceOptions& r) const override { return r; }
  SolverOutcome solve(const BatchCosts& costs, double cutoff) const override {
    Instance inst = to_instance(costs);
    Solution sol = solve_exact(inst, cutoff, kMaxDpStates, costs.deadline);
    return outcome_from(costs, std::move(inst), std::move(sol), identity_map(costs));
  }
};

class DfsSolver : public BatchSolver {
 public:
  explicit DfsSolver(std::int64_t budget) : budget_(budget) {}
  std::string name() const override { return "dfs"; }
  std::string summary() const override {
    return fmt::format("the seed paper's depth-first search over the same space, at most {} nodes per batch",
                       budget_);
  }
  SpaceOptions space(const SpaceOptions& r) const override { return r; }
  SolverOutcome solve(const BatchCosts& costs, double) const override {
    Instance inst = to_instance(costs);
    Solution sol = solve_dfs(inst, budget_);
    return outcome_from(costs, std::move(inst), std::move(sol), identity_map(costs));
  }

 private:
  std::int64_t budget_;
};

// Every operator takes the same kind of choice; with checkpointing auto the uniform variants (none,
// full, selective where an operator has it) are tried and the fastest feasible one kept.
class UniformSolver : public BatchSolver {
 public:
  enum class Kind { kZdp, kDp, kReplicate, kZdpNode, kZdpTwoLevel };
  UniformSolver(std::string name, std::string summary, Kind kind)
      : name_(std::move(name)), summary_(std::move(summary)), kind_(kind) {}
  std::string name() const override { return name_; }
  std::string summary() const override { return summary_; }
  SpaceOptions space(const SpaceOptions& r) const override {
    SpaceOptions s = r;
    s.split_max = 1;
    s.replicate = kind_ == Kind::kReplicate;
    s.groups = kind_ == Kind::kZdpNode || kind_ == Kind::kZdpTwoLevel;
    return s;
  }
  SolverOutcome solve(const BatchCosts& costs, double) const override {
    SolverOutcome best;
    for (auto& [inst, map] : variants(costs)) {
      Solution sol = evaluate(inst, std::vector<int>(inst.groups.size(), 0));
      const bool better = best.instance.groups.empty() ||
                          (sol.feasible && (!best.solution.feasible || sol.time_s < best.solution.time_s));
      if (better) best = outcome_from(costs, std::move(inst), std::move(sol), map);
    }
    return best;
  }
  double min_peak_bytes(const BatchCosts& costs) const override {
    double best = kInf;
    for (const auto& v : variants(costs)) best = std::min(best, search::min_peak_bytes(v.first));
    return best;
  }

 private:
  // One single-item instance per checkpointing variant the priced space allows.
  std::vector<std::pair<Instance, std::vector<std::vector<int>>>> variants(const BatchCosts& costs) const {
    std::vector<std::pair<Instance, std::vector<std::vector<int>>>> out;
    for (const Choice variant : {Choice{}, Choice{false, 1, 0, true}, Choice{.selective = true}}) {
      Instance inst = empty_instance(costs);
      std::vector<std::vector<int>> map(costs.ops.size());
      bool available = true;
      for (std::size_t g = 0; g < costs.ops.size() && available; ++g) {
        const auto& po = costs.ops[g];
        int pick = -1;
        for (std::size_t i = 0; i < po.choices().size(); ++i) {
          const Choice& c = po.choices()[i];
          const bool node = kind_ == Kind::kZdpNode, two = kind_ == Kind::kZdpTwoLevel;
          const bool mode_ok =
              kind_ == Kind::kReplicate ? c.replicate
              : kind_ == Kind::kDp
                  ? (c.is_dp() && c.split == 1 && !c.node_group && !c.two_level)
                  : (c.is_zdp() && c.split == 1 && c.node_group == node && c.two_level == two);
          if (mode_ok && c.recompute() == po.op->recompute(variant)) pick = static_cast<int>(i);
        }
        if (pick < 0)
          available = false;
        else {
          map[g] = {pick};
          inst.groups.push_back({po.op->name,
                                 {item_of(po, pick)},
                                 std::make_shared<const std::vector<std::string>>(1, label_of(po, pick))});
        }
      }
      if (available) out.emplace_back(std::move(inst), std::move(map));
    }
    return out;
  }

  std::string name_, summary_;
  Kind kind_;
};

// The released OSDP code's space and solver: per transformer layer four choices (attention ZDP or
// not x MLP ZDP or not), other operators DP or ZDP, no splitting; a group knapsack over whole MiB
// (persistent bytes rounded up per group, the budget rounded down after setting aside the largest
// transient of the space, so every plan it returns fits).
class OsdpRefSolver : public BatchSolver {
 public:
  std::string name() const override { return "osdp-ref"; }
  std::string summary() const override {
    return "the released OSDP code's space (per layer attention/MLP ZDP or not, no splitting), MiB knapsack";
  }
  SpaceOptions space(const SpaceOptions& r) const override {
    SpaceOptions s = r;
    s.split_max = 1;
    s.replicate = false;
    s.groups = false;
    return s;
  }
  // What its MiB knapsack needs: the largest transient set aside, every block at its smallest
  // persistent size rounded up to whole MiB.
  double min_peak_bytes(const BatchCosts& costs) const override {
    double best = kInf;
    for (bool ckpt : {false, true}) {
      const Blocks b = build_blocks(costs, ckpt);
      if (b.instance.groups.empty()) continue;
      double mib = 0;
      for (const auto& g : b.instance.groups) {
        double m = kInf;
        for (const auto& it : g.items) m = std::min(m, std::ceil(it.persistent_bytes / kMiB));
        mib += m;
      }
      best = std::min(best, b.instance.fixed_memory_bytes + max_transient(b.instance) + mib * kMiB);
    }
    return best;
  }
  SolverOutcome solve(const BatchCosts& costs, double) const override {
    SolverOutcome best;
    for (bool ckpt : {false, true}) {
      SolverOutcome o = solve_blocks(costs, build_blocks(costs, ckpt));
      if (o.instance.groups.empty()) continue;
      const bool better =
          best.instance.groups.empty() ||
          (o.solution.feasible && (!best.solution.feasible || o.solution.time_s < best.solution.time_s));
      if (better) best = std::move(o);
    }
    return best;
  }

 private:
  static constexpr double kMiB = 1048576.0;

  static double max_transient(const Instance& inst) {
    double t = 0;
    for (const auto& g : inst.groups)
      for (const auto& it : g.items) t = std::max(t, it.transient_bytes);
    return t;
  }

  struct Blocks {
    std::vector<std::vector<std::size_t>> ops;         // block -> operator indices
    std::vector<std::vector<std::vector<int>>> combo;  // block -> item -> choice index per operator
    Instance instance;                                 // empty when the space lacks a needed choice
  };

  static Blocks build_blocks(const BatchCosts& costs, bool ckpt) {
    Blocks out;
    // A layer's attention and MLP form one block; every other operator is a block of its own.
    for (std::size_t g = 0; g < costs.ops.size(); ++g) {
      const auto* op = costs.ops[g].op;
      if (op->kind == costmodel::OperatorKind::kMlp && !out.ops.empty() && out.ops.back().size() == 1 &&
          costs.ops[out.ops.back()[0]].op->layer == op->layer)
        out.ops.back().push_back(g);
      else
        out.ops.push_back({g});
    }
    // Per operator: the DP and ZDP choice indices with the requested checkpointing.
    std::vector<std::array<int, 2>> pick(costs.ops.size(), {-1, -1});
    for (std::size_t g = 0; g < costs.ops.size(); ++g) {
      const auto& po = costs.ops[g];
      for (std::size_t i = 0; i < po.choices().size(); ++i) {
        const Choice& c = po.choices()[i];
        if (c.split != 1 || c.replicate || c.selective || c.checkpoint != (ckpt && po.op->checkpointable))
          continue;
        pick[g][c.is_zdp() ? 1 : 0] = static_cast<int>(i);
      }
      if (pick[g][0] < 0 || pick[g][1] < 0) return {};
    }
    Instance inst = empty_instance(costs);
    for (const auto& block : out.ops) {
      const auto* first = costs.ops[block[0]].op;
      Group grp;
      grp.name = first->layer >= 0 ? fmt::format("layer{}", first->layer) : first->name;
      std::vector<std::vector<int>> items;
      auto labels = std::make_shared<std::vector<std::string>>();
      for (int mask = 0; mask < (1 << block.size()); ++mask) {
        Item it;
        std::string label;
        std::vector<int> chosen;
        for (std::size_t j = 0; j < block.size(); ++j) {
          const int ci = pick[block[j]][(mask >> j) & 1];
          const Item one = item_of(costs.ops[block[j]], ci);
          it.time_s += one.time_s;
          it.persistent_bytes += one.persistent_bytes;
          it.transient_bytes = std::max(it.transient_bytes, one.transient_bytes);
          label += (j ? "," : "") + label_of(costs.ops[block[j]], ci);
          chosen.push_back(ci);
        }
        grp.items.push_back(it);
        labels->push_back(std::move(label));
        items.push_back(chosen);
      }
      grp.labels = std::move(labels);
      inst.groups.push_back(std::move(grp));
      out.combo.push_back(std::move(items));
    }
    out.instance = std::move(inst);
    return out;
  }

  static SolverOutcome solve_blocks(const BatchCosts& costs, Blocks blocks) {
    if (blocks.instance.groups.empty()) return {};
    Instance inst = std::move(blocks.instance);
    // Knapsack over whole MiB.
    const double budget = inst.capacity_bytes - inst.fixed_memory_bytes - max_transient(inst);
    Solution sol;
    if (budget >= 0) {
      const auto cap = static_cast<std::size_t>(std::floor(budget / kMiB));
      const std::size_t ngroups = inst.groups.size();
      std::vector<double> dp(cap + 1, 0.0), next(cap + 1);
      std::vector<std::vector<signed char>> choice(ngroups, std::vector<signed char>(cap + 1, -1));
      for (std::size_t g = 0; g < ngroups; ++g) {
        std::fill(next.begin(), next.end(), kInf);
        for (std::size_t i = 0; i < inst.groups[g].items.size(); ++i) {
          const auto& it = inst.groups[g].items[i];
          const auto w = static_cast<std::size_t>(std::ceil(it.persistent_bytes / kMiB));
          for (std::size_t m = w; m <= cap; ++m) {
            const double t = dp[m - w] + it.time_s;
            if (t < next[m]) {
              next[m] = t;
              choice[g][m] = static_cast<signed char>(i);
            }
          }
        }
        dp.swap(next);
      }
      if (dp[cap] < kInf) {
        std::vector<int> sel(ngroups);
        std::size_t m = cap;
        for (std::size_t g = ngroups; g-- > 0;) {
          sel[g] = choice[g][m];
          m -= static_cast<std::size_t>(std::ceil(inst.groups[g].items[sel[g]].persistent_bytes / kMiB));
        }
        sol = evaluate(inst, sel);
      }
    }
    SolverOutcome o;
    o.instance = std::move(inst);
    o.solution = sol;
    if (sol.feasible) {
      o.choices.resize(costs.ops.size());
      for (std::size_t bi = 0; bi < blocks.ops.size(); ++bi)
        for (std::size_t j = 0; j < blocks.ops[bi].size(); ++j)
          o.choices[blocks.ops[bi][j]] =
              costs.ops[blocks.ops[bi][j]].choices()[blocks.combo[bi][o.solution.chosen[bi]][j]];
    }
    return o;
  }
};

}  // namespace

double BatchSolver::lower_bound_s(const BatchCosts& costs) const {
  // Every strategy picks, per operator, one of the choices priced in its space, under the memory
  // limit: the LP relaxation over those bounds any of its plans.
  return lower_bound_time(to_instance(costs));
}

double BatchSolver::quick_lower_bound_s(const BatchCosts& costs) const {
  return quick_lower_bound_time(to_instance(costs));
}

double BatchSolver::min_peak_bytes(const BatchCosts& costs) const {
  return search::min_peak_bytes(to_instance(costs));
}

void SolverRegistry::add(std::unique_ptr<BatchSolver> s) {
  items_.push_back(std::move(s));
}

const BatchSolver& SolverRegistry::get(const std::string& name) const {
  for (const auto& s : items_)
    if (s->name() == name) return *s;
  std::string list;
  for (const auto& n : names()) list += (list.empty() ? "" : ", ") + n;
  throw UsageError(fmt::format("unknown strategy \"{}\" (known: {})", name, list));
}

std::vector<std::string> SolverRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& s : items_) out.push_back(s->name());
  return out;
}

SolverRegistry default_solvers(const SolverLimits& limits) {
  SolverRegistry r;
  r.add(std::make_unique<ExactSolver>());
  r.add(std::make_unique<UniformSolver>("fsdp", "every operator ZDP (ZeRO-3, FSDP full shard)",
                                        UniformSolver::Kind::kZdp));
  r.add(std::make_unique<UniformSolver>("zero2", "every operator DP (gathered once, kept through backward)",
                                        UniformSolver::Kind::kDp));
  r.add(std::make_unique<UniformSolver>("ddp", "every operator REPLICATE (classic data parallel)",
                                        UniformSolver::Kind::kReplicate));
  r.add(std::make_unique<UniformSolver>(
      "hsdp", "every operator ZDP within its node, replicated across nodes (HSDP; clusters of several nodes)",
      UniformSolver::Kind::kZdpNode));
  r.add(std::make_unique<UniformSolver>(
      "fsdp-2level",
      "every operator ZDP over all ranks with two-level collectives (clusters of several nodes)",
      UniformSolver::Kind::kZdpTwoLevel));
  r.add(std::make_unique<OsdpRefSolver>());
  r.add(std::make_unique<DfsSolver>(limits.dfs_node_budget));
  return r;
}

}  // namespace osdp::search
