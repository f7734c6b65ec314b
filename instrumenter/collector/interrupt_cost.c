/*
 * What one perf cpu-clock interruption costs a thread on this machine: the measurement that chooses the
 * sampler's mechanism (instrumenter/collector/mechanism.py binds it with ctypes).
 *
 * The sampler's default mechanism is a perf_event_open software cpu-clock event per thread: an hrtimer
 * on the thread's CPU time (sampler.h).  On bare metal an expiry costs the thread 1-2 us; in a VM each
 * expiry and re-arm exits to the hypervisor, 25-36 us measured here, and a PyTorch loop around it slows by
 * about four times that (its caches and TLB refilled after each exit): 1.15-1.35x at 1 kHz
 * (benchmarks/README.md).  POSIX CPU-time timers ride on the scheduler tick and add no interrupt.
 *
 * Runs in autoitt's own process (the CLI), never in the profiled program: it installs a handler for the
 * signal it is given for the duration, on the calling thread, and puts the previous one back.
 *
 * The measure: a fixed loop of dependent arithmetic, timed by the thread's CPU clock, alone and with the
 * event firing at ``hz``; the extra CPU time over the signals counted is the cost of one.  Rounds
 * alternate the two and the median is taken, as the machine may be busy.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static volatile sig_atomic_t g_signals;

static void count(int signo, siginfo_t *info, void *context)
{
    (void)signo;
    (void)info;
    (void)context;
    g_signals++;
}

static double thread_cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double spin(long iterations)
{
    volatile double x = 0;
    double started = thread_cpu_s();
    for (long i = 0; i < iterations; i++) x += (double)i * 0.5;
    return thread_cpu_s() - started;
}

static int compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nanoseconds of the thread's CPU time one perf cpu-clock interruption at ``hz`` costs, the median over
 * ``rounds`` (at most 32) of a loop of ``iterations``; writes it to *ns and returns 0, or returns the errno
 * of what failed (perf_event_open refused: EACCES, ENOENT, ...), *ns untouched. */
EXPORT int autoitt_perf_interrupt_ns(long hz, long rounds, long iterations, int signo, double *ns)
{
    if (hz <= 0 || rounds <= 0 || rounds > 32 || iterations <= 0 || !ns) return EINVAL;
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.sample_period = (unsigned long long)(1000000000L / hz);
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    attr.disabled = 1;
    int fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
    if (fd < 0) return errno;
    struct sigaction ours, previous;
    memset(&ours, 0, sizeof ours);
    ours.sa_sigaction = count;
    ours.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&ours.sa_mask);
    struct f_owner_ex owner = {F_OWNER_TID, (pid_t)syscall(SYS_gettid)};
    int failed = 0;
    if (sigaction(signo, &ours, &previous) != 0) {
        failed = errno;
        close(fd);
        return failed;
    }
    if (fcntl(fd, F_SETOWN_EX, &owner) != 0 || fcntl(fd, F_SETSIG, signo) != 0
        || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC) != 0)
        failed = errno;
    double costs[32];
    long measured = 0;
    spin(iterations / 4); /* the loop's code and the CPU's frequency warmed up */
    for (long r = 0; r < rounds && !failed; r++) {
        double alone = spin(iterations);
        g_signals = 0;
        ioctl(fd, PERF_EVENT_IOC_RESET, 0);
        ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
        double with = spin(iterations);
        ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
        long signals = g_signals;
        if (signals > 0) costs[measured++] = (with - alone) / (double)signals * 1e9;
    }
    close(fd); /* no signal of it is pending past here: the event is disabled and gone */
    sigaction(signo, &previous, NULL);
    if (failed) return failed;
    if (!measured) return EAGAIN;
    qsort(costs, (size_t)measured, sizeof costs[0], compare);
    *ns = costs[measured / 2];
    return 0;
}
