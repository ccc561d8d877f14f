//! The translation of whole pgbouncer.ini files, through in-memory files.

use std::collections::HashMap;

use super::*;
use crate::auth::md5::md5_password_hash;
use crate::auth::secret::ScramSecret;
use crate::auth::test_vectors::{POSTGRES_15_SECRET, RFC7677_SECRET};
use crate::config::{AuthType, PoolMode, ServerAddress};

const INI: &str = "/etc/pgbouncer/pgbouncer.ini";
const USERLIST: &str = "/etc/pgbouncer/userlist.txt";

/// A listen address and one database, the least that runs.
const BASE: &str = "[databases]\napp = host=127.0.0.1 dbname=postgres\n[pgbouncer]\nlisten_addr = 127.0.0.1\n";

fn files(list: &[(&str, &str)]) -> impl Fn(&Path) -> io::Result<String> {
    let map: HashMap<PathBuf, String> = list.iter().map(|(path, text)| (PathBuf::from(path), text.to_string())).collect();
    move |path: &Path| map.get(path).cloned().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))
}

fn import_with(text: &str, others: &[(&str, &str)]) -> Result<Import, IniError> {
    import(Path::new(INI), text, &files(others))
}

fn config_with(text: &str, others: &[(&str, &str)]) -> (Config, Vec<Warning>) {
    import_with(text, others).and_then(Import::into_config).unwrap_or_else(|e| panic!("{e}\n--- ini ---\n{text}"))
}

fn config(text: &str) -> (Config, Vec<Warning>) {
    config_with(text, &[])
}

/// `BASE` plus `[pgbouncer]` lines.
fn with_settings(lines: &str) -> String {
    format!("{BASE}{lines}\n")
}

fn error_with(text: &str, others: &[(&str, &str)]) -> String {
    match import_with(text, others).and_then(Import::into_config) {
        Ok(_) => panic!("expected an error for\n{text}"),
        Err(e) => e.to_string(),
    }
}

fn error(text: &str) -> String {
    error_with(text, &[])
}

/// The warnings as `(line, setting)`.
fn warned(warnings: &[Warning]) -> Vec<(usize, &str)> {
    warnings.iter().map(|w| (w.at.line, w.setting.as_str())).collect()
}

/// `BASE` with an auth_type (line 5) and an auth_file (line 6) holding `users`.
fn with_users(auth_type: &str, users: &str) -> Result<(Config, Vec<Warning>), IniError> {
    let text = with_settings(&format!("auth_type = {auth_type}\nauth_file = userlist.txt"));
    import_with(&text, &[(USERLIST, users)]).and_then(Import::into_config)
}

#[test]
fn a_minimal_file_gets_pgbouncer_defaults() {
    let (c, warnings) = config(BASE);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.listen.addresses(), ["127.0.0.1:6432"]);
    assert_eq!(c.pool_mode, PoolMode::Session);
    assert_eq!(c.auth_type, AuthType::Md5);
    assert_eq!(c.max_client_conn, 100);
    let app = &c.databases["app"];
    assert_eq!(app.addresses(), vec![ServerAddress::Tcp { host: "127.0.0.1".into(), port: 5432 }]);
    assert_eq!(app.dbname.as_deref(), Some("postgres"));
    assert_eq!(c.pool_size("app"), 20);
    assert_eq!((app.user.as_deref(), app.password.as_deref(), app.pool_mode), (None, None, None));
    // pglane's own defaults where PgBouncer's are not written out.
    assert_eq!(c.max_message_size, 64 << 20);
    assert_eq!(c.query_wait_timeout, 120.0);
    assert_eq!(c.server_reset_query, "DISCARD ALL");
    assert!(c.users.is_empty() && c.admin_users.is_empty());
}

#[test]
fn every_mapped_pgbouncer_setting() {
    let (c, warnings) = config(&with_settings(
        "listen_port = 7432
pool_mode = transaction
max_client_conn = 5000
default_pool_size = 7
admin_users = alice, bob ,,carol
stats_users = stats
query_wait_timeout = 30.5
server_connect_timeout = 3
client_login_timeout = 9
server_reset_query = DEALLOCATE ALL
server_reset_query_always = 1
max_packet_size = 1048576
max_prepared_statements = 50",
    ));
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.listen.addresses(), ["127.0.0.1:7432"]);
    assert_eq!(c.pool_mode, PoolMode::Transaction);
    assert_eq!(c.max_client_conn, 5000);
    assert_eq!(c.pool_size("app"), 7);
    assert_eq!(c.admin_users, ["alice", "bob", "carol"]);
    assert_eq!(c.stats_users, ["stats"]);
    assert_eq!((c.query_wait_timeout, c.server_connect_timeout, c.client_login_timeout), (30.5, 3.0, 9.0));
    assert_eq!(c.server_reset_query, "DEALLOCATE ALL");
    assert!(c.server_reset_query_always);
    assert_eq!(c.max_message_size, 1 << 20);
    assert_eq!(c.max_prepared_statements, 50);
}

#[test]
fn an_empty_reset_query_means_none_and_lists_may_be_empty() {
    let (c, _) = config(&with_settings("server_reset_query =\nadmin_users ="));
    assert_eq!(c.server_reset_query, "");
    assert!(c.admin_users.is_empty());
}

#[test]
fn a_zero_timeout_means_no_limit() {
    let (c, _) = config(&with_settings("query_wait_timeout = 0\nserver_connect_timeout = 0.0\nclient_login_timeout = 0"));
    assert_eq!(c.query_wait_timeout, UNLIMITED_SECONDS);
    assert_eq!(c.server_connect_timeout, UNLIMITED_SECONDS);
    assert_eq!(c.client_login_timeout, UNLIMITED_SECONDS);
    let (c, _) = config(&with_settings("query_wait_timeout = 1e300"));
    assert_eq!(c.query_wait_timeout, UNLIMITED_SECONDS);
    Config::secs(c.query_wait_timeout); // a Duration, not a panic
}

#[test]
fn bad_numbers_are_errors_naming_file_line_and_setting() {
    assert_eq!(
        error(&with_settings("query_wait_timeout = -1")),
        "/etc/pgbouncer/pgbouncer.ini:5: query_wait_timeout: expected a number of seconds (0 for no limit), not \"-1\""
    );
    for setting in ["query_wait_timeout = soon", "client_login_timeout = inf", "server_connect_timeout = NaN"] {
        assert!(error(&with_settings(setting)).contains(":5: "), "{setting}");
    }
    assert!(error(&with_settings("max_client_conn = many")).contains("pgbouncer.ini:5: max_client_conn: expected a whole number"));
    assert!(error(&with_settings("default_pool_size = 0")).contains("default_pool_size: expected a whole number of at least 1"));
    assert!(error(&with_settings("max_client_conn = -5")).contains("max_client_conn"));
    assert!(error(&with_settings("listen_port = 70000")).contains("listen_port: expected a port number"));
    assert!(error(&with_settings("listen_port = 0")).contains("listen_port"));
    assert!(error(&with_settings("server_reset_query_always = maybe")).contains("server_reset_query_always: expected 0 or 1"));
    assert!(error(&with_settings("max_prepared_statements = -1")).contains("max_prepared_statements"));
}

