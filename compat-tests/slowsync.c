/* LD_PRELOAD shim for compat-tests/test_ensemble.py: a slow disk, emulated. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
/* Emulates a slow disk: every fdatasync/fsync first sleeps SLOWSYNC_MS (default 70) ms; or,
 * with SLOWSYNC_FILE set, the number of ms that file holds when the call is made (0 when it is
 * missing or empty), so a test can slow one process's disk down and back while it runs. */
static long file_ms(const char *path) {
    char buf[32] = {0};
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return atol(buf);
}
static void pause_ms(void) {
    const char *file = getenv("SLOWSYNC_FILE");
    const char *e = getenv("SLOWSYNC_MS");
    long ms = file ? file_ms(file) : (e ? atol(e) : 70);
    if (ms <= 0) return;
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
