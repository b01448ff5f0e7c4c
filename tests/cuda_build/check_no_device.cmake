# CTest driver for nccl_probe on a machine (or a CUDA_VISIBLE_DEVICES) without a
# GPU: passes only if the probe exits with code 1 AND every rank's output names
# the missing device, "error: ... no CUDA device available to rank R
# (cudaGetDeviceCount: ...)". Anything else, including a probe that succeeds,
# fails the test.
# cmake -DMPIEXEC=... -DNP_FLAG=-n -DNP=1 -DPROBE=/path/nccl_probe -P check_no_device.cmake
execute_process(COMMAND ${MPIEXEC} ${NP_FLAG} ${NP} ${PROBE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc STREQUAL "1")
  message(FATAL_ERROR "nccl_probe exited with '${rc}'; expected 1 (no CUDA device)")
endif()
math(EXPR last "${NP} - 1")
foreach(r RANGE ${last})
  if(NOT "${out}${err}" MATCHES "error: [^\n]*no CUDA device available to rank ${r} \\(cudaGetDeviceCount: ")
    message(FATAL_ERROR "rank ${r} did not report the missing CUDA device")
  endif()
endforeach()
message("nccl_probe failed cleanly on ${NP} rank(s), as expected without a device")
