//! Docker Engine API versions, and a shim for engines older than testcontainers.
//!
//! testcontainers 0.28 (bollard 0.21) sends every request as `/v1.53/…` and does not negotiate;
//! an engine that speaks less (Debian 12's docker.io 20.10 speaks 1.41) refuses them all with
//! "client version 1.53 is too new". The shim is a unix-socket relay that rewrites the version
//! prefix of each request to the engine's own and passes everything else through unchanged. The
//! calls testcontainers makes (create, start, logs, inspect, copy, remove) have the same shape in
//! both versions.
//!
//! testcontainers finds the engine through `DOCKER_HOST`, read once per process. Setting an
//! environment variable in a running (multi-threaded) process is unsound, so
//! [`rerun_behind_shim_if_needed`] runs the test executable again as a child with `DOCKER_HOST`
//! pointing at the shim, which this process serves meanwhile.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

/// Set in the child run behind the shim, so it never starts another one.
pub const SHIM_MARKER_ENV: &str = "FAKE_PROXMOX_DOCKER_SHIM";
const MAX_HEAD: usize = 64 * 1024;

/// An API version, `(major, minor)`.
pub type ApiVersion = (usize, usize);

/// Why the engine's API version could not be learnt or the shim not run.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// The engine's Unix socket could not be connected to.
    #[error("cannot reach the Docker engine at {path}: {source}")]
    Connect {
        /// The engine's socket.
        path: PathBuf,
        /// The connection's error.
        source: std::io::Error,
    },
    /// `GET /version` got no answer within 10 s, failed mid-exchange, or answered a body
    /// that is not JSON or has no parsable `ApiVersion`.
    #[error("the Docker engine at {path} did not answer GET /version: {detail}")]
    Version {
        /// The engine's socket.
        path: PathBuf,
        /// What was wrong with the answer.
        detail: String,
    },
    /// A local step failed: building the runtime, binding the shim's socket, or finding and
    /// re-running the test executable.
    #[error("docker API shim: {0}")]
    Io(#[from] std::io::Error),
}

/// The API version testcontainers speaks.
pub fn client_api_version() -> ApiVersion {
    let v = testcontainers::bollard::API_DEFAULT_VERSION;
    (v.major_version, v.minor_version)
}

/// The engine's unix socket: `DOCKER_HOST` when it is `unix://…`, else the standard path.
/// `None` when `DOCKER_HOST` names another transport (tcp, ssh…).
pub fn engine_socket() -> Option<PathBuf> {
    match std::env::var("DOCKER_HOST") {
        Ok(h) if !h.is_empty() => h.strip_prefix("unix://").map(PathBuf::from),
        _ => Some(PathBuf::from("/var/run/docker.sock")),
    }
}

/// Asks the engine for its API version (`GET /version`, which every version answers unprefixed).
pub async fn engine_api_version(socket: &Path) -> Result<ApiVersion, ShimError> {
    let fail = |detail: String| ShimError::Version {
        path: socket.to_path_buf(),
        detail,
    };
    let mut s = UnixStream::connect(socket)
        .await
        .map_err(|source| ShimError::Connect {
            path: socket.to_path_buf(),
            source,
        })?;
    let mut buf = Vec::new();
    let exchange = async {
        s.write_all(b"GET /version HTTP/1.0\r\nHost: docker\r\n\r\n")
            .await?;
        s.read_to_end(&mut buf).await
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| fail("no answer within 10 s".into()))?
        .map_err(|e| fail(e.to_string()))?;
    let text = String::from_utf8_lossy(&buf);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| fail(format!("{e}: {body:.200}")))?;
    v["ApiVersion"]
        .as_str()
        .and_then(parse_version)
        .ok_or_else(|| fail(format!("no ApiVersion in {body:.200}")))
}

/// `"1.41"` → `(1, 41)`.
pub fn parse_version(s: &str) -> Option<ApiVersion> {
    let (a, b) = s.trim().split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// A running shim; the socket is removed and the relay stopped on drop.
pub struct ApiShim {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl ApiShim {
    /// Listens on a fresh socket in the temp dir and relays to `engine`, rewriting `/vX.Y/` to
    /// `/v{engine_version}/`. Needs a tokio runtime.
    pub fn start(engine: &Path, engine_version: ApiVersion) -> Result<Self, ShimError> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "fake-proxmox-docker-shim-{}-{}.sock",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        let engine = engine.to_path_buf();
        let prefix = format!("/v{}.{}/", engine_version.0, engine_version.1);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let engine = engine.clone();
                let prefix = prefix.clone();
                tokio::spawn(async move {
                    if let Err(e) = relay(client, &engine, &prefix).await {
                        tracing::debug!("docker shim connection: {e}");
                    }
                });
            }
        });
        Ok(Self { path, task })
    }

    /// The value for `DOCKER_HOST`.
    pub fn docker_host(&self) -> String {
        format!("unix://{}", self.path.display())
    }
}

