//! Messages between shards, over one bounded channel into each shard.
//!
//! Three kinds of traffic cross shards, all rare and all off the query path:
//! cancel requests (SO_REUSEPORT hands the CancelRequest's connection to any
//! shard; the process id pglane gave the client names the owner); new client
//! connections, passed on so that each shard serves as many clients as the
//! next (see [`Peers::place_client`]); and the admin console's questions (a
//! snapshot of each shard's pools and clients, or a command such as PAUSE to
//! carry out) with their answers. No shard ever reads another's state: it
//! asks, and the owner answers. The one exception is a count: how many
//! clients each shard serves, an atomic per shard, read at accept time.

use std::cell::{Cell, RefCell};
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::Duration;

use tracing::warn;

use super::snapshot::ShardSnapshot;
use super::Shard;
use crate::rt::with_timeout;

/// Messages a shard may have waiting from the others before senders wait.
const QUEUE: usize = 1024;

/// A shard's way to every shard's inbox (its own included, unused).
#[derive(Clone)]
pub(super) struct Peers {
    inboxes: Vec<flume::Sender<ShardMessage>>,
    /// How many client connections each shard serves.
    clients: Arc<[AtomicUsize]>,
}

impl Peers {
    /// The inboxes of `shards` shards: each shard's [`Peers`] (all the same)
    /// and the receiving end it serves ([`serve_peers`]).
    pub(super) fn mesh(shards: usize) -> (Peers, Vec<flume::Receiver<ShardMessage>>) {
        let (inboxes, receivers) = (0..shards).map(|_| flume::bounded(QUEUE)).unzip();
        let clients = (0..shards).map(|_| AtomicUsize::new(0)).collect();
        (Peers { inboxes, clients }, receivers)
    }

    /// Which shard serves a client that shard `me` just accepted, counted
    /// there: `me`, unless another shard serves fewer clients, then the one
    /// serving fewest.
    ///
    /// Why: each shard has its own share of `pool_size`, and the kernel
    /// spreads connections over the SO_REUSEPORT listeners by a hash of their
    /// addresses (the unix socket's, by which shard wakes first). Eight
    /// clients over two shards land 4/4 only about a quarter of the time;
    /// at 6/2 or 7/1 with a pool of one connection per shard, one
    /// connection serves most of the clients while the other idles. Spread
    /// this way, clients that connect one after another land evenly whatever
    /// the kernel did. Two shards deciding at the same instant may both pick
    /// the same one; the next clients even that out.
    pub(super) fn place_client(&self, me: usize) -> usize {
        let load = |shard: usize| self.clients[shard].load(Ordering::Relaxed);
        let fewest = (0..self.clients.len()).min_by_key(|&shard| (load(shard), shard != me)).unwrap_or(me);
        self.client_joined(fewest);
        fewest
    }

    /// Client connections over all shards.
    pub(super) fn total_clients(&self) -> usize {
        self.clients.iter().map(|count| count.load(Ordering::Relaxed)).sum()
    }

    /// `shard` serves one more client.
    pub(super) fn client_joined(&self, shard: usize) {
        self.clients[shard].fetch_add(1, Ordering::Relaxed);
    }

    /// A client of `shard` left (or was never handed over to it).
    pub(super) fn client_left(&self, shard: usize) {
        self.clients[shard].fetch_sub(1, Ordering::Relaxed);
    }

    /// Sends `message` to shard `peer` now, or gives it back if that shard's
    /// inbox is full or the shard has stopped.
    pub(super) fn try_send_to(&self, peer: usize, message: ShardMessage) -> Result<(), ShardMessage> {
        let Some(inbox) = self.inboxes.get(peer) else { return Err(message) };
        inbox.try_send(message).map_err(|e| e.into_inner())
    }

    /// Sends `message` to shard `peer`, waiting while its inbox is full.
    /// Fails only if that shard has stopped.
    pub(super) async fn send_to(&self, peer: usize, message: ShardMessage) -> Result<(), ()> {
        let inbox = self.inboxes.get(peer).ok_or(())?;
        inbox.send_async(message).await.map_err(|_| ())
    }
}

/// What one shard sends another.
#[derive(Debug)]
pub enum ShardMessage {
    /// A CancelRequest for a client of the shard; `done` is answered once
    /// the server has taken it.
    Cancel {
        process_id: i32,
        secret_key: i32,
        done: flume::Sender<()>,
    },
    /// DDL ran on another shard's connection to this database (see
    /// `prepare::Registry::ddl_seen`): this shard's statements of it are
    /// resolved again.
    SchemaChanged {
        database: String,
    },
    /// A client is about to run a statement that needs server database
    /// `dbname` free of other sessions (`client::sole_access`): this
    /// shard's idle connections to it close.
    CloseIdleTo {
        dbname: String,
    },
    /// Units of these connection limits came free on another shard (see
    /// `pool::budget`): this shard's pools under them with clients waiting
    /// may open connections.
    BudgetFreed {
        budgets: Vec<Arc<crate::pool::Budget>>,
    },
    /// A client of the same pool on another shard waits and that pool holds
    /// less than its share: this shard's pool gives a connection up if it
    /// holds more than its own.
    BudgetWanted {
        budget: Arc<crate::pool::Budget>,
    },
    /// A client connection another shard accepted, for this one to serve
    /// (see [`Peers::place_client`]); already counted as this shard's.
    Adopt {
        socket: OwnedFd,
        peer: Option<std::net::SocketAddr>,
    },
    Ask {
        from: usize,
        request: u64,
        question: Question,
    },
    Answer {
        request: u64,
        answer: Answer,
    },
}

