/*
 * cpu_threads.h - the OpenMP wait policy the CPU backend's threads run with.
 *
 * cpu_threads.c sets libgomp's spin count before libgomp starts (see there); this
 * says what the process ended up with, for the backend's start-up line.
 */
#ifndef H2O_CPU_THREADS_H
#define H2O_CPU_THREADS_H

/* The spin count libgomp runs with, as "GOMP_SPINCOUNT=N" (ours or the user's), or
 * "OMP_WAIT_POLICY=X" when the user chose a policy; a static string.
 * Thread: any. */
const char *cpu_threads_wait_policy(void);

#endif
