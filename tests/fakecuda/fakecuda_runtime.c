/*
 * fakecuda_runtime.c - the CUDA runtime calls the backend makes, on the host (see
 * fakecuda.h): an allocation registry that remembers each block's device and kind,
 * trivial streams, and copies that check their pointers against the registry.
 *
 * Owns: the registry and every block in it (freed by cudaFree / cudaFreeHost; what a
 * test leaks stays until exit and shows in fakecuda_live_allocations).
 * Thread: any; the registry is behind one mutex, the current device is per thread.
 */
#include "fakecuda_impl.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { KIND_DEVICE, KIND_PINNED };

struct block {
    char *base;
    size_t size;
    int device; /* KIND_DEVICE only */
    int kind;
};

/* The fake machine: a process-global "driver", as the real one is. */
static struct {
    pthread_mutex_t mu;
    struct block *blocks;
    size_t n_blocks, cap_blocks;
    size_t used[64]; /* device bytes allocated per device */
    size_t limit[64]; /* per-device memory size, 0 = `memory` */
    bool broken[64];
    int64_t syncs[64]; /* cudaDeviceSynchronize calls per device */
    int n_dev;
    bool driver;
    size_t memory;
} fc = {.mu = PTHREAD_MUTEX_INITIALIZER, .driver = true, .memory = (size_t)1 << 30};

static atomic_llong n_violations;
static _Thread_local int cur_dev;

/* A stream is a handle that remembers its device. */
struct CUstream_st {
    unsigned magic;
    int device;
};
#define STREAM_MAGIC 0x57ea3u

/* An event remembers its device and the host time it was recorded at: work runs when
 * it is enqueued, so the time between two records is the time of the work between. */
struct CUevent_st {
    unsigned magic;
    int device;
    bool recorded;
    double t; /* seconds, CLOCK_MONOTONIC */
};
#define EVENT_MAGIC 0xe7e47u

void fakecuda_set_devices(int n)
{
    fc.n_dev = n < 0 ? 0 : n > 64 ? 64 : n;
}

void fakecuda_set_driver(bool present)
{
    fc.driver = present;
}

void fakecuda_set_memory(size_t bytes)
{
    fc.memory = bytes;
}

void fakecuda_set_device_memory(int device, size_t bytes)
{
    pthread_mutex_lock(&fc.mu);
    fc.limit[device] = bytes;
    pthread_mutex_unlock(&fc.mu);
}

size_t fakecuda_device_used(int device)
{
    pthread_mutex_lock(&fc.mu);
    const size_t n = fc.used[device];
    pthread_mutex_unlock(&fc.mu);
    return n;
}

int64_t fakecuda_device_syncs(int device)
{
    pthread_mutex_lock(&fc.mu);
    const int64_t n = fc.syncs[device];
    pthread_mutex_unlock(&fc.mu);
    return n;
}

void fakecuda_set_broken(int device, bool broken)
{
    fc.broken[device] = broken;
}

/* The memory size of `device`; the caller holds fc.mu. */
static size_t memory_locked(int device)
{
    return fc.limit[device] ? fc.limit[device] : fc.memory;
}

int64_t fakecuda_live_allocations(void)
{
    pthread_mutex_lock(&fc.mu);
    const int64_t n = (int64_t)fc.n_blocks;
    pthread_mutex_unlock(&fc.mu);
    return n;
}

int64_t fakecuda_violations(void)
{
    return atomic_load(&n_violations);
}

/* The backend's driver check (cuda/be_cuda_driver.c in the real build). */
bool be_cuda_driver_present(void)
{
    return fc.driver;
}

cudaError_t fakecuda_violation(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fakecuda: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    atomic_fetch_add(&n_violations, 1);
    return cudaErrorInvalidValue;
}

int fakecuda_current_device(void)
{
    return cur_dev;
}

/* The block holding p, or NULL; the caller holds fc.mu. */
static const struct block *find_locked(const void *p)
{
    const char *c = p;
    for (size_t i = 0; i < fc.n_blocks; i++)
        if (c >= fc.blocks[i].base && c < fc.blocks[i].base + fc.blocks[i].size)
            return &fc.blocks[i];
    return NULL;
}

/* Kind and device of [p, p + bytes): 1 device, 2 pinned, 0 not registered (pageable
 * host memory), -1 registered but the range runs past its block. */
static int classify(const void *p, size_t bytes, int *device)
{
    pthread_mutex_lock(&fc.mu);
    const struct block *b = find_locked(p);
    int kind = 0;
    if (b) {
        kind = (size_t)((const char *)p - b->base) + bytes > b->size ? -1
               : b->kind == KIND_DEVICE                              ? 1
                                                                      : 2;
        *device = b->device;
    }
    pthread_mutex_unlock(&fc.mu);
    return kind;
}

