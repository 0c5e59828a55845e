// Small models and hand-made plans for the executor tests.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "costmodel/model.hpp"
#include "costmodel/plan.hpp"
#include "costmodel/workload.hpp"
#include "validate/backends.hpp"

namespace osdp::validate::testing {

// The backend an MPI test runs on (fp32 GEMMs, a 60 s collective timeout), or null after printing
// why it cannot run here: the test then exits 77 (skipped).
inline std::unique_ptr<BackendSession> open_test_backend(const std::string& name) {
  if (const std::string why = backend_unavailable_reason(name); !why.empty()) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return nullptr;
  }
  return open_backend(name, BackendOptions{60, GemmMath::kFp32});
}

// A GPT of `layers` layers at hidden h (4 heads), sequence 8, vocabulary 40; with `stages` > 1 a
// second stage of hidden 2h follows (so a projection operator appears).
inline costmodel::ModelSpec tiny_model(bool tied, int stages = 1, int h = 16) {
  costmodel::ModelSpec m;
  m.name = tied ? "tiny-tied" : "tiny-untied";
  m.seq = 8;
  m.vocab = 40;
  m.tied_embeddings = tied;
  m.dropout = false;
  m.stages.push_back({2, h, 4, 4 * h});
  if (stages > 1) m.stages.push_back({1, 2 * h, 4, 8 * h});
  return m;
}

// A llama-family model ("llama", "qwen2": QKV biases, "qwen3": Q/K head norms; costmodel/model.hpp) of
// `layers` layers at hidden 48: 4 query heads over 2 key/value heads of size 16 (so the heads are 64
// wide, not 48), a gated MLP of ffn 64, RMSNorm, rotary positions, an untied head, vocabulary 128,
// fp32. Fused attention keeps no scores: at sequence 16 the executor saves K^T V in their place (at 8
// the scores still fit the IR's bytes; numerics.hpp).
inline costmodel::ModelSpec llama_model(const std::string& family, int layers = 2, int seq = 16) {
  costmodel::ModelSpec m;
  costmodel::apply_family_defaults(m, family);
  m.name = "tiny-" + family;
  m.precision = costmodel::Precision::kFp32;
  m.seq = seq;
  m.vocab = 128;
  m.stages.push_back({layers, 48, 4, 64, 2, 16});
  return m;
}

// The models the executor's step tests run: the GPT tied (one stage) and untied (two stages, a
// projection between them), and the llama family's three kinds (untied, 2 layers).
inline std::vector<costmodel::ModelSpec> step_test_models() {
  return {tiny_model(true, 1), tiny_model(false, 2), llama_model("llama"), llama_model("qwen2"),
          llama_model("qwen3")};
}

// `ranks` in `nodes` nodes (a slower link between them when there are several).
inline costmodel::ClusterSpec tiny_cluster(int ranks, bool overlap, int nodes = 1) {
  costmodel::ClusterSpec c;
  c.name = "cpu";
  c.nodes = nodes;
  c.devices_per_node = ranks / nodes;
  if (nodes > 1) c.inter = costmodel::LinkSpec{5e-5, 1e8};
  c.memory_bytes = 1e12;
  c.overlap.enabled = overlap;
  c.intra.alpha_s = 1e-5;
  c.intra.bandwidth_bytes_per_s = 1e9;
  c.compute.fp32_flops_per_s = 5e10;
  c.compute.memory_bandwidth_bytes_per_s = 1e10;
  return c;
}

using ChoiceFor = std::function<costmodel::Choice(const costmodel::Operator&, int index)>;

// The largest split <= 4 the operator allows, 1 when none.
inline int widest_split(const costmodel::Operator& op) {
  return op.splits(4).back();
}

struct NamedPlan {
  std::string name;
  ChoiceFor choose;
  bool regather = false;
};

inline std::vector<NamedPlan> plan_patterns() {
  using costmodel::Choice;
  using costmodel::Operator;
  return {
      {"dp",
       [](const Operator&, int) {
         return Choice{false, 1, 0, false};
       }},
      {"zdp",
       [](const Operator&, int) {
         return Choice{false, 1, 1, false};
       }},
      {"replicate",
       [](const Operator&, int) {
         return Choice{true, 1, 0, false};
       }},
      {"split-k-of-n",
       [](const Operator& op, int) {
         const int n = widest_split(op);
         return Choice{false, n, n / 2, false};
       }},
      {"split-zdp",
       [](const Operator& op, int) {
         const int n = widest_split(op);
         return Choice{false, n, n, false};
       }},
      {"zdp-ckpt",
       [](const Operator&, int) {
         return Choice{false, 1, 1, true};
       }},
      {"zdp-ckpt-regather",
       [](const Operator&, int) {
         return Choice{false, 1, 1, true};
       },
       true},
      {"mixed",
       [](const Operator& op, int i) {
         const int n = widest_split(op);
         switch (i % 5) {
           case 0:
             return Choice{false, 1, 0, false};
           case 1:
             return Choice{false, n, n > 1 ? 1 : 0, true};
           case 2:
             return Choice{true, 1, 0, false};
           case 3:
             return Choice{false, 1, 1, true};
           default:
             return Choice{false, n, n, false};
         }
       }},
  };
}

// Node groups (HSDP) and two-level collectives, alone and mixed with the single-level choices.
inline std::vector<NamedPlan> leveled_patterns() {
  using costmodel::Choice;
  using costmodel::Operator;
  return {
      {"hsdp", [](const Operator&, int) { return Choice{false, 1, 1, false, true, false}; }},
      {"hsdp-dp", [](const Operator&, int) { return Choice{false, 1, 0, false, true, false}; }},
      {"two-level", [](const Operator&, int) { return Choice{false, 1, 1, false, false, true}; }},
      {"two-level-split-ckpt-regather",
       [](const Operator& op, int) {
         const int n = widest_split(op);
         return Choice{false, n, n > 1 ? n / 2 : 1, true, false, true};
       },
       true},
      {"levels-mixed",
       [](const Operator& op, int i) {
         const int n = widest_split(op);
         switch (i % 5) {
           case 0:
             return Choice{false, n, n, false, true, false};
           case 1:
             return Choice{false, 1, 1, true, false, true};
           case 2:
             return Choice{false, n, n > 1 ? 1 : 0, false, false, false};
           case 3:
             return Choice{true, 1, 0, false};
           default:
             return Choice{false, 1, 0, true, true, false};
         }
       }},
  };
}

inline costmodel::Plan make_plan(const costmodel::ModelSpec& m, const costmodel::ClusterSpec& c,
                                 const costmodel::Workload& w, int batch, int prefetch,
                                 const NamedPlan& pattern) {
  costmodel::Plan p;
  p.strategy = pattern.name;
  p.model = m;
  p.cluster = c;
  p.batch_size = batch;
  p.prefetch = prefetch;
  p.cost_options.prefetch = prefetch;
  p.cost_options.checkpoint_regather = pattern.regather;
  std::vector<costmodel::Choice> choices;
  for (std::size_t u = 0; u < w.operators.size(); ++u)
    choices.push_back(pattern.choose(w.operators[u], static_cast<int>(u)));
  costmodel::set_data_parallel(p, w, std::move(choices));
  return p;
}

}  // namespace osdp::validate::testing
