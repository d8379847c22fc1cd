//! A manifest's `userData` on its way into the VM. PVE's API cannot upload snippets
//! (`upload` takes iso, vztmpl and import), and without one PVE writes only its own
//! user-data (hostname, `ciuser`, `sshkeys`) to the cloud-init drive: the manifest's packages
//! and commands would never run, and an image without the guest agent never reports an
//! address. So the deployer writes the user-data onto the site's snippets share (a storage
//! with `snippets` content it has mounted, `snippets:` in the provider config) and names it
//! in `cicustom user=…`; a VM whose user-data cannot be delivered fails before it is made.
//!
//! A custom user snippet replaces PVE's generated user-data whole, so what the deployer asks
//! of PVE's (`ciuser`, the manifest's SSH keys, the hostname) is added to a `#cloud-config`
//! that does not set it.

use std::io::Write as _;
use std::path::PathBuf;

use crate::deployer::config::SnippetShare;
use crate::deployer::errors::StepError;
use crate::deployer::pve::api::StorageInfo;
use crate::deployer::validate::ValidSpec;

/// Where a VM's user-data goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Snippet {
    /// `<storage>:snippets/<name>-user.yaml`
    pub volid: String,
    /// The file on the share, when this deployer writes it (`None`: placed by someone else).
    pub path: Option<PathBuf>,
    pub text: String,
}

/// The snippet's file name for VM `name`.
pub fn file_name(name: &str) -> String {
    format!("{name}-user.yaml")
}

/// The user-data as the snippet holds it: the manifest's, with the user, the SSH keys and
/// the hostname PVE's own user-data would have set added where a `#cloud-config` lacks them.
pub fn snippet_text(spec: &ValidSpec, user_data: &str, ci_user: &str) -> String {
    let mut text = user_data.to_string();
    if !text.starts_with("#cloud-config") {
        return text;
    }
    let doc: serde_norway::Value = match serde_norway::from_str(&text) {
        Ok(v) => v,
        // Left as written: the guest's cloud-init reports it, as it would on PVE.
        Err(_) => return text,
    };
    let has = |k: &str| doc.as_mapping().is_some_and(|m| m.contains_key(k));
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    if !has("hostname") {
        text.push_str(&format!("hostname: {}\n", quote(&spec.name)));
    }
    if !has("user") && !ci_user.is_empty() {
        text.push_str(&format!("user: {}\n", quote(ci_user)));
    }
    if !has("ssh_authorized_keys") && !spec.ssh_keys.is_empty() {
        text.push_str("ssh_authorized_keys:\n");
        for k in &spec.ssh_keys {
            text.push_str(&format!("  - {}\n", quote(k)));
        }
    }
    text
}

fn undeliverable(spec: &ValidSpec, detail: String) -> StepError {
    StepError::UserDataUndeliverable {
        vm: spec.name.clone(),
        detail,
    }
}

/// Where the user-data of `spec` goes on its node: the share's storage, checked against the
/// node's storages; else a snippet someone placed (`placed`); else the VM cannot get it.
pub fn destination(
    spec: &ValidSpec,
    user_data: &str,
    ci_user: &str,
    share: Option<&SnippetShare>,
    storages: &[StorageInfo],
    placed: Option<String>,
) -> Result<Snippet, StepError> {
    let text = snippet_text(spec, user_data, ci_user);
    let Some(share) = share else {
        return match placed {
            Some(volid) => Ok(Snippet {
                volid,
                path: None,
                text,
            }),
            None => Err(undeliverable(
                spec,
                format!(
                    "PVE's API cannot upload snippets and site {} has no snippets share: mount a storage with 'snippets' content and name it in the provider config (`snippets: {{storage, path}}`), or place the user-data at <storage>:snippets/{}",
                    spec.site,
                    file_name(&spec.name)
                ),
            )),
        };
    };
    let Some(storage) = storages.iter().find(|s| s.storage == share.storage) else {
        return Err(undeliverable(
            spec,
            format!(
                "the snippets share's storage '{}' does not exist on node {}",
                share.storage, spec.node
            ),
        ));
    };
    if !storage.has_content("snippets") {
        return Err(undeliverable(
            spec,
            format!(
                "storage '{}' on node {} does not hold snippets (content: {})",
                share.storage, spec.node, storage.content
            ),
        ));
    }
    let name = file_name(&spec.name);
    Ok(Snippet {
        volid: format!("{}:snippets/{name}", share.storage),
        path: Some(share.path.join("snippets").join(name)),
        text,
    })
}