bool fakecuda_dev_ok(const void *p, size_t bytes, const char *what)
{
    if (!p && bytes == 0) return true;
    int dev = -1;
    const int kind = classify(p, bytes ? bytes : 1, &dev);
    if (kind == 1 && dev == cur_dev) return true;
    if (kind == 1)
        fakecuda_violation("%s: device %d memory used with device %d current", what, dev,
                           cur_dev);
    else if (kind == -1)
        fakecuda_violation("%s: %zu bytes at %p run past the allocation", what, bytes, p);
    else
        fakecuda_violation("%s: %p is %s memory, not device memory", what, p,
                           kind == 2 ? "pinned host" : "host");
    return false;
}

bool fakecuda_stream_ok(cudaStream_t s, const char *what)
{
    if (!s) return true;
    if (s->magic != STREAM_MAGIC) {
        fakecuda_violation("%s: not a live stream", what);
        return false;
    }
    if (s->device != cur_dev) {
        fakecuda_violation("%s: stream of device %d used with device %d current", what,
                           s->device, cur_dev);
        return false;
    }
    return true;
}

bool fakecuda_aligned4(const void *p, const char *what)
{
    if (((uintptr_t)p & 3) == 0) return true;
    fakecuda_violation("%s: fp16 pointer %p not 4-byte aligned", what, p);
    return false;
}

/* ---- devices ---- */

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = fc.n_dev;
    return fc.n_dev ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= fc.n_dev) return cudaErrorInvalidDevice;
    cur_dev = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    *device = cur_dev;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    pthread_mutex_lock(&fc.mu);
    *total_b = memory_locked(cur_dev);
    *free_b = *total_b > fc.used[cur_dev] ? *total_b - fc.used[cur_dev] : 0;
    pthread_mutex_unlock(&fc.mu);
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument (fakecuda)";
    case cudaErrorMemoryAllocation: return "out of memory (fakecuda)";
    case cudaErrorInvalidDevice: return "invalid device ordinal (fakecuda)";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected (fakecuda)";
    case cudaErrorDevicesUnavailable: return "CUDA-capable device(s) is/are busy or unavailable (fakecuda)";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle (fakecuda)";
    default: return "unknown error (fakecuda)";
    }
}

cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}

/* ---- memory ---- */

static cudaError_t alloc(void **p, size_t size, int kind)
{
    *p = NULL;
    if (kind == KIND_DEVICE && fc.n_dev == 0) return cudaErrorNoDevice;
    pthread_mutex_lock(&fc.mu);
    if (kind == KIND_DEVICE && fc.used[cur_dev] + size > memory_locked(cur_dev)) {
        pthread_mutex_unlock(&fc.mu);
        return cudaErrorMemoryAllocation;
    }
    /* 256-byte aligned like cudaMalloc; never 0 bytes, so every block has an address
     * of its own. Garbage-filled: a GPU does not zero what it hands out. */
    const size_t rounded = (size + 255) & ~(size_t)255;
    char *m = aligned_alloc(256, rounded ? rounded : 256);
    if (!m) {
        pthread_mutex_unlock(&fc.mu);
        return cudaErrorMemoryAllocation;
    }
    memset(m, 0xa5, rounded ? rounded : 256);
    if (fc.n_blocks == fc.cap_blocks) {
        fc.cap_blocks = fc.cap_blocks ? 2 * fc.cap_blocks : 256;
        fc.blocks = realloc(fc.blocks, fc.cap_blocks * sizeof *fc.blocks);
        if (!fc.blocks) abort();
    }
    fc.blocks[fc.n_blocks++] = (struct block){m, size, cur_dev, kind};
    if (kind == KIND_DEVICE) fc.used[cur_dev] += size;
    pthread_mutex_unlock(&fc.mu);
    *p = m;
    return cudaSuccess;
}

static cudaError_t release(void *p, int kind, const char *what)
{
    if (!p) return cudaSuccess;
    pthread_mutex_lock(&fc.mu);
    for (size_t i = 0; i < fc.n_blocks; i++) {
        struct block *b = &fc.blocks[i];
        if (b->base != p) continue;
        if (b->kind != kind) break;
        if (kind == KIND_DEVICE) fc.used[b->device] -= b->size;
        free(b->base);
        *b = fc.blocks[--fc.n_blocks];
        pthread_mutex_unlock(&fc.mu);
        return cudaSuccess;
    }
    pthread_mutex_unlock(&fc.mu);
    return fakecuda_violation("%s(%p): not a block of that kind", what, p);
}

cudaError_t cudaMalloc(void **p, size_t size)
{
    return alloc(p, size, KIND_DEVICE);
}

cudaError_t cudaFree(void *p)
{
    return release(p, KIND_DEVICE, "cudaFree");
}

cudaError_t cudaMallocHost(void **p, size_t size)
{
    return alloc(p, size, KIND_PINNED);
}

cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
    (void)flags;
    return alloc(p, size, KIND_PINNED);
}

cudaError_t cudaFreeHost(void *p)
{
    return release(p, KIND_PINNED, "cudaFreeHost");
}

/* Check a copy's pointers against its kind: device sides on the current device and
 * inside their block, host sides not device memory (pinned or pageable both fine). */
