/*
 * cload: a load generator built on Apache ZooKeeper's own C client (Debian's
 * libzookeeper_st), so that throughput targets are not measured only with Warden's own
 * warden-bench (issue 43). The C client does all the framing, encoding and session
 * handling; this file only decides what to send and times the replies.
 *
 * One thread drives every session through the single-threaded library's event API
 * (zookeeper_interest / poll / zookeeper_process). Each session keeps --inflight requests
 * outstanding; a completion records its latency and sends the next request until the
 * measured window ends. Same flags and JSON fields as warden-bench's throughput workloads:
 *
 *   cload --servers 127.0.0.1:2181 --workload set --clients 16 --inflight 8 \
 *         --size 100 --keys 1000 --duration 10 [--read-ratio 0.9] [--procs 2] [--json]
 *
 * --procs N splits the sessions over N processes (one library thread each would otherwise
 * cap the load), whose measured windows start together and whose results are merged.
 *
 * Workloads: create (a new sequential-free node per op), set, get, mixed (--read-ratio gets).
 * Build: gcc -O2 -o cload bench/cload/cload.c -l:libzookeeper_st.so.2
 *   (Debian ships libzookeeper-st2 and libzookeeper-mt-dev side by side; the -st-dev package,
 *   which would add the plain -lzookeeper_st link, conflicts with the -mt one)
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

enum workload { W_CREATE, W_SET, W_GET, W_MIXED };

struct client;

/* One outstanding request: who sent it and when. */
struct req {
    struct client *c;
    double t0;
};

struct client {
    int id;
    zhandle_t *zh;
    int connected;
    int expired;
    int outstanding;
    uint64_t rng;
    long next_create;
    char base[128];
};

static struct {
    enum workload workload;
    int clients, inflight, size, keys;
    double duration, read_ratio;
    int json;
    int procs;
    char servers[4096];
} opt = {W_GET, 16, 8, 100, 1000, 10.0, 0.9, 0, 1, "127.0.0.1:2181"};

static char root[64];
static char *value;
static int phase; /* 0 setup, 1 measuring, 2 draining */
static double deadline;
static long setup_left;
static int setup_failed;
static uint32_t *samples;
static size_t nsamples, capsamples;
static long errors_by_code[256];
static long ok_ops;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t next_rand(struct client *c)
{
    /* xorshift64* */
    c->rng ^= c->rng >> 12;
    c->rng ^= c->rng << 25;
    c->rng ^= c->rng >> 27;
    return c->rng * 2685821657736338717ULL;
}

static void die(const char *what)
{
    fprintf(stderr, "cload: %s\n", what);
    exit(2);
}

static void record(struct req *r, int rc)
{
    double t = now();
    if (phase == 1 && t <= deadline) {
        if (rc == ZOK) {
            ok_ops++;
            if (nsamples == capsamples) {
                capsamples = capsamples ? capsamples * 2 : 1 << 20;
                samples = realloc(samples, capsamples * sizeof *samples);
                if (!samples)
                    die("out of memory for latency samples");
            }
            double us = (t - r->t0) * 1e6;
            samples[nsamples++] = us < 1 ? 1 : (us > 4e9 ? 4000000000u : (uint32_t)us);
        } else {
            errors_by_code[(-rc) & 0xff]++;
        }
    }
}

static void send_one(struct client *c);
static void usage(void);

static void done(struct req *r, int rc)
{
    struct client *c = r->c;
    record(r, rc);
    c->outstanding--;
    free(r);
    if (phase == 1 && now() < deadline)
        send_one(c);
}

static void stat_done(int rc, const struct Stat *stat, const void *data)
{
    (void)stat;
    done((struct req *)data, rc);
}

static void data_done(int rc, const char *v, int len, const struct Stat *stat, const void *data)
{
    (void)v, (void)len, (void)stat;
    done((struct req *)data, rc);
}

static void string_done(int rc, const char *v, const void *data)
{
    (void)v;
    done((struct req *)data, rc);
}

static void send_one(struct client *c)
{
    char path[256];
    struct req *r = malloc(sizeof *r);
    if (!r)
        die("out of memory");
    r->c = c;
    r->t0 = now();
    int rc;
    enum workload w = opt.workload;
    if (w == W_MIXED)
        w = (double)(next_rand(c) >> 11) / (double)(1ULL << 53) < opt.read_ratio ? W_GET : W_SET;
    if (w == W_CREATE) {
        snprintf(path, sizeof path, "%s/n%ld", c->base, c->next_create++);
        rc = zoo_acreate(c->zh, path, value, opt.size, &ZOO_OPEN_ACL_UNSAFE, 0, string_done, r);
    } else {
        snprintf(path, sizeof path, "%s/k%d", c->base, (int)(next_rand(c) % (uint64_t)opt.keys));
        if (w == W_GET)
            rc = zoo_aget(c->zh, path, 0, data_done, r);
        else
            rc = zoo_aset(c->zh, path, value, opt.size, -1, stat_done, r);
    }
    if (rc != ZOK) {
        free(r);
        errors_by_code[(-rc) & 0xff]++;
        return;
    }
    c->outstanding++;
}

