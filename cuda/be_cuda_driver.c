/*
 * be_cuda_driver.c - the CUDA backend's driver check: is there an NVIDIA driver at
 * all? Asked before the first CUDA call (backend_cuda_device_count), so that a machine
 * without one never loads or initialises the CUDA runtime.
 *
 * A file of its own so that the host-only test build (tests/fakecuda, the CUDA
 * runtime faked on the CPU) links its own answer in place of this one; production
 * code has no switch, environment variable or hook for it.
 * Owns: nothing. Thread: any.
 */
#include "backend_cuda.h"
#include "be_cuda_impl.h"

#include <unistd.h>

bool be_cuda_driver_present(void)
{
    return access("/dev/nvidiactl", F_OK) == 0;
}
