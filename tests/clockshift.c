/* A test-only LD_PRELOAD shim: shifts a process's wall clock (CLOCK_REALTIME,
 * gettimeofday, time) by the number of seconds written in the file named by
 * BLOOM_CLOCK_SHIFT_FILE, read again on every call (so a test steps the clock
 * of a running redis-server). The monotonic clock is left alone. No malloc and
 * no dlsym: the real clock comes from the syscall itself (libfaketime deadlocks
 * in jemalloc's initialisation, which Debian's redis-server links). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long shift_ns(void) {
    static const char *path;
    char buf[64];
    if (!path) path = getenv("BLOOM_CLOCK_SHIFT_FILE");
    if (!path) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    return (long long)(strtod(buf, NULL) * 1e9);
}

static int real_clock(clockid_t clk, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, clk, ts);
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    int rc = real_clock(clk, ts);
    if (rc == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE)) {
        long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + shift_ns();
        ts->tv_sec = ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    (void)tz;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
