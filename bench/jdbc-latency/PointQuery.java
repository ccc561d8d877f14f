// pgjdbc point-query latency on one connection (issue 28).
//
// One JDBC connection, one PreparedStatement
// `select abalance from pgbench_accounts where aid = ?`, run --warmup times
// (JIT, server-side statement, the proxy's caches), then --count timed
// executions with a random aid, each timed with System.nanoTime around
// setInt + executeQuery + reading the row. Autocommit, so that every query is
// a transaction of its own, as a pooler in transaction mode sees it.
//
// prepareThreshold is pgjdbc's: -1 makes the statement a named server-side
// one from the first execution, 5 (the driver's default) from the fifth;
// either way the timed queries all run the named statement.
//
// Between warm-up and timed queries it prints `warm` and waits for a line on
// stdin (unless --no-wait), so that a runner can read a proxy's CPU time over
// the timed queries alone. Then one line:
//
//   result threshold=-1 n=20000 median_us=23.1 p99_us=41.0 mean_us=24.2 min_us=19.8
//
// Build: javac -cp /usr/share/java/postgresql.jar -d OUT PointQuery.java
// Run:   java -cp /usr/share/java/postgresql.jar:OUT PointQuery --port 5432 ...
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Arrays;
import java.util.Properties;
import java.util.SplittableRandom;

public final class PointQuery {
    private static final String SQL = "select abalance from pgbench_accounts where aid = ?";

    public static void main(String[] args) throws Exception {
        String host = "127.0.0.1";
        int port = 5432;
        String database = "bench";
        String user = "postgres";
        String password = System.getenv().getOrDefault("PGPASSWORD", "");
        int threshold = -1;
        int warmup = 10000;
        int count = 20000;
        int accounts = 1000000;
        long seed = 28;
        boolean waitForGo = true;
        for (int i = 0; i < args.length; i++) {
            String flag = args[i];
            if (flag.equals("--no-wait")) {
                waitForGo = false;
                continue;
            }
            if (i + 1 >= args.length) {
                usage("missing value after " + flag);
            }
            String value = args[++i];
            switch (flag) {
                case "--host": host = value; break;
                case "--port": port = Integer.parseInt(value); break;
                case "--db": database = value; break;
                case "--user": user = value; break;
                case "--threshold": threshold = Integer.parseInt(value); break;
                case "--warmup": warmup = Integer.parseInt(value); break;
                case "--count": count = Integer.parseInt(value); break;
                case "--accounts": accounts = Integer.parseInt(value); break;
                case "--seed": seed = Long.parseLong(value); break;
                default: usage("unknown flag " + flag);
            }
        }
        if (count < 1 || warmup < 0 || accounts < 1) {
            usage("--count must be at least 1, --warmup and --accounts not negative");
        }

        Properties props = new Properties();
        props.setProperty("user", user);
        props.setProperty("password", password);
        props.setProperty("prepareThreshold", Integer.toString(threshold));
        props.setProperty("sslmode", "disable");
        String url = "jdbc:postgresql://" + host + ":" + port + "/" + database;
        SplittableRandom random = new SplittableRandom(seed);
        long[] nanos = new long[count];
        try (Connection conn = DriverManager.getConnection(url, props);
             PreparedStatement stmt = conn.prepareStatement(SQL)) {
            long checksum = 0;
            for (int i = 0; i < warmup; i++) {
                checksum += pointQuery(stmt, 1 + random.nextInt(accounts));
            }
            System.out.println("warm");
            System.out.flush();
            if (waitForGo) {
                new BufferedReader(new InputStreamReader(System.in)).readLine();
            }
            for (int i = 0; i < count; i++) {
                int aid = 1 + random.nextInt(accounts);
                long start = System.nanoTime();
                checksum += pointQuery(stmt, aid);
                nanos[i] = System.nanoTime() - start;
            }
            // Printed so that the JIT cannot drop the reads.
            System.out.println("checksum " + checksum);
        }
        long total = 0;
        for (long n : nanos) {
            total += n;
        }
        Arrays.sort(nanos);
        System.out.printf("result threshold=%d n=%d median_us=%.1f p99_us=%.1f mean_us=%.1f min_us=%.1f%n",
                threshold, count, percentile(nanos, 0.50) / 1e3, percentile(nanos, 0.99) / 1e3,
                total / (double) count / 1e3, nanos[0] / 1e3);
    }

    /** One execution: the row's abalance (every aid in 1..accounts has one row). */
    private static long pointQuery(PreparedStatement stmt, int aid) throws SQLException {
        stmt.setInt(1, aid);
        try (ResultSet rs = stmt.executeQuery()) {
            if (!rs.next()) {
                throw new SQLException("no row for aid " + aid);
            }
            return rs.getInt(1);
        }
    }

    /** The value at fraction q of sorted samples (nearest rank). */
    private static long percentile(long[] sorted, double q) {
        int rank = (int) Math.ceil(q * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, rank))];
    }

    private static void usage(String why) {
        System.err.println("PointQuery: " + why);
        System.err.println("usage: PointQuery [--host H] [--port P] [--db D] [--user U] [--threshold T]"
                + " [--warmup N] [--count M] [--accounts A] [--seed S] [--no-wait]  (password from PGPASSWORD)");
        System.exit(2);
    }
}