impl Drop for ApiShim {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One client connection: rewrite the first request's head, ask the engine to close after its
/// answer (so the client opens a fresh, rewritten connection for the next request), then pass
/// bytes through both ways (bodies, streamed logs, upgraded connections).
async fn relay(mut client: UnixStream, engine: &Path, prefix: &str) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = find(&head, b"\r\n\r\n") {
            break i + 4;
        }
        if head.len() > MAX_HEAD {
            return Err(std::io::Error::other("request head too large"));
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    };
    let rest = head.split_off(end);
    let rewritten = rewrite_head(&String::from_utf8_lossy(&head), prefix);
    let mut upstream = UnixStream::connect(engine).await?;
    upstream.write_all(rewritten.as_bytes()).await?;
    upstream.write_all(&rest).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Rewrites the version prefix of the request target and, unless the client asks for an
/// upgrade, replaces its `Connection` header with `Connection: close`.
pub fn rewrite_head(head: &str, prefix: &str) -> String {
    let mut lines = head.split("\r\n");
    let request = lines.next().unwrap_or_default();
    let mut parts = request.splitn(3, ' ');
    let (method, target, proto) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let target = match versioned(target) {
        Some(rest) => format!("{prefix}{rest}"),
        None => target.to_string(),
    };
    let headers: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
    let upgrade = headers
        .iter()
        .any(|h| h.to_ascii_lowercase().starts_with("upgrade:"));
    let mut out = format!("{method} {target} {proto}\r\n");
    for h in headers {
        if !upgrade && h.to_ascii_lowercase().starts_with("connection:") {
            continue;
        }
        out.push_str(h);
        out.push_str("\r\n");
    }
    if !upgrade {
        out.push_str("Connection: close\r\n");
    }
    out.push_str("\r\n");
    out
}

/// `/v1.53/containers/json` → `containers/json`; unversioned targets → `None`.
fn versioned(target: &str) -> Option<&str> {
    let t = target.strip_prefix("/v")?;
    let slash = t.find('/')?;
    parse_version(&t[..slash])?;
    Some(&t[slash + 1..])
}

/// For a test executable's `main`, before anything talks to Docker: when the engine speaks an older
/// API than testcontainers and `DOCKER_HOST` is not a shim already, runs this executable again
/// (same arguments) with `DOCKER_HOST` pointing at a shim served from here, and returns the
/// child's exit status. `Ok(None)`: carry on in this process (engine new enough, already behind a
/// shim, or no local engine — the test then reports that itself).
// Prints, not logs, why the test binary runs itself again: whoever reads its output
// should see it with or without a tracing subscriber.
#[allow(clippy::print_stderr)]
pub fn rerun_behind_shim_if_needed() -> Result<Option<ExitStatus>, ShimError> {
    if std::env::var_os(SHIM_MARKER_ENV).is_some() {
        return Ok(None);
    }
    let Some(socket) = engine_socket() else {
        return Ok(None);
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let engine = match rt.block_on(engine_api_version(&socket)) {
        Ok(v) => v,
        Err(ShimError::Connect { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    if engine >= client_api_version() {
        return Ok(None);
    }
    let _guard = rt.enter();
    let shim = ApiShim::start(&socket, engine)?;
    eprintln!(
        "docker engine speaks API {}.{}, testcontainers {}.{}: running again behind the shim {}",
        engine.0,
        engine.1,
        client_api_version().0,
        client_api_version().1,
        shim.docker_host()
    );
    let exe = std::env::current_exe()?;
    let status = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("DOCKER_HOST", shim.docker_host())
        .env(SHIM_MARKER_ENV, "1")
        .status()?;
    drop(shim);
    Ok(Some(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("1.41"), Some((1, 41)));
        assert_eq!(parse_version("x"), None);
        assert!(client_api_version() > (1, 41));
    }

    #[test]
    fn heads_are_rewritten_to_the_engine_version() {
        let h = "POST /v1.53/containers/create?name=x HTTP/1.1\r\nHost: docker\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n";
        let out = rewrite_head(h, "/v1.41/");
        assert!(out.starts_with("POST /v1.41/containers/create?name=x HTTP/1.1\r\n"));
        assert!(out.contains("Content-Length: 2\r\n"));
        assert!(!out.contains("keep-alive"));
        assert!(out.ends_with("Connection: close\r\n\r\n"));
        let plain = rewrite_head("GET /_ping HTTP/1.1\r\nHost: d\r\n\r\n", "/v1.41/");
        assert!(plain.starts_with("GET /_ping HTTP/1.1\r\n"));
        let up = rewrite_head(
            "POST /v1.53/exec/1/start HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n",
            "/v1.41/",
        );
        assert!(up.contains("Connection: Upgrade\r\n") && !up.contains("close"));
    }
}
