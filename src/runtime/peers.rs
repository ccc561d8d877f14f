//! Messages between shards, over one bounded channel into each shard.
//!
//! Two kinds of traffic cross shards, both rare and both off the query path:
//! cancel requests (SO_REUSEPORT hands the CancelRequest's connection to any
//! shard; the process id pglane gave the client names the owner), and the
//! admin console's questions (a snapshot of each shard's pools and clients, or
//! a command such as PAUSE to carry out) with their answers. No shard ever
//! reads another's state: it asks, and the owner answers.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
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
}

impl Peers {
    /// The inboxes of `shards` shards: each shard's [`Peers`] (all the same)
    /// and the receiving end it serves ([`serve_peers`]).
    pub(super) fn mesh(shards: usize) -> (Peers, Vec<flume::Receiver<ShardMessage>>) {
        let (inboxes, receivers) = (0..shards).map(|_| flume::bounded(QUEUE)).unzip();
        (Peers { inboxes }, receivers)
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
    Cancel {
        process_id: i32,
        secret_key: i32,
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
        self.gatherings
            .borrow_mut()
            .insert(request, gathering.clone());
        for peer in (0..self.shards).filter(|&p| p != self.id) {
            let ask = ShardMessage::Ask {
                from: self.id,
                request,
                question: question.clone(),
            };
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
            warn!(
                shard = self.id,
                missing = gathering.missing.get(),
                "some shards did not answer the admin console in time"
            );
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
        gathering
            .missing
            .set(gathering.missing.get().saturating_sub(1));
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
                ShardMessage::Cancel {
                    process_id,
                    secret_key,
                } => shard.cancel_local(process_id, secret_key).await,
                ShardMessage::Ask {
                    from,
                    request,
                    question,
                } => {
                    let shard = shard.clone();
                    crate::rt::spawn_local(async move {
                        let answer = shard.answer(question).await;
                        let _ = shard
                            .peers
                            .send_to(from, ShardMessage::Answer { request, answer })
                            .await;
                    })
                    .detach();
                }
                ShardMessage::Answer { request, answer } => shard.deliver(request, answer),
            }
        }
    })
    .detach();
}
