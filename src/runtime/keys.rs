//! The cancel keys pglane hands its clients (BackendKeyData), and where a
//! CancelRequest carrying one must go.
//!
//! A key is a process id and a secret, 8 bytes. pglane's process ids are
//! not processes: each names the shard that serves the client, and, with
//! `peer_id` set, the pglane instance, so that a CancelRequest the kernel or
//! a load balancer hands to another shard or another instance reaches its
//! owner. They are never below 1 << 30, so never within the kernel's
//! `pid_max` (at most 2^22): a client that passes its
//! backend pid to `pg_terminate_backend` or `kill` can hit no real process.
//! Secrets are random.
//!
//! With `peer_id` set the layout is PgBouncer's (1.21 and later), so that
//! pglane and PgBouncer instances can be peers of one another (while a fleet
//! moves from one to the other): bytes 1 and 2 of the process id are the
//! peer id (low byte first, at most 16383), and the two low bits of the
//! secret's last byte are a time-to-live, 3 when handed out, one less each
//! time a peer forwards the request, which ends loops between peers that
//! disagree about who is who. That leaves 14 bits of the process id for the
//! shard and a client count: the first byte is 0x40 to 0x7f (6 of them),
//! the last byte the other 8. Without peering, all 30 bits below 1 << 30
//! are pglane's: the shard in the top 8, then 22 of client count.
//!
//! This module is pure: it computes keys and routes, and owns no state.

/// The two low bits of a peered key's secret: hops left (PgBouncer's
/// CANCELLATION_TTL_MASK).
const TTL_MASK: i32 = 0b11;

/// Set in every process id pglane hands out without peering: 1 << 30, far
/// above any pid_max.
const MARK: i32 = 1 << 30;

/// The highest peer id, as in PgBouncer.
pub const MAX_PEER_ID: u16 = 16_383;

/// Shards one instance may run (the top 8 bits without peering).
pub const MAX_SHARDS: usize = 256;

/// How one pglane instance makes its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPlan {
    /// 0: no peering.
    peer_id: u16,
    /// Bits of the local part that name the shard; the rest count clients.
    shard_bits: u32,
    /// Bits of the local part: 14 with peering, 30 without.
    local_bits: u32,
}

/// Where a CancelRequest goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A client of this instance, served by `shard`; `secret` as it was
    /// handed out (a forwarded request's time-to-live restored).
    Shard { shard: usize, secret: i32 },
    /// A client of peer `peer_id`: forward the request with `secret` (its
    /// time-to-live one less).
    Peer { peer_id: u16, secret: i32 },
    /// No client pglane could have given this key to, or its
    /// time-to-live is spent.
    Nowhere,
}

impl KeyPlan {
    /// The plan of an instance with `shards` shards and `peer_id` (0: no
    /// peering). `shards` is at most [`MAX_SHARDS`], `peer_id` at most
    /// [`MAX_PEER_ID`] (the config checks).
    pub fn new(peer_id: u16, shards: usize) -> KeyPlan {
        let shards = shards.clamp(1, MAX_SHARDS);
        let needed = usize::BITS - (shards - 1).leading_zeros();
        match peer_id {
            0 => KeyPlan { peer_id, shard_bits: 8, local_bits: 30 },
            _ => KeyPlan { peer_id: peer_id.min(MAX_PEER_ID), shard_bits: needed, local_bits: 14 },
        }
    }

    fn counter_bits(&self) -> u32 {
        self.local_bits - self.shard_bits
    }

    /// How many process ids each shard has (client counts `0..` this).
    pub fn per_shard(&self) -> u32 {
        1 << self.counter_bits()
    }

    /// The process id of client `n` (below [`KeyPlan::per_shard`]) of `shard`.
    pub fn process_id(&self, shard: usize, n: u32) -> i32 {
        let local = ((shard as i32) << self.counter_bits()) | (n & (self.per_shard() - 1)) as i32;
        match self.peer_id {
            0 => MARK | local,
            peer => {
                let [b0, b3] = [0x40 | (local >> 8) as u8, local as u8];
                let [lo, hi] = peer.to_le_bytes();
                i32::from_be_bytes([b0, lo, hi, b3])
            }
        }
    }

    /// The secret handed out with a process id, from `random` bits: with
    /// peering, its time-to-live set.
    pub fn secret(&self, random: i32) -> i32 {
        match self.peer_id {
            0 => random,
            _ => random | TTL_MASK,
        }
    }

