#include "cli/mpi_args.hpp"

#include <sstream>

#include <fmt/format.h>

#include "costmodel/error.hpp"

namespace osdp::cli {

int parse_np(const std::vector<std::string>& v) {
  std::string text;
  if (v.size() == 1)
    text = v[0].size() > 1 && v[0][0] == 'p' ? v[0].substr(1) : v[0];
  else if (v.size() == 2 && v[0] == "p")
    text = v[1];
  else if (!v.empty())
    throw UsageError("-np: expected one number of ranks, e.g. -np 2");
  if (text.empty()) return 0;
  std::size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || n < 1 || n > 4096)
    throw UsageError(fmt::format("-np: \"{}\" is not a number of ranks from 1 to 4096", text));
  return n;
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace osdp::cli
