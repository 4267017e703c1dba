package warden.compat;

import java.io.File;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.utils.ZookeeperFactory;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.client.HostProvider;
import org.apache.zookeeper.data.Stat;

/**
 * A fenced lock client on Curator's InterProcessMutex: the Curator twin of
 * compat-tests/ensemble_worker.py (same CONFIG_JSON keys, same JSON-lines events on stdout),
 * run as its own process by test_ensemble.py's LockRun.
 *
 * Usage: CURATOR_COMPAT_MAIN=warden.compat.FencedLockWorker curator/run.sh CONFIG_JSON
 *
 * CONFIG_JSON (a flat JSON object): hosts (connect string, tried in the given order, see
 * OrderedHostProvider), id, lock, fence, acks, stop (the worker ends when this file exists),
 * writes_per_hold, hold_s, pause_after_read_s, max_holds (0 = unlimited), session_timeout
 * (seconds), duration_s (0 = until the stop file appears).
 *
 * One CuratorFramework (one session) with the usual Curator retry policy,
 * ExponentialBackoffRetry(1000, 3) (Curator has no built-in default; this is the one its
 * documentation uses), connection timeout = session timeout, and Curator's default connection
 * handling (it declares the session LOST itself after a session timeout spent SUSPENDED).
 *
 * While holding the InterProcessMutex the worker appends [token, id, n] to the JSON list in the
 * fence znode with setData(version it read), token = the sequence number of its own lock node
 * (InterProcessMutex#getLockPath, protected, hence the subclass). A connection error leaves the outcome unknown, so the same check-and-set is
 * retried with the same version; BadVersion is resolved by reading the fence: our entry there
 * means an earlier attempt was applied, otherwise the write was rejected. Events, one JSON
 * object per line, each with "t" (epoch seconds):
 *   session {sid, server}   state {state: CONNECTED|SUSPENDED|RECONNECTED|LOST|READ_ONLY,
 *   server, suspended_s (on leaving SUSPENDED)}   acquired {token, sid, node}   read {token, version}
 *   ack {entry, version}   rejected {entry, version, fence_last}   fenced {token, fence_last}
 *   created {path}   released {token}   retry {where, error} (a connection error, retried)
 *   error {where, error}   done
 */
public final class FencedLockWorker {

    static final Pattern ENTRY = Pattern.compile("\\[\\s*(-?\\d+)\\s*,\\s*(-?\\d+)\\s*,\\s*(-?\\d+)\\s*\\]");
    static final long WATCHDOG_SECONDS = Long.getLong("warden.compat.watchdog", 900);
    /** Longest pause between two sweeps of the host list (StaticHostProvider waits the 1 s ClientCnxn asks for). */
    static final long MAX_SPIN_MS = 250;

    static volatile boolean closing = false;
    static volatile OrderedHostProvider hosts;
    static volatile long suspendedAt = 0;

    /** The lock node's path is InterProcessMutex's (protected) getLockPath(). */
    static final class FencedMutex extends InterProcessMutex {
        FencedMutex(CuratorFramework client, String path) { super(client, path); }
        String lockNode() { return getLockPath(); }
    }

    /**
     * The hosts of the connect string in their given order (ZooKeeper's StaticHostProvider
     * shuffles them), like kazoo's randomize_hosts=False: a worker whose list starts with
     * member i connects to member i first and moves on to the next one when it loses it.
     */
    static final class OrderedHostProvider implements HostProvider {
        private final List<InetSocketAddress> addrs = new ArrayList<>();
        private final List<String> names = new ArrayList<>();  // as given in the connect string
        private int index = -1;
        private int sinceConnected = 0;
        volatile String connected;

        OrderedHostProvider(String connectString) {
            int slash = connectString.indexOf('/');
            String list = slash >= 0 ? connectString.substring(0, slash) : connectString;
            for (String hp : list.split(",")) {
                hp = hp.trim();
                int colon = hp.lastIndexOf(':');
                addrs.add(new InetSocketAddress(hp.substring(0, colon), Integer.parseInt(hp.substring(colon + 1))));
                names.add(hp);
            }
        }

        @Override public int size() { return addrs.size(); }

