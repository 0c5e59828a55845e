// Writes the executor's unsharded step on one of the test models as the torch backend's check reads
// it (experiments::executor_reference: the weights before and after, the gradients, the tokens, and a
// JSON description on stdout), for test_executor_model.py to compare osdp.torch.ExecutorModel with.
// Usage: executor_reference DIR MODEL, MODEL one of gpt, llama, llama-materialized, qwen2, qwen3,
// qwen3-tied (executor_fixtures.hpp; batch 2).
#include <cstdio>
#include <iostream>
#include <string>

#include "costmodel/error.hpp"
#include "executor_fixtures.hpp"
#include "experiments/torch_measured.hpp"

using namespace osdp;
using namespace osdp::validate::testing;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr,
                 "usage: executor_reference DIR gpt|llama|llama-materialized|qwen2|qwen3|qwen3-tied\n");
    return 2;
  }
  const std::string name = argv[2];
  costmodel::ModelSpec m;
  if (name == "gpt") {
    m = tiny_model(false, 2);
  } else if (name == "llama-materialized") {
    m = llama_model("llama", 2, 8);
    m.attention = costmodel::AttentionKind::kMaterialized;
  } else if (name == "qwen3-tied") {
    m = llama_model("qwen3");
    m.tied_embeddings = true;
  } else if (name == "llama" || name == "qwen2" || name == "qwen3") {
    m = llama_model(name);
  } else {
    std::fprintf(stderr, "executor_reference: no test model %s\n", name.c_str());
    return 2;
  }
  try {
    const costmodel::Workload w = costmodel::lower(m);
    const costmodel::Plan p = make_plan(m, tiny_cluster(1, false), w, 2, 0, plan_patterns().front());
    std::cout << experiments::check_reference(p, argv[1], 0, true).dump() << "\n";
  } catch (const Error& e) {
    std::fprintf(stderr, "executor_reference: %s\n", e.what());
    return 1;
  }
  return 0;
}
