/* A wall clock the test sets, for every process that preloads this (LD_PRELOAD): two servers
 * (redis-cell's and ours) then read the very same instants. libfaketime aborts redis-server 7.0,
 * hence this.
 *
 * $RL_FAKE_CLOCK names a file (testkit's WallClock) whose first 8 bytes are the instant, in nanoseconds since the
 * epoch, as a little-endian int64; it is mapped shared, so a write by the test is seen at once.
 * Only the wall clock is replaced (CLOCK_REALTIME and its variants, gettimeofday, time): the
 * monotonic clocks Redis times its event loop with keep running. Without the variable, or with
 * an instant of 0, everything reads the real clock. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile const int64_t *fake_ns;

__attribute__((constructor)) static void fake_clock_init(void) {
    const char *path = getenv("RL_FAKE_CLOCK");
    if (!path) return;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    void *m = mmap(NULL, 2 * sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m != MAP_FAILED) fake_ns = m;
}

/* The file holds two copies of the instant (WallClock writes the second, then the first), read
 * only when both agree: a write to the file is not atomic, and a read in its middle would see a
 * torn instant. A second copy of 0 (a file of one instant) reads the first as it is. */
static int64_t fake_now(void) {
    if (!fake_ns) return 0;
    for (;;) {
        int64_t a = fake_ns[0], b = fake_ns[1];
        if (b == 0 || a == b) return a;
    }
}

static int is_wall(clockid_t id) {
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int64_t ns = fake_now();
    if (ns > 0 && is_wall(id)) {
        ts->tv_sec = ns / 1000000000;
        ts->tv_nsec = ns % 1000000000;
        return 0;
    }
    return (int)syscall(SYS_clock_gettime, id, ts);
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    if (tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t) *t = ts.tv_sec;
    return ts.tv_sec;
}