#[test]
fn integers_and_booleans_read_as_pgbouncer_reads_them() {
    let (c, _) = config(&with_settings("max_client_conn = 0x10\nmax_packet_size = 04000\nserver_reset_query_always = on"));
    assert_eq!(c.max_client_conn, 16);
    assert_eq!(c.max_message_size, 2048);
    assert!(c.server_reset_query_always);
    for (text, value) in [("0", false), ("1", true), ("2", true), ("off", false), ("TRUE", true), ("no", false)] {
        let (c, _) = config(&with_settings(&format!("server_reset_query_always = {text}")));
        assert_eq!(c.server_reset_query_always, value, "{text}");
    }
    assert_eq!(c_integer("+12"), Some(12));
    assert_eq!(c_integer("-0x1f"), Some(-31));
    assert_eq!(c_integer("0"), Some(0));
    for bad in ["", "-", "0x", "08", "1.5", "1e3", "12 ", "++1", "0x-1", "99999999999999999999"] {
        assert_eq!(c_integer(bad), None, "{bad:?}");
    }
}

#[test]
fn validation_runs_on_the_result() {
    // max_packet_size maps to max_message_size, which pglane needs at 1024 or more.
    assert!(error(&with_settings("max_packet_size = 100")).contains("max_message_size must be at least 1024"));
}

#[test]
fn listen_addresses() {
    let listen = |lines: &str| config(&format!("[databases]\napp = host=db\n[pgbouncer]\n{lines}\n")).0.listen.to_string();
    assert_eq!(listen("listen_addr = *"), "0.0.0.0:6432");
    assert_eq!(listen("listen_addr = localhost\nlisten_port = 6000"), "127.0.0.1:6000");
    assert_eq!(listen("listen_addr = ::1"), "[::1]:6432");
    assert_eq!(listen("listen_addr = 10.1.2.3"), "10.1.2.3:6432");

    let (c, warnings) = config("[databases]\napp = host=db\n[pgbouncer]\nlisten_addr = 10.0.0.1, 10.0.0.2,::1\n");
    assert_eq!(c.listen.addresses(), ["10.0.0.1:6432", "10.0.0.2:6432", "[::1]:6432"], "every address, as PgBouncer");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(listen("listen_addr = 127.0.0.1, localhost"), "127.0.0.1:6432", "each address once");

    assert_eq!(
        error("[databases]\napp = host=db\n[pgbouncer]\nlisten_addr = db.example.com\n"),
        "/etc/pgbouncer/pgbouncer.ini:4: listen_addr = db.example.com is not supported: pglane listens on IP addresses; \
         write the address, or * for all IPv4 addresses"
    );
}

#[test]
fn without_listen_addr_there_is_nothing_to_listen_on() {
    for text in [
        "[databases]\napp = host=db\n[pgbouncer]\nlisten_port = 6432\n",
        "[databases]\napp = host=db\n[pgbouncer]\nlisten_addr =\n",
    ] {
        let message = error(text);
        assert!(message.starts_with("/etc/pgbouncer/pgbouncer.ini: listen_addr is not set"), "{message}");
        assert!(message.contains("--config"), "{message}");
    }
}

#[test]
fn pool_modes() {
    let (c, warnings) = config(&with_settings("pool_mode = Transaction"));
    assert_eq!((c.pool_mode, warnings.len()), (PoolMode::Transaction, 0));

    let (c, warnings) = config(&with_settings("pool_mode = statement"));
    assert_eq!(c.pool_mode, PoolMode::Transaction);
    assert_eq!(warned(&warnings), [(5, "pool_mode")]);
    assert!(warnings[0].message.contains("statement pooling is not supported"));

    assert_eq!(
        error(&with_settings("pool_mode = sometimes")),
        "/etc/pgbouncer/pgbouncer.ini:5: pool_mode: expected session, transaction or statement, not \"sometimes\""
    );
    let text = "[databases]\napp = host=db pool_mode=statement\nother = host=db pool_mode=session\n\
                [users]\nbob = pool_mode=transaction\n[pgbouncer]\nlisten_addr = *\n";
    let (c, warnings) = config(text);
    assert_eq!(c.databases["app"].pool_mode, Some(PoolMode::Transaction));
    assert_eq!(c.databases["other"].pool_mode, Some(PoolMode::Session));
    assert_eq!(c.users["bob"].pool_mode, Some(PoolMode::Transaction));
    assert_eq!(c.pool_mode_for("other", "bob"), PoolMode::Transaction);
    assert_eq!(warned(&warnings), [(2, "pool_mode of database app")]);
    assert!(error("[databases]\napp = host=db pool_mode=x\n[pgbouncer]\nlisten_addr = *\n")
        .contains(":2: pool_mode of database app: expected session"));
}

#[test]
fn database_connection_strings() {
    let text = "[databases]
app = host=db1.internal port=5433 dbname=appdb user=owner password='it''s a secret' pool_size=3 pool_mode=session
copy = host = 10.0.0.5  dbname=app
[pgbouncer]
listen_addr = *
default_pool_size = 11
";
    let (c, warnings) = config(text);
    assert!(warnings.is_empty(), "{warnings:?}");
    let app = &c.databases["app"];
    assert_eq!(app.addresses(), vec![ServerAddress::Tcp { host: "db1.internal".into(), port: 5433 }]);
    assert_eq!(app.dbname.as_deref(), Some("appdb"));
    assert_eq!(app.user.as_deref(), Some("owner"));
    assert_eq!(app.password.as_deref(), Some("it's a secret"));
    assert_eq!((c.pool_size("app"), app.pool_mode), (3, Some(PoolMode::Session)));
    assert_eq!(c.databases["copy"].addresses(), vec![ServerAddress::Tcp { host: "10.0.0.5".into(), port: 5432 }]);
    assert_eq!(c.pool_size("copy"), 11);
}

