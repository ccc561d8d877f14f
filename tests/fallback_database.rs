//! The `*` fallback database, as PgBouncer's: `[databases."*"]` in TOML,
//! `* = host=...` in a pgbouncer.ini. A client asking for a database no entry
//! lists gets a pool made for it, with that name as the server's database,
//! up to `max_fallback_databases` names at once over all shards; beyond,
//! FATAL 53400. A name counts while a pool of it serves a client or holds a
//! server connection, so names come free as their connections expire.

mod common;

use std::time::{Duration, Instant};

use common::{postgres, try_connect, Pglane, SUPERUSER, SUPERUSER_PASSWORD};

const NAMES: [&str; 3] = ["fb_one", "fb_two", "fb_three"];

fn databases() {
    static MADE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    MADE.get_or_init(|| {
        for name in NAMES {
            postgres().fresh_database(name, None);
        }
    });
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

async fn current_database(port: u16, db: &str) -> Result<(tokio_postgres::Client, String), tokio_postgres::Error> {
    let client = try_connect(port, SUPERUSER, SUPERUSER_PASSWORD, db).await?;
    let name: String = client.query_one("select current_database()", &[]).await?.get(0);
    Ok((client, name))
}

/// The SQLSTATE and message of a refused login.
fn refusal(e: &tokio_postgres::Error) -> (String, String) {
    let db = e.as_db_error().unwrap_or_else(|| panic!("not an ErrorResponse: {e}"));
    (db.code().code().to_owned(), db.message().to_owned())
}

/// Tries to log in to `db` until it works (names come free at a tick of
/// pglane's housekeeping once connections have expired).
async fn admitted_within(port: u16, db: &str, limit: Duration) -> tokio_postgres::Client {
    let deadline = Instant::now() + limit;
    loop {
        match current_database(port, db).await {
            Ok((client, name)) => {
                assert_eq!(name, db);
                return client;
            }
            Err(e) if Instant::now() < deadline => {
                assert_eq!(refusal(&e).0, "53400", "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{db} still refused after {limit:?}: {e}"),
        }
    }
}

#[test]
fn unlisted_databases_are_served_by_the_fallback_up_to_the_bound() {
    databases();
    let pg = postgres();
    let lane = Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\nmax_fallback_databases = 2\nserver_idle_timeout = 1\nadmin_users = [\"{SUPERUSER}\"]\n\
             [databases.app]\nhost = \"127.0.0.1\"\nport = {port}\ndbname = \"postgres\"\n\
             [databases.\"*\"]\nhost = \"127.0.0.1\"\nport = {port}\npool_size = 2\n\
             [users.{SUPERUSER}]\npassword = \"{SUPERUSER_PASSWORD}\"\n",
            port = pg.port
        ),
        &["--cores", "2"],
    );
    runtime().block_on(async {
        let (one, name) = current_database(lane.port, "fb_one").await.expect("fb_one through the fallback");
        assert_eq!(name, "fb_one");
        let (two, _) = current_database(lane.port, "fb_two").await.expect("fb_two through the fallback");
        // A listed database does not count.
        let (_app, name) = current_database(lane.port, "app").await.expect("app");
        assert_eq!(name, "postgres");
        // SHOW DATABASES lists the names the `*` entry serves, as PgBouncer
        // lists the databases it made from its `*`, and not the `*` entry,
        // which PgBouncer never lists.
        let shown = common::Psql::tcp(lane.port, SUPERUSER, SUPERUSER_PASSWORD, "pgbouncer")
            .command("SHOW DATABASES")
            .run()
            .expect("SHOW DATABASES");
        let names: Vec<&str> = shown.lines().filter_map(|l| l.split('|').next()).collect();
        assert_eq!(names, ["app", "fb_one", "fb_two"], "{shown}");
        // A third name is one too many while the two are in use.
        let e = current_database(lane.port, "fb_three").await.expect_err("refused");
        assert_eq!(
            refusal(&e),
            (
                "53400".to_owned(),
                "database \"fb_three\" is not in pglane's configuration, and the \"*\" entry serves \
                 max_fallback_databases = 2 other databases already"
                    .to_owned()
            )
        );
        // fb_one's client leaves; once its server connection expires
        // (server_idle_timeout = 1), its name comes free.
        drop(one);
        let three = admitted_within(lane.port, "fb_three", Duration::from_secs(30)).await;
        // A name the server does not have gets the server's own error, and
        // keeps no place: fb_one comes back in once two leaves.
        drop(three);
        let nope = admitted_within_or_refused(lane.port, "fb_nope", Duration::from_secs(30)).await;
        assert_eq!(nope.0, "3D000", "{nope:?}");
        assert!(nope.1.contains("\"fb_nope\" does not exist"), "{nope:?}");
        drop(two);
        let _one_again = admitted_within(lane.port, "fb_one", Duration::from_secs(30)).await;
        let _three_again = admitted_within(lane.port, "fb_three", Duration::from_secs(30)).await;
    });
}

/// Waits until logging in to `db` is no longer refused by the bound, and
/// returns the server's refusal (SQLSTATE, message).
async fn admitted_within_or_refused(port: u16, db: &str, limit: Duration) -> (String, String) {
    let deadline = Instant::now() + limit;
    loop {
        let e = current_database(port, db).await.expect_err("no such database on the server");
        let refused = refusal(&e);
        if refused.0 != "53400" || Instant::now() > deadline {
            return refused;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// PgBouncer's `* = host=...`, imported from a pgbouncer.ini: the same.
#[test]
fn the_fallback_of_a_pgbouncer_ini_serves_unlisted_databases() {
    databases();
    let pg = postgres();
    let dir = std::env::temp_dir().join(format!("pglane-fallback-ini-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ini = dir.join("pgbouncer.ini");
    std::fs::write(
        &ini,
        format!(
            "[databases]\n* = host=127.0.0.1 port={}\n[pgbouncer]\nlisten_addr = 127.0.0.1\npool_mode = transaction\nauth_type = trust\nunix_socket_dir =\n",
            pg.port
        ),
    )
    .unwrap();
    let lane = Pglane::start_with_args(
        &format!("[users.{SUPERUSER}]\npassword = \"{SUPERUSER_PASSWORD}\"\n"),
        &["--pgbouncer-ini", ini.to_str().unwrap(), "--cores", "1"],
    );
    runtime().block_on(async {
        for name in NAMES {
            let (_client, got) = current_database(lane.port, name).await.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got, name);
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}
