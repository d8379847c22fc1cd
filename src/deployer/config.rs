//! The ProviderConfig (sites, endpoints, TLS options) and its credentials Secret, in the seed's
//! Crossplane shape. Endpoints are data: nothing here connects anywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::deployer::pve::Credentials;
use crate::deployer::pve::tls::{TlsMode, parse_fingerprint};

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderConfigDoc {
    pub kind: String,
    pub metadata: crate::deployer::manifest::Metadata,
    pub spec: ProviderSpec,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderSpec {
    #[serde(default)]
    pub credentials: Option<CredentialsRef>,
    pub sites: Vec<SiteDoc>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsRef {
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub secret_ref: Option<SecretRef>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SiteDoc {
    pub name: String,
    pub endpoint: String,
    #[serde(default)]
    pub node: Option<String>,
    /// Skip TLS verification (the seed's `insecureSkipTLSVerify`). Off by default.
    #[serde(default, alias = "insecure")]
    pub insecure_skip_tls_verify: bool,
    /// SHA-256 fingerprint of the node certificate to pin (as PVE shows it).
    #[serde(default)]
    pub fingerprint: Option<String>,
    /// A CA certificate file (PEM) to trust instead of the system roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Where this deployer reaches the site's snippets storage as files (see [`SnippetShare`]).
    #[serde(default)]
    pub snippets: Option<SnippetShareDoc>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnippetShareDoc {
    pub storage: String,
    pub path: PathBuf,
}

/// A PVE storage with `snippets` content that this deployer also has mounted: PVE's API
/// cannot upload snippets, so a manifest's `userData` is written to `<path>/snippets/` and the
/// VM's `cicustom` names it. A storage that is not `shared` is reached on the site's node only.
#[derive(Debug, Clone, PartialEq)]
pub struct SnippetShare {
    /// The storage id (`local`, `cephfs`).
    pub storage: String,
    /// The storage's directory (PVE's `path`, where `snippets/` is) as mounted here.
    pub path: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SecretDoc {
    kind: String,
    metadata: crate::deployer::manifest::Metadata,
    #[serde(default)]
    string_data: BTreeMap<String, String>,
}

/// A site ready to connect to.
#[derive(Debug, Clone, PartialEq)]
pub struct Site {
    pub name: String,
    pub endpoint: String,
    pub node: Option<String>,
    pub tls: TlsMode,
    /// Where `userData` snippets are written, if the site has a share for them.
    pub snippets: Option<SnippetShare>,
}

/// Sites plus the credentials used for all of them.
#[derive(Debug, Clone)]
pub struct Provider {
    pub sites: Vec<Site>,
    pub credentials: Credentials,
}

impl Provider {
    pub fn site(&self, name: &str) -> Option<&Site> {
        self.sites.iter().find(|s| s.name == name)
    }

    /// Points a site at another endpoint (the fake's URL in rehearse and tests).
    pub fn override_endpoint(&mut self, site: &str, endpoint: &str, tls: TlsMode) -> bool {
        match self.sites.iter_mut().find(|s| s.name == site) {
            Some(s) => {
                s.endpoint = endpoint.to_string();
                s.tls = tls;
                true
            }
            None => false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {detail}")]
    Invalid { path: String, detail: String },
    #[error(
        "no credentials: give --credentials FILE, put the Secret '{0}' next to the provider config, or set PVE_TOKEN_ID/PVE_TOKEN_SECRET"
    )]
    NoCredentials(String),
}

/// Parses the provider config text; `base_dir` resolves `caFile`.
pub fn parse_provider(
    text: &str,
    origin: &str,
    base_dir: &Path,
) -> Result<(Vec<Site>, Option<String>), ConfigError> {
    let invalid = |detail: String| ConfigError::Invalid {
        path: origin.to_string(),
        detail,
    };
    let mut found = None;
    for d in serde_norway::Deserializer::from_str(text) {
        let v = serde_norway::Value::deserialize(d).map_err(|e| invalid(e.to_string()))?;
        if v.get("kind").and_then(|k| k.as_str()) == Some("ProviderConfig") {
            found = Some(v);
            break;
        }
    }
    let value = found.ok_or_else(|| invalid("no `kind: ProviderConfig` document".into()))?;
    let doc: ProviderConfigDoc =
        serde_norway::from_value(value).map_err(|e| invalid(e.to_string()))?;
    if doc.spec.sites.is_empty() {
        return Err(ConfigError::Invalid {
            path: origin.to_string(),
            detail: "spec.sites is empty".into(),
        });
    }
    let mut sites = Vec::new();
    for s in &doc.spec.sites {
        let invalid = |detail: String| ConfigError::Invalid {
            path: origin.to_string(),
            detail: format!("site {}: {detail}", s.name),
        };
        let tls = if let Some(fp) = &s.fingerprint {
            TlsMode::Pinned(parse_fingerprint(fp).map_err(invalid)?)
        } else if let Some(ca) = &s.ca_file {
            let path = base_dir.join(ca);
            let pem = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            TlsMode::CaPem(pem)
        } else if s.insecure_skip_tls_verify {
            TlsMode::Insecure
        } else {
            TlsMode::Verify
        };
        sites.push(Site {
            name: s.name.clone(),
            endpoint: s.endpoint.clone(),
            node: s.node.clone(),
            tls,
            snippets: s.snippets.as_ref().map(|d| SnippetShare {
                storage: d.storage.clone(),
                path: base_dir.join(&d.path),
            }),
        });
    }
    let secret = doc
        .spec
        .credentials
        .and_then(|c| c.secret_ref)
        .map(|r| r.name);
    Ok((sites, secret))
}

/// Reads credentials from a Secret's `stringData`: `tokenid` + `token`, or `username` + `password`.
/// A `tokenid` with a `username` but no `!` is joined as `username!tokenid`.
pub fn parse_secret(
    text: &str,
    origin: &str,
    name: Option<&str>,
) -> Result<Option<Credentials>, ConfigError> {
    for doc in serde_norway::Deserializer::from_str(text) {
        let Ok(secret) = SecretDoc::deserialize(doc) else {
            continue;
        };
        if secret.kind != "Secret" || name.is_some_and(|n| n != secret.metadata.name) {
            continue;
        }
        return credentials_from_map(&secret.string_data)
            .map(Some)
            .map_err(|detail| ConfigError::Invalid {
                path: origin.to_string(),
                detail,
            });
    }
    Ok(None)
}

fn credentials_from_map(data: &BTreeMap<String, String>) -> Result<Credentials, String> {
    let get = |k: &str| {
        data.get(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    if let (Some(id), Some(token)) = (get("tokenid").or_else(|| get("tokenId")), get("token")) {
        let token_id = match (id.contains('!'), get("username")) {
            (false, Some(user)) => format!("{user}!{id}"),
            _ => id,
        };
        return Ok(Credentials::Token {
            token_id,
            secret: token,
        });
    }
    if let (Some(username), Some(password)) = (get("username"), get("password")) {
        return Ok(Credentials::Password { username, password });
    }
    Err("the Secret has neither tokenid+token nor username+password in stringData".into())
}

/// Credentials from the environment, which win over files: `PVE_TOKEN_ID` + `PVE_TOKEN_SECRET`,
/// or `PVE_USERNAME` + `PVE_PASSWORD`.
pub fn credentials_from_env() -> Option<Credentials> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let (Some(token_id), Some(secret)) = (get("PVE_TOKEN_ID"), get("PVE_TOKEN_SECRET")) {
        return Some(Credentials::Token { token_id, secret });
    }
    if let (Some(username), Some(password)) = (get("PVE_USERNAME"), get("PVE_PASSWORD")) {
        return Some(Credentials::Password { username, password });
    }
    None
}

/// Loads the provider config file and finds its credentials: `credentials_file` if given, else
/// any YAML next to the provider config holding the referenced Secret; the environment wins.
pub fn load_provider(
    path: &Path,
    credentials_file: Option<&Path>,
) -> Result<Provider, ConfigError> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
            path: p.to_path_buf(),
            source,
        })
    };
    let text = read(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let origin = path.display().to_string();
    let (sites, secret_name) = parse_provider(&text, &origin, dir)?;
    if let Some(c) = credentials_from_env() {
        return Ok(Provider {
            sites,
            credentials: c,
        });
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(f) = credentials_file {
        candidates.push(f.to_path_buf());
    } else {
        candidates.push(path.to_path_buf());
        if let Ok(entries) = std::fs::read_dir(dir) {
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
                .collect();
            files.sort();
            candidates.extend(files);
        }
    }
    let wanted = if credentials_file.is_some() {
        None
    } else {
        secret_name.as_deref()
    };
    for c in candidates {
        let text = read(&c)?;
        if let Some(credentials) = parse_secret(&text, &c.display().to_string(), wanted)? {
            return Ok(Provider { sites, credentials });
        }
    }
    Err(ConfigError::NoCredentials(
        secret_name.unwrap_or_else(|| "proxmox-credentials".into()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PC: &str = r#"
apiVersion: proxmox.sankofa.nexus/v1alpha1
kind: ProviderConfig
metadata:
  name: proxmox-provider-config
spec:
  credentials:
    source: Secret
    secretRef:
      name: proxmox-credentials
      namespace: crossplane-system
  sites:
    - name: site-1
      endpoint: https://192.168.11.10:8006
      node: ml110-01
    - name: site-2
      endpoint: https://192.168.11.11:8006
      node: r630-01
      fingerprint: "00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF"
"#;

    #[test]
    fn provider_and_secret() {
        let (sites, secret) = parse_provider(PC, "pc.yaml", Path::new(".")).expect("parses");
        assert_eq!(sites.len(), 2);
        assert_eq!(sites[0].tls, TlsMode::Verify);
        assert!(matches!(sites[1].tls, TlsMode::Pinned(_)));
        assert_eq!(secret.as_deref(), Some("proxmox-credentials"));
        let s = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: proxmox-credentials\nstringData:\n  tokenid: root@pam!t\n  token: abc\n";
        let c = parse_secret(s, "s.yaml", Some("proxmox-credentials"))
            .expect("ok")
            .expect("found");
        assert_eq!(c.principal(), "root@pam!t");
        assert!(
            parse_secret(s, "s.yaml", Some("other"))
                .expect("ok")
                .is_none()
        );
    }

    #[test]
    fn bad_fingerprint_is_reported() {
        let bad = PC.replace("00:11:22", "zz:11:22");
        let e = parse_provider(&bad, "pc.yaml", Path::new(".")).expect_err("invalid");
        assert!(e.to_string().contains("site-2"), "{e}");
    }
}