static cudaError_t check_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                              const char *what)
{
    if (n == 0) return cudaSuccess;
    const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost &&
        kind != cudaMemcpyDeviceToDevice)
        return fakecuda_violation("%s: copy kind %d not used by the backend", what, (int)kind);
    int dev = -1;
    if (dst_dev ? !fakecuda_dev_ok(dst, n, what) : classify(dst, n, &dev) == 1 ||
                                                       classify(dst, n, &dev) == -1)
        return dst_dev ? cudaErrorInvalidValue
                       : fakecuda_violation("%s: destination %p is not host memory", what, dst);
    if (src_dev ? !fakecuda_dev_ok(src, n, what) : classify(src, n, &dev) == 1 ||
                                                       classify(src, n, &dev) == -1)
        return src_dev ? cudaErrorInvalidValue
                       : fakecuda_violation("%s: source %p is not host memory", what, src);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    cudaError_t e = check_copy(dst, src, n, kind, "cudaMemcpy");
    if (e == cudaSuccess && n) memmove(dst, src, n);
    return e;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    if (!fakecuda_stream_ok(stream, "cudaMemcpyAsync")) return cudaErrorInvalidResourceHandle;
    cudaError_t e = check_copy(dst, src, n, kind, "cudaMemcpyAsync");
    if (e == cudaSuccess && n) memmove(dst, src, n);
    return e;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t n, cudaStream_t stream)
{
    if (!fakecuda_stream_ok(stream, "cudaMemsetAsync")) return cudaErrorInvalidResourceHandle;
    if (!fakecuda_dev_ok(dst, n, "cudaMemsetAsync")) return cudaErrorInvalidValue;
    memset(dst, value, n);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *dst, int value, size_t n)
{
    return cudaMemsetAsync(dst, value, n, 0);
}

/* ---- streams ---- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    (void)flags;
    *s = NULL;
    if (fc.n_dev == 0) return cudaErrorNoDevice;
    if (fc.broken[cur_dev]) return cudaErrorDevicesUnavailable;
    struct CUstream_st *st = malloc(sizeof *st);
    if (!st) return cudaErrorMemoryAllocation;
    *st = (struct CUstream_st){STREAM_MAGIC, cur_dev};
    *s = st;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithFlags(s, 0);
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    /* Work ran when it was enqueued; only the handle is checked. */
    return fakecuda_stream_ok(s, "cudaStreamSynchronize") ? cudaSuccess
                                                         : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s || s->magic != STREAM_MAGIC) return fakecuda_violation("cudaStreamDestroy: not a stream");
    s->magic = 0;
    free(s);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    /* Nothing is ever in flight; count the call, so a test can see that a device was
     * synchronised where a GPU needs it. */
    if (fc.n_dev == 0) return cudaErrorNoDevice;
    pthread_mutex_lock(&fc.mu);
    fc.syncs[cur_dev]++;
    pthread_mutex_unlock(&fc.mu);
    return cudaSuccess;
}

/* ---- events ---- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    (void)flags;
    *e = NULL;
    if (fc.n_dev == 0) return cudaErrorNoDevice;
    struct CUevent_st *ev = malloc(sizeof *ev);
    if (!ev) return cudaErrorMemoryAllocation;
    *ev = (struct CUevent_st){.magic = EVENT_MAGIC, .device = cur_dev};
    *e = ev;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return cudaEventCreateWithFlags(e, 0);
}

/* Whether e is a live event of the current device; reports when not. */
static bool event_ok(cudaEvent_t e, const char *what)
{
    if (!e || e->magic != EVENT_MAGIC) {
        fakecuda_violation("%s: not a live event", what);
        return false;
    }
    if (e->device != cur_dev) {
        fakecuda_violation("%s: event of device %d used with device %d current", what,
                           e->device, cur_dev);
        return false;
    }
    return true;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream)
{
    /* The event, the stream and the current device must agree, as on a GPU. */
    if (!event_ok(e, "cudaEventRecord") || !fakecuda_stream_ok(stream, "cudaEventRecord"))
        return cudaErrorInvalidResourceHandle;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    e->recorded = true;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (!e || e->magic != EVENT_MAGIC) return fakecuda_violation("cudaEventSynchronize: not an event");
    return cudaSuccess; /* recorded work has run; an unrecorded event is complete too */
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    return cudaEventSynchronize(e);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (!start || !end || start->magic != EVENT_MAGIC || end->magic != EVENT_MAGIC)
        return fakecuda_violation("cudaEventElapsedTime: not an event");
    if (start->device != end->device)
        return fakecuda_violation("cudaEventElapsedTime: events of devices %d and %d",
                                  start->device, end->device);
    /* CUDA's answer for an event never recorded; not a misuse in itself. */
    if (!start->recorded || !end->recorded) return cudaErrorInvalidResourceHandle;
    *ms = (float)(1e3 * (end->t - start->t));
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    if (!e || e->magic != EVENT_MAGIC) return fakecuda_violation("cudaEventDestroy: not an event");
    e->magic = 0;
    free(e);
    return cudaSuccess;
}
