/*
 * The process's identity, the record clock's choice and small utilities: the ground floor, which calls no
 * other unit of the collector.  See common.h.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

int g_tsc;
uint32_t g_pid, g_ppid;
uint64_t g_start_mono, g_start_real;
uint64_t g_start_ticks;
uint32_t g_rank_plus_one;
int g_forked;

int env_number(const char *variable, unsigned long *out)
{
    const char *value = getenv(variable);
    if (!value || value[0] < '0' || value[0] > '9') return 0;
    char *end;
    unsigned long number = strtoul(value, &end, 10); /* an overflow gives ULONG_MAX: refused below */
    if (*end != 0 || number >= 0xFFFFFFFFul) return 0;
    *out = number;
    return 1;
}

uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Slurm sets SLURM_PROCID=0 in every job step, a single-task sbatch job included: it is a rank only when
 * the step runs more than one task. */
static int slurm_has_ranks(void)
{
    unsigned long tasks;
    if (env_number("SLURM_NTASKS", &tasks)) return tasks > 1;
    return env_number("SLURM_NPROCS", &tasks) && tasks > 1;
}

/* The rank a launcher gave this process, + 1 (0: none), from the first variable set to a number: RANK
 * (torchrun), LOCAL_RANK (launchers that set only it), OMPI_COMM_WORLD_RANK (Open MPI), PMI_RANK (MPICH,
 * Intel MPI), SLURM_PROCID (srun, see slurm_has_ranks). */
static uint32_t launcher_rank_plus_one(void)
{
    static const char *const RANK_VARIABLES[] = {"RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
    unsigned long rank;
    for (size_t i = 0; i < sizeof RANK_VARIABLES / sizeof RANK_VARIABLES[0]; i++)
        if (env_number(RANK_VARIABLES[i], &rank)) return (uint32_t)rank + 1;
    if (slurm_has_ranks() && env_number("SLURM_PROCID", &rank)) return (uint32_t)rank + 1;
    return 0;
}

/* The TSC is the record clock when the kernel keeps time with it (it checked it is constant and
 * synchronised across CPUs), unless AUTOITT_CLOCK=monotonic. */
static int tsc_usable(void)
{
    const char *clock = getenv("AUTOITT_CLOCK");
    if (clock && strcmp(clock, "monotonic") == 0) return 0;
    int tsc_allowed = PR_TSC_ENABLE; /* a process may forbid rdtsc (prctl PR_SET_TSC): then it would crash */
    if (prctl(PR_GET_TSC, &tsc_allowed, 0, 0, 0) == 0 && tsc_allowed != PR_TSC_ENABLE) return 0;
    char source[32] = {0};
    int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, source, sizeof source - 1);
    close(fd);
    return n >= 3 && strncmp(source, "tsc", 3) == 0 && (n == 3 || source[3] == '\n');
}

void identity_load(void)
{
    g_pid = (uint32_t)getpid();
    g_ppid = (uint32_t)getppid();
    g_tsc = tsc_usable();
    g_start_ticks = now_ticks();
    g_start_mono = now_ns(CLOCK_MONOTONIC);
    g_start_real = now_ns(CLOCK_REALTIME);
    g_rank_plus_one = launcher_rank_plus_one();
}

void identity_fork_child(void)
{
    g_forked = 1;
    g_pid = (uint32_t)getpid();
    g_ppid = (uint32_t)getppid();
    g_start_ticks = now_ticks();
    g_start_mono = now_ns(CLOCK_MONOTONIC);
    g_start_real = now_ns(CLOCK_REALTIME);
}
