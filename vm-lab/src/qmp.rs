//! QMP through the `qapi` crate. Commands use one-shot connections to the node's control
//! monitor (`qmp-ctl.sock`), so the library and the CLI can both issue them; the driver keeps a
//! second monitor (`qmp.sock`) open only to log events to `qmp-events.jsonl`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use qapi::futures::QmpStreamTokio;
use qapi::qmp::QmpCommand;
use tokio::io::AsyncWriteExt;

/// Default bound on one QMP exchange.
pub const QMP_TIMEOUT: Duration = Duration::from_secs(10);

/// Run one QMP command on a fresh connection, bounded by `timeout`.
pub async fn execute<C>(sock: &Path, cmd: C, timeout: Duration) -> Result<C::Ok, String>
where
    C: QmpCommand + 'static,
{
    let work = async {
        let neg = QmpStreamTokio::open_uds(sock)
            .await
            .map_err(|e| format!("connect {}: {e}", sock.display()))?;
        let stream = neg
            .negotiate()
            .await
            .map_err(|e| format!("negotiate: {e}"))?;
        let (service, task) = stream.spawn_tokio();
        let res = service.execute(cmd).await.map_err(|e| e.to_string());
        drop(service);
        task.abort();
        res
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}

/// Connect to the event monitor and append every event as a JSON line until QEMU goes away.
pub fn spawn_event_log(sock: PathBuf, log: PathBuf) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut conn = None;
        for _ in 0..100 {
            if let Ok(neg) = QmpStreamTokio::open_uds(&sock).await {
                conn = Some(neg);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let Some(neg) = conn else { return };
        let Ok(stream) = neg.negotiate().await else {
            return;
        };
        let (_service, mut events) = stream.into_parts();
        let Ok(mut file) = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .await
        else {
            return;
        };
        while let Some(ev) = events.next().await {
            let line = match ev {
                Ok(ev) => serde_json::to_string(&ev)
                    .unwrap_or_else(|e| format!("{{\"unencodable\":\"{e}\"}}")),
                Err(e) => {
                    tracing::debug!("qmp event stream ended: {e}");
                    break;
                }
            };
            if file
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
    })
}
