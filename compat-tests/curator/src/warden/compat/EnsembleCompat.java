package warden.compat;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.data.Stat;

/**
 * Curator recipes with every client on a different ensemble member.
 *
 * Usage: EnsembleCompat HP1,HP2,...,HPn TESTNAME   (run through curator/run_ensemble.sh)
 * Client i connects to HP(i mod n) only, so the recipe's coordination has to go
 * through the ensemble: a lock node deleted through one server must wake a
 * waiter watching through another. Exit status as CuratorCompat's: 0 pass,
 * 1 fail, 2 usage, 3 watchdog.
 */
public final class EnsembleCompat {

    static final long WATCHDOG_SECONDS = Long.getLong("warden.compat.watchdog", 150);
    static String[] hostports;
    static String base;
    static final List<CuratorFramework> clients = Collections.synchronizedList(new ArrayList<>());
    static int checks = 0;

    interface Test { void run() throws Exception; }

    static final Map<String, Test> TESTS = new LinkedHashMap<>();
    static {
        TESTS.put("mutex", EnsembleCompat::testMutex);
        TESTS.put("leader_latch", EnsembleCompat::testLeaderLatch);
        TESTS.put("ensemble_tracker", EnsembleCompat::testEnsembleTracker);
    }

    public static void main(String[] args) {
        if (args.length == 1 && args[0].equals("list")) {
            TESTS.keySet().forEach(System.out::println);
            System.exit(0);
        }
        if (args.length != 2 || !TESTS.containsKey(args[1])) {
            System.err.println("usage: EnsembleCompat HP1,HP2,... TESTNAME; tests: " + TESTS.keySet());
            System.exit(2);
        }
        hostports = args[0].split(",");
        String name = args[1];
        base = "/warden-ensemble-compat/" + name + "-" + System.currentTimeMillis() + "-" + ProcessHandle.current().pid();
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
            System.out.println("TEST " + name + " against " + String.join(",", hostports) + " under " + base);
            TESTS.get(name).run();
            System.out.printf("PASS %s: %d checks in %.2fs%n", name, checks, (System.nanoTime() - t0) / 1e9);
            rc = 0;
        } catch (Throwable t) {
            System.out.println("FAIL " + name + ": " + t);
            t.printStackTrace(System.out);
            rc = 1;
        }
        List<CuratorFramework> all;
        synchronized (clients) { all = new ArrayList<>(clients); }
        for (CuratorFramework c : all) {
            try { c.close(); } catch (Throwable ignored) { }
        }
        System.out.flush();
        Runtime.getRuntime().halt(rc);
    }

    static void check(boolean cond, String what) {
        checks++;
        if (!cond) throw new AssertionError("check failed: " + what);
        System.out.println("  ok: " + what);
    }

    static void info(String s) { System.out.println("  .. " + s); }

    /** A client of member i only (no fail-over: the point is which server it uses). */
    static CuratorFramework clientOn(int i) throws Exception {
        String hp = hostports[i % hostports.length];
        CuratorFramework c = CuratorFrameworkFactory.builder()
                .connectString(hp)
                .sessionTimeoutMs(15000)
                .connectionTimeoutMs(10000)
                .retryPolicy(new ExponentialBackoffRetry(100, 6))
                .build();
        clients.add(c);
        c.start();
        if (!c.blockUntilConnected(20, TimeUnit.SECONDS)) {
            throw new AssertionError("client " + i + " could not connect to " + hp);
        }
        return c;
    }

    static byte[] b(String s) { return s.getBytes(StandardCharsets.UTF_8); }

    interface Cond { boolean get() throws Exception; }

    static boolean waitFor(long timeoutMs, Cond c) throws Exception {
        long end = System.currentTimeMillis() + timeoutMs;
        while (System.currentTimeMillis() < end) {
            if (c.get()) return true;
            Thread.sleep(20);
        }
        return c.get();
    }

    /**
     * Curator's EnsembleTracker follows a reconfig: a client given member 1 alone learns the
     * others from /zookeeper/config, then (as the super user) removes member 1 with
     * reconfig; its connection string drops member 1 and it goes on writing through the
     * others. Needs reconfigEnabled=true and client addresses in the server lines.
     */
    static void testEnsembleTracker() throws Exception {
        String first = hostports[0];
        CuratorFramework c = CuratorFrameworkFactory.builder()
                .connectString(first)
                .ensembleTracker(true)
                .authorization("digest", b(System.getProperty("warden.compat.super", "super:secret")))
                .sessionTimeoutMs(15000)
                .connectionTimeoutMs(10000)
                .retryPolicy(new ExponentialBackoffRetry(100, 8))
                .build();
        clients.add(c);
        c.start();
        check(c.blockUntilConnected(20, TimeUnit.SECONDS), "connected to member 1 alone (" + first + ")");
        boolean tracked = waitFor(20000, () -> {
            String now = c.getZookeeperClient().getCurrentConnectionString();
            for (String hp : hostports) if (!now.contains(hp)) return false;
            return true;
        });
        info("connection string " + c.getZookeeperClient().getCurrentConnectionString());
        check(tracked, "EnsembleTracker learned every member from /zookeeper/config");
        c.create().creatingParentsIfNeeded().forPath(base + "/before", b("1"));
        c.reconfig().leaving("1").forEnsemble();
        boolean dropped = waitFor(30000, () -> !c.getZookeeperClient().getCurrentConnectionString().contains(first));
        info("connection string " + c.getZookeeperClient().getCurrentConnectionString());
        check(dropped, "the connection string no longer names the removed member");
        boolean wrote = waitFor(60000, () -> {
            try {
                c.create().forPath(base + "/after", b("2"));
                return true;
            } catch (org.apache.zookeeper.KeeperException.NodeExistsException e) {
                return true;
            } catch (Exception e) {
                return false;
            }
        });
        check(wrote, "writes go on through the remaining members");
        check(new String(c.getData().forPath(base + "/before"), StandardCharsets.UTF_8).equals("1"),
              "the write from before the reconfig is there");
    }

    /**
     * InterProcessMutex: one client per member, 10 acquisitions each. Inside the lock each
     * holder does a read-modify-write of a counter znode with setData(version read): under
     * a correct lock every check-and-set succeeds. The JVM-local section counter must never
     * exceed 1.
     */
    static void testMutex() throws Exception {
        final int n = hostports.length, rounds = 10;
        final String lockPath = base + "/lock";
        final String counter = base + "/counter";
        List<CuratorFramework> cs = new ArrayList<>();
        for (int i = 0; i < n; i++) cs.add(clientOn(i));
        cs.get(0).create().creatingParentsIfNeeded().forPath(counter, b("0"));
        final AtomicInteger inSection = new AtomicInteger();
        final AtomicInteger maxInSection = new AtomicInteger();
        final AtomicInteger casFailures = new AtomicInteger();
        final AtomicInteger done = new AtomicInteger();
        ExecutorService ex = Executors.newFixedThreadPool(n);
        CyclicBarrier start = new CyclicBarrier(n);
        List<Future<?>> fs = new ArrayList<>();
        for (int t = 0; t < n; t++) {
            final int id = t;
            fs.add(ex.submit(() -> {
                CuratorFramework c = cs.get(id);
                InterProcessMutex m = new InterProcessMutex(c, lockPath);
                start.await();
                for (int r = 0; r < rounds; r++) {
                    if (!m.acquire(60, TimeUnit.SECONDS)) throw new AssertionError("client " + id + " timed out acquiring");
                    try {
                        maxInSection.accumulateAndGet(inSection.incrementAndGet(), Math::max);
                        Stat st = new Stat();
                        // Local read on this client's server: it must already show the previous
                        // holder's write, because that holder released (a later write) before we got in.
                        int v = Integer.parseInt(new String(c.getData().storingStatIn(st).forPath(counter), StandardCharsets.UTF_8));
                        try {
                            c.setData().withVersion(st.getVersion()).forPath(counter, b(Integer.toString(v + 1)));
                        } catch (org.apache.zookeeper.KeeperException.BadVersionException e) {
                            casFailures.incrementAndGet();
                        }
                        inSection.decrementAndGet();
                    } finally {
                        m.release();
                    }
                    done.incrementAndGet();
                }
                return null;
            }));
        }
        for (Future<?> f : fs) f.get(120, TimeUnit.SECONDS);
        ex.shutdown();
        check(maxInSection.get() == 1, "max clients in critical section == 1 (was " + maxInSection.get() + ")");
        check(done.get() == n * rounds, n + " clients x " + rounds + " acquisitions completed");
        check(casFailures.get() == 0, "every check-and-set inside the lock succeeded (failures: " + casFailures.get() + ")");
        for (int i = 0; i < n; i++) {
            CuratorFramework c = cs.get(i);
            c.sync().forPath(counter);
            final int ii = i;
            check(waitFor(5000, () -> new String(c.getData().forPath(counter), StandardCharsets.UTF_8).equals(Integer.toString(n * rounds))),
                    "counter == " + n * rounds + " on member " + ii);
            // The lock path is a container: once empty, the container reaper may already have
            // removed it (Warden checks every second by default), which also means no lock nodes.
            boolean empty;
            try {
                empty = c.getChildren().forPath(lockPath).isEmpty();
            } catch (org.apache.zookeeper.KeeperException.NoNodeException e) {
                empty = true;
            }
            check(empty, "no lock nodes left, seen on member " + ii);
        }
    }

    /** LeaderLatch: one client per member; exactly one leader, agreed by all; it hands over twice. */
    static void testLeaderLatch() throws Exception {
        final int n = hostports.length;
        final String path = base + "/latch";
        List<CuratorFramework> cs = new ArrayList<>();
        List<LeaderLatch> latches = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            cs.add(clientOn(i));
            latches.add(new LeaderLatch(cs.get(i), path, "p" + i));
        }
        for (LeaderLatch l : latches) l.start();
        check(waitFor(20000, () -> leaders(latches) == 1), "exactly one of " + n + " latches has leadership");
        Thread.sleep(500);
        check(leaders(latches) == 1, "still exactly one leader after 500ms");
        int leader = indexOfLeader(latches, -1);
        final String leaderId = "p" + leader;
        for (LeaderLatch l : latches) {
            check(waitFor(5000, () -> l.getLeader().getId().equals(leaderId)), l.getId() + " (own server) sees leader " + leaderId);
            check(waitFor(5000, () -> l.getParticipants().size() == n), l.getId() + " sees " + n + " participants");
        }
        info("closing latch of leader " + leaderId);
        latches.get(leader).close();
        List<LeaderLatch> rest = new ArrayList<>(latches);
        rest.remove(leader);
        check(waitFor(20000, () -> leaders(rest) == 1), "exactly one of the remaining latches becomes leader");
        int leader2 = indexOfLeader(latches, leader);
        final String id2 = "p" + leader2;
        for (LeaderLatch l : rest) {
            check(waitFor(5000, () -> l.getLeader().getId().equals(id2)), l.getId() + " sees new leader " + id2);
        }
        info("closing the whole client (session) of leader " + id2);
        CuratorFramework c2 = cs.get(leader2);
        clients.remove(c2);
        c2.close();
        List<LeaderLatch> last = new ArrayList<>(rest);
        last.remove(latches.get(leader2));
        check(waitFor(30000, () -> leaders(last) == 1), "one of the last " + last.size() + " becomes leader after the leader's session closes");
        for (LeaderLatch l : last) {
            check(waitFor(5000, () -> l.getParticipants().size() == n - 2), l.getId() + " sees " + (n - 2) + " participants");
        }
        for (LeaderLatch l : last) l.close();
    }

    static int leaders(List<LeaderLatch> ls) {
        int k = 0;
        for (LeaderLatch l : ls) if (l.hasLeadership()) k++;
        return k;
    }

    static int indexOfLeader(List<LeaderLatch> ls, int except) {
        for (int i = 0; i < ls.size(); i++) if (i != except && ls.get(i).hasLeadership()) return i;
        throw new AssertionError("no leader");
    }
}
