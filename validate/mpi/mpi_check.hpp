// The one check for MPI return codes (DESIGN.md convention 5): a call that did not return
// MPI_SUCCESS becomes a BackendFailure "rank R: CALL failed in WHAT: TEXT", TEXT being
// MPI_Error_string's. Errors are returned only on communicators with MPI_ERRORS_RETURN; with MPI's
// default handler a failing call aborts the job before this sees it. Needs no <mpi.h> to include.
#pragma once

#include <string_view>

namespace osdp::validate {

// No-op when `code` is MPI_SUCCESS; else throws BackendFailure (validate/executor/backend.hpp):
// check_mpi(MPI_Comm_dup(...), "MPI_Comm_dup", "creating the communicator", rank) ->
// "rank 0: MPI_Comm_dup failed in creating the communicator: MPI_ERR_COMM: invalid communicator".
void check_mpi(int code, std::string_view call, std::string_view what, int rank);

}  // namespace osdp::validate
