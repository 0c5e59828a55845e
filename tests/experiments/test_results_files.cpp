// The files a sweep writes: results.csv and candidates.csv (experiments/results_files.cpp) and the
// results directory both osdp sweep and osdp validate write through (experiments/results_dir.hpp).
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "costmodel/error.hpp"
#include "experiments/results_dir.hpp"
#include "experiments/run.hpp"
#include "experiments/sweep.hpp"
#include "unit_rows.hpp"

using nlohmann::json;
using namespace osdp::experiments;
using osdp::experiments::testing::ev;
using osdp::experiments::testing::result;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::string line;
  for (char c : text) {
    if (c == '\n') {
      out.push_back(line);
      line.clear();
    } else {
      line += c;
    }
  }
  return out;
}

// The speedup column of a results.csv line (seven columns follow it: micro_batches, pp,
// global_batch and the interval's four).
std::string speedup_field(const std::string& line) {
  std::string rest = line;
  for (int i = 0; i < 7; ++i) rest = rest.substr(0, rest.rfind(','));
  return rest.substr(rest.rfind(',') + 1);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// The CSV writer

TEST_CASE("csv_field quotes per RFC 4180 only when needed", "[experiments][sweep]") {
  CHECK(csv_field("plain text; with semicolons") == "plain text; with semicolons");
  CHECK(csv_field("") == "");
  CHECK(csv_field("a, b") == "\"a, b\"");
  CHECK(csv_field("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CHECK(csv_field("two\nlines") == "\"two\nlines\"");
}

TEST_CASE("results.csv: sorted lines, quoting, speedup over the baseline per configuration and evaluator",
          "[experiments][sweep]") {
  // Two configurations x (fsdp, exact), baseline fsdp (position 0). Configuration 0: fsdp 10 and 20
  // samples/s (analytic, sim), exact 12.5 and 30 -> speedups 1.25 and 1.5. Configuration 1: fsdp does
  // not fit, exact does -> no speedup; given in a shuffled order.
  std::vector<UnitResult> rows{
      result(3, "exact", {ev("analytic", true, 40), ev("sim", true, 40)}, "attention: DP x 2, ZDP x 2"),
      result(0, "fsdp", {ev("analytic", true, 10), ev("sim", true, 20)}, "all \"ZDP\""),
      result(2, "fsdp", {ev("analytic", false, 0), ev("sim", false, 0)}),
      result(1, "exact", {ev("analytic", true, 12.5), ev("sim", true, 30)}, "mlp: DP x 2"),
  };
  // Unit 0's analytic step (0.8 s) has a 90% interval of 0.64-1 s: the throughput's is 8 / 1 to 8 / 0.64.
  rows[1].evaluations[0].interval = {0.64, 1.0};
  const auto lines = lines_of(results_csv(rows, 2, 0));
  REQUIRE(lines.size() == 1 + 8);
  CHECK(lines[0] ==
        "index,model,cluster,world_size,memory_limit_bytes,strategy,evaluator,feasible,batch_size,"
        "throughput_samples_per_s,iteration_time_s,peak_memory_bytes,min_fit_memory_bytes,plan_summary,"
        "speedup_over_baseline,micro_batches,pp,global_batch,iteration_time_low_s,iteration_time_high_s,"
        "throughput_low,throughput_high");
  // Unit 0, analytic: 8 / 10 = 0.8 s per step; the plan summary quoted with its quotes doubled; one
  // micro-batch, one stage, 4 samples on each of the 8 devices.
  CHECK(lines[1] ==
        "0,m,c,8,8000000000,fsdp,analytic,true,4,10,0.8,1000000000,,\"all "
        "\"\"ZDP\"\"\",1,1,1,32,0.64,1,8,12.5");
  CHECK(lines[2] == "0,m,c,8,8000000000,fsdp,sim,true,4,20,0.4,1000000000,,\"all \"\"ZDP\"\"\",1,1,1,32,,,,");
  CHECK(lines[3] ==
        "1,m,c,8,8000000000,exact,analytic,true,4,12.5,0.64,1000000000,,mlp: DP x 2,1.25,1,1,32,,,,");
  CHECK(speedup_field(lines[4]) == "1.5");
  // Unit 2 does not fit: empty batch, throughput, time, peak, speedup and layout; the memory that would fit.
  CHECK(lines[5] == "2,m,c,8,8000000000,fsdp,analytic,false,,,,,9500000000,,,,,,,,,");
  CHECK(lines[7] ==
        "3,m,c,8,8000000000,exact,analytic,true,4,40,0.2,1000000000,,\"attention: DP x 2, ZDP x "
        "2\",,1,1,32,,,,");

  // Without a baseline the column is there but empty.
  for (const auto& line : lines_of(results_csv(rows, 2, -1)))
    if (line[0] != 'i') CHECK(speedup_field(line).empty());
  // The baseline may be any position: exact (1) as the baseline gives fsdp 10 / 12.5 = 0.8.
  CHECK(speedup_field(lines_of(results_csv(rows, 2, 1))[1]) == "0.8");
}

TEST_CASE("results.csv is the same after a round trip through rows.jsonl's JSON", "[experiments][sweep]") {
  // A resumed sweep reads its rows back from JSON: the CSV must not change by a bit.
  std::vector<UnitResult> rows{
      result(0, "fsdp", {ev("analytic", true, 1.0 / 3.0), ev("sim", true, 2.0 / 7.0)}),
      result(1, "exact", {ev("analytic", true, 0.1 + 0.2), ev("sim", true, 1e-7 / 3)})};
  rows[0].candidates = {{1, 0.1 / 3, 123456789.5, 7.0 / 9.0}};
  rows[1].evaluations[1].interval = {1e-7 / 7, 1e-7 / 2.9};  // an interval survives the trip too
  std::vector<UnitResult> back;
  for (const auto& r : rows) back.push_back(unit_result_from_json(json::parse(to_json(r).dump())));
  CHECK(results_csv(rows, 2, 0) == results_csv(back, 2, 0));
  CHECK(back[1].evaluations[1].interval.low == rows[1].evaluations[1].interval.low);
  CHECK(back[1].evaluations[1].interval.high == rows[1].evaluations[1].interval.high);
  CHECK(!back[0].evaluations[0].interval.known());
  CHECK(candidates_csv(rows) == candidates_csv(back));
  CHECK(lines_of(candidates_csv(rows)).size() == 2);
}

// ---------------------------------------------------------------------------------------------------
// The results directory both osdp sweep and osdp validate write through

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("ResultsDir: locked, finished rows kept unless --resume or --force", "[experiments][sweep]") {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("osdp_results_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  const std::vector<std::string> finals{"results.csv"};
  {
    ResultsDir d(dir, {false, false, finals});
    CHECK_FALSE(d.resuming());
    // A second writer of the same directory is refused while the first holds it.
    CHECK_THROWS_AS(ResultsDir(dir, {true, false, finals}), osdp::UsageError);
    d.append(R"({"index": 0})");
    d.append(R"({"index": 1})");
  }
  std::ofstream(dir + "/results.csv") << "final\n";
  const std::string rows = slurp(dir + "/rows.jsonl");
  CHECK(rows == "{\"index\": 0}\n{\"index\": 1}\n");

  SECTION("neither --resume nor --force: refused, nothing touched") {
    CHECK(ResultsDir::refusal(dir, {false, false, finals}).find("--resume") != std::string::npos);
    CHECK_THROWS_AS(ResultsDir(dir, {false, false, finals}), osdp::UsageError);
    CHECK(slurp(dir + "/rows.jsonl") == rows);
    CHECK(std::filesystem::exists(dir + "/results.csv"));
  }
  SECTION("--resume: the caller keeps what matches, then appends after it") {
    CHECK(ResultsDir::refusal(dir, {true, false, finals}).empty());
    ResultsDir d(dir, {true, false, finals});
    CHECK(d.resuming());
    d.keep({R"({"index": 1})"});
    d.append(R"({"index": 2})");
    CHECK(slurp(dir + "/rows.jsonl") == "{\"index\": 1}\n{\"index\": 2}\n");
  }
  SECTION("--force: the rows and the final files of the earlier run are deleted") {
    ResultsDir d(dir, {false, true, finals});
    CHECK_FALSE(d.resuming());
    CHECK_FALSE(std::filesystem::exists(dir + "/results.csv"));
    d.append(R"({"index": 9})");
    CHECK(slurp(dir + "/rows.jsonl") == "{\"index\": 9}\n");
  }
  std::filesystem::remove_all(dir);
}