/// Write the snippet onto the share (whole or not at all: a temporary file renamed over it).
pub fn write(spec: &ValidSpec, snippet: &Snippet) -> Result<(), StepError> {
    let Some(path) = &snippet.path else {
        return Ok(());
    };
    let fail = |what: &str, e: std::io::Error| {
        undeliverable(spec, format!("{what} {}: {e}", path.display()))
    };
    let dir = path
        .parent()
        .ok_or_else(|| undeliverable(spec, format!("{} has no directory", path.display())))?;
    let root = dir.parent().unwrap_or(dir);
    if !root.is_dir() {
        return Err(undeliverable(
            spec,
            format!(
                "the snippets share {} is not mounted here (no such directory)",
                root.display()
            ),
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| fail("creating the directory of", e))?;
    if std::fs::read_to_string(path).is_ok_and(|t| t == snippet.text) {
        return Ok(());
    }
    // Named after the snippet, the process and the write: VMs of one run write their snippets
    // into the same directory at the same time, and two runs in one process (a run cancelled
    // while a thread still finishes its write, and the run resuming it) may write the same
    // snippet at once; a shared name let one rename take the other's file away (ENOENT).
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{file}.{}.{n}.tmp", std::process::id()));
    let result = std::fs::File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(snippet.text.as_bytes())?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail("writing", e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ValidSpec {
        let mut s = crate::deployer::pipeline::rules::test_spec();
        s.ssh_keys = vec!["ssh-ed25519 AAAA ops@example".into()];
        s
    }

    fn storage(name: &str, content: &str) -> StorageInfo {
        serde_json::from_value(serde_json::json!({
            "storage": name, "type": "dir", "content": content, "active": 1
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_user_keys_and_hostname_pve_would_set_are_added_where_missing() {
        let t = snippet_text(
            &spec(),
            "#cloud-config\npackages: [qemu-guest-agent]",
            "admin",
        );
        assert_eq!(
            t,
            "#cloud-config\npackages: [qemu-guest-agent]\nhostname: \"nginx-proxy-vm\"\nuser: \"admin\"\nssh_authorized_keys:\n  - \"ssh-ed25519 AAAA ops@example\"\n"
        );
        let own = "#cloud-config\nhostname: x\nuser: ops\nssh_authorized_keys: [k]\n";
        assert_eq!(snippet_text(&spec(), own, "admin"), own);
        assert_eq!(
            snippet_text(&spec(), "#!/bin/sh\necho hi\n", "admin"),
            "#!/bin/sh\necho hi\n"
        );
    }

    #[test]
    fn a_share_without_snippets_content_or_no_share_at_all_is_named() {
        let share = SnippetShare {
            storage: "local".into(),
            path: "/mnt/share".into(),
        };
        let ok = destination(
            &spec(),
            "#cloud-config\n",
            "admin",
            Some(&share),
            &[storage("local", "iso,snippets")],
            None,
        );
        assert_eq!(
            ok.map(|s| s.volid).ok().as_deref(),
            Some("local:snippets/nginx-proxy-vm-user.yaml")
        );
        let e = destination(
            &spec(),
            "#cloud-config\n",
            "admin",
            Some(&share),
            &[storage("local", "iso")],
            None,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(e.contains("does not hold snippets (content: iso)"), "{e}");
        let e = destination(&spec(), "#cloud-config\n", "admin", None, &[], None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("no snippets share"), "{e}");
        let placed = destination(
            &spec(),
            "#cloud-config\n",
            "admin",
            None,
            &[],
            Some("s:snippets/x".into()),
        );
        assert_eq!(placed.map(|s| s.path).ok(), Some(None));
    }

    #[test]
    fn the_snippet_is_written_whole_and_an_unmounted_share_is_refused() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let snippet = Snippet {
            volid: "local:snippets/a-user.yaml".into(),
            path: Some(dir.path().join("snippets").join("a-user.yaml")),
            text: "#cloud-config\n".into(),
        };
        assert!(write(&spec(), &snippet).is_ok());
        let written = std::fs::read_to_string(dir.path().join("snippets/a-user.yaml"));
        assert_eq!(written.ok().as_deref(), Some("#cloud-config\n"));
        let gone = Snippet {
            path: Some(dir.path().join("nope/snippets/a-user.yaml")),
            ..snippet
        };
        let e = write(&spec(), &gone)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("is not mounted here"), "{e}");
    }

    /// Two runs in one process writing one VM's snippet at the same moment both succeed, and
    /// the file ends whole.
    #[test]
    fn the_same_snippet_written_at_once_from_several_threads_succeeds_every_time() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let snippet = Snippet {
            volid: "local:snippets/a-user.yaml".into(),
            path: Some(dir.path().join("snippets").join("a-user.yaml")),
            text: "#cloud-config\n".into(),
        };
        let failures: usize = std::thread::scope(|s| {
            let threads: Vec<_> = (0..8)
                .map(|t| {
                    let snippet = &snippet;
                    s.spawn(move || {
                        (0..200)
                            .filter(|i| {
                                // Different texts, so no write is skipped as already there.
                                let text = format!("#cloud-config\n# {t} {i}\n");
                                let one = Snippet {
                                    text,
                                    ..snippet.clone()
                                };
                                write(&spec(), &one).is_err()
                            })
                            .count()
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().unwrap_or(usize::MAX))
                .sum()
        });
        assert_eq!(failures, 0, "writes that failed");
        let written =
            std::fs::read_to_string(dir.path().join("snippets/a-user.yaml")).unwrap_or_default();
        assert!(written.starts_with("#cloud-config\n# "), "{written:?}");
        let left: Vec<_> = std::fs::read_dir(dir.path().join("snippets"))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(left.len(), 1, "temporary files left behind: {left:?}");
    }
}
