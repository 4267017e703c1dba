/* LD_PRELOAD shim for compat-tests/test_ensemble.py: a slow disk, emulated. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
/* Emulates a slow disk: every fdatasync/fsync first sleeps SLOWSYNC_MS (default 70) ms. */
static void pause_ms(void) {
    const char *e = getenv("SLOWSYNC_MS");
    long ms = e ? atol(e) : 70;
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}
int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    pause_ms();
    return real(fd);
}
int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    pause_ms();
    return real(fd);
}
