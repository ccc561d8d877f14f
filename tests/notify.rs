//! LISTEN/NOTIFY in transaction mode through the notification hub: a
//! client's LISTEN does not pin it, notifications reach it between its
//! transactions only, with PostgreSQL's channel and payload; a lost
//! listening connection is reopened and its clients told; a client that
//! does not read its notifications is cut off at notify_client_buffer.

mod common;

use std::time::Duration;

use common::{postgres, Pglane};
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

const LISTENER: &str = "pglane notification listener";

fn start(dbname: &str, pool_size: usize, extra: &str) -> Pglane {
    let pg = postgres();
    pg.fresh_database(dbname, None);
    Pglane::start_with_args(
        &format!(
            "pool_mode = \"transaction\"\nquery_wait_timeout = 3\nadmin_users = [\"postgres\"]\n{extra}\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"{dbname}\"\npool_size = {pool_size}\n[users.postgres]\npassword = \"secret\"\n",
            pg.port
        ),
        &["--cores", "1"],
    )
}

/// A client whose connection's asynchronous messages (notifications,
/// notices) come out of `messages`. Once `deaf` is sent, its connection is
/// no longer polled: it reads nothing more from its socket.
struct Listener {
    client: tokio_postgres::Client,
    messages: mpsc::UnboundedReceiver<AsyncMessage>,
    deaf: Option<tokio::sync::oneshot::Sender<()>>,
}

async fn listener(port: u16) -> Listener {
    listener_to(port, "app").await
}

/// A [`Listener`] of database `dbname` (a direct connection's, say).
async fn listener_to(port: u16, dbname: &str) -> Listener {
    let mut config = tokio_postgres::Config::new();
    config.host("127.0.0.1").port(port).user("postgres").password("secret").dbname(dbname);
    let (client, mut connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
    let (tx, messages) = mpsc::unbounded_channel();
    let (deaf, mut deafened) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        loop {
            tokio::select! {
                message = stream.next() => match message {
                    Some(Ok(m)) => { let _ = tx.send(m); }
                    _ => return,
                },
                _ = &mut deafened => {
                    // Holds the socket open, reading nothing.
                    tokio::time::sleep(Duration::from_secs(600)).await;
                    drop(stream);
                    return;
                }
            }
        }
    });
    Listener { client, messages, deaf: Some(deaf) }
}

impl Listener {
    /// The next notification (notices are skipped), within 10 s.
    async fn notification(&mut self) -> (String, String) {
        loop {
            match tokio::time::timeout(Duration::from_secs(10), self.messages.recv()).await {
                Ok(Some(AsyncMessage::Notification(n))) => return (n.channel().to_owned(), n.payload().to_owned()),
                Ok(Some(_)) => continue,
                Ok(None) => panic!("the connection ended"),
                Err(_) => panic!("no notification within 10 s"),
            }
        }
    }

    /// The next notice (a notification first fails), within 10 s.
    async fn notice(&mut self) -> String {
        match tokio::time::timeout(Duration::from_secs(10), self.messages.recv()).await {
            Ok(Some(AsyncMessage::Notice(n))) => n.message().to_owned(),
            Ok(Some(_)) => panic!("a notification before the notice"),
            Ok(None) => panic!("the connection ended"),
            Err(_) => panic!("no notice within 10 s"),
        }
    }

    /// The notifications that come until none has for 400 ms, as
    /// "channel payload" (notices skipped).
    async fn drain(&mut self) -> Vec<String> {
        let mut got = Vec::new();
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(400), self.messages.recv()).await {
            if let AsyncMessage::Notification(n) = m {
                got.push(format!("{} {}", n.channel(), n.payload()));
            }
        }
        got
    }

    /// Nothing arrives for `wait`.
    async fn nothing_for(&mut self, wait: Duration) {
        if let Ok(Some(m)) = tokio::time::timeout(wait, self.messages.recv()).await {
            match m {
                AsyncMessage::Notification(n) => panic!("unexpected notification {:?} {:?}", n.channel(), n.payload()),
                AsyncMessage::Notice(n) => panic!("unexpected notice {:?}", n.message()),
                _ => panic!("unexpected message"),
            }
        }
    }
}

