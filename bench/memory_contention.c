/* What two processes on this machine's cores cost each other, by kind of work (docs/results/HISTORY.md,
 * "CPU ranks reducing through shared memory"). Run it alone, then twice at once, and compare the times:
 *   cc -O2 bench/memory_contention.c -o /tmp/contend
 *   for mb in 0 2 64; do /tmp/contend $mb; /tmp/contend $mb & /tmp/contend $mb; wait; done
 * MB = 0: arithmetic only; 2: memcpy between two 2 MB buffers (fits a core's L2); 64: two 64 MB
 * buffers (memory bandwidth). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const size_t mb = argc > 1 ? (size_t)atoi(argv[1]) : 64, n = mb << 20;
  const int reps = mb == 0 ? 0 : (int)(1200 / mb + 1) * 10;  /* ~12 GB copied whatever the size */
  char *a = malloc(n + 1), *b = malloc(n + 1);
  memset(a, 1, n + 1);
  memset(b, 2, n + 1);
  volatile double x = 1.0;
  const double t0 = now();
  if (mb == 0)
    for (long i = 0; i < 400000000L; i++) x = x * 1.0000001 + 1e-9;
  else
    for (int r = 0; r < reps; r++) memcpy(r & 1 ? a : b, r & 1 ? b : a, n);
  printf("%zu MB: %.3f s\n", mb, now() - t0);
  return 0;
}
