/*
 * backend_nocuda.c - the CUDA entry points of a build without CUDA (-Dcuda=disabled,
 * or no toolkit found): no device, and a clear error for --device cuda.
 */
#include "backend_cuda.h"

#include "err.h"

int backend_cuda_create(struct backend *out, const struct be_cuda_opts *opts)
{
    (void)out;
    (void)opts;
    return err_set(ENG_EUNSUPPORTED, "this h2oserve was built without CUDA (the build found "
                                     "no CUDA toolkit, or -Dcuda=disabled): use --device cpu");
}

int backend_cuda_device_count(void)
{
    return 0;
}
