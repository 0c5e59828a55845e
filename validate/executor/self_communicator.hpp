// A communicator of one rank: collectives are copies. The unsharded reference run (one process,
// the whole global batch) and single-process tests use it; it speaks for rank 0 of a job of 1.
#pragma once

#include <string>
#include <vector>

#include "validate/executor/backend.hpp"

namespace osdp::validate {

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(Device& dev) : dev_(dev) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "self"; }
  std::string version() const override { return "1"; }
  void all_gather(Stream& s, const float* shard, float* full, std::size_t n, const std::string&) override {
    if (shard != full) dev_.copy(s, shard, full, n);
  }
  void reduce_scatter(Stream& s, const float* full, float* shard, std::size_t n,
                      const std::string&) override {
    if (shard != full) dev_.copy(s, full, shard, n);
  }
  void all_reduce(Stream&, float*, std::size_t, const std::string&) override {}
  void all_to_all(Stream& s, const float* send, const std::vector<std::size_t>& send_counts, float* recv,
                  const std::vector<std::size_t>& recv_counts, const std::string& what) override {
    check_all_to_all_counts(*this, send_counts, recv_counts, what);
    if (send_counts[0] != recv_counts[0])
      throw UsageError(fmt::format("{}: sends {} elements to itself and receives {}", what, send_counts[0],
                                   recv_counts[0]));
    dev_.copy(s, send, recv, send_counts[0]);
  }
  void barrier(const std::string&) override {}
  double max_over_ranks(double x) override { return x; }
  double sum_over_ranks(double x) override { return x; }
  std::vector<double> all_values(double x) override { return {x}; }

 private:
  Device& dev_;
};

}  // namespace osdp::validate