/// Backends of the hub's listening connections to `dbname`.
fn listening_backends(dbname: &str) -> usize {
    postgres()
        .psql(&format!("SELECT count(*) FROM pg_stat_activity WHERE datname = '{dbname}' AND application_name = '{LISTENER}'"))
        .parse()
        .unwrap()
}

/// SHOW NOTIFY's one row (one shard), by column name.
async fn show_notify(port: u16) -> std::collections::HashMap<String, u64> {
    common::show_numbers(port, "postgres", "secret", "SHOW NOTIFY").await
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn a_listening_client_is_not_pinned_and_gets_notifications() {
    let lane = start("notify_basic", 1, "");
    let mut l = listener(lane.port).await;
    l.client.simple_query("LISTEN jobs").await.unwrap();
    l.client.simple_query("listen \"Mixed Case\"").await.unwrap();
    // One server connection: were the listener pinned to it, nobody else
    // could run anything (query_wait_timeout is 3 s).
    let other = common::connect(lane.port, "postgres", "secret", "app").await;
    other.simple_query("SELECT 1").await.unwrap();
    other.simple_query("NOTIFY jobs, 'hello'").await.unwrap();
    assert_eq!(l.notification().await, ("jobs".into(), "hello".into()));
    other.simple_query("SELECT pg_notify('Mixed Case', 'quoted')").await.unwrap();
    assert_eq!(l.notification().await, ("Mixed Case".into(), "quoted".into()));
    // The listener runs queries as before, and so does the other client.
    l.client.simple_query("SELECT 2").await.unwrap();
    other.simple_query("SELECT 3").await.unwrap();
    // Notifications come in the order they were committed.
    other.batch_execute("NOTIFY jobs, '1'; NOTIFY jobs, '2'").await.unwrap();
    other.simple_query("NOTIFY jobs, '3'").await.unwrap();
    for payload in ["1", "2", "3"] {
        assert_eq!(l.notification().await, ("jobs".into(), payload.into()));
    }
    assert_eq!(listening_backends("notify_basic"), 1, "one listening connection");
    // The difference docs/compatibility.md states: the client's server
    // connection does not listen, the hub's does.
    let channels: i64 = l.client.query_one("SELECT count(*) FROM pg_listening_channels()", &[]).await.unwrap().get(0);
    assert_eq!(channels, 0);
    let shown = show_notify(lane.port).await;
    assert_eq!((shown["listening_clients"], shown["channels"], shown["listening_connections"]), (1, 2, 1), "{shown:?}");
    assert_eq!((shown["received"], shown["delivered"], shown["dropped"]), (5, 5, 0), "{shown:?}");
}

#[tokio::test]
async fn nothing_is_delivered_inside_the_listeners_transaction() {
    let lane = start("notify_txn", 2, "");
    let mut l = listener(lane.port).await;
    l.client.simple_query("LISTEN jobs").await.unwrap();
    assert_eq!(listening_backends("notify_txn"), 1, "the hub listens, not the client's server connection");
    let other = common::connect(lane.port, "postgres", "secret", "app").await;
    l.client.simple_query("BEGIN").await.unwrap();
    l.client.simple_query("SELECT 1").await.unwrap();
    other.simple_query("NOTIFY jobs, 'during'").await.unwrap();
    l.nothing_for(Duration::from_millis(700)).await;
    l.client.simple_query("SELECT 2").await.unwrap();
    l.nothing_for(Duration::from_millis(300)).await;
    l.client.simple_query("COMMIT").await.unwrap();
    assert_eq!(l.notification().await, ("jobs".into(), "during".into()));
}

#[tokio::test]
async fn a_client_gets_its_own_notifications_and_unlisten_stops_them() {
    let lane = start("notify_own", 2, "");
    let mut l = listener(lane.port).await;
    l.client.simple_query("LISTEN a").await.unwrap();
    l.client.simple_query("LISTEN b;").await.unwrap();
    assert_eq!(listening_backends("notify_own"), 1, "the hub listens, not the client's server connection");
    l.client.simple_query("NOTIFY a, 'mine'").await.unwrap();
    assert_eq!(l.notification().await, ("a".into(), "mine".into()));
    assert_eq!(l.client.simple_query("UNLISTEN a").await.unwrap().len(), 1);
    l.client.simple_query("NOTIFY a, 'not for me'").await.unwrap();
    l.client.simple_query("NOTIFY b, 'for me'").await.unwrap();
    assert_eq!(l.notification().await, ("b".into(), "for me".into()));
    l.client.simple_query("UNLISTEN *").await.unwrap();
    l.client.simple_query("NOTIFY b, 'not either'").await.unwrap();
    l.nothing_for(Duration::from_millis(500)).await;
    // Nobody listens any more: the listening connection goes.
    wait_until("the listening connection closed", || listening_backends("notify_own") == 0);
    // And comes back for the next LISTEN.
    l.client.simple_query("LISTEN c").await.unwrap();
    l.client.simple_query("NOTIFY c, 'again'").await.unwrap();
    assert_eq!(l.notification().await, ("c".into(), "again".into()));
}

/// A notification committed before the client's UNLISTEN reaches it, as
/// direct: PostgreSQL's backend sends an idle client what was committed
/// before it reads the client's next command. Through pglane the hub's
/// listening connection may not have read it yet when the UNLISTEN comes
/// (the race behind a lost asyncpg notification in CI); the hub answers the
/// UNLISTEN once it has. Another client notifies, and the listener
/// UNLISTENs at once and LISTENs again, many times; alone on the channel,
/// and beside a second listener (then the hub's connection keeps listening).
#[tokio::test]
async fn a_notification_committed_before_unlisten_is_delivered() {
    const ROUNDS: usize = 150;
    let lane = start("notify_unlisten_race", 2, "");
    let direct = postgres().port;
    for beside_another in [false, true] {
        let mut got = Vec::new();
        for (port, dbname) in [(direct, "notify_unlisten_race"), (lane.port, "app")] {
            let mut l = listener_to(port, dbname).await;
            let other = listener_to(port, dbname).await;
            if beside_another {
                other.client.simple_query("LISTEN race").await.unwrap();
            }
            // The notifier goes straight to PostgreSQL: its answer comes
            // while the listening backend may still be sending.
            let notifier = common::connect(direct, "postgres", "secret", "notify_unlisten_race").await;
            l.client.simple_query("LISTEN race").await.unwrap();
            for round in 0..ROUNDS {
                notifier.simple_query(&format!("NOTIFY race, '{round}'")).await.unwrap();
                l.client.simple_query("UNLISTEN race").await.unwrap();
                l.client.simple_query("LISTEN race").await.unwrap();
            }
            l.client.simple_query("UNLISTEN *").await.unwrap();
            got.push(l.drain().await);
        }
        let expected: Vec<String> = (0..ROUNDS).map(|round| format!("race {round}")).collect();
        assert_eq!(got[0], expected, "direct, beside another listener: {beside_another}");
        assert_eq!(got[1], expected, "through pglane, beside another listener: {beside_another}");
    }
}

/// An UNLISTEN or DISCARD ALL among other statements goes to the server,
/// and ends the client's subscription when its transaction commits, as
/// direct (asyncpg's pool sends `... UNLISTEN *; RESET ALL;` on release):
/// the same script, direct and through pglane, gets the same notifications.
#[tokio::test]
async fn unlisten_among_other_statements_ends_the_subscription_once_committed() {
    let lane = start("notify_follow", 2, "");
    let direct = postgres().port;
    let through = script_of_unlistens(lane.port, "app").await;
    assert_eq!(script_of_unlistens(direct, "notify_follow").await, through);
    assert_eq!(through, ["a 1", "b 1", "c 1", "a 2", "a 3"].map(String::from));
    // UNLISTEN * and DISCARD ALL left the subscription empty: the hub's
    // listening connection goes.
    wait_until("the listening connection closed", || listening_backends("notify_follow") == 0);
}

/// Listens to a, b and c on `port`'s `dbname`, unlistens them in several
/// forms, another client notifying all three after each step; the
/// notifications the listener got, as "channel payload".
async fn script_of_unlistens(port: u16, dbname: &str) -> Vec<String> {
    let mut l = listener_to(port, dbname).await;
    let other = common::connect(port, "postgres", "secret", dbname).await;
    for channel in ["a", "b", "c"] {
        l.client.simple_query(&format!("LISTEN {channel}")).await.unwrap();
    }
    let notify_all = |round: u32| {
        let other = &other;
        async move { other.batch_execute(&format!("NOTIFY a, '{round}'; NOTIFY b, '{round}'; NOTIFY c, '{round}'")).await.unwrap() }
    };
    let mut seen = Vec::new();
    // Rolled back: nothing ends.
    l.client.batch_execute("BEGIN; UNLISTEN a; UNLISTEN b; ROLLBACK").await.unwrap();
    notify_all(1).await;
    l.client.simple_query("SELECT 1").await.unwrap();
    seen.extend(l.drain().await);
    // Committed, among other statements (asyncpg's pool reset); and one
    // whose implicit transaction fails.
    l.client.batch_execute("SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN b; RESET ALL;").await.unwrap();
    assert!(l.client.batch_execute("UNLISTEN c; SELECT 1/0").await.is_err());
    // In a block, with a notification committed while it is open: once
    // the UNLISTEN commits, what was not delivered for c is not either.
    l.client.simple_query("BEGIN").await.unwrap();
    l.client.simple_query("unlisten \"c\"").await.unwrap();
    notify_all(2).await;
    l.client.simple_query("COMMIT").await.unwrap();
    l.client.simple_query("SELECT 2").await.unwrap();
    seen.extend(l.drain().await);
    notify_all(3).await;
    l.client.simple_query("SELECT 3").await.unwrap();
    seen.extend(l.drain().await);
    l.client.batch_execute("SELECT 4; UNLISTEN *").await.unwrap();
    l.client.batch_execute("LISTEN a").await.unwrap();
    l.client.batch_execute("DISCARD ALL").await.unwrap();
    notify_all(4).await;
    l.client.simple_query("SELECT 5").await.unwrap();
    seen.extend(l.drain().await);
    seen
}

/// A LISTEN inside a transaction block, or among other statements of a
/// simple query, goes to the server and is followed: the client is not
/// pinned, its subscription starts when the transaction commits and not if
/// it rolls back, and it gets what commits after its LISTEN, not what
/// committed while its block was open: the same script, direct and through
/// pglane, gets the same notifications.
#[tokio::test]
async fn listen_in_a_transaction_block_applies_at_commit_without_pinning() {
    let lane = start("notify_block", 2, "");
    let direct = postgres().port;
    let through = script_of_listens(lane.port, "app").await;
    assert_eq!(script_of_listens(direct, "notify_block").await, through);
    assert_eq!(
        through,
        ["a 2", "d 4", "e 5", "f mine", "g 6"].map(String::from),
        "committed LISTENs only, and only what committed after them"
    );
    let log = lane.log();
    assert!(!log.contains("client pinned"), "the listener was pinned:\n{log}");
    // The server connection that ran the LISTENs listens to nothing now.
    let other = common::connect(lane.port, "postgres", "secret", "app").await;
    let channels: i64 = other.query_one("SELECT count(*) FROM pg_listening_channels()", &[]).await.unwrap().get(0);
    assert_eq!(channels, 0, "a LISTEN outlived its client's transaction on a pooled connection");
    assert!(log.contains("notification listener connected"), "the hub did not listen:\n{log}");
}

/// LISTENs in blocks and among other statements on `port`'s `dbname`, in
/// every way a transaction can end, another client notifying around each;
/// the notifications the listener got, as "channel payload".
async fn script_of_listens(port: u16, dbname: &str) -> Vec<String> {
    let mut l = listener_to(port, dbname).await;
    let other = common::connect(port, "postgres", "secret", dbname).await;
    let notify = |channel: &'static str, payload: &'static str| {
        let other = &other;
        async move { other.batch_execute(&format!("NOTIFY {channel}, '{payload}'")).await.unwrap() }
    };
    let mut seen = Vec::new();
    // Committed: what committed while the block was open is not delivered.
    l.client.simple_query("BEGIN").await.unwrap();
    l.client.simple_query("LISTEN a").await.unwrap();
    notify("a", "1").await;
    // Through pglane, one committed within the hub's delivery time (about
    // a millisecond) before the client's next request may still come.
    tokio::time::sleep(Duration::from_millis(200)).await;
    l.client.simple_query("SELECT 1").await.unwrap();
    l.client.simple_query("COMMIT").await.unwrap();
    notify("a", "2").await;
    l.client.simple_query("SELECT 2").await.unwrap();
    seen.extend(l.drain().await);
    // Rolled back, by ROLLBACK and by an error in the implicit transaction.
    l.client.batch_execute("BEGIN; LISTEN b; ROLLBACK").await.unwrap();
    assert!(l.client.batch_execute("LISTEN c; SELECT 1/0").await.is_err());
    notify("b", "3").await;
    notify("c", "3").await;
    // Kept through a savepoint rolled back to after it.
    l.client.batch_execute("BEGIN; LISTEN d; SAVEPOINT s").await.unwrap();
    assert!(l.client.simple_query("SELECT 1/0").await.is_err());
    l.client.batch_execute("ROLLBACK TO s; COMMIT").await.unwrap();
    notify("d", "4").await;
    // Among other statements, autocommitted; and a block of its own.
    l.client.batch_execute("SELECT 1; LISTEN e").await.unwrap();
    notify("e", "5").await;
    l.client.batch_execute("BEGIN; LISTEN f; NOTIFY f, 'mine'; COMMIT").await.unwrap();
    l.client.simple_query("SELECT 3").await.unwrap();
    seen.extend(l.drain().await);
    // UNLISTEN * then LISTEN in one transaction: only the LISTEN stands.
    l.client.batch_execute("BEGIN; UNLISTEN *; LISTEN g; COMMIT").await.unwrap();
    for channel in ["a", "d", "e", "f"] {
        notify(channel, "after unlisten").await;
    }
    notify("g", "6").await;
    l.client.simple_query("SELECT 4").await.unwrap();
    seen.extend(l.drain().await);
    l.client.batch_execute("UNLISTEN *").await.unwrap();
    seen
}

#[tokio::test]
async fn a_lost_listening_connection_is_reopened_and_its_clients_told() {
    let lane = start("notify_lost", 2, "");
    let mut l = listener(lane.port).await;
    l.client.simple_query("LISTEN jobs").await.unwrap();
    let killed = postgres().psql(&format!(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = 'notify_lost' AND application_name = '{LISTENER}'"
    ));
    assert_eq!(killed, "1");
    let notice = l.notice().await;
    assert!(notice.contains("may have been missed"), "{notice}");
    let other = common::connect(lane.port, "postgres", "secret", "app").await;
    other.simple_query("NOTIFY jobs, 'after'").await.unwrap();
    assert_eq!(l.notification().await, ("jobs".into(), "after".into()));
}

#[tokio::test]
async fn a_client_that_does_not_read_is_cut_off_and_others_keep_receiving() {
    let lane = start("notify_full", 2, "notify_client_buffer = 262144");
    let mut deaf = listener(lane.port).await;
    deaf.client.simple_query("LISTEN jobs").await.unwrap();
    let mut reader = listener(lane.port).await;
    reader.client.simple_query("LISTEN jobs").await.unwrap();
    let _ = deaf.deaf.take().unwrap().send(());
    let other = common::connect(lane.port, "postgres", "secret", "app").await;
    // About 10 MB in all, more than the socket buffers and the mailbox
    // hold; in batches the reader takes before the next is sent, each
    // well under the limit.
    const BATCHES: usize = 75;
    const BATCH: usize = 20;
    for batch in 0..BATCHES {
        let (from, to) = (batch * BATCH + 1, (batch + 1) * BATCH);
        other
            .simple_query(&format!(
                "SELECT pg_notify('jobs', i || 'x' || repeat('x', 7000)) FROM generate_series({from}, {to}) i"
            ))
            .await
            .unwrap();
        for i in from..=to {
            let (channel, payload) = reader.notification().await;
            assert_eq!(channel, "jobs");
            assert!(payload.starts_with(&format!("{i}x")), "notification {i} out of order");
        }
    }
    lane.wait_for_log("notify_client_buffer", Duration::from_secs(10));
    assert!(show_notify(lane.port).await["dropped"] >= 1);
    other.simple_query("NOTIFY jobs, 'still'").await.unwrap();
    assert_eq!(reader.notification().await, ("jobs".into(), "still".into()));
}

#[tokio::test]
async fn session_mode_passes_listen_to_the_server() {
    let pg = postgres();
    pg.fresh_database("notify_session", None);
    let lane = Pglane::start_with_args(
        &format!(
            "pool_mode = \"session\"\n[databases.app]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"notify_session\"\npool_size = 2\n[users.postgres]\npassword = \"secret\"\n",
            pg.port
        ),
        &["--cores", "1"],
    );
    let mut l = listener(lane.port).await;
    l.client.simple_query("LISTEN jobs").await.unwrap();
    let listening: String = l.client.query_one("SELECT pg_listening_channels()::text", &[]).await.unwrap().get(0);
    assert_eq!(listening, "jobs", "the client's own backend listens");
    let other = common::connect(lane.port, "postgres", "secret", "app").await;
    other.simple_query("NOTIFY jobs, 'direct'").await.unwrap();
    assert_eq!(l.notification().await, ("jobs".into(), "direct".into()));
    assert_eq!(listening_backends("notify_session"), 0);
}

#[tokio::test]
async fn a_client_pinned_after_it_listened_still_gets_notifications_between_transactions() {
    let lane = start("notify_pinned", 2, "");
    let mut l = listener(lane.port).await;
    l.client.simple_query("LISTEN jobs").await.unwrap();
    // A temporary table pins the client to its server connection for good.
    l.client.simple_query("CREATE TEMP TABLE pinned_here (x int)").await.unwrap();
    let other = common::connect(lane.port, "postgres", "secret", "app").await;
    other.simple_query("NOTIFY jobs, 'idle'").await.unwrap();
    assert_eq!(l.notification().await, ("jobs".into(), "idle".into()));
    l.client.simple_query("BEGIN").await.unwrap();
    other.simple_query("NOTIFY jobs, 'in a block'").await.unwrap();
    l.nothing_for(Duration::from_millis(500)).await;
    l.client.simple_query("INSERT INTO pinned_here VALUES (1)").await.unwrap();
    l.nothing_for(Duration::from_millis(300)).await;
    l.client.simple_query("COMMIT").await.unwrap();
    assert_eq!(l.notification().await, ("jobs".into(), "in a block".into()));
}
