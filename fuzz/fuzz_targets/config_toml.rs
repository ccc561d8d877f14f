//! The TOML config (`Config::parse`: parse + validate). No panic on any text;
//! a config that validates has the properties validation promises.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pglane::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(config) = Config::parse(text) {
        assert!(config.listen_addr().is_ok());
        assert!(!config.databases.is_empty());
        assert!(config.max_message_size >= 1024);
        for (name, db) in &config.databases {
            assert!(db.pool_size >= 1 && !db.host.is_empty());
            let _ = db.address();
            for shards in 1..4 {
                let total: usize = (0..shards).map(|s| Config::pool_size_per_shard(db.pool_size, shards, s)).sum();
                assert!(total >= db.pool_size.min(shards) && total <= db.pool_size.max(shards));
            }
            for user in config.users.keys().chain([&String::from("nobody")]) {
                let _ = config.pool_mode_for(name, user);
            }
        }
        for t in [config.query_wait_timeout, config.server_connect_timeout, config.client_login_timeout, config.shutdown_timeout] {
            let _ = Config::secs(t); // panics on a negative, NaN or overflowing value
        }
    }
});