#[test]
fn databases_without_host_use_the_unix_socket_dir() {
    let (c, warnings) = config("[databases]\nfoodb =\nbar = dbname=baz\n[pgbouncer]\nlisten_addr = *\n");
    assert!(warnings.is_empty());
    assert_eq!(c.databases["foodb"].addresses(), vec![ServerAddress::Unix("/tmp/.s.PGSQL.5432".into())]);
    assert_eq!(c.databases["foodb"].dbname, None);
    assert_eq!(c.databases["bar"].addresses(), vec![ServerAddress::Unix("/tmp/.s.PGSQL.5432".into())]);

    let (c, warnings) =
        config("[databases]\nfoodb = port=5433\n[pgbouncer]\nlisten_addr = *\nunix_socket_dir = /var/run/postgresql\n");
    assert_eq!(c.databases["foodb"].addresses(), vec![ServerAddress::Unix("/var/run/postgresql/.s.PGSQL.5433".into())]);
    assert!(warnings.is_empty());
    // pglane listens there too, as PgBouncer does.
    assert_eq!(c.unix_socket_path(), Some("/var/run/postgresql/.s.PGSQL.6432".into()));

    let message = error("[databases]\nfoodb =\n[pgbouncer]\nlisten_addr = *\nunix_socket_dir =\n");
    assert_eq!(message, "/etc/pgbouncer/pgbouncer.ini:2: [databases] foodb: no host=, and unix_socket_dir is empty");
}

#[test]
fn database_hosts() {
    use crate::config::{LoadBalanceHosts, TargetSessionAttrs};
    let tcp = |host: &str, port| ServerAddress::Tcp { host: host.into(), port };
    // libpq's lists; PgBouncer's default for a list is round-robin.
    let (c, warnings) = config("[databases]\napp = host=10.0.0.1,10.0.0.2 dbname=x\n[pgbouncer]\nlisten_addr = *\n");
    assert!(warnings.is_empty(), "{warnings:?}");
    let app = &c.databases["app"];
    assert_eq!(app.addresses(), vec![tcp("10.0.0.1", 5432), tcp("10.0.0.2", 5432)]);
    assert_eq!((app.load_balance_hosts, app.target_session_attrs), (LoadBalanceHosts::RoundRobin, TargetSessionAttrs::Any));
    let (c, warnings) = config(
        "[databases]\napp = host='a, b' port=5432,5433 target_session_attrs=read-write load_balance_hosts=disable\n\
         one = host=c target_session_attrs=Prefer-Standby\n[pgbouncer]\nlisten_addr = *\n",
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    let app = &c.databases["app"];
    assert_eq!(app.addresses(), vec![tcp("a", 5432), tcp("b", 5433)]);
    assert_eq!((app.load_balance_hosts, app.target_session_attrs), (LoadBalanceHosts::Disable, TargetSessionAttrs::ReadWrite));
    let one = &c.databases["one"];
    assert_eq!(
        (one.load_balance_hosts, one.target_session_attrs),
        (LoadBalanceHosts::Disable, TargetSessionAttrs::PreferStandby)
    );
    let bad = |connstr: &str| error(&format!("[databases]\napp = {connstr}\n[pgbouncer]\nlisten_addr = *\n"));
    assert!(bad("host=@pgsock").contains("abstract unix sockets"));
    assert!(bad("host=a,@pgsock").contains("abstract unix sockets"));
    assert!(bad("host=,").contains("host of database app: no host name"));
    assert!(bad("host=a,b,c port=1,2").contains("lists 2 ports for 3 hosts"), "{}", bad("host=a,b,c port=1,2"));
    assert!(bad("host=a port=1,x").contains("port of database app: expected a port number"));
    assert!(bad("host=a target_session_attrs=master").contains("expected any, read-write"));
    assert!(bad("host=a load_balance_hosts=yes").contains("expected round-robin, disable or random"));
    // so_reuseport carries over (rolling restarts).
    assert!(config(&with_settings("so_reuseport = 1")).0.so_reuseport);
    assert!(!config(BASE).0.so_reuseport);
}

#[test]
fn database_mistakes_name_the_line_and_database() {
    let bad = |connstr: &str| error(&format!("[pgbouncer]\nlisten_addr = *\n[databases]\n\napp = {connstr}\n"));
    assert_eq!(bad("host=db port=x"), "/etc/pgbouncer/pgbouncer.ini:5: port of database app: expected a port number (1-65535)");
    assert!(bad("host=db pool_size=0").contains(":5: pool_size of database app: expected a whole number of at least 1"));
    assert!(bad("host=db pool_size=5x").contains("pool_size of database app"));
    assert!(bad("host=db user").contains(":5: [databases] app: expected key=value after the value of host"));
    assert!(bad("host=db password='oops").contains("[databases] app: the quoted value of password has no closing quote"));
    assert!(bad(&format!("host=db user=u password={POSTGRES_15_SECRET}")).contains("must be the plaintext password"));
    assert!(bad("host=db password=md5123").contains("password of database app: invalid stored secret"));
    assert_eq!(
        error("[databases]\npgbouncer = host=db\n[pgbouncer]\nlisten_addr = *\n"),
        "/etc/pgbouncer/pgbouncer.ini:2: [databases] pgbouncer: the name pgbouncer is reserved for the admin console"
    );
}

#[test]
fn errors_never_quote_passwords() {
    let bad = |connstr: &str| error(&format!("[pgbouncer]\nlisten_addr = *\n[databases]\napp = {connstr}\n"));
    for connstr in ["host=db password=hunter2 oops", "host=db password='hunter2", "host=db password='hunter2'x"] {
        let message = bad(connstr);
        assert!(!message.contains("hunter2"), "{message}");
    }
    let list = "\"bob\" \"md5hunter2hunter2hunter2hunter2hunt\"\n";
    let message = error_with(&with_settings("auth_file = u.txt"), &[("/etc/pgbouncer/u.txt", list)]);
    assert!(message.contains("user bob") && !message.contains("hunter2"), "{message}");
}

#[test]
fn database_parameters_pglane_cannot_honour_are_refused() {
    let text = "[databases]
app = host=db max_db_connections=5
[pgbouncer]
listen_addr = *
max_db_connections = 7
max_user_connections = 4
";
    let (c, warnings) = config(text);
    assert_eq!(c.databases["app"].host, ["db"]);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!((c.max_db_connections("app"), c.max_db_connections("other"), c.max_user_connections("u")), (5, 7, 4));
    assert_eq!(
        error(&text.replace("max_db_connections=5", "connect_query='SELECT 1'")),
        "/etc/pgbouncer/pgbouncer.ini:2: connect_query of database app = SELECT 1 is not supported: pglane runs no \
         query on a new server connection; use ALTER DATABASE ... SET or ALTER ROLE ... SET"
    );
}

/// A name PgBouncer does not have is a typo: PgBouncer refuses to start,
/// and so does pglane, naming the nearest name it may have meant.
#[test]
fn unknown_names_are_refused_with_the_nearest_known_one() {
    assert_eq!(
        error(&with_settings("defualt_pool_size = 10")),
        "/etc/pgbouncer/pgbouncer.ini:5: defualt_pool_size: PgBouncer has no such setting (did you mean \
         default_pool_size?); it would not start with it, nor does pglane"
    );
    assert!(error(&with_settings("frobnicate = 1")).contains("frobnicate: PgBouncer has no such setting; it would not"));
    let database = error("[databases]\napp = host=db pool_szie=5\n[pgbouncer]\nlisten_addr = *\n");
    assert!(
        database.contains(":2: pool_szie: PgBouncer has no such connection parameter (did you mean pool_size?)"),
        "{database}"
    );
    let user = error(&format!("{BASE}[users]\nbob = pool_mod=session\n"));
    assert!(user.contains("pool_mod: PgBouncer has no such user parameter (did you mean pool_mode?)"), "{user}");
}

#[test]
fn the_fallback_database_is_served() {
    let (c, warnings) = config("[databases]\n* = host=db port=5433\napp = host=db\n[pgbouncer]\nlisten_addr = *\n");
    assert_eq!(c.databases.keys().collect::<Vec<_>>(), ["*", "app"]);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.database("other").map(|d| (d.port.clone(), d.dbname.clone())), Some((vec![5433], None)));
    assert!(c.is_fallback("other"));
    // The fallback alone is enough.
    let (c, _) = config("[databases]\n* = host=db dbname=shared\n[pgbouncer]\nlisten_addr = *\n");
    assert_eq!(c.database("x").and_then(|d| d.dbname.as_deref()), Some("shared"));
    // pglane drops a name's pools once unused: accepted without a word.
    let (_, warnings) = config(&with_settings("autodb_idle_timeout = 60"));
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn the_users_section() {
    let text = with_settings(
        "auth_file = userlist.txt\n[users]\nalice = pool_mode=session max_user_connections=3\n\
         bob = pool_mode=transaction",
    );
    let (c, warnings) = config_with(&text, &[(USERLIST, "\"alice\" \"pw\"\n")]);
    assert_eq!(c.users["alice"].password.as_deref(), Some("pw"));
    assert_eq!(c.users["alice"].pool_mode, Some(PoolMode::Session));
    assert_eq!((c.max_user_connections("alice"), c.max_user_connections("bob")), (3, 0));
    assert_eq!(c.users["bob"].password, None);
    assert_eq!(c.users["bob"].pool_mode, Some(PoolMode::Transaction));
    assert!(warnings.is_empty(), "{warnings:?}");
    let message = error(&with_settings("[users]\nalice = query_timeout=30"));
    assert!(
        message.starts_with("/etc/pgbouncer/pgbouncer.ini:6: query_timeout of user alice = 30 is not supported: pglane has only"),
        "{message}"
    );
    let message = error(&with_settings("[users]\nalice = pool_mode"));
    assert_eq!(message, "/etc/pgbouncer/pgbouncer.ini:6: [users] alice: expected key=value at the start");
}

#[test]
fn the_auth_file_becomes_users() {
    let md5 = md5_password_hash("bob", "builder");
    let list = format!("; users\n\"alice\" \"wonderland\"\n\"bob\" \"{md5}\"\n\"nobody\" \"\"\n");
    let text = with_settings("auth_file = userlist.txt");
    let (c, warnings) = config_with(&text, &[(USERLIST, &list)]);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.users["alice"].password.as_deref(), Some("wonderland"));
    assert_eq!(c.users["bob"].password.as_deref(), Some(md5.as_str()));
    assert_eq!(c.users["nobody"].password, None);

    // Absolute, and relative to an included file.
    let (c, _) = config_with(&with_settings("auth_file = /srv/users.txt"), &[("/srv/users.txt", "\"x\" \"y\"")]);
    assert!(c.users.contains_key("x"));
    let (c, _) = config_with(
        &with_settings("%include conf.d/auth.ini"),
        &[("/etc/pgbouncer/conf.d/auth.ini", "auth_file = users.txt\n"), ("/etc/pgbouncer/conf.d/users.txt", "\"z\" \"y\"")],
    );
    assert!(c.users.contains_key("z"));
}