        @Override public InetSocketAddress next(long spinDelay) {
            boolean sweptAll;
            synchronized (this) {
                sweptAll = sinceConnected >= addrs.size();
                if (sweptAll) sinceConnected = 0;
            }
            if (sweptAll && spinDelay > 0) {
                try {
                    Thread.sleep(Math.min(spinDelay, MAX_SPIN_MS));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            synchronized (this) {
                sinceConnected++;
                index = (index + 1) % addrs.size();
                return addrs.get(index);
            }
        }

        @Override public synchronized void onConnected() {
            sinceConnected = 0;
            connected = names.get(index);
        }

        /** The list is fixed (the ensemble tracker is off, so this is not called). */
        @Override public boolean updateServerList(Collection<InetSocketAddress> serverAddresses, InetSocketAddress currentHost) {
            return false;
        }
    }

    static final ZookeeperFactory ORDERED = (connectString, sessionTimeout, watcher, canBeReadOnly) -> {
        OrderedHostProvider p = new OrderedHostProvider(connectString);
        hosts = p;
        return new ZooKeeper(connectString, sessionTimeout, watcher, canBeReadOnly, p);
    };

    // ---------------------------------------------------------------------------------------
    // JSON: a flat config object in, one event object per line out, fence lists both ways

    static Map<String, Object> parseConfig(String s) {
        Map<String, Object> m = new HashMap<>();
        int[] pos = {0};
        skipWs(s, pos);
        expect(s, pos, '{');
        skipWs(s, pos);
        if (s.charAt(pos[0]) == '}') return m;
        while (true) {
            skipWs(s, pos);
            String key = parseString(s, pos);
            skipWs(s, pos);
            expect(s, pos, ':');
            skipWs(s, pos);
            Object value;
            char c = s.charAt(pos[0]);
            if (c == '"') {
                value = parseString(s, pos);
            } else {
                int start = pos[0];
                while (pos[0] < s.length() && ",} \t\r\n".indexOf(s.charAt(pos[0])) < 0) pos[0]++;
                String tok = s.substring(start, pos[0]);
                value = tok.equals("null") ? null : tok.equals("true") ? (Object) 1.0 : tok.equals("false") ? (Object) 0.0 : (Object) Double.parseDouble(tok);
            }
            m.put(key, value);
            skipWs(s, pos);
            if (s.charAt(pos[0]) == ',') { pos[0]++; continue; }
            expect(s, pos, '}');
            return m;
        }
    }

    static void skipWs(String s, int[] pos) {
        while (pos[0] < s.length() && Character.isWhitespace(s.charAt(pos[0]))) pos[0]++;
    }

    static void expect(String s, int[] pos, char c) {
        if (pos[0] >= s.length() || s.charAt(pos[0]) != c) {
            throw new IllegalArgumentException("config: expected '" + c + "' at " + pos[0] + " in " + s);
        }
        pos[0]++;
    }

    static String parseString(String s, int[] pos) {
        expect(s, pos, '"');
        StringBuilder b = new StringBuilder();
        while (true) {
            char c = s.charAt(pos[0]++);
            if (c == '"') return b.toString();
            if (c != '\\') { b.append(c); continue; }
            char e = s.charAt(pos[0]++);
            switch (e) {
                case 'n': b.append('\n'); break;
                case 't': b.append('\t'); break;
                case 'r': b.append('\r'); break;
                case 'b': b.append('\b'); break;
                case 'f': b.append('\f'); break;
                case 'u': b.append((char) Integer.parseInt(s.substring(pos[0], pos[0] + 4), 16)); pos[0] += 4; break;
                default: b.append(e);  // \" \\ \/
            }
        }
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static String json(Object v) {
        if (v == null) return "null";
        if (v instanceof String) return quote((String) v);
        if (v instanceof long[]) {
            StringBuilder b = new StringBuilder("[");
            for (long x : (long[]) v) b.append(b.length() > 1 ? ", " : "").append(x);
            return b.append(']').toString();
        }
        if (v instanceof Double) return String.format(Locale.ROOT, "%.3f", (Double) v);
        return v.toString();  // Integer, Long, Boolean
    }

    static synchronized void out(String ev, Object... kv) {
        Instant now = Instant.now();
        StringBuilder b = new StringBuilder("{\"ev\": ").append(quote(ev));
        for (int i = 0; i < kv.length; i += 2) b.append(", ").append(quote((String) kv[i])).append(": ").append(json(kv[i + 1]));
        b.append(String.format(Locale.ROOT, ", \"t\": %d.%06d}", now.getEpochSecond(), now.getNano() / 1000));
        System.out.println(b);
        System.out.flush();
    }

    /** The fence: a JSON list of [token, worker, n] entries. */
    static List<long[]> parseFence(byte[] raw) {
        List<long[]> l = new ArrayList<>();
        Matcher m = ENTRY.matcher(new String(raw, StandardCharsets.UTF_8));
        while (m.find()) l.add(new long[] {Long.parseLong(m.group(1)), Long.parseLong(m.group(2)), Long.parseLong(m.group(3))});
        return l;
    }

    static byte[] fenceBytes(List<long[]> hist) {
        StringBuilder b = new StringBuilder("[");
        for (long[] e : hist) b.append(b.length() > 1 ? ", " : "").append(json(e));
        return b.append(']').toString().getBytes(StandardCharsets.UTF_8);
    }

    static boolean contains(List<long[]> hist, long[] entry) {
        for (long[] e : hist) if (java.util.Arrays.equals(e, entry)) return true;
        return false;
    }

    // ---------------------------------------------------------------------------------------

    interface Op<T> { T call() throws Exception; }

    static boolean isTransient(KeeperException e) {
        switch (e.code()) {
            case CONNECTIONLOSS:
            case SESSIONEXPIRED:
            case OPERATIONTIMEOUT:
            case SESSIONMOVED:
                return true;
            default:
                return false;
        }
    }

    /** Curator's retry policy gave up on a connection error: report it and try again, until deadlineS. */
    static <T> T retry(String where, double deadlineS, Op<T> op) throws Exception {
        long deadline = System.nanoTime() + (long) (deadlineS * 1e9);
        while (true) {
            try {
                return op.call();
            } catch (KeeperException e) {
                if (!isTransient(e) || System.nanoTime() > deadline) throw e;
                out("retry", "where", where, "error", e.toString());
                Thread.sleep(50);
            }
        }
    }

    static CuratorFramework zk;

    static Object sid() {
        try {
            return zk.getZookeeperClient().getZooKeeper().getSessionId();
        } catch (Exception e) {
            return null;
        }
    }

    static String server() {
        OrderedHostProvider p = hosts;
        return p == null ? null : p.connected;
    }

    public static void main(String[] args) {
        if (args.length != 1) {
            System.err.println("usage: FencedLockWorker CONFIG_JSON");
            System.exit(2);
        }
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(WATCHDOG_SECONDS * 1000);
            } catch (InterruptedException e) {
                return;
            }
            out("error", "where", "watchdog", "error", "still running after " + WATCHDOG_SECONDS + "s");
            Runtime.getRuntime().halt(3);
        });
        watchdog.setDaemon(true);
        watchdog.start();
        int rc = 0;
        try {
            run(parseConfig(args[0]));
        } catch (Throwable t) {
            out("error", "where", "main", "error", t.toString());
            rc = 1;
        }
        System.out.flush();
        Runtime.getRuntime().halt(rc);
    }

