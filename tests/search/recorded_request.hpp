// A plan request priced by a recorded calibration whose fits carry errors (a 2-rank shared-memory run
// of osdp calibrate, committed): val-4x384 on 2 CPU ranks at batch 2 under one strategy, without
// baselines or selective checkpointing. Shared by the tests of intervals (search, sim).
#pragma once

#include <string>

#include "search/request.hpp"

namespace osdp::testing {

inline search::PlanRequest recorded_request(const std::string& strategy) {
  search::PlanRequest r;
  r.model = "val-4x384";
  r.cluster = "cpu-2";
  r.calibration = std::string(OSDP_TEST_DATA_DIR) + "/results/lab/xeon-shm-intervals-a/calibration.json";
  r.batch = "2";
  r.baselines = {"none"};
  r.strategy = strategy;
  r.selective = false;
  return r;
}

}  // namespace osdp::testing
