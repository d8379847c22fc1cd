//! Containers in the whole stack: seed 002's node03 as a `kind: ProxmoxContainer` made from
//! vm-lab's container template with the cluster's packages (the same etcd the VMs' golden image
//! bakes in), the template uploaded to the lab-backed site's `local` storage through PVE's upload
//! route as a team uploads one, and the cluster formed across VMs and containers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fake_proxmox::FakeProxmox;

use crate::cluster::ClusterError;
use crate::deployer::guest::GuestKind;
use crate::deployer::manifest::Loaded;
use crate::deployer::pve::tasks::TaskWait;
use crate::deployer::pve::tls::{TlsMode, parse_fingerprint};
use crate::deployer::rehearse::{RehearseError, Rollout};

/// The storage the template is uploaded to (a `dir` storage, as PVE's `local` is).
pub const TEMPLATE_STORAGE: &str = "local";
/// The template's file name on that storage (PVE wants `<name>.tar.<gz|xz|zst>` for `vztmpl`).
pub const TEMPLATE_FILE: &str = "provision-harness-ct-etcd_1.0_amd64.tar.gz";

/// vm-lab's container template with the cluster's packages ([`crate::cluster::lab::PACKAGES`]:
/// etcd's server and client, as the VMs' golden image has them), built from Debian packages
/// or found in vm-lab's cache. Blocking.
pub fn container_template() -> Result<PathBuf, RehearseError> {
    let req = vm_lab::image::template::TemplateRequest {
        packages: crate::cluster::lab::PACKAGES.map(str::to_owned).to_vec(),
    };
    vm_lab::image::template::build(&vm_lab::image::default_cache_dir(), &req)
        .map(|t| t.path)
        .map_err(|e| RehearseError::Image(format!("the container template: {e}")))
}

/// The manifest of VM `vm` made a container: same name, site, node, bridge, address, keys and
/// rollout group, its rootfs on `local-lvm`, made from the uploaded template.
fn container_manifest(vm: &Loaded) -> Loaded {
    let mut ct = vm.clone();
    ct.path = format!("production/{}-ct.yaml", vm.vm.metadata.name);
    ct.vm.kind = GuestKind::Container.manifest_kind().to_owned();
    let fp = &mut ct.vm.spec.for_provider;
    fp.cpu = 1;
    fp.memory = "512Mi".into();
    fp.disk = "2Gi".into();
    fp.storage = "local-lvm".into();
    fp.image = format!("{TEMPLATE_STORAGE}:vztmpl/{TEMPLATE_FILE}");
    fp.user_data = None;
    ct
}

/// `rollout` with VM `name` made a container ([`container_manifest`]), and the site's `local`
/// storage taking container templates (`vztmpl`), as PVE's default `local` does.
pub fn with_container(rollout: &mut Rollout, name: &str) -> Result<(), RehearseError> {
    let vm = rollout
        .manifests
        .vms
        .iter_mut()
        .find(|m| m.vm.spec.for_provider.name == name)
        .ok_or_else(|| RehearseError::Example(format!("the rollout has no {name}")))?;
    *vm = container_manifest(vm);
    let vztmpl = serde_json::from_str(r#""vztmpl""#)
        .map_err(|e| RehearseError::Example(format!("the content type vztmpl: {e}")))?;
    for s in rollout
        .scenario
        .sites
        .iter_mut()
        .flat_map(|s| &mut s.nodes)
        .flat_map(|n| &mut n.storages)
        .filter(|s| s.name == TEMPLATE_STORAGE)
    {
        if !s.content.contains(&vztmpl) {
            s.content.push(vztmpl);
        }
    }
    Ok(())
}

/// Uploads `template` to `storage` of `node` through PVE's upload route
/// (`POST /nodes/{node}/storage/{storage}/upload`, multipart, `content=vztmpl`) with the
/// rollout's API token, and waits for the copy task. Returns the volid.
pub async fn upload_template(
    fake: &FakeProxmox,
    site: &str,
    rollout: &Rollout,
    node: &str,
    template: &Path,
) -> Result<String, ClusterError> {
    let handle = fake
        .site(site)
        .ok_or_else(|| ClusterError::Spec(format!("the fake has no site {site}")))?;
    let pin = parse_fingerprint(handle.fingerprint()).map_err(ClusterError::Tls)?;
    let token =
        rollout.provider.credentials.token_header().ok_or_else(|| {
            ClusterError::Spec("the rollout's credentials are not a token".into())
        })?;
    let data = tokio::fs::read(template)
        .await
        .map_err(|e| ClusterError::io(template, e))?;
    let (content_type, body) = multipart(&[("content", "vztmpl")], TEMPLATE_FILE, &data);
    crate::deployer::pve::tls::ensure_crypto_provider();
    let http = crate::deployer::pve::tls::apply(
        reqwest::Client::builder()
            .http1_only()
            .timeout(Duration::from_secs(300)),
        &TlsMode::Pinned(pin),
    )
    .map_err(ClusterError::Tls)?
    .build()
    .map_err(|e| ClusterError::Spec(format!("HTTP client: {e}")))?;
    let url = format!(
        "{}/api2/json/nodes/{node}/storage/{TEMPLATE_STORAGE}/upload",
        handle.url().trim_end_matches('/')
    );
    let failed = |e: String| ClusterError::Remote {
        node: node.to_owned(),
        step: format!("upload {TEMPLATE_FILE} to {TEMPLATE_STORAGE}"),
        code: 0,
        detail: e,
    };
    let reply = http
        .post(&url)
        .header(reqwest::header::AUTHORIZATION, token)
        .header(reqwest::header::CONTENT_TYPE, content_type)
        .body(body)
        .send()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let status = reply.status();
    let text = reply.text().await.map_err(|e| failed(e.to_string()))?;
    if !status.is_success() {
        return Err(failed(format!("{status}: {text}")));
    }
    let upid = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v["data"].as_str().map(str::to_owned))
        .ok_or_else(|| failed(format!("no UPID in {text}")))?;
    let client = super::pve_client(fake, site, rollout)?;
    let wait = TaskWait {
        poll: Duration::from_millis(100),
        timeout: Duration::from_secs(300),
    };
    client
        .await_task(&upid, wait)
        .await
        .map_err(|e| failed(e.to_string()))?;
    Ok(format!("{TEMPLATE_STORAGE}:vztmpl/{TEMPLATE_FILE}"))
}

