//! auth_query: users pglane's config does not list log in with the secret
//! the server holds for them, looked up as `auth_user` — against the real
//! PostgreSQL, with tokio-postgres as the client. Each test makes its own
//! roles and database.

mod common;

use common::{connect, postgres, try_connect, Pglane};

/// pglane in front of database `db` (as `app`), with `postgres` as auth_user
/// and no other user in its config.
fn pglane(auth_type: &str, db: &str, extra: &str) -> Pglane {
    Pglane::start_with_args(
        &format!(
            "auth_type = \"{auth_type}\"\nauth_user = \"postgres\"\n{extra}\n\
             [databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"{db}\"\npool_size = 2\n\
             [users.postgres]\npassword = \"secret\"\n",
            postgres().port
        ),
        &["--cores", "1"],
    )
}

fn own_role(name: &str, password: Option<&str>) {
    let pg = postgres();
    pg.psql(&format!("drop role if exists {name}"));
    match password {
        Some(p) => pg.psql(&format!("create role {name} login password '{p}'")),
        None => pg.psql(&format!("create role {name} login")),
    };
}

async fn whoami(port: u16, user: &str, password: &str) -> Result<String, (String, String)> {
    match try_connect(port, user, password, "app").await {
        Ok(c) => Ok(c.query_one("select current_user::text", &[]).await.unwrap().get(0)),
        Err(e) => Err(e
            .as_db_error()
            .map(|d| (d.code().code().to_owned(), d.message().to_owned()))
            .unwrap_or_else(|| ("none".into(), e.to_string()))),
    }
}

fn wrong_password(user: &str) -> Result<String, (String, String)> {
    Err(("28P01".into(), format!("password authentication failed for user \"{user}\"")))
}

#[tokio::test]
async fn scram_users_log_in_with_the_servers_verifier() {
    postgres().fresh_database("aq_scram_db", None);
    own_role("aq_scram", Some("aqpass"));
    own_role("aq_nopass", None);
    let lane = pglane("scram-sha-256", "aq_scram_db", "");
    // pglane checks the client against pg_shadow's verifier, then logs in to
    // the server as aq_scram with the ClientKey the proof revealed: it never
    // learns the password.
    assert_eq!(whoami(lane.port, "aq_scram", "aqpass").await, Ok("aq_scram".into()));
    assert_eq!(whoami(lane.port, "aq_scram", "aqpass").await, Ok("aq_scram".into()));
    // A wrong password, a role without one and a role that does not exist
    // anywhere all get the same answer.
    assert_eq!(whoami(lane.port, "aq_scram", "wrong").await, wrong_password("aq_scram"));
    assert_eq!(whoami(lane.port, "aq_nopass", "").await, wrong_password("aq_nopass"));
    assert_eq!(whoami(lane.port, "aq_nopass", "x").await, wrong_password("aq_nopass"));
    assert_eq!(whoami(lane.port, "aq_nobody", "x").await, wrong_password("aq_nobody"));
    // The auth_user itself (in the config) is unaffected.
    assert_eq!(whoami(lane.port, "postgres", "secret").await, Ok("postgres".into()));
}

#[tokio::test]
async fn md5_users_log_in_with_the_servers_md5_hash() {
    // md5user is stored as an md5 hash and the harness's pg_hba asks md5 of it.
    postgres().fresh_database("aq_md5_db", None);
    own_role("aq_md5_scram", Some("scrampw"));
    let lane = pglane("md5", "aq_md5_db", "");
    assert_eq!(whoami(lane.port, "md5user", "md5pass").await, Ok("md5user".into()));
    assert_eq!(whoami(lane.port, "md5user", "wrong").await, wrong_password("md5user"));
    // Under md5 a user with a SCRAM verifier does SCRAM, as with PostgreSQL.
    assert_eq!(whoami(lane.port, "aq_md5_scram", "scrampw").await, Ok("aq_md5_scram".into()));
    assert_eq!(whoami(lane.port, "aq_md5_scram", "md5pass").await, wrong_password("aq_md5_scram"));
    assert_eq!(whoami(lane.port, "aq_md5_nobody", "x").await, wrong_password("aq_md5_nobody"));
}