#[test]
fn auth_file_mistakes() {
    let text = with_settings("auth_file = userlist.txt");
    assert_eq!(error(&text), "/etc/pgbouncer/pgbouncer.ini:5: cannot read /etc/pgbouncer/userlist.txt: no such file");
    assert_eq!(
        error_with(&text, &[(USERLIST, "\"alice\" \"pw\"\nbob pw\n")]),
        "/etc/pgbouncer/userlist.txt:2: expected \"user\" \"password\""
    );
    assert!(error(&with_settings("auth_file = ~/userlist.txt")).contains("auth_file = ~/userlist.txt is not supported"));
    // An empty auth_file is no auth_file.
    assert!(config(&with_settings("auth_file =")).0.users.is_empty());
}

#[test]
fn auth_type_md5_and_scram_as_asked() {
    let md5 = md5_password_hash("bob", "builder");
    let (c, warnings) = with_users("md5", &format!("\"alice\" \"pw\"\n\"bob\" \"{md5}\"\n")).unwrap();
    assert_eq!((c.auth_type, warnings.len()), (AuthType::Md5, 0));
    let (c, warnings) = with_users("SCRAM-SHA-256", &format!("\"alice\" \"pw\"\n\"carol\" \"{POSTGRES_15_SECRET}\"\n")).unwrap();
    assert_eq!((c.auth_type, warnings.len()), (AuthType::ScramSha256, 0));
}

#[test]
fn md5_users_under_scram_are_warned() {
    let md5 = md5_password_hash("bob", "builder");
    let (c, warnings) = with_users("scram-sha-256", &format!("\"alice\" \"pw\"\n\"bob\" \"{md5}\"\n")).unwrap();
    assert_eq!(c.auth_type, AuthType::ScramSha256);
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].at.to_string(), "/etc/pgbouncer/userlist.txt:2");
    assert_eq!(warnings[0].setting, "user bob");
}