/// A `multipart/form-data` body: the text fields, then the file as part `filename` (the part
/// PVE's upload route reads the file from).
fn multipart(fields: &[(&str, &str)], file_name: &str, data: &[u8]) -> (String, Vec<u8>) {
    let boundary = "----provision-harness-upload-7d3f9a";
    let mut body = Vec::with_capacity(data.len() + 512);
    for (k, v) in fields {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"filename\"; \
             filename=\"{file_name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(data);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn node03_becomes_a_container_at_the_same_address_with_the_same_keys() {
        let mut r = crate::deployer::rehearse_stack::stack_rollout(
            Path::new("/nonexistent.qcow2"),
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDx me@host",
        )
        .unwrap();
        with_container(&mut r, "node03").unwrap();
        let kinds: Vec<(String, String)> = r
            .manifests
            .vms
            .iter()
            .map(|m| (m.vm.spec.for_provider.name.clone(), m.vm.kind.clone()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("node01".into(), "ProxmoxVM".into()),
                ("node02".into(), "ProxmoxVM".into()),
                ("node03".into(), "ProxmoxContainer".into()),
            ]
        );
        let ct = &r.manifests.vms[2].vm;
        assert_eq!(GuestKind::of_manifest(&ct.kind), Some(GuestKind::Container));
        let fp = &ct.spec.for_provider;
        assert_eq!(fp.ip_address.as_deref(), Some("192.168.100.13/24"));
        assert_eq!(fp.gateway.as_deref(), Some("192.168.100.1"));
        assert_eq!(
            fp.ssh_keys,
            ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDx me@host"]
        );
        assert_eq!(fp.image, format!("local:vztmpl/{TEMPLATE_FILE}"));
        let local = r
            .scenario
            .sites
            .iter()
            .flat_map(|s| &s.nodes)
            .flat_map(|n| &n.storages)
            .find(|s| s.name == "local")
            .unwrap();
        let contents = serde_json::to_string(&local.content).unwrap();
        assert!(contents.contains("\"vztmpl\""), "{contents}");
        assert!(with_container(&mut r, "node09").is_err());
    }

    #[test]
    fn the_upload_body_carries_the_fields_then_the_file() {
        let (ct, body) = multipart(&[("content", "vztmpl")], "t.tar.gz", b"\x1f\x8bDATA");
        let boundary = ct.strip_prefix("multipart/form-data; boundary=").unwrap();
        let text = String::from_utf8_lossy(&body);
        let content = text.find("name=\"content\"\r\n\r\nvztmpl\r\n").unwrap();
        let file = text.find("filename=\"t.tar.gz\"").unwrap();
        assert!(content < file);
        assert!(text.ends_with(&format!("DATA\r\n--{boundary}--\r\n")));
    }
}
