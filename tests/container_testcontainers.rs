//! The fake-proxmox container image, started with the testcontainers module against this machine's
//! Docker engine, answers the PVE API over HTTPS: with the API token, the pinned fingerprint the
//! module hands back, and the certificate; a wrong pin is refused. Needs Docker: fails without it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod container_support;

use std::time::Duration;

use fake_proxmox::AuthKind;
use fake_proxmox::testcontainers::{FakeProxmoxImage, docker_api, start};
use provision_harness::pve::tls::parse_fingerprint;
use provision_harness::pve::{ClientOptions, Credentials, PveClient, TlsMode};
use sha2::{Digest, Sha256};

#[test]
fn container_serves_pve_api_with_token_and_pinned_fingerprint() {
    // testcontainers 0.28 speaks Docker API 1.53 only; an older engine gets the shim.
    if let Some(status) =
        docker_api::rerun_behind_shim_if_needed().expect("probing the Docker engine")
    {
        assert!(
            status.success(),
            "the run behind the Docker API shim failed ({status}); its output is above"
        );
        return;
    }
    let (name, tag) = container_support::image();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let image = FakeProxmoxImage::default()
            .with_image(name, tag)
            .no_auth_delay();
        let fake = start(image).await.unwrap_or_else(|e| {
            panic!("Docker is required for this test and must be running: {e}")
        });
        assert_eq!(fake.sites.len(), 2, "both seed sites are served");
        let site = fake.site("site-1").expect("site-1");
        assert!(site.url.starts_with("https://127.0.0.1:"), "{}", site.url);

        // The handed-back fingerprint is the SHA-256 of the certificate the server presents.
        let (_, pem) =
            x509_parser::pem::parse_x509_pem(site.cert_pem.as_bytes()).expect("cert.pem");
        let der_fp: Vec<String> = Sha256::digest(&pem.contents)
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect();
        assert_eq!(site.fingerprint, der_fp.join(":"));

        // The deployer's own client, token auth, certificate pinned by fingerprint.
        let pin = parse_fingerprint(&site.fingerprint).expect("fingerprint");
        let creds = Credentials::Token {
            token_id: site.credentials.token_id.clone(),
            secret: site.credentials.token_secret.clone(),
        };
        let options = |tls| ClientOptions {
            tls,
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
        };
        let client =
            PveClient::new(&site.url, creds.clone(), &options(TlsMode::Pinned(pin))).unwrap();
        let v = client
            .version()
            .await
            .expect("GET /version with the pinned fingerprint");
        assert_eq!(v.major_minor(), Some((9, 1)), "{v:?}");

        // A different pin is refused before any request is answered.
        let mut wrong = pin;
        wrong[0] ^= 0xff;
        let refused = PveClient::new(&site.url, creds, &options(TlsMode::Pinned(wrong)))
            .unwrap()
            .version()
            .await;
        assert!(refused.is_err(), "a wrong pin must be refused");

        // Any HTTP client: trust the certificate, send PVE's token header.
        let http = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(site.cert_pem.as_bytes()).unwrap()])
            .build()
            .unwrap();
        let body: serde_json::Value = http
            .get(format!("{}/nodes", site.api_url()))
            .header("Authorization", site.credentials.token_header())
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(body["data"][0]["node"], "ml110-01", "{body}");

        // site-2 is its own cluster on its own port.
        let site2 = fake.site("site-2").expect("site-2");
        assert_ne!(site2.url, site.url);
        let nodes: serde_json::Value = http
            .get(format!("{}/nodes", site2.api_url()))
            .header("Authorization", site2.credentials.token_header())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(nodes["data"][0]["node"], "r630-01", "{nodes}");

        // The control plane sees what was sent, and how it was authenticated.
        let journal = site.control().journal().await.expect("journal");
        let version_calls: Vec<_> = journal.iter().filter(|e| e.path == "/version").collect();
        assert!(!version_calls.is_empty(), "journal: {journal:?}");
        assert!(
            version_calls
                .iter()
                .all(|e| e.status == 200 && matches!(e.auth, AuthKind::ApiToken { .. })),
            "{version_calls:?}"
        );
        fake.container.rm().await.expect("remove the container");
    });
}
