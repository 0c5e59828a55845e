// libFuzzer harnesses for osdp's file readers, one executable per kind (OSDP_FUZZ_KIND): the
// model, cluster, calibration, plan and experiment readers. Each input is parsed as JSON and
// read; an osdp::Error (bad input, named with the file and the JSON pointer) is the expected
// outcome for most inputs. What a reader accepts must survive osdp's own writing: it is written
// (to_json), read back, and written again, and the two writings must be equal (experiments: each
// unit's key and the row the sweep would write for it read back unchanged, and results.csv keeps
// one width). Anything else (a crash, a sanitizer report, another exception, a written file that
// does not read back) is a finding, and the run aborts with the evidence. Built with
// -DOSDP_BUILD_FUZZERS=ON (clang); tests/fuzz/run.sh builds and runs them.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodel/calibration.hpp"
#include "costmodel/cluster.hpp"
#include "costmodel/error.hpp"
#include "costmodel/json_reader.hpp"
#include "costmodel/model.hpp"
#include "costmodel/plan.hpp"
#include "experiments/experiment.hpp"
#include "experiments/run.hpp"
#include "experiments/sweep.hpp"

namespace {

using namespace osdp;

[[noreturn]] void finding(const std::string& what, const std::string& evidence) {
  std::fprintf(stderr, "osdp fuzz finding: %s\n  %.2000s\n", what.c_str(), evidence.c_str());
  std::abort();
}

// Reads `doc` with `read`, then checks write -> read -> write gives the same JSON.
template <class Read, class Write>
void round_trip(const nlohmann::json& doc, Read read, Write write) {
  const auto value = read(doc, "fuzz.json");  // an osdp::Error here is a rejected input: fine
  const nlohmann::json written = write(value);
  const std::string text = written.dump();
  nlohmann::json again;
  try {
    again = write(read(costmodel::parse_json_text(text, "written.json"), "written.json"));
  } catch (const osdp::Error& e) {
    finding(std::string("what osdp wrote does not read back: ") + e.what(), text);
  }
  if (again != written)
    finding("written, read back and written again, the JSON differs", text + "\n  " + again.dump());
}

// The number of fields on each line of an RFC 4180 CSV text (quoted fields may hold commas, quotes
// doubled and line breaks); a quote left open is a finding.
std::vector<std::size_t> csv_field_counts(const std::string& csv) {
  std::vector<std::size_t> counts;
  std::size_t fields = 1;
  bool quoted = false;
  for (std::size_t i = 0; i < csv.size(); ++i) {
    const char c = csv[i];
    if (quoted) {
      if (c == '"' && i + 1 < csv.size() && csv[i + 1] == '"')
        ++i;
      else if (c == '"')
        quoted = false;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      ++fields;
    } else if (c == '\n') {
      counts.push_back(fields);
      fields = 1;
    }
  }
  if (quoted) finding("results.csv leaves a quote open", csv);
  return counts;
}

void one_input(const std::string& text) {
  const nlohmann::json doc = costmodel::parse_json_text(text, "fuzz.json");
#if OSDP_FUZZ_KIND == 1
  round_trip(
      doc, [](const nlohmann::json& d, const std::string& f) { return costmodel::read_model(d, f); },
      [](const costmodel::ModelSpec& m) { return costmodel::to_json(m); });
#elif OSDP_FUZZ_KIND == 2
  round_trip(
      doc, [](const nlohmann::json& d, const std::string& f) { return costmodel::read_cluster(d, f); },
      [](const costmodel::ClusterSpec& c) { return costmodel::to_json(c); });
#elif OSDP_FUZZ_KIND == 3
  round_trip(
      doc,
      [](const nlohmann::json& d, const std::string& f) {
        return costmodel::read_calibration(d, f, costmodel::ComputeSpec{});
      },
      [](const costmodel::Calibration& c) { return costmodel::to_json(c); });
#elif OSDP_FUZZ_KIND == 4
  round_trip(
      doc, [](const nlohmann::json& d, const std::string& f) { return costmodel::read_plan(d, f); },
      [](const costmodel::Plan& p) { return costmodel::to_json(p); });
#elif OSDP_FUZZ_KIND == 5
  // An experiment is read and expanded (within kMaxUnits); each unit's key, which the results
  // directory writes and --resume reads back to match rows, must parse and be stable.
  const experiments::Experiment e = experiments::read_experiment(doc, "fuzz.json");
  const auto units = experiments::expand(e);
  if (units.size() > static_cast<std::size_t>(experiments::kMaxUnits))
    finding("an experiment expanded past kMaxUnits", std::to_string(units.size()));
  for (std::size_t i = 0; i < units.size() && i < 16; ++i) {
    const std::string key = units[i].key();
    nlohmann::json parsed;
    try {
      parsed = costmodel::parse_json_text(key, "key");
    } catch (const osdp::Error& err) {
      finding(std::string("a unit key does not read back: ") + err.what(), key);
    }
    if (parsed.dump() != key) finding("a unit key is not stable through a read", key);
  }
  // The rows a sweep writes for these units (rows.jsonl, read back by --resume) read back as they
  // were written, and every line of results.csv has as many fields as its header.
  std::vector<experiments::UnitResult> rows;
  for (std::size_t i = 0; i < units.size() && i < 16; ++i) {
    const experiments::Unit& u = units[i];
    experiments::UnitResult r;
    r.index = u.index;
    r.key = u.key();
    r.model = u.config.model;
    r.cluster = u.config.cluster;
    r.strategy = u.strategy.label;
    r.world_size = u.config.world_size;
    r.batch_size = u.config.batch.value_or(0);
    for (const auto& ev : e.evaluators) r.evaluations.push_back({ev, false, 0, 0, 0});
    const std::string line = experiments::to_json(r).dump();
    std::string again;
    try {
      again =
          experiments::to_json(experiments::unit_result_from_json(costmodel::parse_json_text(line, "row")))
              .dump();
    } catch (const osdp::Error& err) {
      finding(std::string("a row does not read back: ") + err.what(), line);
    }
    if (again != line) finding("a row is not stable through a read", line + "\n  " + again);
    rows.push_back(std::move(r));
  }
  const std::string csv = experiments::results_csv(rows, static_cast<int>(e.strategies.size()), -1);
  const std::vector<std::size_t> fields = csv_field_counts(csv);
  for (std::size_t n : fields)
    if (n != fields.front()) finding("results.csv has lines of different widths", csv);
#else
#error "OSDP_FUZZ_KIND must be 1 (model) to 5 (experiment)"
#endif
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    one_input(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const osdp::Error&) {
    // Rejected with osdp's message: the expected outcome of most inputs.
  }
  return 0;
}
