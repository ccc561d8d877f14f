//! What pglane shows a client whose user cannot log in, so that it looks
//! like what it shows a user who can (PostgreSQL's `scram_mock_salt`).
//!
//! Owns the per-process secret nonce and the salts derived from it. A SCRAM
//! server-first-message carries a salt and an iteration count; if unknown
//! users got a random salt (or none) while real users got a fixed one, two
//! logins would tell an attacker which names exist. So every salt pglane
//! presents for a user without a stored verifier — a user that does not exist,
//! one without a password, and one whose password is configured in plaintext
//! — is `SHA-256(nonce ‖ user)`, the same for every login and every shard of
//! this process, with the same iteration count (`scram_iterations`,
//! PostgreSQL's and PgBouncer's default 4096).
//!
//! Must never do I/O or decide who may log in; a mock verifier must never
//! accept a proof (its keys are random and the caller fails the exchange
//! whatever the client sends).

use std::sync::OnceLock;

use rand::RngCore;
use sha2::{Digest, Sha256};

use super::secret::{ScramSecret, DEFAULT_SCRAM_SALT_LEN};

/// Random bytes drawn once per process; never leaves memory.
fn process_nonce() -> &'static [u8; 32] {
    static NONCE: OnceLock<[u8; 32]> = OnceLock::new();
    NONCE.get_or_init(|| {
        let mut nonce = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut nonce);
        nonce
    })
}

/// The salt presented for `user` under `nonce`: the first bytes of
/// `SHA-256(nonce ‖ user)`.
fn salt_for(nonce: &[u8], user: &str) -> [u8; DEFAULT_SCRAM_SALT_LEN] {
    let digest = Sha256::new().chain_update(nonce).chain_update(user.as_bytes()).finalize();
    let mut salt = [0u8; DEFAULT_SCRAM_SALT_LEN];
    salt.copy_from_slice(&digest[..DEFAULT_SCRAM_SALT_LEN]);
    salt
}

/// This process's salt for `user`.
#[must_use]
pub fn scram_salt(user: &str) -> [u8; DEFAULT_SCRAM_SALT_LEN] {
    salt_for(process_nonce(), user)
}

/// A verifier for a user who cannot log in: the salt and count (`iterations`)
/// a real one would show, and random keys no proof matches.
#[must_use]
pub fn scram_secret(user: &str, iterations: u32) -> ScramSecret {
    let mut rng = rand::thread_rng();
    let mut stored_key = [0u8; 32];
    let mut server_key = [0u8; 32];
    rng.fill_bytes(&mut stored_key);
    rng.fill_bytes(&mut server_key);
    ScramSecret { iterations, salt: scram_salt(user).to_vec(), stored_key, server_key }
}

/// The verifier pglane checks a plaintext-password user with: derived with
/// the same salt and count a mock one shows, so the two cannot be told apart.
/// Costs a PBKDF2 run: callers cache it.
#[must_use]
pub fn scram_secret_for_password(user: &str, password: &str, iterations: u32) -> ScramSecret {
    ScramSecret::from_password(password, &scram_salt(user), iterations)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salts_are_stable_per_user_and_differ_between_users_and_nonces() {
        assert_eq!(scram_salt("alice"), scram_salt("alice"));
        assert_ne!(scram_salt("alice"), scram_salt("bob"));
        assert_ne!(salt_for(b"one", "alice"), salt_for(b"two", "alice"));
    }

    #[test]
    fn mock_and_real_verifiers_show_the_same_salt_and_count() {
        let mock = scram_secret("alice", 4096);
        let real = scram_secret_for_password("alice", "correct horse", 4096);
        assert_eq!((mock.salt.clone(), mock.iterations), (real.salt.clone(), real.iterations));
        assert_eq!(mock.iterations, 4096);
        assert_eq!(scram_secret_for_password("alice", "correct horse", 10).iterations, 10);
        // A mock verifier's keys are fresh each time: no password matches them.
        assert_ne!(scram_secret("alice", 4096).stored_key, mock.stored_key);
        assert_ne!(mock.stored_key, real.stored_key);
    }
}