#[test]
fn md5_with_scram_secrets_stays_md5() {
    // PgBouncer's md5 (and pglane's) checks SCRAM secrets with SCRAM, so an
    // auth_file may hold both kinds.
    let users = format!(
        "\"bob\" \"{}\"\n\"carol\" \"{POSTGRES_15_SECRET}\"\n\"dave\" \"{RFC7677_SECRET}\"\n",
        md5_password_hash("bob", "x")
    );
    let (c, warnings) = with_users("md5", &users).unwrap();
    assert_eq!(c.auth_type, AuthType::Md5);
    assert!(warnings.is_empty(), "{warnings:?}");
    // PgBouncer's default auth_type is md5 too.
    let text = with_settings("auth_file = userlist.txt");
    let (c, warnings) = config_with(&text, &[(USERLIST, &users)]);
    assert_eq!((c.auth_type, warnings.len()), (AuthType::Md5, 0));
}

#[test]
fn plain_is_checked_as_scram_or_md5() {
    let (c, warnings) = with_users("plain", "\"alice\" \"pw\"\n").unwrap();
    assert_eq!(c.auth_type, AuthType::ScramSha256);
    assert_eq!(warned(&warnings), [(5, "auth_type")]);
    assert!(warnings[0].message.contains("never asks clients for cleartext"));
    let (c, _) = with_users("plain", &format!("\"alice\" \"pw\"\n\"bob\" \"{}\"\n", md5_password_hash("bob", "x"))).unwrap();
    assert_eq!(c.auth_type, AuthType::Md5);
}

#[test]
fn trust_is_warned() {
    let (c, warnings) = with_users("trust", "\"alice\" \"\"\n").unwrap();
    assert_eq!(c.auth_type, AuthType::Trust);
    assert_eq!(warned(&warnings), [(5, "auth_type")]);
    assert!(warnings[0].message.contains("admits any user name"));
}

#[test]
fn auth_types_pglane_cannot_give_are_errors() {
    for method in ["cert", "pam", "ldap", "any", "CERT"] {
        let message = error(&with_settings(&format!("auth_type = {method}")));
        assert!(
            message.starts_with(&format!("/etc/pgbouncer/pgbouncer.ini:5: auth_type = {method} is not supported")),
            "{message}"
        );
    }
    assert!(error(&with_settings("auth_type = md6")).contains("auth_type: expected md5, scram-sha-256, trust, hba or plain"));
}

