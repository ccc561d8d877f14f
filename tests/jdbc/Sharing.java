import java.sql.*;
import java.util.*;

/**
 * pgjdbc as its users run it, with its default settings, several
 * connections open at once on a small pool, for tests/jdbc.rs:
 *
 * - every connection sends SET extra_float_digits = 3 over the extended
 *   protocol at startup: it must not pin its server connection, or the
 *   connections past the pool's size wait forever;
 * - statements with 32,767, 32,768 and 65,535 parameters (PostgreSQL takes
 *   up to 65,535);
 * - schema changes and search_path switches through the unnamed and named
 *   statements pgjdbc sends (prepareThreshold 0 and the default), each
 *   statement doing what it says.
 *
 * Usage: Sharing URL USER PASSWORD CONNECTIONS. Prints one line per result
 * ("name value"), then "ok"; exits 1 on the first failure.
 */
public class Sharing {
    static final List<String> results = new ArrayList<>();

    public static void main(String[] args) throws Exception {
        String url = args[0];
        int connections = Integer.parseInt(args[3]);
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        List<Connection> open = new ArrayList<>();
        for (int i = 0; i < connections; i++) {
            open.add(DriverManager.getConnection(url, props));
        }
        // Every connection works in turn while all are open.
        for (int round = 0; round < 10; round++) {
            for (int i = 0; i < open.size(); i++) {
                try (PreparedStatement s = open.get(i).prepareStatement("select ?::int4 * 2, 0.1::float8")) {
                    s.setInt(1, round * 100 + i);
                    try (ResultSet rs = s.executeQuery()) {
                        rs.next();
                        check(rs.getInt(1) == (round * 100 + i) * 2, "round " + round + " connection " + i);
                        check(rs.getString(2).equals("0.1"), "extra_float_digits 3 gives 0.1: " + rs.getString(2));
                    }
                }
            }
        }
        result("rounds", "10x" + open.size());
        Connection c = open.get(0);
        for (int n : new int[] {32767, 32768, 65535}) {
            StringBuilder sql = new StringBuilder("select cardinality(array[");
            for (int p = 0; p < n; p++) {
                sql.append(p == 0 ? "?::int4" : ",?::int4");
            }
            sql.append("])");
            try (PreparedStatement s = c.prepareStatement(sql.toString())) {
                for (int p = 1; p <= n; p++) {
                    s.setInt(p, p);
                }
                try (ResultSet rs = s.executeQuery()) {
                    rs.next();
                    result("params_" + n, rs.getInt(1));
                }
            }
        }
        for (String threshold : new String[] {"0", "5"}) {
            Properties p = new Properties();
            p.putAll(props);
            p.setProperty("prepareThreshold", threshold);
            try (Connection d = DriverManager.getConnection(url, p); Statement s = d.createStatement()) {
                String schema = "jdbc_sharing_" + threshold;
                for (int k = 0; k < 3; k++) {
                    s.execute("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
                    s.execute("CREATE SCHEMA " + schema);
                    s.execute("SET SESSION search_path TO " + schema);
                    s.execute("CREATE TABLE t (v text)");
                    s.execute("INSERT INTO t VALUES ('" + schema + " " + k + "')");
                    try (ResultSet rs = s.executeQuery("SELECT v FROM t")) {
                        rs.next();
                        result("schema_" + threshold + "_" + k, rs.getString(1));
                    }
                    s.execute("SET SESSION search_path TO DEFAULT");
                    try (ResultSet rs = s.executeQuery("SHOW search_path")) {
                        rs.next();
                        result("search_path_" + threshold + "_" + k, rs.getString(1));
                    }
                }
                s.execute("DROP SCHEMA " + schema + " CASCADE");
            }
        }
        for (Connection o : open) {
            o.close();
        }
        for (String r : results) {
            System.out.println(r);
        }
        System.out.println("ok");
    }

    static void result(String name, Object value) {
        results.add(name + " " + value);
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            System.out.println("FAILED: " + what);
            System.exit(1);
        }
    }
}
