// pgjdbc's query timeout, for tests/jdbc.rs: ITERATIONS times a
// pg_sleep(10) with a 100 ms timeout (setQueryTimeoutMs, the millisecond
// form of setQueryTimeout: pgjdbc's timer sends a CancelRequest, waits for
// the server to close its connection, and the statement returns only once
// the cancel is done), then `select 1` (sleeping 10 ms, so that a cancel a
// few milliseconds late is seen), which must not be cancelled; a bystander
// connection runs short queries that no cancel may hit. Prints
// "late=N bystander_cancelled=N timed_out=N completed=N".
//
// Usage: java -cp postgresql.jar:. CancelLoop URL USER PASSWORD ITERATIONS
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

public class CancelLoop {
    static final String CANCELED = "57014";

    public static void main(String[] args) throws Exception {
        String url = args[0], user = args[1], password = args[2];
        int iterations = Integer.parseInt(args[3]);
        AtomicBoolean stop = new AtomicBoolean(false);
        AtomicInteger bystanderCancelled = new AtomicInteger();
        AtomicInteger bystanderQueries = new AtomicInteger();
        Thread bystander = new Thread(() -> {
            try (Connection other = DriverManager.getConnection(url, user, password); Statement st = other.createStatement()) {
                while (!stop.get()) {
                    try {
                        st.execute("select pg_sleep(0.005)");
                    } catch (SQLException e) {
                        if (!CANCELED.equals(e.getSQLState())) throw e;
                        bystanderCancelled.incrementAndGet();
                    }
                    bystanderQueries.incrementAndGet();
                }
            } catch (SQLException e) {
                throw new RuntimeException(e);
            }
        });
        bystander.start();
        int late = 0, timedOut = 0, completed = 0;
        try (Connection conn = DriverManager.getConnection(url, user, password)) {
            for (int i = 0; i < iterations; i++) {
                try (Statement st = conn.createStatement()) {
                    st.unwrap(org.postgresql.jdbc.PgStatement.class).setQueryTimeoutMs(100);
                    st.execute("select pg_sleep(10)");
                    completed++;
                } catch (SQLException e) {
                    if (!CANCELED.equals(e.getSQLState())) throw e;
                    timedOut++;
                }
                try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("select 1 from pg_sleep(0.01)")) {
                    rs.next();
                    if (rs.getInt(1) != 1) throw new IllegalStateException("select 1 gave " + rs.getInt(1));
                } catch (SQLException e) {
                    if (!CANCELED.equals(e.getSQLState())) throw e;
                    late++;
                }
            }
        }
        stop.set(true);
        bystander.join();
        if (bystanderQueries.get() == 0) throw new IllegalStateException("the bystander ran nothing");
        System.out.println("late=" + late + " bystander_cancelled=" + bystanderCancelled.get() + " timed_out=" + timedOut
                + " completed=" + completed);
    }
}
