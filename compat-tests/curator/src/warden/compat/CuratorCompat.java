package warden.compat;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.barriers.DistributedBarrier;
import org.apache.curator.framework.recipes.barriers.DistributedDoubleBarrier;
import org.apache.curator.framework.recipes.cache.ChildData;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderSelector;
import org.apache.curator.framework.recipes.leader.LeaderSelectorListenerAdapter;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.nodes.PersistentTtlNode;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.data.Stat;

/**
 * Black-box Curator recipe tests against a ZooKeeper-compatible server.
 *
 * Usage: CuratorCompat HOSTPORT TESTNAME   (TESTNAME "list" prints the test names)
 * Exit status: 0 = all checks passed, 1 = a check failed or an exception escaped,
 * 2 = usage error, 3 = watchdog timeout.
 * Every test works under a fresh base path, so runs can repeat against one server.
 */
public final class CuratorCompat {

    static final long WATCHDOG_SECONDS = Long.getLong("warden.compat.watchdog", 180);
    static String hostport;
    static String base;
    static final List<CuratorFramework> clients = Collections.synchronizedList(new ArrayList<>());
    static int checks = 0;

    interface Test { void run() throws Exception; }

    static final Map<String, Test> TESTS = new LinkedHashMap<>();
    static {
        TESTS.put("mutex", CuratorCompat::testMutex);
        TESTS.put("leader_latch", CuratorCompat::testLeaderLatch);
        TESTS.put("leader_selector", CuratorCompat::testLeaderSelector);
        TESTS.put("semaphore", CuratorCompat::testSemaphore);
        TESTS.put("atomic_long", CuratorCompat::testAtomicLong);
        TESTS.put("barrier", CuratorCompat::testBarrier);
        TESTS.put("double_barrier", CuratorCompat::testDoubleBarrier);
        TESTS.put("cache", CuratorCompat::testCache);
        TESTS.put("ttl_node", CuratorCompat::testTtlNode);
        TESTS.put("parent_containers", CuratorCompat::testParentContainers);
    }

