// pgjdbc's LISTEN/NOTIFY API for tests/jdbc.rs, run direct and through
// pglane in transaction mode: Statement.execute("LISTEN ...") (the extended
// protocol) and PGConnection.getNotifications(timeout). Prints what the
// listener got, one "channel payload" per line, then "ok".
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;

public class Notify {
    public static void main(String[] args) throws Exception {
        String url = args[0], user = args[1], password = args[2];
        try (Connection listener = DriverManager.getConnection(url, user, password);
             Connection notifier = DriverManager.getConnection(url, user, password)) {
            PGConnection pg = listener.unwrap(PGConnection.class);
            try (Statement s = listener.createStatement()) {
                s.execute("LISTEN jobs");
                s.execute("LISTEN \"Mixed Case\"");
            }
            try (Statement n = notifier.createStatement()) {
                n.execute("NOTIFY jobs, 'one'");
                n.execute("SELECT pg_notify('Mixed Case', 'two')");
                notifier.setAutoCommit(false);
                n.execute("NOTIFY jobs, 'three'");
                n.execute("NOTIFY jobs, 'four'");
                notifier.commit();
                notifier.setAutoCommit(true);
            }
            print(receive(pg, 4));
            try (Statement s = listener.createStatement()) {
                s.execute("UNLISTEN jobs");
                s.execute("NOTIFY \"Mixed Case\", 'own'");
            }
            try (Statement n = notifier.createStatement()) {
                n.execute("NOTIFY jobs, 'not heard'");
                n.execute("NOTIFY \"Mixed Case\", 'five'");
            }
            print(receive(pg, 2));
            try (Statement s = listener.createStatement()) {
                s.execute("UNLISTEN *");
            }
            try (Statement n = notifier.createStatement()) {
                n.execute("NOTIFY \"Mixed Case\", 'not heard either'");
            }
            // Nothing more comes (a query reads what the server sent).
            try (Statement s = listener.createStatement()) {
                s.execute("SELECT 1");
            }
            print(receive(pg, 0));
        }
        // Not in autocommit (a Spring @Transactional method, say): pgjdbc
        // sends the LISTEN inside the block it opens, and it takes effect
        // at commit.
        try (Connection listener = DriverManager.getConnection(url, user, password);
             Connection notifier = DriverManager.getConnection(url, user, password)) {
            PGConnection pg = listener.unwrap(PGConnection.class);
            listener.setAutoCommit(false);
            try (Statement s = listener.createStatement()) {
                s.execute("SELECT 1");
                s.execute("LISTEN txn_jobs");
            }
            listener.commit();
            try (Statement n = notifier.createStatement()) {
                n.execute("NOTIFY txn_jobs, 'after commit'");
            }
            print(receive(pg, 1));
            try (Statement s = listener.createStatement()) {
                s.execute("UNLISTEN *");
            }
            listener.commit();
            try (Statement n = notifier.createStatement()) {
                n.execute("NOTIFY txn_jobs, 'after unlisten'");
            }
            try (Statement s = listener.createStatement()) {
                s.execute("SELECT 1");
            }
            listener.commit();
            print(receive(pg, 0));
        }
        System.out.println("ok");
    }

    /// Waits for `count` notifications (at most 10 s), then 300 ms for any more.
    static List<String> receive(PGConnection pg, int count) throws Exception {
        List<String> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 10_000;
        while (got.size() < count && System.currentTimeMillis() < deadline) {
            add(got, pg.getNotifications(1000));
        }
        add(got, pg.getNotifications(300));
        return got;
    }

    static void add(List<String> got, PGNotification[] notifications) {
        if (notifications != null) {
            for (PGNotification n : notifications) {
                got.add(n.getName() + " " + n.getParameter());
            }
        }
    }

    static void print(List<String> lines) {
        System.out.println(lines.size() + " notifications");
        for (String line : lines) {
            System.out.println(line);
        }
    }
}