/// What the admin console asks every shard.
#[derive(Debug, Clone)]
pub enum Question {
    Snapshot,
    Control(Control),
}

/// Admin commands each shard carries out on its own state. `None` means
/// every database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// New transactions wait; returns once no server connection of the
    /// database is in use, with the idle ones closed.
    Pause(Option<String>),
    Resume(Option<String>),
    /// Close every client and server connection of the database now.
    Kill(String),
    /// Close server connections as they become idle; new ones replace them.
    Reconnect(Option<String>),
    /// Refuse (or again admit) new clients of the database.
    Disable(String),
    Enable(String),
    /// Returns once no server connection of the database (all: None) opened
    /// before its pool's last RECONNECT is left.
    WaitClose(Option<String>),
    /// Apply the config now in `Shared::config`.
    Reload,
}

#[derive(Debug)]
pub enum Answer {
    Snapshot(Box<ShardSnapshot>),
    Done,
}

/// The answers to one question, as they arrive.
#[derive(Default)]
pub(super) struct Gathering {
    answers: RefCell<Vec<Answer>>,
    missing: Cell<usize>,
    waker: RefCell<Option<Waker>>,
}

impl Shard {
    /// Asks every shard, this one included, and returns the answers that came
    /// within `limit` (a shard that does not answer in time is left out).
    pub async fn ask_all(&self, question: Question, limit: Duration) -> Vec<Answer> {
        let request = self.next_request.get();
        self.next_request.set(request + 1);
        let gathering = Rc::new(Gathering::default());
        gathering.missing.set(self.shards - 1);
        self.gatherings.borrow_mut().insert(request, gathering.clone());
        for peer in (0..self.shards).filter(|&p| p != self.id) {
            let ask = ShardMessage::Ask { from: self.id, request, question: question.clone() };
            if self.peers.send_to(peer, ask).await.is_err() {
                gathering.missing.set(gathering.missing.get() - 1);
            }
        }
        let own = self.answer(question).await;
        let all_in = futures_lite::future::poll_fn(|cx| {
            if gathering.missing.get() == 0 {
                Poll::Ready(())
            } else {
                *gathering.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        });
        if with_timeout(limit, all_in).await.is_none() {
            warn!(shard = self.id, missing = gathering.missing.get(), "some shards did not answer the admin console in time");
        }
        self.gatherings.borrow_mut().remove(&request);
        let mut answers = std::mem::take(&mut *gathering.answers.borrow_mut());
        answers.insert(0, own);
        answers
    }

    async fn answer(&self, question: Question) -> Answer {
        match question {
            Question::Snapshot => Answer::Snapshot(Box::new(self.snapshot())),
            Question::Control(control) => {
                self.control(control).await;
                Answer::Done
            }
        }
    }

    fn deliver(&self, request: u64, answer: Answer) {
        let Some(gathering) = self.gatherings.borrow().get(&request).cloned() else {
            return; // too late: the asker gave up
        };
        gathering.answers.borrow_mut().push(answer);
        gathering.missing.set(gathering.missing.get().saturating_sub(1));
        if gathering.missing.get() == 0 {
            if let Some(w) = gathering.waker.borrow_mut().take() {
                w.wake();
            }
        }
    }
}

/// Serves the messages every other shard sends this one.
pub(super) fn serve_peers(shard: &Rc<Shard>, inbox: flume::Receiver<ShardMessage>) {
    let shard = shard.clone();
    crate::rt::spawn_local(async move {
        while let Ok(message) = inbox.recv_async().await {
            match message {
                ShardMessage::Cancel { process_id, secret_key, done } => {
                    // On a task of its own: it waits for the server.
                    let shard = shard.clone();
                    crate::rt::spawn_local(async move {
                        shard.cancel_local(process_id, secret_key).await;
                        let _ = done.send(());
                    })
                    .detach();
                }
                ShardMessage::Adopt { socket, peer } => shard.serve_client(socket, peer),
                ShardMessage::SchemaChanged { database } => shard.schema_changed(&database, None),
                ShardMessage::CloseIdleTo { dbname } => shard.close_idle_connections_to(&dbname, false),
                ShardMessage::BudgetFreed { budgets } => shard.budget_freed(&budgets),
                ShardMessage::BudgetWanted { budget } => shard.budget_wanted(&budget),
                ShardMessage::Ask { from, request, question } => {
                    let shard = shard.clone();
                    crate::rt::spawn_local(async move {
                        let answer = shard.answer(question).await;
                        let _ = shard.peers.send_to(from, ShardMessage::Answer { request, answer }).await;
                    })
                    .detach();
                }
                ShardMessage::Answer { request, answer } => shard.deliver(request, answer),
            }
        }
    })
    .detach();
}

#[cfg(test)]
mod tests {
    use super::Peers;

    #[test]
    fn a_new_client_goes_to_the_shard_serving_fewest() {
        let (peers, _inboxes) = Peers::mesh(3);
        // Shard 0 accepts them all: it keeps one and passes the next two on.
        let placed: Vec<usize> = (0..6).map(|_| peers.place_client(0)).collect();
        assert_eq!(placed, [0, 1, 2, 0, 1, 2]);
        peers.client_left(1);
        assert_eq!(peers.place_client(2), 1, "shard 1 serves fewest");
        assert_eq!(peers.place_client(2), 2, "all even: the shard that accepted it keeps it");
    }
}