    public static void main(String[] args) {
        if (args.length == 1 && args[0].equals("list")) {
            TESTS.keySet().forEach(System.out::println);
            System.exit(0);
        }
        if (args.length != 2 || !TESTS.containsKey(args[1])) {
            System.err.println("usage: CuratorCompat HOSTPORT TESTNAME; tests: " + TESTS.keySet());
            System.exit(2);
        }
        hostport = args[0];
        String name = args[1];
        base = "/warden-curator-compat/" + name + "-" + System.currentTimeMillis() + "-" + ProcessHandle.current().pid();
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(WATCHDOG_SECONDS * 1000);
            } catch (InterruptedException e) {
                return;
            }
            System.out.println("FAIL " + name + ": watchdog timeout after " + WATCHDOG_SECONDS + "s");
            System.out.flush();
            Runtime.getRuntime().halt(3);
        });
        watchdog.setDaemon(true);
        watchdog.start();
        long t0 = System.nanoTime();
        int rc;
        try {
            System.out.println("TEST " + name + " against " + hostport + " under " + base);
            TESTS.get(name).run();
            System.out.printf("PASS %s: %d checks in %.2fs%n", name, checks, (System.nanoTime() - t0) / 1e9);
            rc = 0;
        } catch (Throwable t) {
            System.out.println("FAIL " + name + ": " + t);
            t.printStackTrace(System.out);
            rc = 1;
        }
        cleanup();
        System.out.flush();
        Runtime.getRuntime().halt(rc);
    }

    // ----------------------------------------------------------------- helpers

    static void check(boolean cond, String what) {
        checks++;
        if (!cond) throw new AssertionError("check failed: " + what);
        System.out.println("  ok: " + what);
    }

    static void info(String s) { System.out.println("  .. " + s); }

    static CuratorFramework newClient() throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.builder()
                .connectString(hostport)
                .sessionTimeoutMs(15000)
                .connectionTimeoutMs(10000)
                .retryPolicy(new ExponentialBackoffRetry(100, 6))
                .build();
        clients.add(c);
        c.start();
        if (!c.blockUntilConnected(20, TimeUnit.SECONDS)) {
            throw new AssertionError("client could not connect to " + hostport);
        }
        return c;
    }

    static void closeClient(CuratorFramework c) {
        clients.remove(c);
        try { c.close(); } catch (Throwable ignored) { }
    }

    static void cleanup() {
        try {
            CuratorFramework c = newClient();
            c.delete().deletingChildrenIfNeeded().forPath(base);
        } catch (Throwable t) {
            // best effort only
        }
        List<CuratorFramework> all;
        synchronized (clients) { all = new ArrayList<>(clients); }
        for (CuratorFramework c : all) {
            try { c.close(); } catch (Throwable ignored) { }
        }
    }

    static byte[] b(String s) { return s.getBytes(StandardCharsets.UTF_8); }
    static String s(byte[] b) { return b == null ? null : new String(b, StandardCharsets.UTF_8); }

    static void sleep(long ms) {
        try { Thread.sleep(ms); } catch (InterruptedException e) { throw new RuntimeException(e); }
    }

    interface Cond { boolean get() throws Exception; }

    static boolean waitFor(long timeoutMs, Cond c) throws Exception {
        long end = System.currentTimeMillis() + timeoutMs;
        while (System.currentTimeMillis() < end) {
            if (c.get()) return true;
            Thread.sleep(20);
        }
        return c.get();
    }

    static void joinAll(List<Future<?>> fs, long timeoutSec) throws Exception {
        long end = System.currentTimeMillis() + timeoutSec * 1000;
        for (Future<?> f : fs) {
            f.get(Math.max(1, end - System.currentTimeMillis()), TimeUnit.MILLISECONDS);
        }
    }

    // ------------------------------------------------------------------ tests

    /** InterProcessMutex: 8 threads, each with its own client/session, N acquisitions each. */
    static void testMutex() throws Exception {
        final int threads = 8, rounds = 10;
        final String lockPath = base + "/lock";
        final AtomicInteger inSection = new AtomicInteger();
        final AtomicInteger maxInSection = new AtomicInteger();
        final int[] plainCounter = {0}; // deliberately unsynchronized: protected only by the ZK lock
        final AtomicInteger[] perThread = new AtomicInteger[threads];
        List<CuratorFramework> cs = new ArrayList<>();
        for (int i = 0; i < threads; i++) { cs.add(newClient()); perThread[i] = new AtomicInteger(); }
        Set<Long> sessions = new HashSet<>();
        for (CuratorFramework c : cs) sessions.add(c.getZookeeperClient().getZooKeeper().getSessionId());
        check(sessions.size() == threads, threads + " distinct sessions");
        ExecutorService ex = Executors.newFixedThreadPool(threads);
        CyclicBarrier start = new CyclicBarrier(threads);
        List<Future<?>> fs = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int id = t;
            fs.add(ex.submit(() -> {
                InterProcessMutex m = new InterProcessMutex(cs.get(id), lockPath);
                start.await();
                for (int r = 0; r < rounds; r++) {
                    if (!m.acquire(60, TimeUnit.SECONDS)) throw new AssertionError("thread " + id + " timed out acquiring");
                    try {
                        int now = inSection.incrementAndGet();
                        maxInSection.accumulateAndGet(now, Math::max);
                        int v = plainCounter[0];
                        Thread.yield();
                        Thread.sleep(1);
                        plainCounter[0] = v + 1;
                        if (!m.isAcquiredInThisProcess()) throw new AssertionError("lock not held inside section");
                        inSection.decrementAndGet();
                    } finally {
                        m.release();
                    }
                    perThread[id].incrementAndGet();
                }
                return null;
            }));
        }
        joinAll(fs, 150);
        ex.shutdown();
        check(maxInSection.get() == 1, "max threads in critical section == 1 (was " + maxInSection.get() + ")");
        for (int t = 0; t < threads; t++) {
            check(perThread[t].get() == rounds, "thread " + t + " acquired " + rounds + " times");
        }
        synchronized (plainCounter) {
            check(plainCounter[0] == threads * rounds, "unsynchronized counter == " + threads * rounds + " (was " + plainCounter[0] + ")");
        }
        // The lock path is a container: the reaper may already have removed it once empty.
        List<String> left;
        try {
            left = cs.get(0).getChildren().forPath(lockPath);
        } catch (org.apache.zookeeper.KeeperException.NoNodeException e) {
            left = Collections.emptyList();
        }
        check(left.isEmpty(), "no lock nodes remain under " + lockPath + " (" + left + ")");
    }

    /** LeaderLatch: 3 participants, exactly one leader; closing it elects another. */
    static void testLeaderLatch() throws Exception {
        final String path = base + "/latch";
        List<CuratorFramework> cs = new ArrayList<>();
        List<LeaderLatch> latches = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            CuratorFramework c = newClient();
            cs.add(c);
            LeaderLatch l = new LeaderLatch(c, path, "p" + i);
            latches.add(l);
        }
        for (LeaderLatch l : latches) l.start();
        check(waitFor(20000, () -> leaders(latches) == 1), "exactly one of 3 latches has leadership");
        sleep(500);
        check(leaders(latches) == 1, "still exactly one leader after 500ms");
        int leader = -1;
        for (int i = 0; i < 3; i++) if (latches.get(i).hasLeadership()) leader = i;
        final String leaderId = "p" + leader;
        for (LeaderLatch l : latches) {
            check(waitFor(5000, () -> l.getLeader().getId().equals(leaderId)), l.getId() + " sees leader " + leaderId);
        }
        check(latches.get(0).getParticipants().size() == 3, "3 participants");
        info("closing leader " + leaderId);
        latches.get(leader).close();
        List<LeaderLatch> rest = new ArrayList<>(latches);
        rest.remove(leader);
        check(waitFor(20000, () -> leaders(rest) == 1), "exactly one of the remaining 2 latches becomes leader");
        check(!latches.get(leader).hasLeadership(), "closed latch no longer leader");
        int leader2 = -1;
        for (int i = 0; i < 3; i++) if (i != leader && latches.get(i).hasLeadership()) leader2 = i;
        final String id2 = "p" + leader2;
        check(waitFor(5000, () -> rest.get(0).getParticipants().size() == 2), "2 participants remain");
        for (LeaderLatch l : rest) {
            check(waitFor(5000, () -> l.getLeader().getId().equals(id2)), l.getId() + " sees new leader " + id2);
        }
        // Leader's session goes away entirely (client closed, not just latch): last one takes over.
        info("closing client of new leader " + id2);
        closeClient(cs.get(leader2));
        int last = 3 - leader - leader2;
        check(waitFor(30000, () -> latches.get(last).hasLeadership()), "last participant p" + last + " becomes leader after leader's session closes");
        latches.get(last).close();
    }

    static int leaders(List<LeaderLatch> ls) {
        int n = 0;
        for (LeaderLatch l : ls) if (l.hasLeadership()) n++;
        return n;
    }

    /** LeaderSelector: 3 participants with autoRequeue; leadership is exclusive and rotates. */
    static void testLeaderSelector() throws Exception {
        final String path = base + "/selector";
        final int participants = 3, totalTerms = 9;
        final AtomicInteger leadingNow = new AtomicInteger();
        final AtomicInteger maxLeading = new AtomicInteger();
        final AtomicInteger terms = new AtomicInteger();
        final List<String> order = Collections.synchronizedList(new ArrayList<>());
        final CountDownLatch done = new CountDownLatch(totalTerms);
        List<LeaderSelector> sels = new ArrayList<>();
        for (int i = 0; i < participants; i++) {
            CuratorFramework c = newClient();
            final String id = "s" + i;
            LeaderSelector sel = new LeaderSelector(c, path, new LeaderSelectorListenerAdapter() {
                @Override
                public void takeLeadership(CuratorFramework client) throws Exception {
                    int now = leadingNow.incrementAndGet();
                    maxLeading.accumulateAndGet(now, Math::max);
                    try {
                        // Hold the first term until every participant is queued, so the
                        // rotation order below is deterministic even on a slow machine.
                        waitFor(20000, () -> sels.get(0).getParticipants().size() >= participants);
                        if (terms.incrementAndGet() <= totalTerms) {
                            order.add(id);
                            Thread.sleep(100);
                            done.countDown();
                        } else {
                            Thread.sleep(20);
                        }
                    } finally {
                        leadingNow.decrementAndGet();
                    }
                }
            });
            sel.setId(id);
            sel.autoRequeue();
            sels.add(sel);
        }
        for (LeaderSelector s : sels) s.start();
        check(done.await(60, TimeUnit.SECONDS), totalTerms + " leadership terms completed");
        for (LeaderSelector s : sels) s.close();
        info("leadership order: " + order);
        check(maxLeading.get() == 1, "never more than one leader at a time (max " + maxLeading.get() + ")");
        check(new HashSet<>(order).size() == participants, "every participant led at least once");
        for (int i = 1; i < order.size(); i++) {
            check(!order.get(i).equals(order.get(i - 1)), "requeued leader waits behind others (term " + i + ": " + order.get(i - 1) + " -> " + order.get(i) + ")");
        }
    }

    /** InterProcessSemaphoreV2: leases never exceed the limit. */
    static void testSemaphore() throws Exception {
        final String path = base + "/sem";
        final int threads = 8, rounds = 6, maxLeases = 3;
        final AtomicInteger holding = new AtomicInteger();
        final AtomicInteger maxHolding = new AtomicInteger();
        final AtomicInteger acquired = new AtomicInteger();
        List<CuratorFramework> cs = new ArrayList<>();
        for (int i = 0; i < threads; i++) cs.add(newClient());
        ExecutorService ex = Executors.newFixedThreadPool(threads);
        CyclicBarrier start = new CyclicBarrier(threads);
        List<Future<?>> fs = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int id = t;
            fs.add(ex.submit(() -> {
                InterProcessSemaphoreV2 sem = new InterProcessSemaphoreV2(cs.get(id), path, maxLeases);
                start.await();
                for (int r = 0; r < rounds; r++) {
                    Lease lease = sem.acquire(60, TimeUnit.SECONDS);
                    if (lease == null) throw new AssertionError("thread " + id + " timed out acquiring lease");
                    try {
                        int now = holding.incrementAndGet();
                        maxHolding.accumulateAndGet(now, Math::max);
                        Thread.sleep(30);
                        holding.decrementAndGet();
                    } finally {
                        sem.returnLease(lease);
                    }
                    acquired.incrementAndGet();
                }
                return null;
            }));
        }
        joinAll(fs, 150);
        ex.shutdown();
        check(maxHolding.get() <= maxLeases, "concurrent leases <= " + maxLeases + " (max " + maxHolding.get() + ")");
        check(maxHolding.get() >= 2, "semaphore actually allowed concurrency (max " + maxHolding.get() + ")");
        check(acquired.get() == threads * rounds, "all " + threads * rounds + " leases acquired and returned");
        // A fresh semaphore sees no participants left.
        InterProcessSemaphoreV2 probe = new InterProcessSemaphoreV2(cs.get(0), path, maxLeases);
        check(probe.getParticipantNodes().isEmpty(), "no lease nodes remain");
        // Exhaust the semaphore from one client: maxLeases succeed, the next times out.
        List<Lease> held = new ArrayList<>(probe.acquire(maxLeases, 10, TimeUnit.SECONDS));
        check(held.size() == maxLeases, "one client can take all " + maxLeases + " leases");
        InterProcessSemaphoreV2 other = new InterProcessSemaphoreV2(cs.get(1), path, maxLeases);
        check(other.acquire(500, TimeUnit.MILLISECONDS) == null, "lease " + (maxLeases + 1) + " is refused while all are held");
        probe.returnAll(held);
        Lease l = other.acquire(10, TimeUnit.SECONDS);
        check(l != null, "lease available again after returnAll");
        other.returnLease(l);
    }

    /** DistributedAtomicLong: concurrent increments sum exactly, each post-value unique. */
    static void testAtomicLong() throws Exception {
        final String path = base + "/counter";
        final int threads = 8, rounds = 25;
        List<CuratorFramework> cs = new ArrayList<>();
        for (int i = 0; i < threads; i++) cs.add(newClient());
        final Set<Long> postValues = ConcurrentHashMap.newKeySet();
        final AtomicInteger failedAttempts = new AtomicInteger();
        ExecutorService ex = Executors.newFixedThreadPool(threads);
        CyclicBarrier start = new CyclicBarrier(threads);
        List<Future<?>> fs = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int id = t;
            fs.add(ex.submit(() -> {
                DistributedAtomicLong al = new DistributedAtomicLong(cs.get(id), path, new RetryNTimes(1000, 1));
                start.await();
                for (int r = 0; r < rounds; r++) {
                    while (true) {
                        AtomicValue<Long> v = al.increment();
                        if (v.succeeded()) {
                            if (v.postValue() != v.preValue() + 1) throw new AssertionError("post != pre+1: " + v.preValue() + " -> " + v.postValue());
                            if (!postValues.add(v.postValue())) throw new AssertionError("duplicate post-value " + v.postValue());
                            break;
                        }
                        failedAttempts.incrementAndGet();
                    }
                }
                return null;
            }));
        }
        joinAll(fs, 150);
        ex.shutdown();
        DistributedAtomicLong reader = new DistributedAtomicLong(cs.get(0), path, new RetryNTimes(3, 10));
        AtomicValue<Long> fin = reader.get();
        check(fin.succeeded(), "final get succeeded");
        check(fin.postValue() == (long) threads * rounds, "final value == " + threads * rounds + " (was " + fin.postValue() + ")");
        Set<Long> expect = new TreeSet<>();
        for (long i = 1; i <= (long) threads * rounds; i++) expect.add(i);
        check(postValues.equals(expect), "post-values are exactly 1.." + threads * rounds);
        info("increments that had to be retried as a whole: " + failedAttempts.get());
        AtomicValue<Long> cas = reader.compareAndSet(999999L, 5L);
        check(!cas.succeeded(), "compareAndSet with wrong expected value fails");
        cas = reader.compareAndSet((long) threads * rounds, 5L);
        check(cas.succeeded() && reader.get().postValue() == 5L, "compareAndSet with right expected value succeeds");
        AtomicValue<Long> sub = reader.subtract(7L);
        check(sub.succeeded() && sub.postValue() == -2L, "subtract to a negative value works (-2)");
    }

    /** DistributedBarrier: waiters block until the barrier is removed. */
    static void testBarrier() throws Exception {
        final String path = base + "/barrier";
        final int waiters = 4;
        CuratorFramework owner = newClient();
        DistributedBarrier ctl = new DistributedBarrier(owner, path);
        ctl.setBarrier();
        check(owner.checkExists().forPath(path) != null, "barrier node exists after setBarrier");
        ExecutorService ex = Executors.newFixedThreadPool(waiters);
        AtomicInteger released = new AtomicInteger();
        List<Future<Boolean>> fs = new ArrayList<>();
        CountDownLatch waiting = new CountDownLatch(waiters);
        for (int i = 0; i < waiters; i++) {
            CuratorFramework c = newClient();
            fs.add(ex.submit(() -> {
                DistributedBarrier bw = new DistributedBarrier(c, path);
                waiting.countDown();
                boolean ok = bw.waitOnBarrier(60, TimeUnit.SECONDS);
                released.incrementAndGet();
                return ok;
            }));
        }
        waiting.await();
        sleep(1500);
        check(released.get() == 0, "no waiter passes while the barrier is set (after 1.5s)");
        ctl.removeBarrier();
        for (Future<Boolean> f : fs) check(f.get(20, TimeUnit.SECONDS), "waiter released by removeBarrier");
        ex.shutdown();
        check(owner.checkExists().forPath(path) == null, "barrier node gone");
        DistributedBarrier again = new DistributedBarrier(owner, path);
        check(again.waitOnBarrier(1, TimeUnit.SECONDS), "waitOnBarrier returns at once with no barrier");
    }

    /** DistributedDoubleBarrier: nobody enters before all 3 arrive; nobody leaves before all 3 leave. */
    static void testDoubleBarrier() throws Exception {
        final String path = base + "/double";
        final int members = 3;
        ExecutorService ex = Executors.newFixedThreadPool(members);
        AtomicInteger entered = new AtomicInteger();
        AtomicInteger arrived = new AtomicInteger();
        AtomicInteger enteredEarly = new AtomicInteger();
        List<Future<?>> fs = new ArrayList<>();
        for (int i = 0; i < members; i++) {
            final int id = i;
            CuratorFramework c = newClient();
            fs.add(ex.submit(() -> {
                DistributedDoubleBarrier db = new DistributedDoubleBarrier(c, path, members);
                Thread.sleep(400L * id); // staggered arrival
                arrived.incrementAndGet();
                if (!db.enter(30, TimeUnit.SECONDS)) throw new AssertionError("member " + id + " enter timed out");
                if (arrived.get() < members) enteredEarly.incrementAndGet();
                entered.incrementAndGet();
                Thread.sleep(100);
                if (!db.leave(30, TimeUnit.SECONDS)) throw new AssertionError("member " + id + " leave timed out");
                return null;
            }));
        }
        joinAll(fs, 90);
        ex.shutdown();
        check(enteredEarly.get() == 0, "no member entered before all " + members + " arrived");
        check(entered.get() == members, "all " + members + " members entered and left");
    }

    /** CuratorCache: create/change/delete events arrive in order, one change at a time. */
    static void testCache() throws Exception {
        final String path = base + "/cache";
        CuratorFramework c = newClient();
        c.create().creatingParentsIfNeeded().forPath(path, b("root"));
        c.create().forPath(path + "/pre", b("p0"));
        final BlockingQueue<String> events = new LinkedBlockingQueue<>();
        CountDownLatch init = new CountDownLatch(1);
        CuratorCache cache = CuratorCache.build(c, path);
        cache.listenable().addListener(new CuratorCacheListener() {
            @Override
            public void event(Type type, ChildData oldData, ChildData data) {
                String ev = type + " " + (data != null ? data.getPath() : oldData.getPath())
                        + " old=" + (oldData == null ? "-" : s(oldData.getData()))
                        + " new=" + (data == null ? "-" : s(data.getData()));
                events.add(ev);
            }
            @Override
            public void initialized() { init.countDown(); }
        });
        cache.start();
        check(init.await(20, TimeUnit.SECONDS), "cache initialized");
        // The initial load reports the existing nodes as created (order between them not guaranteed).
        Set<String> initial = new TreeSet<>();
        initial.add(expect(events));
        initial.add(expect(events));
        check(initial.equals(new TreeSet<>(Arrays.asList(
                "NODE_CREATED " + path + " old=- new=root",
                "NODE_CREATED " + path + "/pre old=- new=p0"))), "initial load events: " + initial);
        check(cache.size() == 2, "cache holds 2 nodes after init");

        String a = path + "/a";
        c.create().forPath(a, b("v1"));
        check(expect(events).equals("NODE_CREATED " + a + " old=- new=v1"), "create event for " + a);
        c.setData().forPath(a, b("v2"));
        check(expect(events).equals("NODE_CHANGED " + a + " old=v1 new=v2"), "change event v1->v2");
        c.setData().forPath(a, b("v3"));
        check(expect(events).equals("NODE_CHANGED " + a + " old=v2 new=v3"), "change event v2->v3");
        String gc = a + "/g";
        c.create().forPath(gc, b("deep"));
        check(expect(events).equals("NODE_CREATED " + gc + " old=- new=deep"), "create event for grandchild");
        c.setData().forPath(gc, b("deeper"));
        check(expect(events).equals("NODE_CHANGED " + gc + " old=deep new=deeper"), "change event for grandchild");
        c.delete().forPath(gc);
        check(expect(events).equals("NODE_DELETED " + gc + " old=deeper new=-"), "delete event for grandchild");
        c.delete().forPath(a);
        check(expect(events).equals("NODE_DELETED " + a + " old=v3 new=-"), "delete event for " + a);
        c.setData().forPath(path, b("root2"));
        check(expect(events).equals("NODE_CHANGED " + path + " old=root new=root2"), "change event on the cache root");
        String eph = path + "/eph";
        CuratorFramework other = newClient();
        other.create().withMode(CreateMode.EPHEMERAL).forPath(eph, b("e"));
        check(expect(events).equals("NODE_CREATED " + eph + " old=- new=e"), "create event for another session's ephemeral");
        closeClient(other);
        check(expect(events).equals("NODE_DELETED " + eph + " old=e new=-"), "delete event when that session closes");
        check(cache.get(path + "/pre").map(d -> s(d.getData())).orElse("").equals("p0"), "cache.get returns current data");
        check(cache.size() == 2, "cache holds 2 nodes at the end");
        sleep(300);
        check(events.isEmpty(), "no unexpected extra events: " + events);
        cache.close();
    }

    static String expect(BlockingQueue<String> q) throws InterruptedException {
        String e = q.poll(15, TimeUnit.SECONDS);
        if (e == null) throw new AssertionError("timed out waiting for a cache event");
        info("event: " + e);
        return e;
    }

    /** PersistentTtlNode (container + TTL child) and direct TTL creates; needs extendedTypesEnabled. */
    static void testTtlNode() throws Exception {
        CuratorFramework c = newClient();
        c.create().creatingParentsIfNeeded().forPath(base, new byte[0]);
        final String path = base + "/ttl";
        // ttl 2000ms: Curator re-touches the TTL child every ttl/2 (DEFAULT_TOUCH_SCHEDULE_FACTOR).
        PersistentTtlNode node = new PersistentTtlNode(c, path, 2000, b("ttl-data"));
        node.start();
        check(node.waitForInitialCreate(20, TimeUnit.SECONDS), "PersistentTtlNode initial create completed");
        Stat st = c.checkExists().forPath(path);
        check(st != null, path + " (container) exists");
        info(path + " ephemeralOwner=0x" + Long.toHexString(st.getEphemeralOwner()));
        check(s(c.getData().forPath(path)).equals("ttl-data"), "container node carries the data");
        String touch = path + "/" + PersistentTtlNode.DEFAULT_CHILD_NODE_NAME;
        check(waitFor(10000, () -> c.checkExists().forPath(touch) != null), "TTL child " + touch + " exists");
        Stat tst = c.checkExists().forPath(touch);
        info(touch + " ephemeralOwner=0x" + Long.toHexString(tst.getEphemeralOwner()) + " version=" + tst.getVersion());
        check(tst.getEphemeralOwner() != c.getZookeeperClient().getZooKeeper().getSessionId(), "TTL child is not an ephemeral of this session");
        final int v0 = tst.getVersion();
        check(waitFor(8000, () -> c.checkExists().forPath(touch).getVersion() >= v0 + 2), "TTL child is re-touched periodically (version " + v0 + " -> " + c.checkExists().forPath(touch).getVersion() + ")");
        node.setData(b("ttl-data-2"));
        check(waitFor(10000, () -> "ttl-data-2".equals(s(c.getData().forPath(path)))), "PersistentTtlNode.setData reaches the node");
        node.close();

        // Direct TTL-mode creates.
        String p1 = base + "/direct-ttl";
        String made = c.create().withTtl(60000).withMode(CreateMode.PERSISTENT_WITH_TTL).forPath(p1, b("x"));
        check(made.equals(p1), "create PERSISTENT_WITH_TTL returns " + p1);
        Stat s1 = new Stat();
        check(s(c.getData().storingStatIn(s1).forPath(p1)).equals("x"), "TTL node readable with its data");
        info(p1 + " ephemeralOwner=0x" + Long.toHexString(s1.getEphemeralOwner()));
        check(s1.getEphemeralOwner() != c.getZookeeperClient().getZooKeeper().getSessionId(), "TTL node not owned by the session");
        Stat s2 = new Stat();
        String seq = c.create().withTtl(60000).storingStatIn(s2).withMode(CreateMode.PERSISTENT_SEQUENTIAL_WITH_TTL).forPath(base + "/seqttl-", b("y"));
        check(seq.matches(java.util.regex.Pattern.quote(base + "/seqttl-") + "\\d{10}"), "PERSISTENT_SEQUENTIAL_WITH_TTL name has a 10-digit suffix: " + seq);
        check(s2.getCzxid() > 0 && s2.getDataLength() == 1, "create2 stat returned for TTL create");
        // TTL nodes survive their creator's session.
        closeClient(c);
        CuratorFramework c2 = newClient();
        check(c2.checkExists().forPath(p1) != null && c2.checkExists().forPath(seq) != null, "TTL nodes survive the creating session");
        // (Out-of-range TTLs are refused by the client library before they reach the
        // server; the differential tester sends them raw.)
        Stat s3 = c2.checkExists().forPath(p1);
        check(s3.getNumChildren() == 0 && s3.getVersion() == 0, "TTL node stat: version 0, no children");
    }

    /** creatingParentContainersIfNeeded: parents created (as containers), leaf created. */
    static void testParentContainers() throws Exception {
        CuratorFramework c = newClient();
        final String leaf = base + "/a/b/c/leaf";
        String made = c.create().creatingParentContainersIfNeeded().forPath(leaf, b("leafdata"));
        check(made.equals(leaf), "create with creatingParentContainersIfNeeded returns " + leaf);
        for (String p : new String[]{base, base + "/a", base + "/a/b", base + "/a/b/c"}) {
            Stat st = c.checkExists().forPath(p);
            check(st != null, "parent " + p + " exists");
            info(p + " ephemeralOwner=0x" + Long.toHexString(st.getEphemeralOwner()) + " numChildren=" + st.getNumChildren());
            check(st.getEphemeralOwner() != c.getZookeeperClient().getZooKeeper().getSessionId(), "parent " + p + " is not an ephemeral");
        }
        check(s(c.getData().forPath(leaf)).equals("leafdata"), "leaf data");
        // Second leaf under the existing container parents; ephemeral leaf with container parents.
        String eph = c.create().creatingParentContainersIfNeeded().withMode(CreateMode.EPHEMERAL).forPath(base + "/x/y/eph", b("e"));
        check(eph.equals(base + "/x/y/eph"), "ephemeral leaf under new container parents");
        Stat est = c.checkExists().forPath(eph);
        check(est.getEphemeralOwner() == c.getZookeeperClient().getZooKeeper().getSessionId(), "ephemeral leaf owned by the session");
        String seq = c.create().creatingParentContainersIfNeeded().withMode(CreateMode.PERSISTENT_SEQUENTIAL).forPath(base + "/a/b/c/s-", b("s"));
        check(seq.startsWith(base + "/a/b/c/s-") && seq.length() == (base + "/a/b/c/s-").length() + 10, "sequential leaf under existing containers: " + seq);
        check(c.getChildren().forPath(base + "/a/b/c").size() == 2, "container parent has 2 children");
        // Create container explicitly via the API, and a child under it.
        String cont = c.create().withMode(CreateMode.CONTAINER).forPath(base + "/explicit");
        check(cont.equals(base + "/explicit"), "explicit CONTAINER create");
        c.create().forPath(base + "/explicit/kid");
        check(c.getChildren().forPath(base + "/explicit").equals(Collections.singletonList("kid")), "child under explicit container");
        // creatingParentsIfNeeded on an already-existing chain is harmless
        c.create().orSetData().creatingParentContainersIfNeeded().forPath(leaf, b("again"));
        check(s(c.getData().forPath(leaf)).equals("again"), "orSetData on existing leaf updates data");
    }
}
