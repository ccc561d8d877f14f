//! pgjdbc through pglane in transaction mode with server-prepared statements
//! from the first execution (prepareThreshold=1): the setting that breaks
//! behind a transaction pooler without statement tracking. Needs a JDK and
//! Debian's libpostgresql-jdbc-java, which tools/test installs.

mod common;

use std::path::Path;
use std::process::Command;

use common::{postgres, Pglane};

const DRIVER: &str = "/usr/share/java/postgresql.jar";

#[test]
fn jdbc_prepared_statements_20_threads_on_4_server_connections() {
    assert!(Path::new(DRIVER).exists(), "{DRIVER} missing: apt-get install libpostgresql-jdbc-java (tools/test does)");
    let pg = postgres();
    pg.fresh_database("jdbc_db", None);
    let lane = Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"jdbc_db\"\npool_size = 4\n[users.postgres]\npassword = \"secret\"\n",
            pg.port
        ),
        &["--cores", "2"],
    );
    let classes = lane.dir.join("classes");
    std::fs::create_dir_all(&classes).unwrap();
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/jdbc/PreparedLoad.java");
    let javac = Command::new("javac").args(["-cp", DRIVER, "-d"]).arg(&classes).arg(source).output().expect("javac runs");
    assert!(javac.status.success(), "{}", String::from_utf8_lossy(&javac.stderr));

    let url = format!("jdbc:postgresql://127.0.0.1:{}/app", lane.port);
    let classpath = format!("{}:{}", classes.display(), DRIVER);
    let run = Command::new("java")
        .args(["-cp", &classpath, "PreparedLoad", &url, "postgres", "secret", "20", "100"])
        .output()
        .expect("java runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}\n{}", String::from_utf8_lossy(&run.stderr), lane.log());
    assert_eq!(stdout.trim(), "ok 4000");
    let servers: i64 = pg.psql("select count(*) from pg_stat_activity where datname = 'jdbc_db'").parse().unwrap();
    assert!(servers <= 4, "{servers} server connections");
}