    static double num(Map<String, Object> cfg, String key, double dflt) {
        Object v = cfg.get(key);
        return v == null ? dflt : (Double) v;
    }

    static void run(Map<String, Object> cfg) throws Exception {
        final long wid = (long) num(cfg, "id", 0);
        final String lockPath = (String) cfg.get("lock");
        final String fence = (String) cfg.get("fence");
        final String acks = (String) cfg.get("acks");
        final File stop = new File((String) cfg.get("stop"));
        final int writesPerHold = (int) num(cfg, "writes_per_hold", 2);
        final long holdMs = (long) (num(cfg, "hold_s", 0.02) * 1000);
        final long pauseAfterReadMs = (long) (num(cfg, "pause_after_read_s", 0) * 1000);
        final int maxHolds = (int) num(cfg, "max_holds", 0);
        final double durationS = num(cfg, "duration_s", 0);
        final long endNanos = System.nanoTime() + (long) (durationS * 1e9);

        final int sessionTimeoutMs = (int) (num(cfg, "session_timeout", 4.0) * 1000);
        zk = CuratorFrameworkFactory.builder()
                .connectString((String) cfg.get("hosts"))
                .sessionTimeoutMs(sessionTimeoutMs)
                .connectionTimeoutMs(sessionTimeoutMs)  // how long an operation waits for a connection (default 15 s)
                .retryPolicy(new ExponentialBackoffRetry(1000, 3))
                .zookeeperFactory(ORDERED)
                .ensembleTracker(false)  // keep exactly the given member list (no /zookeeper/config following)
                .build();
        zk.getConnectionStateListenable().addListener((client, state) -> {
            if (closing) return;  // Curator may report on its own close
            if (state == ConnectionState.SUSPENDED) {
                suspendedAt = System.nanoTime();
                out("state", "state", state.name());
                return;
            }
            Double suspended = null;
            if (suspendedAt != 0) {
                suspended = (System.nanoTime() - suspendedAt) / 1e9;
                if (state != ConnectionState.LOST) suspendedAt = 0;
            }
            out("state", "state", state.name(), "server", state.isConnected() ? server() : null, "suspended_s", suspended);
        });
        zk.start();
        if (!zk.blockUntilConnected(20, TimeUnit.SECONDS)) {
            throw new IllegalStateException("not connected to " + cfg.get("hosts") + " within 20s");
        }
        out("session", "sid", sid(), "server", server());

        FencedMutex mutex = new FencedMutex(zk, lockPath);
        long n = 0;
        int holds = 0;
        while (!stop.exists() && (durationS <= 0 || System.nanoTime() < endNanos)) {
            if (maxHolds > 0 && holds >= maxHolds) break;
            try {
                if (!mutex.acquire(10, TimeUnit.SECONDS)) continue;
            } catch (Exception e) {
                out("error", "where", "acquire", "error", e.toString());
                Thread.sleep(100);
                continue;
            }
            holds++;
            String node = mutex.lockNode();
            long token = Long.parseLong(node.substring(node.length() - 10));
            out("acquired", "token", token, "sid", sid(), "node", node);
            try {
                for (int k = 0; k < writesPerHold; k++) {
                    n++;
                    final long[] entry = {token, wid, n};
                    final Stat stat = new Stat();
                    List<long[]> hist = parseFence(retry("read", 60, () -> zk.getData().storingStatIn(stat).forPath(fence)));
                    if (!hist.isEmpty() && hist.get(hist.size() - 1)[0] > token) {
                        out("fenced", "token", token, "fence_last", hist.get(hist.size() - 1));
                        break;
                    }
                    out("read", "token", token, "version", stat.getVersion());
                    if (pauseAfterReadMs > 0) Thread.sleep(pauseAfterReadMs);
                    List<long[]> next = new ArrayList<>(hist);
                    next.add(entry);
                    Object[] result = cas(fence, entry, fenceBytes(next), stat.getVersion());
                    if (result[0].equals("ack")) {
                        out("ack", "entry", entry, "version", result[1]);
                    } else {
                        out("rejected", "entry", entry, "version", stat.getVersion(), "fence_last", result[1]);
                        break;
                    }
                    final String path = acks + "/w" + wid + "-" + n;
                    try {
                        retry("create", 60, () -> zk.create().forPath(path, json(entry).getBytes(StandardCharsets.UTF_8)));
                    } catch (KeeperException.NodeExistsException e) {
                        // an attempt whose reply was lost did create it
                    }
                    out("created", "path", path);
                    Thread.sleep(holdMs);
                }
            } catch (Exception e) {
                out("error", "where", "hold", "error", e.toString());  // report and carry on contending
            } finally {
                try {
                    mutex.release();  // Curator deletes the lock node with guaranteed(): it keeps trying if this fails
                } catch (Exception e) {
                    out("error", "where", "release", "error", e.toString());
                }
                out("released", "token", token);
            }
        }
        closing = true;
        zk.close();
        out("done");
    }

    /** setData(version) of the fence; ["ack", new version] or ["rejected", last entry or null]. */
    static Object[] cas(String fence, long[] entry, byte[] data, int version) throws Exception {
        long deadline = System.nanoTime() + 60_000_000_000L;
        while (true) {
            try {
                Stat st = zk.setData().withVersion(version).forPath(fence, data);
                return new Object[] {"ack", st.getVersion()};
            } catch (KeeperException.BadVersionException e) {
                List<long[]> cur = parseFence(retry("cas-check", 60, () -> zk.getData().forPath(fence)));
                if (contains(cur, entry)) return new Object[] {"ack", version + 1};  // an earlier attempt did apply
                return new Object[] {"rejected", cur.isEmpty() ? null : cur.get(cur.size() - 1)};
            } catch (KeeperException e) {
                if (!isTransient(e) || System.nanoTime() > deadline) throw e;
                out("retry", "where", "cas", "error", e.toString());
                Thread.sleep(50);
            }
        }
    }
}
