//! When an appended record reaches the disk: before the answer, or within a second after.

/// When a request that changed the state is answered, against what it survives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StateSync {
    /// Once its record is written to the journal file (`write(2)`): it survives the process
    /// dying any way (SIGKILL, a panic, the OOM killer), since the kernel holds the bytes.
    /// The file is fdatasynced within [`SYNC_EVERY`] after, so a power loss or kernel crash
    /// loses at most that much. The default: the harness's fake dies as a process, not as a
    /// machine, and one client no longer waits on the disk's sync latency for each change.
    #[default]
    Write,
    /// Once its record is fdatasynced: it survives a power loss too, at the cost of one
    /// sync (0.7–8 ms on the CI disk) for every request that waits alone.
    Data,
}

impl std::str::FromStr for StateSync {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "write" => Ok(StateSync::Write),
            "data" => Ok(StateSync::Data),
            other => Err(format!("'{other}': expected write or data")),
        }
    }
}

/// How often [`StateSync::Write`]'s syncer fdatasyncs the journal when records were appended.
pub const SYNC_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The background fdatasync of [`StateSync::Write`]: a thread with its own handle of the
/// journal file, syncing it after appends; it syncs once more and ends with the journal.
#[derive(Debug)]
pub(super) struct Syncer {
    appended: std::sync::Arc<std::sync::atomic::AtomicBool>,
    closing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::Thread,
}

impl Syncer {
    pub(super) fn spawn(file: std::fs::File) -> std::io::Result<Syncer> {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let appended = Arc::new(AtomicBool::new(false));
        let closing = Arc::new(AtomicBool::new(false));
        let (a, c) = (appended.clone(), closing.clone());
        let handle = std::thread::Builder::new()
            .name("fake-proxmox-sync".into())
            .spawn(move || {
                loop {
                    let last = c.load(Ordering::Acquire);
                    if a.swap(false, Ordering::AcqRel)
                        && let Err(e) = file.sync_data()
                    {
                        tracing::error!("syncing the state journal: {e}");
                    }
                    if last {
                        return;
                    }
                    std::thread::park_timeout(SYNC_EVERY);
                }
            })?;
        Ok(Syncer {
            appended,
            closing,
            thread: handle.thread().clone(),
        })
    }

    pub(super) fn note_append(&self) {
        self.appended
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.closing
            .store(true, std::sync::atomic::Ordering::Release);
        self.thread.unpark();
    }
}