static void watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    (void)zh, (void)path;
    struct client *c = ctx;
    if (type == ZOO_SESSION_EVENT) {
        if (state == ZOO_CONNECTED_STATE)
            c->connected = 1;
        else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE)
            c->expired = 1;
    }
}

static void setup_done(int rc, const char *v, const void *data)
{
    (void)v, (void)data;
    if (rc != ZOK && rc != ZNODEEXISTS) {
        fprintf(stderr, "cload: setup create failed: %s\n", zerror(rc));
        setup_failed = 1;
    }
    setup_left--;
}

/* One round of zookeeper_interest / poll / zookeeper_process over every session. */
static void pump(struct client *cs, int n, int max_wait_ms)
{
    struct pollfd pfd[n];
    int wait_ms = max_wait_ms;
    for (int i = 0; i < n; i++) {
        int fd = -1, interest = 0;
        struct timeval tv = {0, 0};
        pfd[i].fd = -1;
        pfd[i].events = 0;
        pfd[i].revents = 0;
        if (cs[i].expired)
            continue;
        int rc = zookeeper_interest(cs[i].zh, &fd, &interest, &tv);
        if (rc != ZOK && rc != ZCONNECTIONLOSS && rc != ZOPERATIONTIMEOUT)
            continue;
        int ms = (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000);
        if (ms < wait_ms)
            wait_ms = ms;
        if (fd != -1) {
            pfd[i].fd = fd;
            pfd[i].events = (interest & ZOOKEEPER_READ ? POLLIN : 0) | (interest & ZOOKEEPER_WRITE ? POLLOUT : 0);
        }
    }
    if (wait_ms < 0)
        wait_ms = 0;
    if (poll(pfd, n, wait_ms) < 0 && errno != EINTR)
        die("poll failed");
    for (int i = 0; i < n; i++) {
        if (cs[i].expired)
            continue;
        int ev = (pfd[i].revents & (POLLIN | POLLHUP | POLLERR) ? ZOOKEEPER_READ : 0) |
                 (pfd[i].revents & POLLOUT ? ZOOKEEPER_WRITE : 0);
        zookeeper_process(cs[i].zh, ev);
        /* The library reads one reply per call: go on while the socket holds more, rather
         * than one poll() over every session per reply. */
        int avail = 0;
        for (int k = 0; k < 4096 && pfd[i].fd >= 0 && (pfd[i].revents & POLLIN) && !cs[i].expired &&
                        ioctl(pfd[i].fd, FIONREAD, &avail) == 0 && avail > 0;
             k++)
            zookeeper_process(cs[i].zh, ZOOKEEPER_READ);
    }
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static double quantile_ms(double q)
{
    if (!nsamples)
        return 0;
    size_t i = (size_t)(q * (double)nsamples);
    if (i >= nsamples)
        i = nsamples - 1;
    return samples[i] / 1000.0;
}

/* One process's share: sessions first .. first + nclients - 1, connected, set up, loaded for
 * --duration; returns how many sessions were lost. ready_fd / go_fd (or -1): the --procs
 * handshake with the parent. */
static int run_load(int first, int nclients, int ready_fd, int go_fd)
{
    /* Client i talks to server i mod n, as warden-bench spreads its clients. */
    char *hosts[64];
    int nhosts = 0;
    char *save = NULL;
    for (char *h = strtok_r(opt.servers, ",", &save); h && nhosts < 64; h = strtok_r(NULL, ",", &save))
        hosts[nhosts++] = h;
    if (!nhosts)
        usage();
    struct client *cs = calloc(nclients, sizeof *cs);
    if (!cs)
        die("out of memory");
    for (int i = 0; i < nclients; i++) {
        cs[i].id = first + i;
        cs[i].rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(first + i + 1);
        snprintf(cs[i].base, sizeof cs[i].base, "%s/c%d", root, i);
        cs[i].zh = zookeeper_init2(hosts[(first + i) % nhosts], watcher, 30000, NULL, &cs[i], 0, NULL);
        if (!cs[i].zh)
            die("zookeeper_init failed");
    }
    double t_give_up = now() + 30;
    for (;;) {
        int up = 0;
        for (int i = 0; i < nclients; i++)
            up += cs[i].connected;
        if (up == nclients)
            break;
        if (now() > t_give_up)
            die("sessions did not connect within 30 s");
        pump(cs, nclients, 50);
    }

    /* Setup: the root, each client's parent, its keys (not for create). */
    setup_left = 1;
    if (zoo_acreate(cs[0].zh, root, "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, setup_done, NULL) != ZOK)
        die("cannot send the root create");
    while (setup_left > 0 && !setup_failed)
        pump(cs, nclients, 50);
    for (int i = 0; i < nclients && !setup_failed; i++) {
        setup_left++;
        if (zoo_acreate(cs[i].zh, cs[i].base, "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, setup_done, NULL) != ZOK)
            die("cannot send a setup create");
    }
    while (setup_left > 0 && !setup_failed)
        pump(cs, nclients, 50);
    if (opt.workload != W_CREATE) {
        char path[256];
        for (int k = 0; k < opt.keys && !setup_failed; k++) {
            for (int i = 0; i < nclients; i++) {
                snprintf(path, sizeof path, "%s/k%d", cs[i].base, k);
                setup_left++;
                if (zoo_acreate(cs[i].zh, path, value, opt.size, &ZOO_OPEN_ACL_UNSAFE, 0, setup_done, NULL) != ZOK)
                    die("cannot send a setup create");
            }
            /* Bound what is queued: drain every 64 keys. */
            if (k % 64 == 63)
                while (setup_left > 0 && !setup_failed)
                    pump(cs, nclients, 50);
        }
        while (setup_left > 0 && !setup_failed)
            pump(cs, nclients, 50);
    }
    if (setup_failed)
        die("setup failed");

    /* With --procs, every process starts its measured window when the parent says so. */
    char byte = 'r';
    if (ready_fd >= 0 && (write(ready_fd, &byte, 1) != 1 || read(go_fd, &byte, 1) != 1))
        die("lost the parent");
    double start = now();
    deadline = start + opt.duration;
    phase = 1;
    for (int i = 0; i < nclients; i++)
        for (int j = 0; j < opt.inflight; j++)
            send_one(&cs[i]);
    while (now() < deadline)
        pump(cs, nclients, 10);
    phase = 2;
    double t_drain = now() + 10;
    for (;;) {
        long left = 0;
        for (int i = 0; i < nclients; i++)
            left += cs[i].outstanding;
        if (!left || now() > t_drain)
            break;
        pump(cs, nclients, 10);
    }
    int lost = 0;
    for (int i = 0; i < nclients; i++) {
        lost += cs[i].expired;
        zookeeper_close(cs[i].zh);
    }
    return lost;
}


/* What a --procs child sends its parent when done. */
struct summary {
    long ok;
    long errors[256];
    size_t n;
    int lost;
};

static void write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w <= 0)
            die("cannot send results to the parent");
        p += w;
        len -= (size_t)w;
    }
}

static int read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t r = read(fd, p, len);
        if (r <= 0)
            return -1;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

/* --procs N: N processes of clients/N sessions each (the C client's single thread per
 * process would otherwise be the bottleneck), measured over the same window; returns the
 * sessions lost, with every child's samples and counts merged into this process's. */
static int run_procs(void)
{
    int n = opt.procs;
    int ready[2], results[n], go[n];
    pid_t pids[n];
    if (pipe(ready) != 0)
        die("pipe failed");
    for (int k = 0; k < n; k++) {
        int res[2], g[2];
        if (pipe(res) != 0 || pipe(g) != 0)
            die("pipe failed");
        int first = opt.clients * k / n, count = opt.clients * (k + 1) / n - first;
        pid_t pid = fork();
        if (pid < 0)
            die("fork failed");
        if (pid == 0) {
            /* Never outlive the parent (killed on a timeout, or gone through die()). */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() == 1)
                _exit(2);
            close(ready[0]);
            close(res[0]);
            close(g[1]);
            snprintf(root, sizeof root, "/cload-%d-%ld", (int)getpid(), (long)time(NULL));
            struct summary sm = {0};
            sm.lost = run_load(first, count, ready[1], g[0]);
            sm.ok = ok_ops;
            memcpy(sm.errors, errors_by_code, sizeof sm.errors);
            sm.n = nsamples;
            write_all(res[1], &sm, sizeof sm);
            if (nsamples)
                write_all(res[1], samples, nsamples * sizeof *samples);
            _exit(0);
        }
        pids[k] = pid;
        close(res[1]);
        close(g[0]);
        results[k] = res[0];
        go[k] = g[1];
    }
    close(ready[1]);
    char byte;
    for (int k = 0; k < n; k++) {
        /* A child that dies in setup leaves the others holding the pipe open: time out. */
        struct pollfd pr = {ready[0], POLLIN, 0};
        if (poll(&pr, 1, 300000) != 1 || read(ready[0], &byte, 1) != 1)
            die("a load process failed in setup");
    }
    for (int k = 0; k < n; k++)
        if (write(go[k], "g", 1) != 1)
            die("a load process is gone");
    int lost = 0;
    for (int k = 0; k < n; k++) {
        struct summary sm;
        if (read_all(results[k], &sm, sizeof sm) != 0)
            die("a load process failed");
        ok_ops += sm.ok;
        lost += sm.lost;
        for (int e = 0; e < 256; e++)
            errors_by_code[e] += sm.errors[e];
        if (nsamples + sm.n > capsamples) {
            capsamples = nsamples + sm.n;
            samples = realloc(samples, capsamples * sizeof *samples);
            if (!samples)
                die("out of memory for latency samples");
        }
        if (sm.n && read_all(results[k], samples + nsamples, sm.n * sizeof *samples) != 0)
            die("a load process failed");
        nsamples += sm.n;
        int status;
        waitpid(pids[k], &status, 0);
    }
    return lost;
}

static void usage(void)
{
    fprintf(stderr, "usage: cload [--servers h:p,...] [--workload create|set|get|mixed] [--clients N] "
                    "[--inflight N] [--size B] [--keys N] [--duration S] [--read-ratio F] [--procs N] [--json]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            opt.json = 1;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (!strcmp(a, "--servers"))
            snprintf(opt.servers, sizeof opt.servers, "%s", v);
        else if (!strcmp(a, "--workload")) {
            if (!strcmp(v, "create"))
                opt.workload = W_CREATE;
            else if (!strcmp(v, "set"))
                opt.workload = W_SET;
            else if (!strcmp(v, "get"))
                opt.workload = W_GET;
            else if (!strcmp(v, "mixed"))
                opt.workload = W_MIXED;
            else
                usage();
        } else if (!strcmp(a, "--clients"))
            opt.clients = atoi(v);
        else if (!strcmp(a, "--inflight"))
            opt.inflight = atoi(v);
        else if (!strcmp(a, "--size"))
            opt.size = atoi(v);
        else if (!strcmp(a, "--keys"))
            opt.keys = atoi(v);
        else if (!strcmp(a, "--duration"))
            opt.duration = atof(v);
        else if (!strcmp(a, "--read-ratio"))
            opt.read_ratio = atof(v);
        else if (!strcmp(a, "--procs"))
            opt.procs = atoi(v);
        else
            usage();
    }
    if (opt.clients < 1 || opt.inflight < 1 || opt.size < 0 || opt.keys < 1 || opt.duration <= 0 || opt.procs < 1 ||
        opt.procs > opt.clients)
        usage();
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    value = malloc(opt.size ? opt.size : 1);
    if (!value)
        die("out of memory");
    memset(value, 'v', opt.size);

    int lost;
    if (opt.procs > 1) {
        lost = run_procs();
    } else {
        snprintf(root, sizeof root, "/cload-%d-%ld", (int)getpid(), (long)time(NULL));
        lost = run_load(0, opt.clients, -1, -1);
    }

    qsort(samples, nsamples, sizeof *samples, cmp_u32);
    double ops = ok_ops / opt.duration;
    static const char *names[] = {"create", "set", "get", "mixed"};
    if (opt.json) {
        printf("{\"tool\": \"cload\", \"workload\": \"%s\", \"clients\": %d, \"inflight\": %d, \"size\": %d, "
               "\"duration_s\": %.3f, \"ops\": %ld, \"ops_per_sec\": %.1f, \"p50_ms\": %.3f, \"p90_ms\": %.3f, "
               "\"p99_ms\": %.3f, \"p999_ms\": %.3f, \"max_ms\": %.3f, \"sessions_lost\": %d, \"errors\": {",
               names[opt.workload], opt.clients, opt.inflight, opt.size, opt.duration, ok_ops, ops,
               quantile_ms(0.5), quantile_ms(0.9), quantile_ms(0.99), quantile_ms(0.999),
               nsamples ? samples[nsamples - 1] / 1000.0 : 0.0, lost);
        int first = 1;
        for (int e = 0; e < 256; e++)
            if (errors_by_code[e]) {
                printf("%s\"%d\": %ld", first ? "" : ", ", -e, errors_by_code[e]);
                first = 0;
            }
        printf("}, \"client_failures\": []}\n");
    } else {
        printf("workload: %s\nops_per_sec: %.1f\np50_ms: %.3f\np99_ms: %.3f\nmax_ms: %.3f\nsessions_lost: %d\n",
               names[opt.workload], ops, quantile_ms(0.5), quantile_ms(0.99),
               nsamples ? samples[nsamples - 1] / 1000.0 : 0.0, lost);
        for (int e = 0; e < 256; e++)
            if (errors_by_code[e])
                printf("error %d: %ld\n", -e, errors_by_code[e]);
    }
    return 0;
}
