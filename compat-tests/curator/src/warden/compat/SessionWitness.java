package warden.compat;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryForever;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.Stat;

/**
 * A Java client whose session must live through a server cutover (test_migration.py): one plain
 * ZooKeeper handle holding a one-shot data watch, which the Java client re-registers with
 * SetWatches when it reconnects, and one Curator client holding an InterProcessMutex.
 *
 * Usage: CURATOR_COMPAT_MAIN=warden.compat.SessionWitness curator/run.sh CONNECT_STRING WATCH_PATH LOCK_PATH SESSION_TIMEOUT_MS
 *
 * stdout, one line each, flushed:
 *   zk-state STATE            every connection event of the plain handle (SyncConnected, Disconnected, Expired, ...)
 *   zk-session 0xID           the plain handle's session, once connected
 *   watching PATH VERSION     getData(PATH) with a watch done; VERSION is the data version read
 *   watch TYPE PATH           the data watch fired (NodeDataChanged, NodeDeleted)
 *   curator-state NAME        every Curator connection state change (CONNECTED SUSPENDED RECONNECTED LOST)
 *   curator-session 0xID      the Curator client's session, once connected
 *   locked NODE               the mutex is held; NODE is its lock node (full path)
 *   held BOOL 0xZK 0xCURATOR  answer to "check": the mutex is held here, and both handles' current sessions
 *   contend BOOL              answer to "contend": whether a second Curator client (a new session) got the
 *                             same mutex within 2 s
 *   error MESSAGE             this program failed; it exits 1
 * stdin: "check", "contend", "quit" (release, close both, exit 0); EOF = quit.
 */
public final class SessionWitness {

    static final int CONNECTION_TIMEOUT_MS = 15000;
    static final PrintStream OUT = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
    static volatile boolean closing = false;

    static synchronized void out(String line) {
        OUT.print(line.replace('\n', ' '));
        OUT.print('\n');
        OUT.flush();
    }

    static void fail(Object why) {
        out("error " + why);
        Runtime.getRuntime().halt(1);
    }

    static String hex(long id) {
        return "0x" + Long.toHexString(id);
    }

    static CuratorFramework curator(String connect, int timeoutMs) {
        return CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(timeoutMs)
                .connectionTimeoutMs(CONNECTION_TIMEOUT_MS)
                .retryPolicy(new RetryForever(200))
                .ensembleTracker(false)
                .build();
    }

    public static void main(String[] args) {
        if (args.length != 4) {
            System.err.println("usage: SessionWitness CONNECT_STRING WATCH_PATH LOCK_PATH SESSION_TIMEOUT_MS");
            System.exit(2);
        }
        try {
            run(args[0], args[1], args[2], Integer.parseInt(args[3]));
        } catch (Throwable t) {
            fail(t);
        }
        OUT.flush();
        Runtime.getRuntime().halt(0);
    }

    static void run(String connect, String watchPath, String lockPath, int timeoutMs) throws Exception {
        CountDownLatch connected = new CountDownLatch(1);
        ZooKeeper zk = new ZooKeeper(connect, timeoutMs, event -> {
            if (closing) return;
            out("zk-state " + event.getState());
            if (event.getState() == Watcher.Event.KeeperState.SyncConnected) connected.countDown();
        });
        if (!connected.await(30, TimeUnit.SECONDS)) throw new IllegalStateException("plain handle never connected");
        out("zk-session " + hex(zk.getSessionId()));
        Stat stat = new Stat();
        zk.getData(watchPath, event -> {
            if (!closing) out("watch " + event.getType() + " " + event.getPath());
        }, stat);
        out("watching " + watchPath + " " + stat.getVersion());

        CuratorFramework client = curator(connect, timeoutMs);
        client.getConnectionStateListenable().addListener((c, state) -> {
            if (!closing) out("curator-state " + state.name());
        });
        client.start();
        if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) throw new IllegalStateException("Curator never connected");
        out("curator-session " + hex(client.getZookeeperClient().getZooKeeper().getSessionId()));
        InterProcessMutex mutex = new InterProcessMutex(client, lockPath);
        if (!mutex.acquire(30, TimeUnit.SECONDS)) throw new IllegalStateException("mutex not acquired");
        out("locked " + String.join(",", mutex.getParticipantNodes()));

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        while (true) {
            String line = in.readLine();
            if (line == null) break;
            String cmd = line.trim();
            if (cmd.isEmpty()) continue;
            if (cmd.equals("quit")) break;
            if (cmd.equals("check")) {
                out("held " + mutex.isAcquiredInThisProcess() + " " + hex(zk.getSessionId()) + " "
                        + hex(client.getZookeeperClient().getZooKeeper().getSessionId()));
            } else if (cmd.equals("contend")) {
                CuratorFramework other = curator(connect, timeoutMs);
                other.start();
                try {
                    if (!other.blockUntilConnected(30, TimeUnit.SECONDS)) throw new IllegalStateException("contender never connected");
                    InterProcessMutex rival = new InterProcessMutex(other, lockPath);
                    boolean got = rival.acquire(2, TimeUnit.SECONDS);
                    if (got) rival.release();
                    out("contend " + got);
                } finally {
                    other.close();
                }
            } else {
                throw new IllegalArgumentException("unknown command: " + cmd);
            }
        }
        closing = true;
        mutex.release();
        client.close();
        zk.close();
    }
}