#[test]
fn hba_and_auth_query_settings_carry_over() {
    // auth_hba_file is read by pglane's own validation, from the real file
    // system, relative to the ini file.
    let dir = std::env::temp_dir().join(format!("pglane-ini-hba-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hba.conf"), "host all all 10.0.0.0/8 md5\nhost all all 0.0.0.0/0 reject\n").unwrap();
    let ini = dir.join("pgbouncer.ini");
    let text = "[databases]\napp = host=db\n[pgbouncer]\nlisten_addr = *\nauth_type = hba\nauth_hba_file = hba.conf\n\
                auth_file = userlist.txt\nauth_user = pgb\nauth_query = SELECT usename, passwd FROM my_shadow($1)\n";
    let users = "\"pgb\" \"pgbpass\"\n";
    let files = |path: &Path| -> std::io::Result<String> {
        match path.file_name().and_then(|n| n.to_str()) {
            Some("userlist.txt") => Ok(users.to_owned()),
            _ => Err(std::io::ErrorKind::NotFound.into()),
        }
    };
    let (c, warnings) = super::import(&ini, text, &files).and_then(Import::into_config).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.auth_type, AuthType::Hba);
    assert_eq!(c.auth_hba_file.as_deref(), Some(dir.join("hba.conf").as_path()));
    assert_eq!(c.hba.get().map(|h| h.len()), Some(2));
    assert_eq!((c.auth_user.as_deref(), c.auth_query.as_str()), (Some("pgb"), "SELECT usename, passwd FROM my_shadow($1)"));
    // hba without a file is pglane's validation error; a file without hba is ignored (warned).
    let no_file = text.replace("auth_hba_file = hba.conf\n", "");
    let e = super::import(&ini, &no_file, &files).and_then(Import::into_config).unwrap_err().to_string();
    assert!(e.contains("needs auth_hba_file"), "{e}");
    let md5 = text.replace("auth_type = hba", "auth_type = md5");
    let (c, warnings) = super::import(&ini, &md5, &files).and_then(Import::into_config).unwrap();
    assert_eq!((c.auth_type, c.auth_hba_file), (AuthType::Md5, None));
    assert_eq!(warned(&warnings), [(6, "auth_hba_file")]);
    // auth_dbname and per-database overrides carry over too.
    let per_db = text.replace(
        "app = host=db\n",
        "app = host=db\nauthdb = host=db\nother = host=db auth_user=pgb2 auth_query='SELECT 1, $1' auth_dbname=app\n",
    ) + "auth_dbname = authdb\n";
    let two_users = |path: &Path| match path.file_name().and_then(|n| n.to_str()) {
        Some("userlist.txt") => Ok(format!("{users}\"pgb2\" \"pgb2pass\"\n")),
        _ => files(path),
    };
    let (c, warnings) = super::import(&ini, &per_db, &two_users).and_then(Import::into_config).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.auth_dbname.as_deref(), Some("authdb"));
    let lookup = |db: &str| c.auth_lookup_for(db).map(|l| (l.user.to_owned(), l.query.to_owned(), l.database.to_owned()));
    assert_eq!(lookup("app"), Some(("pgb".into(), "SELECT usename, passwd FROM my_shadow($1)".into(), "authdb".into())));
    assert_eq!(lookup("other"), Some(("pgb2".into(), "SELECT 1, $1".into(), "app".into())));
    let e = super::import(&ini, &per_db.replace("auth_dbname = authdb", "auth_dbname = nowhere"), &two_users)
        .and_then(Import::into_config)
        .unwrap_err()
        .to_string();
    assert!(e.contains("auth_dbname \"nowhere\" is not in [databases]"), "{e}");
    // auth_user must be a user pglane can log in as.
    let stranger = text.replace("auth_user = pgb", "auth_user = nobody");
    let e = super::import(&ini, &stranger, &files).and_then(Import::into_config).unwrap_err().to_string();
    assert!(e.contains("auth_user \"nobody\" must be in [users]"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tls_settings_map_onto_pglanes_and_disable_pqexec_is_an_error() {
    let message = error(&with_settings("disable_pqexec = 1"));
    assert!(message.starts_with("/etc/pgbouncer/pgbouncer.ini:5: disable_pqexec = 1 is not supported"), "{message}");
    let (c, warnings) = config(&with_settings("client_tls_sslmode = Disable\nserver_tls_sslmode = allow"));
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(c.client_tls_sslmode, crate::config::SslMode::Disable);
    assert_eq!(c.server_tls_sslmode, crate::config::SslMode::Allow);
    // rustls' suites are among what "fast" allows; a list of OpenSSL's is refused.
    let (_, warnings) = config(&with_settings("client_tls_sslmode = disable\nserver_tls_ciphers = fast\ndisable_pqexec = 0"));
    assert!(warnings.is_empty(), "{warnings:?}");
    let message = error(&with_settings("client_tls_ciphers = HIGH:!aNULL"));
    assert!(
        message.starts_with("/etc/pgbouncer/pgbouncer.ini:5: client_tls_ciphers = HIGH:!aNULL is not supported"),
        "{message}"
    );
    assert!(error(&with_settings("client_tls_sslmode = sometimes")).contains("client_tls_sslmode: expected disable"));
    let (c, warnings) = config(&with_settings("server_idle_timeout = 30\nquery_timeout = 0\nserver_lifetime = 0"));
    assert_eq!((c.server_idle_timeout, c.query_timeout, c.server_lifetime), (30.0, 0.0, 0.0));
    assert_eq!(warned(&warnings), [(7, "server_lifetime")]);
    // require without a certificate is refused by pglane's own validation.
    assert!(error(&with_settings("client_tls_sslmode = require")).contains("client_tls"));
    // Unset, server_tls_sslmode is PgBouncer's default (since 1.20), prefer.
    let (c, _) = config(&with_settings(""));
    assert_eq!((c.client_tls_sslmode, c.server_tls_sslmode), (crate::config::SslMode::Disable, crate::config::SslMode::Prefer));
}

/// No setting is ignored: a value pglane cannot honour stops it, with one
/// line naming file, line, setting, value and what to do instead.
#[test]
fn a_setting_pglane_cannot_honour_is_refused_naming_file_line_and_value() {
    assert_eq!(
        error(&with_settings("server_lifetime = 3600\nsyslog = 1")),
        "/etc/pgbouncer/pgbouncer.ini:6: syslog = 1 is not supported: pglane logs to stderr (and logfile), not to \
         syslog; run it under systemd, whose journal takes stderr, or set logfile"
    );
    for refused in [
        "user = nobody-pglane-runs-as",
        "unix_socket_group = pgbouncer",
        "auth_ident_file = ident.map",
        "server_tls_protocols = tlsv1.1,tlsv1.2",
        "client_tls_ecdhcurve = prime256v1",
        "server_round_robin = 1",
        "server_check_query = select pg_is_in_recovery()",
        "transaction_timeout = 30",
        "resolv_conf = /etc/pgbouncer/resolv.conf",
    ] {
        let message = error(&with_settings(refused));
        assert!(message.starts_with(&format!("/etc/pgbouncer/pgbouncer.ini:5: {refused} is not supported: ")), "{message}");
        assert!(!message.contains('\n'), "one line: {message}");
    }
}

/// What pglane already does (or what means nothing to it) is accepted
/// without a warning, at PgBouncer's default and at other values alike.
#[test]
fn settings_pglane_already_behaves_as_are_accepted_without_a_word() {
    let text = with_settings(
        "syslog = 0
syslog_ident = pgb
pkt_buf = 8192
sbuf_loopcnt = 20
dns_max_ttl = 30
ignore_startup_parameters = extra_float_digits, options
track_extra_parameters = IntervalStyle
suspend_timeout = 30
server_check_delay = 10
server_check_query = SELECT 1
client_tls_protocols = secure
server_tls_ciphers = default
client_tls_dheparams = auto
job_name = pgbouncer
user =
max_prepared_statements = 0",
    );
    let (_, warnings) = config(&text);
    assert_eq!(warned(&warnings), [(20, "max_prepared_statements")]);
}

#[test]
fn other_sections_are_warned_once_each() {
    let text = format!("{BASE}[extra]\nx = 1\n[more]\ny = 2\n");
    let (_, warnings) = config(&text);
    assert_eq!(warned(&warnings), [(5, "[extra]"), (7, "[more]")]);
}

#[test]
fn peer_id_and_peers_carry_over_as_pgbouncer_reads_them() {
    let text = format!(
        "{BASE}peer_id = 2\n[peers]\n1 = host=10.0.0.1\n2 = host=/tmp/pgbouncer-2 port=5555\n3 = host=10.0.0.3 port=7432 pool_size=4\n"
    );
    let (c, warnings) = config(&text);
    assert_eq!(c.peer_id, 2);
    assert_eq!(c.peer_by_id(1).map(|p| p.address()), Some(ServerAddress::Tcp { host: "10.0.0.1".into(), port: 6432 }));
    assert_eq!(c.peer_by_id(2).map(|p| p.address()), Some(ServerAddress::Unix("/tmp/pgbouncer-2/.s.PGSQL.5555".into())));
    assert_eq!(c.peer_by_id(3).map(|p| p.address()), Some(ServerAddress::Tcp { host: "10.0.0.3".into(), port: 7432 }));
    assert_eq!(warned(&warnings), [(9, "pool_size")]);
    // PgBouncer's own refusals.
    assert!(error(&format!("{BASE}[peers]\n1 = port=6432\n")).contains("host was not provided"));
    assert!(error(&format!("{BASE}[peers]\n1 = host=a dbname=x\n")).contains("unrecognized connection parameter: dbname"));
    assert!(error(&format!("{BASE}[peers]\n0 = host=a\n")).contains("peer ids"));
    assert!(error(&format!("{BASE}[peers]\n16384 = host=a\n")).contains("peer ids"));
    assert!(error(&format!("{BASE}peer_id = 16384\n")).contains("peer_id"));
    assert!(error(&format!("{BASE}[peers]\n1 = host=@abstract\n")).contains("abstract"));
}

#[test]
fn a_later_line_wins_as_in_pgbouncer() {
    let text = "[databases]\napp = host=one\n[pgbouncer]\npool_mode = session\nlisten_addr = *\n\
                [databases]\napp = host=two\n[pgbouncer]\npool_mode = transaction\n";
    let (c, _) = config(text);
    assert_eq!(c.databases["app"].host, ["two"]);
    assert_eq!(c.pool_mode, PoolMode::Transaction);
}

#[test]
fn includes_through_the_whole_pipeline() {
    let text = "[pgbouncer]\nlisten_addr = *\n%include conf.d/databases.ini\n%include conf.d/tuning.ini\n";
    let (c, warnings) = config_with(
        text,
        &[
            ("/etc/pgbouncer/conf.d/databases.ini", "[databases]\napp = host=db\n[pgbouncer]\n"),
            ("/etc/pgbouncer/conf.d/tuning.ini", "\npool_mode = statement\nmax_client_conn = 50\n"),
        ],
    );
    assert_eq!(c.databases["app"].host, ["db"]);
    assert_eq!(c.max_client_conn, 50);
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].at.to_string(), "/etc/pgbouncer/conf.d/tuning.ini:2");
    let message =
        error_with(text, &[("/etc/pgbouncer/conf.d/databases.ini", "[databases]\napp = host=db\n%include databases.ini\n")]);
    assert!(
        message.starts_with("/etc/pgbouncer/conf.d/databases.ini:3: %include of /etc/pgbouncer/conf.d/databases.ini is a cycle"),
        "{message}"
    );
}

