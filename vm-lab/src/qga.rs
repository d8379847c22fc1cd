//! The guest agent through the `qapi` crate, with the handshake it needs in practice: qemu-ga
//! answers the documented 0xFF flush byte with a JSON *error*, and its replies carry no ids, so
//! `qapi`'s own `guest_sync` would take that error as the answer. Here the `0xFF` +
//! `guest-sync-delimited` exchange runs on the raw socket, discarding everything until the
//! 0xFF sentinel and the matching id; only then is the socket handed to `qapi`. A connection
//! whose request timed out is never reused.

use std::path::Path;
use std::time::Duration;

use qapi::futures::{QapiService, QgaStreamTokio};
use qapi::qga::QgaCommand;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;

/// Bound on one handshake attempt (a guest that has not opened its port never answers).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

type Service = QapiService<QgaStreamTokio<OwnedWriteHalf>>;

/// A synchronised connection to a guest agent socket, ready for commands. Drop it after a
/// command timed out: a late reply would be taken for the next command's.
pub struct QgaConn {
    service: Service,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for QgaConn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Connect and synchronise, bounded by `timeout`.
pub async fn connect(sock: &Path, timeout: Duration) -> Result<QgaConn, String> {
    let work = async {
        let mut s = UnixStream::connect(sock)
            .await
            .map_err(|e| format!("connect {}: {e}", sock.display()))?;
        let id = i64::from(rand::random::<u32>());
        handshake(&mut s, id)
            .await
            .map_err(|e| format!("sync: {e}"))?;
        let (r, w) = s.into_split();
        let (service, task) = QgaStreamTokio::open_split(r, w).spawn_tokio();
        Ok(QgaConn { service, task })
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(format!("the guest agent did not answer within {timeout:?}")),
    }
}

impl QgaConn {
    /// Run one agent command, bounded by `timeout`; the error is the agent's or a timeout, as text.
    pub async fn execute<C>(&self, cmd: C, timeout: Duration) -> Result<C::Ok, String>
    where
        C: QgaCommand + 'static,
    {
        match tokio::time::timeout(timeout, self.service.execute(cmd)).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer within {timeout:?}")),
        }
    }
}

/// Output of a guest command: exit code (128 + signal when killed), stdout, stderr.
pub type Exec = (i64, Vec<u8>, Vec<u8>);

/// `sh -c command` through `guest-exec`, polling `guest-exec-status` with backoff until it
/// exits; `Ok(None)` when it has not finished within `timeout`.
pub async fn exec(
    conn: &QgaConn,
    command: &str,
    timeout: Duration,
) -> Result<Option<Exec>, String> {
    let start = std::time::Instant::now();
    let pid = conn
        .execute(
            qapi::qga::guest_exec {
                path: "/bin/sh".into(),
                arg: Some(vec!["-c".into(), command.into()]),
                env: Some(vec![
                    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
                    "HOME=/root".into(),
                ]),
                input_data: None,
                // qemu-ga < 8 rejects the `mode` form; the boolean works everywhere.
                capture_output: Some(qapi::qga::GuestExecCaptureOutput::flag(true)),
            },
            ATTEMPT_TIMEOUT,
        )
        .await
        .map_err(|e| format!("guest-exec: {e}"))?
        .pid;
    let mut backoff = Duration::from_millis(50);
    loop {
        let st = conn
            .execute(qapi::qga::guest_exec_status { pid }, ATTEMPT_TIMEOUT)
            .await
            .map_err(|e| format!("guest-exec-status: {e}"))?;
        if st.exited {
            let code = match (st.exitcode, st.signal) {
                (Some(c), _) => c,
                (None, Some(s)) => 128 + s,
                (None, None) => -1,
            };
            return Ok(Some((
                code,
                st.out_data.unwrap_or_default(),
                st.err_data.unwrap_or_default(),
            )));
        }
        if start.elapsed() > timeout {
            return Ok(None);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
}

/// Write the `0xFF` flush byte and a `guest-sync-delimited` request with `id`, then read until
/// the reply carrying the same `id` (after a `0xFF` sentinel). Has no bound of its own: the
/// caller wraps it in a timeout.
pub async fn handshake(sock: &mut UnixStream, id: i64) -> std::io::Result<()> {
    sock.write_all(&[0xFF]).await?;
    sock.write_all(sync_request(id).as_bytes()).await?;
    let mut line = Vec::new();
    let mut armed = false;
    let mut b = [0u8; 1];
    loop {
        sock.read_exact(&mut b).await?;
        match b[0] {
            0xFF => {
                armed = true;
                line.clear();
            }
            b'\n' if armed => {
                if sync_reply_matches(&line, id) {
                    return Ok(());
                }
                armed = false;
                line.clear();
            }
            c if armed => line.push(c),
            _ => {}
        }
    }
}

/// The `guest-sync-delimited` request line for `id`, newline-terminated.
pub fn sync_request(id: i64) -> String {
    format!("{{\"execute\":\"guest-sync-delimited\",\"arguments\":{{\"id\":{id}}}}}\n")
}

/// Whether `line` is the agent's `{"return": id}` answer to a sync with `id`.
pub fn sync_reply_matches(line: &[u8], id: i64) -> bool {
    serde_json::from_slice::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v.get("return").and_then(|r| r.as_i64()))
        == Some(id)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sync_reply_must_match_id() {
        assert!(sync_reply_matches(br#"{"return": 7}"#, 7));
        assert!(!sync_reply_matches(br#"{"return": 8}"#, 7));
        assert!(!sync_reply_matches(
            br#"{"error":{"class":"GenericError"}}"#,
            7
        ));
    }

    #[tokio::test]
    async fn handshake_skips_the_error_reply_to_the_flush_byte() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let agent = tokio::spawn(async move {
            let mut buf = [0u8; 256];
            let _ = b.read(&mut buf).await.unwrap();
            // What qemu-ga 7.2 does: an error for the stray 0xFF, then the delimited sync reply.
            b.write_all(b"{\"error\":{\"class\":\"GenericError\",\"desc\":\"stray\"}}\n")
                .await
                .unwrap();
            b.write_all(b"\xff{\"return\": 1234}\n").await.unwrap();
            b
        });
        tokio::time::timeout(Duration::from_secs(5), handshake(&mut a, 1234))
            .await
            .unwrap()
            .unwrap();
        agent.await.unwrap();
    }
}
