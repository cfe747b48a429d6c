/*
 * cpu_threads.c - the OpenMP wait policy of every program that runs the CPU backend,
 * set before libgomp reads it.
 *
 * A libgomp thread that reaches a barrier (the end of each parallel loop and of each
 * oneDNN GEMM: hundreds a forward) spins GOMP_SPINCOUNT times for the others before
 * it sleeps. libgomp's default, 300000 spins (several milliseconds), keeps a quiet
 * machine's next region cheap to start, but beside another process on the same
 * cores it is what makes us slow: the spinning thread burns the time slice it was
 * given, and the thread whose work the barrier waits for sits in a run queue behind
 * the other process. CPU_THREADS_SPIN spins are long enough to bridge the gaps
 * between the regions of a forward (no cost on a quiet machine) and short enough to
 * give the core back (docs/benchmarks.md, "Shared cores", measured both ways).
 *
 * libgomp reads the variable once, in its constructor, before main; the C library
 * resets the environment array after an executable's .preinit_array runs, so
 * nothing inside the process can set it in time. This constructor (it runs after
 * every shared library's, before main) sets it and executes the program again, once.
 * A user's OMP_WAIT_POLICY or GOMP_SPINCOUNT always wins; where the exec fails the
 * program runs on with libgomp's default.
 * Thread: the process's only thread, before main.
 */
#include "cpu_threads.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CPU_THREADS_SPIN "10000"

/* What the process runs with, written once by the constructor (before main, before
 * any other thread), read-only after. */
static char wait_policy[80];

static void describe(void)
{
    const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    if (policy && !spin)
        snprintf(wait_policy, sizeof wait_policy, "OMP_WAIT_POLICY=%.48s", policy);
    else
        snprintf(wait_policy, sizeof wait_policy, "GOMP_SPINCOUNT=%.48s",
                 spin ? spin : "300000 (libgomp's default)");
}

/* glibc passes constructors argc, argv and the environment. The program is executed
 * again by its own path, not by /proc/self/exe: the kernel names a process after the
 * file it executes, and ps, top and pgrep must go on seeing h2oserve. */
__attribute__((constructor)) static void cpu_threads_reexec(int argc, char **argv,
                                                            char **envp)
{
    (void)envp;
    char self[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (argc >= 1 && n > 0 && !getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT") &&
        setenv("GOMP_SPINCOUNT", CPU_THREADS_SPIN, 0) == 0) {
        self[n] = '\0';
        execv(self, argv);
        unsetenv("GOMP_SPINCOUNT"); /* it failed (say, a deleted binary): as it was */
    }
    describe(); /* this process's policy as it is */
}

const char *cpu_threads_wait_policy(void)
{
    return wait_policy;
}