#[test]
fn warnings_come_in_file_order() {
    let text = format!("{BASE}pool_mode = statement\n[extra]\n[databases]\nb = host=db pool_mode=statement\n");
    let (_, warnings) = config(&text);
    assert_eq!(warned(&warnings), [(5, "pool_mode"), (6, "[extra]"), (8, "pool_mode of database b")]);
}

#[test]
fn a_toml_overlay_wins_key_by_key() {
    let text = "[databases]\napp = host=db pool_size=4 dbname=x\nother = host=db\n[pgbouncer]\nlisten_addr = 127.0.0.1\n";
    let mut import = import_with(text, &[]).unwrap();
    import
        .overlay(
            "listen = \"0.0.0.0:7000\"\ncores = 2\n[databases.app]\npool_size = 9\n[users.postgres]\npassword = \"secret\"\n",
        )
        .unwrap();
    let (c, _) = import.into_config().unwrap();
    assert_eq!(c.listen.addresses(), ["0.0.0.0:7000"]);
    assert_eq!(c.cores, Some(2));
    assert_eq!(c.pool_size("app"), 9);
    assert_eq!(c.databases["app"].dbname.as_deref(), Some("x"), "the rest of the database stays");
    assert!(c.databases.contains_key("other"));
    assert_eq!(c.users["postgres"].password.as_deref(), Some("secret"));
    assert_eq!(c.pool_mode, PoolMode::Session, "what the overlay does not set comes from the ini");

    // The overlay may give what the ini lacks, and its mistakes are reported.
    let mut import = import_with("[databases]\napp = host=db\n", &[]).unwrap();
    import.overlay("listen = \"127.0.0.1:1\"").unwrap();
    assert_eq!(import.into_config().unwrap().0.listen.addresses(), ["127.0.0.1:1"]);
    let mut import = import_with(BASE, &[]).unwrap();
    import.overlay("pool_sise = 3").unwrap();
    assert!(import.into_config().unwrap_err().to_string().contains("pool_sise"));
    assert!(import_with(BASE, &[]).unwrap().overlay("listen = ").is_err());
}

#[test]
fn the_document_is_what_pglane_toml_would_say() {
    let import = import_with(BASE, &[]).unwrap();
    let text = toml::to_string(import.document()).unwrap();
    let c = Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(c.listen.addresses(), ["127.0.0.1:6432"]);
}

#[test]
fn the_shipped_example_imports_cleanly() {
    let ini = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/config/pgbouncer.ini"));
    let users = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/config/userlist.txt"));
    let loader = |path: &Path| {
        if path == users {
            Ok(include_str!("../../../config/userlist.txt").to_owned())
        } else {
            Err(io::Error::from(io::ErrorKind::NotFound))
        }
    };
    let (c, warnings) = parse(ini, include_str!("../../../config/pgbouncer.ini"), &loader).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.listen.addresses(), ["127.0.0.1:6432"]);
    assert_eq!((c.auth_type, c.pool_mode, c.max_client_conn), (AuthType::ScramSha256, PoolMode::Transaction, 1000));
    assert_eq!(c.stats_users, ["stats", "postgres"]);
    assert_eq!(c.databases["reports"].password.as_deref(), Some("rep's secret"));
    assert_eq!(c.databases["reports"].pool_mode, Some(PoolMode::Session));
    assert_eq!(c.databases["local"].addresses(), vec![ServerAddress::Unix("/var/run/postgresql/.s.PGSQL.5432".into())]);
    assert_eq!(c.pool_size("legacy"), 20);
    assert_eq!(c.users["batch"].pool_mode, Some(PoolMode::Session));
    // The example's SCRAM secrets are real ones, for the passwords the file says.
    let batch = ScramSecret::from_password("batchpass", b"pglane-example-1", 4096).to_postgres_string();
    assert_eq!(c.users["batch"].password.as_deref(), Some(batch.as_str()));
    assert_eq!(c.users["legacy"].password.as_deref(), Some(md5_password_hash("legacy", "legacypass").as_str()));
    let names: Vec<&str> = warnings.iter().map(|w| w.setting.as_str()).collect();
    assert_eq!(names, ["user legacy"]);
    assert_eq!(c.logfile.as_deref(), Some(Path::new("/var/log/postgresql/pgbouncer.log")));
    assert_eq!(c.pidfile.as_deref(), Some(Path::new("/var/run/postgresql/pgbouncer.pid")));
}

#[test]
fn garbage_never_panics() {
    let alphabet = "[]=%'\" \t\n;#*,.01x@~pgbouncerdatabasesuserslisten_addrhost=auth_typepool_mode";
    for text in garbage(alphabet, 3_000) {
        let _ = import_with(&text, &[]).and_then(Import::into_config);
    }
    // Structured garbage: random values for real settings.
    let settings = [
        "listen_addr",
        "listen_port",
        "pool_mode",
        "auth_type",
        "max_client_conn",
        "query_wait_timeout",
        "client_tls_sslmode",
        "auth_file",
    ];
    for (i, value) in garbage("0123456789.-x*:, '\"abc", 3_000).into_iter().enumerate() {
        let text = format!("{BASE}{} = {value}\n[databases]\ndb{i} = host={value}\n", settings[i % settings.len()]);
        let _ = import_with(&text, &[]).and_then(Import::into_config);
    }
}

/// Every setting the catalogue calls honoured is carried over, not warned
/// about: set to a value PgBouncer takes, it imports without a warning.
#[test]
fn every_honoured_setting_imports_without_a_warning() {
    let value = |key: &str| match key {
        "admin_users" | "stats_users" | "auth_user" => "postgres",
        "auth_dbname" => "app",
        "auth_file" => "userlist.txt",
        // Read under auth_type = hba only, as by PgBouncer.
        "auth_hba_file" => "hba.conf\nauth_type = hba",
        "auth_query" => "SELECT usename, passwd FROM pg_shadow WHERE usename=$1",
        "auth_type" => "md5",
        "client_tls_sslmode" | "server_tls_sslmode" => "disable",
        "client_tls_ca_file" | "client_tls_cert_file" | "client_tls_key_file" => "/etc/ssl/none.pem",
        "server_tls_ca_file" | "server_tls_cert_file" | "server_tls_key_file" => "/etc/ssl/none.pem",
        "disable_pqexec" | "server_reset_query_always" | "so_reuseport" | "peer_id" => "0",
        "listen_addr" => "127.0.0.1",
        "listen_port" => "6432",
        "logfile" => "/var/log/pgbouncer.log",
        "pidfile" => "/run/pgbouncer.pid",
        "pool_mode" => "transaction",
        "server_reset_query" => "DISCARD ALL",
        "unix_socket_dir" => "/tmp",
        "unix_socket_mode" => "0777",
        "max_prepared_statements" => "100",
        _ => "30",
    };
    for key in unsupported::HONOURED {
        let text = with_settings(&format!("{key} = {}", value(key)));
        let imported = import_with(&text, &[(USERLIST, "\"postgres\" \"pw\"\n")]).unwrap_or_else(|e| panic!("{key}: {e}"));
        assert!(imported.warnings().iter().all(|w| w.setting != *key), "{key}: {:?}", imported.warnings());
    }
}

