/* The effective clock of this machine's core: a chain of dependent integer
   adds, one per cycle on Sandy Bridge and on Zen 3 (add latency 1), timed
   on the thread's CPU clock. The i7-2600 platform's speed factor uses it
   (crates/cpusched/src/cfsv_study.rs). Rerun:
     cc -O2 -o /tmp/clock tools/iocost/clock.c && /tmp/clock */
#include <stdio.h>
#include <time.h>
int main(void){
  /* A chain of dependent adds: one per cycle on Sandy Bridge and on Zen 3
     (integer add latency 1), so adds per second of CPU time is the clock. */
  unsigned long n = 2000000000UL, x = 0;
  struct timespec a, b;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  for (unsigned long i = 0; i < n; i += 8) {
    __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                     "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
  }
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
  printf("%.2f GHz (%lu dependent adds in %.3f s of CPU)\n", n / s / 1e9, x, s);
  return 0;
}
