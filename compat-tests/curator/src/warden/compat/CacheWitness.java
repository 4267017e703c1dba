package warden.compat;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.cache.ChildData;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.retry.RetryForever;
import org.apache.curator.utils.PathUtils;
import org.apache.zookeeper.data.Stat;

/**
 * A witness of what a Curator CuratorCache sees: one CuratorFramework, one CuratorCache (default
 * options: PATH and its whole subtree, with data) and a line protocol on stdin/stdout, so a test
 * can compare the cache's view with the server's tree after faults. Driven by
 * compat-tests/cache_witness.py.
 *
 * Usage: CURATOR_COMPAT_MAIN=warden.compat.CacheWitness curator/run.sh CONNECT_STRING PATH [SESSION_TIMEOUT_MS]
 *
 * The client: the connect string as given (several host:port allowed; the ensemble tracker is
 * off, so the list stays exactly what was given), session timeout SESSION_TIMEOUT_MS (default
 * 30000), connection timeout 15000, RetryForever(200 ms), so the cache's background reads keep
 * being retried through any outage instead of being given up. The program does not wait for a
 * connection: it starts the client and the cache and reports what happens.
 *
 * stdout, one line each, flushed, UTF-8:
 *   state NAME                 every connection state change: CONNECTED SUSPENDED RECONNECTED LOST READ_ONLY
 *   event TYPE PATH VERSION    every cache event: NODE_CREATED NODE_CHANGED NODE_DELETED; VERSION is the
 *                              data version of the new node data (of the old data for NODE_DELETED).
 *                              PATH may contain spaces: the type is the first word, the version the last.
 *   ready                      the cache's initial load is done (CuratorCacheListener.initialized)
 *   dump JSON                  answer to "dump": {PATH: {"version": V, "cversion": C, "data": BASE64}, ...}
 *                              of everything the cache holds at that moment (null data as "")
 *   error MESSAGE              this program failed; it exits 1. Any exception does it: in this program's
 *                              own code ("error java.lang..."), one the cache hands its exception handler
 *                              ("error cache: ..."; the CuratorCache would only log it and carry on without
 *                              that read), one Curator reports to its unhandled-error listeners
 *                              ("error unhandled: ..."; a background operation given up), an unknown command.
 * stdin, one command a line: "dump", "quit" (close the cache and the client, exit 0); EOF = quit.
 * Exit status: 0 after quit, 1 on error, 2 on a usage error.
 */
public final class CacheWitness {

    static final int DEFAULT_SESSION_TIMEOUT_MS = 30000;
    static final int CONNECTION_TIMEOUT_MS = 15000;
    static final int RETRY_SLEEP_MS = 200;
    /** How long quit may take to close the cache and the client before the JVM halts anyway. */
    static final long CLOSE_GRACE_MS = 10000;

    /** UTF-8 whatever the locale (System.out would write '?' for non-ASCII paths under LANG=C). */
    static final PrintStream OUT = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);

    static volatile boolean closing = false;

    static synchronized void out(String line) {
        OUT.print(line);
        OUT.print('\n');
        OUT.flush();
    }

    /** One line whatever the exception's message holds. */
    static String message(Object t) {
        return String.valueOf(t).replace('\r', ' ').replace('\n', ' ');
    }

    static void fail(Object why) {
        out("error " + message(why));
        Runtime.getRuntime().halt(1);
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20 || c == 0x7f || Character.isSurrogate(c) || (c >= 0x80 && c < 0xa0)) {
                b.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
            } else b.append(c);
        }
        return b.append('"').toString();
    }

    static String dumpJson(CuratorCache cache) {
        Map<String, ChildData> nodes = new TreeMap<>();
        cache.stream().forEach(d -> nodes.put(d.getPath(), d));
        StringBuilder b = new StringBuilder("{");
        for (ChildData d : nodes.values()) {
            Stat st = d.getStat();
            byte[] data = d.getData();
            if (b.length() > 1) b.append(", ");
            b.append(quote(d.getPath())).append(": {\"version\": ").append(st == null ? -1 : st.getVersion())
                    .append(", \"cversion\": ").append(st == null ? -1 : st.getCversion())
                    .append(", \"data\": \"").append(Base64.getEncoder().encodeToString(data == null ? new byte[0] : data))
                    .append("\"}");
        }
        return b.append('}').toString();
    }

    public static void main(String[] args) {
        if (args.length < 2 || args.length > 3) {
            System.err.println("usage: CacheWitness CONNECT_STRING PATH [SESSION_TIMEOUT_MS]");
            System.exit(2);
        }
        try {
            run(args[0], args[1], args.length == 3 ? Integer.parseInt(args[2]) : DEFAULT_SESSION_TIMEOUT_MS);
        } catch (Throwable t) {
            fail(t);
        }
        OUT.flush();
        Runtime.getRuntime().halt(0);
    }

    static void run(String connectString, String path, int sessionTimeoutMs) throws Exception {
        PathUtils.validatePath(path);  // Curator would only report a bad path from a background thread
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connectString)
                .sessionTimeoutMs(sessionTimeoutMs)
                .connectionTimeoutMs(CONNECTION_TIMEOUT_MS)
                .retryPolicy(new RetryForever(RETRY_SLEEP_MS))
                .ensembleTracker(false)  // keep exactly the given member list
                .build();
        client.getConnectionStateListenable().addListener((c, state) -> {
            if (!closing) out("state " + state.name());
        });
        // Curator reports what its retry policy gave up on (with RetryForever: what is not
        // retryable at all) to these two; the cache would not converge after either, so both end
        // the program like any other exception.
        client.getUnhandledErrorListenable().addListener((msg, e) -> {
            if (!closing) fail("unhandled: " + msg + ": " + e);
        });
        CuratorCache cache = CuratorCache.builder(client, path)
                .withExceptionHandler(e -> {
                    if (!closing) fail("cache: " + e);
                })
                .build();
        cache.listenable().addListener(new CuratorCacheListener() {
            @Override
            public void event(Type type, ChildData oldData, ChildData data) {
                try {
                    ChildData d = data != null ? data : oldData;
                    Stat st = d.getStat();
                    out("event " + type.name() + " " + d.getPath() + " " + (st == null ? -1 : st.getVersion()));
                } catch (Throwable t) {
                    fail(t);
                }
            }

            @Override
            public void initialized() {
                out("ready");
            }
        });
        client.start();
        cache.start();

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        while (true) {
            String line = in.readLine();
            if (line == null) break;  // EOF: as quit
            String cmd = line.trim();
            if (cmd.isEmpty()) continue;
            if (cmd.equals("quit")) break;
            if (cmd.equals("dump")) {
                out("dump " + dumpJson(cache));
                continue;
            }
            throw new IllegalArgumentException("unknown command: " + cmd);
        }

        closing = true;
        Thread guard = new Thread(() -> {
            try {
                Thread.sleep(CLOSE_GRACE_MS);
            } catch (InterruptedException e) {
                return;
            }
            System.err.println("CacheWitness: close took longer than " + CLOSE_GRACE_MS + " ms; halting");
            Runtime.getRuntime().halt(0);
        });
        guard.setDaemon(true);
        guard.start();
        cache.close();
        client.close();
    }
}