#[test]
fn console_sets_come_after_the_files_lines_and_win() {
    let sets =
        [("default_pool_size".to_owned(), "9".to_owned()), ("server_reset_query".to_owned(), "DISCARD ALL; SELECT 1".to_owned())];
    let text = with_settings("default_pool_size = 7") + &console_sets(&sets);
    let (c, _) = config(&text);
    assert_eq!((c.default_pool_size, c.pool_size("app")), (9, 9));
    assert_eq!(c.server_reset_query, "DISCARD ALL; SELECT 1");
    assert_eq!(console_sets(&[]), "", "no SETs, the file as it is");
    let bad = [("defualt_pool_size".to_owned(), "9".to_owned())];
    assert!(error_with(&(with_settings("") + &console_sets(&bad)), &[]).contains("default_pool_size"), "did you mean");
}

#[test]
fn tcp_settings_carry_over_to_the_same_socket_options() {
    let (c, warnings) = config(&with_settings(
        "tcp_keepalive = 1\ntcp_keepidle = 60\ntcp_keepintvl = 0x0a\ntcp_keepcnt = 3\ntcp_user_timeout = 30000\n\
         tcp_socket_buffer = 65536\nlisten_backlog = 512\ntcp_defer_accept = 1",
    ));
    assert!(warnings.is_empty(), "{warnings:?}");
    let tuning = c.tcp_tuning();
    assert_eq!(
        (tuning.keepalive, tuning.keepidle, tuning.keepintvl, tuning.keepcnt, tuning.user_timeout_ms, tuning.socket_buffer),
        (true, 60, 10, 3, 30_000, 65_536)
    );
    assert_eq!((c.listen_backlog, c.tcp_defer_accept), (512, true));
    let (c, _) = config(&with_settings("tcp_keepalive = 0"));
    assert!(!c.tcp_tuning().keepalive);
    // Unset: PgBouncer's keepalive default (on) is pglane's too.
    let (c, _) = config(&with_settings(""));
    assert!(c.tcp_keepalive && !c.tcp_defer_accept);
    // Linux refuses these; so does pglane, at start rather than at every connection.
    assert!(error(&with_settings("tcp_keepidle = 40000")).contains("tcp_keepidle must be at most 32767"));
    assert!(error(&with_settings("tcp_keepcnt = -1")).contains("tcp_keepcnt: expected a whole number"));
}

#[test]
fn log_settings_carry_over() {
    let (c, warnings) = config(&with_settings("log_connections = 0\nlog_disconnections = 0\nlog_pooler_errors = 0\nverbose = 5"));
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!((c.log_connections, c.log_disconnections, c.log_pooler_errors, c.verbose), (false, false, false, 2));
    // Unset: PgBouncer's defaults, which are pglane's.
    let (c, _) = config(&with_settings(""));
    assert_eq!((c.log_connections, c.log_disconnections, c.log_pooler_errors, c.verbose), (true, true, true, 0));
}

#[test]
fn scram_iterations_carries_over() {
    let (c, _) = config(&with_settings("scram_iterations = 10000"));
    assert_eq!(c.scram_iterations, 10_000);
    let (c, _) = config(&with_settings(""));
    assert_eq!(c.scram_iterations, 4096, "PgBouncer's default, and PostgreSQL's");
    assert!(error(&with_settings("scram_iterations = 0")).contains("scram_iterations: expected a whole number of at least 1"));
}

#[test]
fn client_limits_carry_over_globally_per_database_and_per_user() {
    let text = "[databases]
app = host=db max_db_client_connections=3
other = host=db
[users]
alice = max_user_client_connections=2
[pgbouncer]
listen_addr = *
max_db_client_connections = 7
max_user_client_connections = 4
";
    let (c, warnings) = config(text);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!((c.max_db_client_connections("app"), c.max_db_client_connections("other")), (3, 7));
    assert_eq!((c.max_user_client_connections("alice"), c.max_user_client_connections("bob")), (2, 4));
    assert!(error(&text.replace("=2", "=-1")).contains("max_user_client_connections of user alice: expected a whole number"));
}

#[test]
fn query_wait_notify_carries_over_with_pgbouncers_default() {
    let (c, _) = config(&with_settings("query_wait_notify = 2"));
    assert_eq!(c.query_wait_notify, 2.0);
    let (c, _) = config(&with_settings("query_wait_notify = 0"));
    assert_eq!(c.query_wait_notify, 0.0);
    let (c, _) = config(&with_settings(""));
    assert_eq!(c.query_wait_notify, 5.0, "PgBouncer's default, though pglane's own is 0");
}

#[test]
fn startup_parameters_of_a_database_become_its_default_settings() {
    let (c, warnings) = config(
        "[databases]\napp = host=db client_encoding=LATIN1 datestyle='ISO, DMY' timezone=UTC application_name=batch\n\
         [pgbouncer]\nlisten_addr = *\n",
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    let defaults: Vec<(&str, &str)> = c.databases["app"].default_settings.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        defaults,
        [("DateStyle", "ISO, DMY"), ("TimeZone", "UTC"), ("application_name", "batch"), ("client_encoding", "LATIN1")]
    );
}

/// PgBouncer switches to `user`; already running as that user, there is
/// nothing to switch, for PgBouncer or pglane.
#[test]
fn user_is_accepted_when_it_is_the_user_pglane_runs_as() {
    let me = super::running_as().expect("this process's user name");
    let (_, warnings) = config(&with_settings(&format!("user = {me}")));
    assert!(warnings.is_empty(), "{warnings:?}");
    let message = error(&with_settings("user = somebody-else-entirely"));
    assert!(message.contains("user = somebody-else-entirely is not supported: pglane does not switch users ("), "{message}");
}
