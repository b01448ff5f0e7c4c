// shardtrain/dist/mpi/wire_monitor.hpp
// Owns WireMonitor: the bytes this process has sent through Open MPI's PML,
// read in-process through MPI_T from the pml/monitoring component's
// performance variable pml_monitoring_messages_size (per peer of
// MPI_COMM_WORLD, summed). The PML is where point-to-point messages and the
// internal messages of every collective algorithm (coll/tuned, coll/libnbc)
// pass, so the figure is what the algorithms really sent, not a formula.
// Invariants:
//  - measured() only with OMPI_MCA_pml_monitoring_enable=1: with 0 there is no
//    counting, and with 2 (filtered) Open MPI keeps collective traffic
//    (negative tags) out of the MPI_T variable; status() then says so and
//    bytes_sent() is 0: a number is never made up;
//  - the counter is cumulative and process-wide: callers take differences.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

namespace shardtrain {

class WireMonitor {
 public:
  // After MPI_Init. Never throws: when the variable cannot be read, measured()
  // is false and status() says why.
  WireMonitor();
  ~WireMonitor();
  WireMonitor(const WireMonitor&) = delete;
  WireMonitor& operator=(const WireMonitor&) = delete;

  bool measured() const { return m_measured; }
  // "wire: measured by ..." or "wire: not measured; ...".
  const std::string& status() const { return m_status; }
  // Bytes this process has sent to all peers since monitoring started (0 when
  // not measured). Cheap: one MPI_T read of one counter per peer.
  std::uint64_t bytes_sent();

 private:
  bool m_measured = false;
  bool m_t_initialized = false;
  std::string m_status;
  MPI_T_pvar_session m_session = MPI_T_PVAR_SESSION_NULL;
  MPI_T_pvar_handle m_handle = MPI_T_PVAR_HANDLE_NULL;
  std::vector<unsigned long long> m_values;
  std::uint64_t m_last = 0;
};

}  // namespace shardtrain