    /// Where a CancelRequest for (`process_id`, `secret`) goes.
    pub fn route(&self, process_id: i32, secret: i32) -> Route {
        let [b0, lo, hi, b3] = process_id.to_be_bytes();
        let local = match self.peer_id {
            // Positive, with the mark: one of ours.
            0 if process_id >> 30 == 1 => process_id & (MARK - 1),
            0 => return Route::Nowhere,
            own => {
                let peer = u16::from_le_bytes([lo, hi]);
                if peer != own {
                    return match secret & TTL_MASK {
                        0 => Route::Nowhere,
                        _ if peer == 0 || peer > MAX_PEER_ID => Route::Nowhere,
                        // The hops left are the low bits: one less, no borrow.
                        _ => Route::Peer { peer_id: peer, secret: secret - 1 },
                    };
                }
                if b0 & 0xc0 != 0x40 {
                    return Route::Nowhere;
                }
                (i32::from(b0 & 0x3f) << 8) | i32::from(b3)
            }
        };
        let secret = self.secret(secret);
        Route::Shard { shard: (local >> self.counter_bits()) as usize, secret }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux's highest possible pid_max (PID_MAX_LIMIT on 64-bit): every
    /// process id at or above 1 << 30 is above it.
    const PID_MAX_LIMIT: i32 = 4_194_304;
    const _: () = assert!(PID_MAX_LIMIT < 1 << 30);

    #[test]
    fn without_peering_every_process_id_is_far_above_pid_max_and_names_its_shard() {
        let plan = KeyPlan::new(0, 2);
        assert_eq!(plan.per_shard(), 1 << 22);
        for shard in [0, 1] {
            for n in [0, 1, 2, 12, 4_194_303] {
                let pid = plan.process_id(shard, n);
                assert!(pid >= 1 << 30, "{pid}");
                assert_eq!(plan.route(pid, -7), Route::Shard { shard, secret: -7 });
            }
        }
        assert_ne!(plan.process_id(0, 5), plan.process_id(1, 5));
        assert_ne!(plan.process_id(0, 5), plan.process_id(0, 6));
        // The biggest instance still fits.
        let big = KeyPlan::new(0, MAX_SHARDS);
        let pid = big.process_id(MAX_SHARDS - 1, big.per_shard() - 1);
        assert!(pid > 0);
        assert_eq!(big.route(pid, 1), Route::Shard { shard: MAX_SHARDS - 1, secret: 1 });
        // Real backends' pids, and keys pglane never made, go nowhere.
        for pid in [1, 12, 4_194_303, 0x2000_0000, -1, i32::MIN] {
            assert_eq!(plan.route(pid, 0), Route::Nowhere, "{pid:#x}");
        }
        // The secret is what it was: all 32 bits random.
        assert_eq!(plan.secret(0x1234_5678), 0x1234_5678);
    }

    #[test]
    fn with_peering_the_layout_is_pgbouncers() {
        let plan = KeyPlan::new(0x1234, 2);
        let pid = plan.process_id(1, 0x0abc);
        let bytes = pid.to_be_bytes();
        // Bytes 1 and 2: the peer id, low byte first.
        assert_eq!((bytes[1], bytes[2]), (0x34, 0x12));
        assert!(pid >= 1 << 30, "{pid:#x}");
        // The time-to-live: PgBouncer hands out 3.
        let secret = plan.secret(0x5555_5554);
        assert_eq!(secret & TTL_MASK, 3);
        assert_eq!(plan.route(pid, secret), Route::Shard { shard: 1, secret });
        // 14 bits for shard and count: 8192 clients per shard on two shards.
        assert_eq!(plan.per_shard(), 8192);
        assert_eq!(KeyPlan::new(7, 1).per_shard(), 16384);
        assert_eq!(KeyPlan::new(7, 64).per_shard(), 256);
        let distinct: std::collections::HashSet<i32> =
            (0..2).flat_map(|shard| (0..plan.per_shard()).map(move |n| plan.process_id(shard, n))).collect();
        assert_eq!(distinct.len(), 2 * 8192);
        assert!(distinct.iter().all(|&pid| plan.route(pid, 3) != Route::Nowhere));
    }

    #[test]
    fn a_peers_key_is_forwarded_with_one_hop_less_until_none_is_left() {
        let mine = KeyPlan::new(1, 2);
        let theirs = KeyPlan::new(2, 4);
        let pid = theirs.process_id(3, 77);
        let secret = theirs.secret(0x0bad_cafc);
        let Route::Peer { peer_id: 2, secret: hop1 } = mine.route(pid, secret) else { panic!("{:?}", mine.route(pid, secret)) };
        assert_eq!(hop1 & TTL_MASK, 2);
        assert_eq!(hop1 & !TTL_MASK, secret & !TTL_MASK, "only the time-to-live changes");
        // The owner restores it and finds its client.
        assert_eq!(theirs.route(pid, hop1), Route::Shard { shard: 3, secret });
        let Route::Peer { secret: hop2, .. } = mine.route(pid, hop1) else { panic!() };
        let Route::Peer { secret: hop3, .. } = mine.route(pid, hop2) else { panic!() };
        assert_eq!(hop3 & TTL_MASK, 0);
        assert_eq!(mine.route(pid, hop3), Route::Nowhere, "no hops left");
        // A PgBouncer's key names its peer the same way.
        let pgbouncer_pid = i32::from_be_bytes([0x5a, 0x02, 0x00, 0x11]);
        assert!(matches!(mine.route(pgbouncer_pid, 0x7fff_ffff), Route::Peer { peer_id: 2, .. }));
        // Peer id 0 is nobody's.
        assert_eq!(mine.route(i32::from_be_bytes([0x40, 0, 0, 1]), 3), Route::Nowhere);
    }

    #[test]
    fn peer_ids_over_the_limit_are_clamped_as_the_config_refuses_them() {
        assert_eq!(KeyPlan::new(u16::MAX, 1), KeyPlan::new(MAX_PEER_ID, 1));
    }
}
