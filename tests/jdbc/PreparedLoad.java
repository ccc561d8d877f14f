import java.sql.*;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Many JDBC threads using server-prepared statements (prepareThreshold=1:
 * named from the first execution) through pglane in transaction mode.
 * Usage: PreparedLoad URL USER PASSWORD THREADS ITERATIONS. Prints
 * "ok <executions>" and exits 0, or prints the first failure and exits 1.
 */
public class PreparedLoad {
    public static void main(String[] args) throws Exception {
        String url = args[0];
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        props.setProperty("prepareThreshold", "1");
        int threads = Integer.parseInt(args[3]);
        int iterations = Integer.parseInt(args[4]);
        AtomicLong executions = new AtomicLong();
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        List<Future<?>> results = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int thread = t;
            results.add(pool.submit(() -> {
                try (Connection c = DriverManager.getConnection(url, props);
                     PreparedStatement add = c.prepareStatement("select ?::int4 + 1, ?::text");
                     PreparedStatement count = c.prepareStatement("select count(*) from generate_series(1, ?)")) {
                    for (int i = 0; i < iterations; i++) {
                        boolean inTransaction = i % 5 == 0;
                        c.setAutoCommit(!inTransaction);
                        add.setInt(1, i);
                        add.setString(2, "thread " + thread);
                        try (ResultSet rs = add.executeQuery()) {
                            rs.next();
                            check(rs.getInt(1) == i + 1 && rs.getString(2).equals("thread " + thread), "add");
                        }
                        count.setInt(1, i % 7 + 1);
                        try (ResultSet rs = count.executeQuery()) {
                            rs.next();
                            check(rs.getLong(1) == i % 7 + 1, "count");
                        }
                        if (inTransaction) c.commit();
                        executions.addAndGet(2);
                    }
                }
                return null;
            }));
        }
        try {
            for (Future<?> f : results) f.get();
        } catch (ExecutionException e) {
            e.getCause().printStackTrace();
            System.exit(1);
        } finally {
            pool.shutdownNow();
        }
        System.out.println("ok " + executions.get());
    }

    static void check(boolean ok, String what) {
        if (!ok) throw new IllegalStateException("wrong result from " + what);
    }
}
