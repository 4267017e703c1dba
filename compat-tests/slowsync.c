/* LD_PRELOAD shim for compat-tests/test_ensemble.py: a slow disk, emulated. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
/* Emulates a slow disk: every fdatasync/fsync first sleeps SLOWSYNC_MS (default 70) ms; or,
 * with SLOWSYNC_FILE set, the number of ms that file holds when the call is made (0 when it is
 * missing or empty), so a test can slow one process's disk down and back while it runs.
 * When that file holds `eio` instead (optionally followed by ms to sleep first), every
 * fdatasync/fsync fails with EIO after the real call (a disk whose write-back failed: the
 * nemesis's disk-error fault). */
static long file_ms(const char *path, int *eio) {
    char buf[32] = {0};
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    if (strncmp(buf, "eio", 3) == 0) {
        *eio = 1;
        return atol(buf + 3); /* `eio 300`: 300 ms, then the real call, then EIO */
    }
    return atol(buf);
}
/* Sleeps as configured; returns whether the call must fail with EIO. */
static int pause_ms(void) {
    const char *file = getenv("SLOWSYNC_FILE");
    const char *e = getenv("SLOWSYNC_MS");
    int eio = 0;
    long ms = file ? file_ms(file, &eio) : (e ? atol(e) : 70);
    if (ms > 0) {
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
    return eio;
}
/* The real call's result, or EIO when the fault says so. */
static int finish(int rc, int eio) {
    if (eio) {
        errno = EIO;
        return -1;
    }
    return rc;
}
int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    int eio = pause_ms();
    return finish(real(fd), eio);
}
int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    int eio = pause_ms();
    return finish(real(fd), eio);
}