#[tokio::test]
async fn lookups_share_one_auth_user_connection_and_are_cached() {
    postgres().fresh_database("aq_reuse_db", None);
    for i in 0..4 {
        own_role(&format!("aq_reuse{i}"), Some("pw"));
    }
    // An auth_query that counts its runs.
    postgres().psql_db(
        "aq_reuse_db",
        "create table lookups (usename name);
         create function lookup(u name) returns table (usename name, passwd text) language sql as $$
             insert into lookups values (u);
             select usename, passwd from pg_shadow where usename = u;
         $$;",
    );
    let lane = pglane("scram-sha-256", "aq_reuse_db", "auth_query = \"SELECT * FROM lookup($1)\"");
    for round in 0..3 {
        for i in 0..4 {
            let user = format!("aq_reuse{i}");
            assert_eq!(whoami(lane.port, &user, "pw").await, Ok(user.clone()), "round {round}");
        }
        assert_eq!(whoami(lane.port, "aq_reuse_nobody", "pw").await, wrong_password("aq_reuse_nobody"));
    }
    let pg = postgres();
    // 15 logins of 5 users within the cache's lifetime: 5 lookups.
    let runs = pg.psql_db("aq_reuse_db", "select count(*) || ' ' || count(distinct usename) from lookups");
    assert_eq!(runs, "5 5");
    // One shard, logins one after another: every lookup used the same server
    // connection as postgres, kept in the pool between them.
    let lookups = pg.psql(
        "select count(*) from pg_stat_activity where datname = 'aq_reuse_db' and usename = 'postgres' and backend_type = 'client backend'",
    );
    assert_eq!(lookups, "1");
}

#[tokio::test]
async fn a_failing_auth_query_refuses_everyone_alike() {
    postgres().fresh_database("aq_broken_db", None);
    own_role("aq_broken", Some("pw"));
    let lane =
        pglane("scram-sha-256", "aq_broken_db", "auth_query = \"SELECT usename, passwd FROM no_such_table WHERE usename=$1\"");
    let failed =
        Err(("08006".to_string(), "pglane could not look up the password (auth_query failed); see pglane's log".to_string()));
    assert_eq!(whoami(lane.port, "aq_broken", "pw").await, failed);
    assert_eq!(whoami(lane.port, "aq_broken_nobody", "pw").await, failed);
    assert!(lane.log().contains("no_such_table"), "the reason is logged");
    // Users in the config do not need the query.
    let c = connect(lane.port, "postgres", "secret", "app").await;
    assert_eq!(c.query_one("select 1", &[]).await.unwrap().get::<_, i32>(0), 1);
}

#[tokio::test]
async fn auth_dbname_runs_the_lookup_in_another_database() {
    postgres().fresh_database("aq_target_db", None);
    postgres().fresh_database("aq_auth_db", None);
    own_role("aq_dbuser", Some("dbpass"));
    // This auth_query finds users only when it runs in aq_auth_db.
    let query = "auth_query = \"SELECT rolname::text, rolpassword FROM pg_authid \
                 WHERE rolname = $1 AND current_database() = 'aq_auth_db'\"\n";
    let auth_db =
        format!("[databases.authdb]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"aq_auth_db\"\npool_size = 1\n", postgres().port);
    let elsewhere = pglane("scram-sha-256", "aq_target_db", &format!("{query}auth_dbname = \"authdb\"\n{auth_db}"));
    assert_eq!(whoami(elsewhere.port, "aq_dbuser", "dbpass").await, Ok("aq_dbuser".into()));
    assert_eq!(whoami(elsewhere.port, "aq_dbuser", "wrong").await, wrong_password("aq_dbuser"));
    // Without auth_dbname the same query runs in the client's database and finds nobody.
    let here = pglane("scram-sha-256", "aq_target_db", &format!("{query}{auth_db}"));
    assert_eq!(whoami(here.port, "aq_dbuser", "dbpass").await, wrong_password("aq_dbuser"));
}
