//! `POST /nodes/{node}/storage/{storage}/oci-registry-pull` (Status.pm, PVE 9.x): an
//! `ociregistrypull` task that runs `skopeo copy docker://<reference>` into the storage's
//! container template directory as `<normalized reference or filename>.tar`.
//!
//! The fake never leaves loopback: PVE's checks (privileges, storage, content type, file
//! name) answer as PVE does, and every accepted pull is a task that fails as it fails on a
//! node that cannot reach the registry — skopeo's name-resolution error, then
//! `run_command`'s.

use rand::Rng;

use crate::request::Request;
use crate::storage::model::Content;
use crate::storage::upload::normalize_filename;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

/// The registry host skopeo contacts for a reference: its first component when that names a
/// host (has a `.` or a port, or is `localhost`), else Docker Hub's registry.
fn registry_host(reference: &str) -> &str {
    match reference.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first,
        _ => "registry-1.docker.io",
    }
}

/// skopeo's log line (logrus text format, as it prints without a terminal).
fn skopeo_failure(reference: &str, at: u64) -> String {
    let host = registry_host(reference);
    let when = time::OffsetDateTime::from_unix_timestamp(i64::try_from(at).unwrap_or(0))
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default();
    format!(
        "time=\"{when}\" level=fatal msg=\"initializing source docker://{reference}: pinging container registry {host}: Get \\\"https://{host}/v2/\\\": dial tcp: lookup {host}: Temporary failure in name resolution\""
    )
}

impl Site {
    /// Start the pull; its UPID.
    pub fn oci_registry_pull(&mut self, req: &Request) -> Result<String, PveError> {
        let node = req.node()?;
        let sid = req.p.req_str("storage")?;
        self.require(
            &req.who,
            &format!("/storage/{sid}"),
            "Datastore.AllocateTemplate",
        )?;
        self.require(&req.who, &format!("/nodes/{node}"), "Sys.AccessNetwork")?;
        let s = self.storage_of_request(req)?;
        if !s.kind.is_file_based() {
            return Err(PveError::die(format!(
                "can't upload to storage type '{}', not a file based storage!",
                s.kind.as_str()
            )));
        }
        if !s.supports(Content::Vztmpl) {
            return Err(PveError::die(format!(
                "storage '{sid}' is not configured for content-type 'vztmpl'"
            )));
        }
        let reference = req.p.req_str("reference")?;
        let name = req.p.str("filename").unwrap_or_else(|| reference.clone());
        let filename = format!("{}.tar", normalize_filename(&name));
        if s.volumes.contains_key(&format!("vztmpl/{filename}")) {
            return Err(PveError::die(format!(
                "refusing to override existing file '{filename}'"
            )));
        }
        let dir = s.file_path(&format!("vztmpl/{filename}"));
        // `$$` of the API daemon's worker, not the task's pid.
        let daemon_pid: u32 = self.rng.random_range(2_000..4_000_000);
        let cmd = format!("skopeo copy docker://{reference} oci-archive:{dir}.tmp.{daemon_pid}");
        let mut plan = TaskPlan::new(
            "ociregistrypull",
            filename,
            &node,
            &req.task_user(),
            Work::Noop,
        );
        plan.line(0.4, skopeo_failure(&reference, req.now as u64));
        plan.duration = 0.5;
        plan.planned_error = Some(format!("command '{cmd}' failed: exit code 1"));
        Ok(self.start_task(plan, req.now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_go_to_docker_hub() {
        assert_eq!(registry_host("alpine:latest"), "registry-1.docker.io");
        assert_eq!(registry_host("library/alpine:3"), "registry-1.docker.io");
        assert_eq!(registry_host("ghcr.io/a/b:1"), "ghcr.io");
        assert_eq!(registry_host("localhost:5000/a:1"), "localhost:5000");
    }
}
