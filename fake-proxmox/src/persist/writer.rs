//! The writer of the state dir, and what a request waits for before it is answered.
//!
//! The shared state counts its changes (`Inner::dirty`). A request that may have changed
//! something bumps the count after its handler ran; every request then waits until a
//! state at least as new as the count it saw is durable. One thread writes: it takes what
//! changed under the lock (copies of the changed entries for a journal record, or now and
//! then a whole snapshot serialised, see `journal`), serialises and writes it outside the
//! lock, and wakes every request it covers — so many concurrent requests share one fsync,
//! and a lone client pays one append per change.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

use super::journal::{Journal, Pending};
use crate::server::inner::Inner;

/// Where the writer takes the state from: the server's shared state, held weakly, so the
/// writer ends with the server (implemented by the server, which the writer need not know).
pub trait StateSource: Send + Sync + 'static {
    /// Whether the server still exists.
    fn alive(&self) -> bool;
    /// `f` run on the newest state under its lock (tasks due completed first), with the
    /// change count it covers; `None` once the server is gone.
    fn with_state(&self, f: &mut dyn FnMut(&mut Inner) -> Pending) -> Option<(u64, Pending)>;
}

/// How far the state file has got.
#[derive(Clone, Debug, Default)]
struct Durable {
    /// Every change up to this count is on disk.
    change: u64,
    /// The last write that failed: the count it tried to make durable, and why.
    failed: Option<(u64, String)>,
}

/// The state dir's writer: appends the changes answered requests made to the journal (one
/// write and sync for every request waiting), folds it into a new snapshot when it grows, and
/// lets each answer wait until what it saw is durable.
pub struct Persister {
    dir: PathBuf,
    /// The newest count a request waits for.
    wanted: Mutex<u64>,
    wake: Condvar,
    durable: watch::Sender<Durable>,
}

impl std::fmt::Debug for Persister {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persister").field("dir", &self.dir).finish()
    }
}

impl Persister {
    /// A persister for `dir` whose file already holds the state as of change `change`.
    pub fn new(dir: PathBuf, change: u64) -> Arc<Persister> {
        let (durable, _) = watch::channel(Durable {
            change,
            failed: None,
        });
        Arc::new(Persister {
            dir,
            wanted: Mutex::new(change),
            wake: Condvar::new(),
            durable,
        })
    }

    /// Start the writer thread, writing to `journal`; it ends when the source's server is
    /// gone.
    pub fn spawn(
        self: &Arc<Self>,
        shared: impl StateSource,
        journal: Journal,
    ) -> std::io::Result<()> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("fake-proxmox-state".into())
            .spawn(move || me.run(shared, journal))
            .map(|_| ())
    }

    fn run(&self, shared: impl StateSource, mut journal: Journal) {
        loop {
            {
                let mut wanted = self.wanted.lock();
                while *wanted <= self.durable.borrow().change {
                    // Wake now and then to notice that the server is gone.
                    if self
                        .wake
                        .wait_for(&mut wanted, Duration::from_millis(500))
                        .timed_out()
                        && !shared.alive()
                    {
                        return;
                    }
                }
            }
            let Some((change, pending)) = shared.with_state(&mut |inner| journal.take(inner))
            else {
                return;
            };
            match journal.write(pending) {
                Ok(()) => self.durable.send_modify(|d| {
                    d.change = d.change.max(change);
                    d.failed = None;
                }),
                Err(e) => {
                    tracing::error!("writing the state dir: {e}");
                    self.durable
                        .send_modify(|d| d.failed = Some((change, e.to_string())));
                    // Do not spin on a full disk: retry a little later.
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    /// Whether change `change` is durable already (then a request need not wait).
    pub fn is_durable(&self, change: u64) -> bool {
        self.durable.borrow().change >= change
    }

    /// Wait until change `change` is durable; `Err` says why it could not be written.
    pub async fn wait(&self, change: u64) -> Result<(), String> {
        let mut rx = self.durable.subscribe();
        if rx.borrow().change >= change {
            return Ok(());
        }
        {
            let mut wanted = self.wanted.lock();
            if *wanted < change {
                *wanted = change;
            }
            self.wake.notify_one();
        }
        let seen = rx
            .wait_for(|d| {
                d.change >= change || d.failed.as_ref().is_some_and(|(g, _)| *g >= change)
            })
            .await
            .map_err(|_| "the state writer stopped".to_string())?;
        if seen.change >= change {
            return Ok(());
        }
        Err(seen
            .failed
            .as_ref()
            .map_or_else(String::new, |(_, e)| e.clone()))
    }
}
