// WireMonitor: MPI_T access to Open MPI's pml_monitoring_messages_size.
#include "dist/mpi/wire_monitor.hpp"

#include <numeric>

namespace shardtrain {

namespace {

constexpr const char* kEnable = "set OMPI_MCA_pml_monitoring_enable=1";

}  // namespace

WireMonitor::WireMonitor() {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) {
    m_status = "wire: not measured; MPI_T_init_thread failed";
    return;
  }
  m_t_initialized = true;
  // The switch itself, as Open MPI read it (environment, files or command line),
  // where MPI_T still lists it.
  int index = -1;
  MPI_T_cvar_handle cvar = MPI_T_CVAR_HANDLE_NULL;
  int count = 0, enable = -1;
  if (MPI_T_cvar_get_index("pml_monitoring_enable", &index) == MPI_SUCCESS &&
      MPI_T_cvar_handle_alloc(index, nullptr, &cvar, &count) == MPI_SUCCESS && count == 1)
    MPI_T_cvar_read(cvar, &enable);
  if (cvar != MPI_T_CVAR_HANDLE_NULL) MPI_T_cvar_handle_free(&cvar);
  if (enable == 0) {
    m_status = std::string("wire: not measured; ") + kEnable;
    return;
  }
  if (enable > 1) {
    m_status = "wire: not measured; pml_monitoring_enable=" + std::to_string(enable) +
               " keeps collective traffic out of the MPI_T counters; " + kEnable;
    return;
  }
  if (MPI_T_pvar_get_index("pml_monitoring_messages_size", MPI_T_PVAR_CLASS_SIZE, &index) != MPI_SUCCESS) {
    // Open MPI 4.1 interposes pml/monitoring after selection and unregisters
    // its MPI_T variables when it closes the component (open-mpi/ompi#9260).
    m_status = enable == 1 ? std::string("wire: not measured; pml_monitoring_enable=1, but this MPI lists no MPI_T "
                                         "variable pml_monitoring_messages_size (Open MPI 4.1 unregisters it when it "
                                         "interposes pml/monitoring: open-mpi/ompi#9260)")
                           : std::string("wire: not measured; this MPI lists no MPI_T variable "
                                         "pml_monitoring_messages_size (Open MPI 4.1 unregisters pml/monitoring's "
                                         "MPI_T variables when it interposes the component, open-mpi/ompi#9260; "
                                         "where they work, ") + kEnable + ")";
    return;
  }
  if (MPI_T_pvar_session_create(&m_session) != MPI_SUCCESS) {
    m_status = "wire: not measured; MPI_T_pvar_session_create failed";
    return;
  }
  MPI_Comm world = MPI_COMM_WORLD;  // the only communicator the variable binds to
  if (MPI_T_pvar_handle_alloc(m_session, index, &world, &m_handle, &count) != MPI_SUCCESS || count <= 0) {
    m_status = "wire: not measured; MPI_T_pvar_handle_alloc(pml_monitoring_messages_size) failed";
    return;
  }
  m_values.assign(static_cast<std::size_t>(count), 0);
  // A continuous variable: no start; a read must work now.
  if (MPI_T_pvar_read(m_session, m_handle, m_values.data()) != MPI_SUCCESS) {
    m_status = "wire: not measured; MPI_T_pvar_read(pml_monitoring_messages_size) failed";
    return;
  }
  m_measured = true;
  m_status = "wire: measured (Open MPI pml monitoring, MPI_T pml_monitoring_messages_size)";
}

WireMonitor::~WireMonitor() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || !m_t_initialized) return;
  if (m_handle != MPI_T_PVAR_HANDLE_NULL) MPI_T_pvar_handle_free(m_session, &m_handle);
  if (m_session != MPI_T_PVAR_SESSION_NULL) MPI_T_pvar_session_free(&m_session);
  MPI_T_finalize();
}

std::uint64_t WireMonitor::bytes_sent() {
  if (!m_measured) return 0;
  // A failed read repeats the last value, so differences never wrap.
  if (MPI_T_pvar_read(m_session, m_handle, m_values.data()) == MPI_SUCCESS)
    m_last = std::accumulate(m_values.begin(), m_values.end(), std::uint64_t{0});
  return m_last;
}

}  // namespace shardtrain
