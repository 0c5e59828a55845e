// What users see of a simulation (DESIGN.md section 6): a summary, a Chrome trace-event file that
// opens in Perfetto (ui.perfetto.dev) or chrome://tracing, and the memory timeline as CSV.
//
// Summary (the critical rank is the one that finished last):
//   exposed_comm_s = iteration_time_s - compute_busy_s   (the step time compute did not cover;
//                    compute_busy_s includes the interference slowdown while collectives run)
//   peak_memory_bytes = max over ranks of the peak, reserve included; peak_breakdown splits it by
//                    buffer category plus "reserve", and its entries sum to peak_memory_bytes.
//   per stage (its first rank): compute, comm and send busy time and the peak; bubble_fraction =
//   1 - the stages' compute busy time / (pp x the step)
// Trace: one process per simulated rank (pid = rank, "rank N", with its stage on a pipeline), thread 0
// "compute" and thread 1 "comm" (and 2, 3 the send streams on a pipeline) with one complete event per
// task (ts and dur in microseconds), and a counter "memory" per rank with the bytes in use per
// category after each instant of its memory timeline. The trace
// needs SimOptions.record_tasks and, for the counters, memory_rank = SimOptions::kAllRanks.
// CSV: time_s,rank,buffer,category,delta_bytes,total_bytes — one row per memory event, totals with
// the reserve included, as the engine recorded them.
//
// Same input, same bytes out: events are sorted by (time, rank, stream, task), times are printed
// from integer ticks exactly, and nothing depends on addresses or hash order. Only the summary's
// wall_time_s and events_per_second vary between runs.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "costmodel/plan.hpp"
#include "sim/engine.hpp"
#include "sim/replay.hpp"
#include "sim/schedule.hpp"

namespace osdp::sim {

// The options a trace needs on top of `base`: every task recorded, every rank's memory timeline.
SimOptions trace_options(SimOptions base);

nlohmann::json summary_json(const Schedule& schedule, const SimResult& result);
nlohmann::json chrome_trace(const Schedule& schedule, const SimResult& result);
std::string memory_csv(const Schedule& schedule, const SimResult& result);

// What `osdp simulate --json` prints and osdp.simulate() returns: summary_json of the replay with the
// plan file (`source`), its model and cluster, how the ranks were simulated and the stragglers, the
// simulated throughput, and the analytic figures beside it: the plan's prediction, or the cost model's
// when `repriced` (the plan has none, or its prefetch was changed); and their relative differences.
nlohmann::json simulation_json(const costmodel::Plan& plan, const Replay& run, const std::string& source,
                               const std::string& ranks_mode, const std::vector<std::string>& stragglers,
                               bool repriced);

// Adds the 90% intervals of a simulation_json object over `draws` draws of the plan's calibration's
// uncertainty (costmodel/uncertainty.hpp): "iteration_time_interval_s" (each draw simulated with
// `options`, its trace and progress off) and "analytic"/"iteration_time_interval_s" (each draw
// priced by the cost model), with "interval_level" and "draws"; null intervals without a calibration
// that records errors.
void add_intervals(nlohmann::json& j, const costmodel::Plan& plan, int draws, SimOptions options);

// Seconds of `t` ticks written exactly ("0.000012345678"), for text outputs.
std::string format_tick_seconds(Tick t);

}  // namespace osdp::sim
