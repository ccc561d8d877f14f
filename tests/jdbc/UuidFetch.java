import java.nio.file.*;
import java.sql.*;
import java.util.*;

/**
 * Fetches every row of `select u from t1` (uuid) as text, in fetchSize
 * batches inside a transaction, with binaryTransfer=false (the client asks
 * for text, as pgjdbc always does with prepareThreshold=0) and
 * prepareThreshold THRESHOLD (default 1: a named server-prepared statement
 * from the first execution; 0: an unnamed statement parsed again at every
 * execution, the usual setting behind a transaction pooler).
 * Usage: UuidFetch URL USER PASSWORD RUNS [THRESHOLD]. Prints, per run:
 * "run N rows R checksum C ms T server_cpu_ticks K", where C is FNV-1a over
 * every value's text and K the utime+stime (1/100 s) of the server backend,
 * read from /proc (the backend must be on this machine, and the only one a
 * pooler uses: pool_size = 1).
 */
public class UuidFetch {
    static long cpuTicks(int pid) throws Exception {
        String stat = new String(Files.readAllBytes(Paths.get("/proc/" + pid + "/stat")));
        String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
        return Long.parseLong(f[11]) + Long.parseLong(f[12]);
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        props.setProperty("prepareThreshold", args.length > 4 ? args[4] : "1");
        props.setProperty("binaryTransfer", "false");
        int runs = Integer.parseInt(args[3]);
        try (Connection c = DriverManager.getConnection(args[0], props)) {
            c.setAutoCommit(false);
            int pid;
            try (Statement s = c.createStatement(); ResultSet r = s.executeQuery("select pg_backend_pid()")) {
                r.next();
                pid = r.getInt(1);
            }
            c.commit();
            try (PreparedStatement ps = c.prepareStatement("select u from t1")) {
                ps.setFetchSize(10000);
                for (int run = 0; run < runs; run++) {
                    long cpu0 = cpuTicks(pid);
                    long t0 = System.nanoTime();
                    long rows = 0;
                    long sum = 0xcbf29ce484222325L;
                    try (ResultSet r = ps.executeQuery()) {
                        while (r.next()) {
                            String u = r.getString(1);
                            for (int i = 0; i < u.length(); i++) {
                                sum ^= u.charAt(i);
                                sum *= 0x100000001b3L;
                            }
                            rows++;
                        }
                    }
                    c.commit();
                    long t1 = System.nanoTime();
                    long cpu1 = cpuTicks(pid);
                    System.out.println("run " + run + " rows " + rows + " checksum " + Long.toHexString(sum)
                        + " ms " + (t1 - t0) / 1000000 + " server_cpu_ticks " + (cpu1 - cpu0));
                }
            }
        }
    }
}
