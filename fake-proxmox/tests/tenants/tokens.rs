//! Control tokens and tenants: each tenant gets a token of its own at creation; it opens that
//! tenant's control plane and nothing else; only the server's token manages tenants.

use fake_proxmox::{ControlClient, ControlToken, FakeProxmox, TenantRequest};

use super::{host, host_with, refused, site1};

const SERVER_TOKEN: &str = "the-server-token";

async fn guarded_host() -> FakeProxmox {
    host_with(|b| b.control_token(ControlToken::new(SERVER_TOKEN).unwrap())).await
}

/// A client of the host's site-1 control plane sending `token` (or none).
fn host_ctl(host: &FakeProxmox, token: Option<&str>) -> ControlClient {
    let s = host.site("site-1").unwrap();
    let c = ControlClient::new(s.url(), Some(s.cert_pem()));
    match token {
        Some(t) => c.with_token(t),
        None => c,
    }
}

#[tokio::test]
async fn each_tenant_gets_its_own_token_at_creation() {
    let host = guarded_host().await;
    let ctl = host.site("site-1").unwrap().control();
    let a = ctl.create_tenant(&TenantRequest::default()).await.unwrap();
    let b = ctl.create_tenant(&TenantRequest::default()).await.unwrap();
    assert_eq!(a.control_token.len(), 64);
    assert_ne!(a.control_token, b.control_token);
    assert_ne!(a.control_token, SERVER_TOKEN);
    assert!(a.sites.iter().all(|s| s.control_token == a.control_token));
    // The listing (server token only) shows it too, so a job can find its tenant again.
    let listed = ctl.tenant(&a.id).await.unwrap();
    assert_eq!(listed.control_token, a.control_token);
    // With it, the tenant's control plane works (on every site of the tenant).
    for s in &a.sites {
        s.control().journal().await.unwrap();
    }
    host.shutdown().await;
}

#[tokio::test]
async fn only_the_server_token_creates_lists_or_deletes_tenants() {
    let host = guarded_host().await;
    let t = host_ctl(&host, Some(SERVER_TOKEN))
        .create_tenant(&TenantRequest::default())
        .await
        .unwrap();
    for (who, token) in [
        ("no token", None),
        ("a wrong token", Some("not-the-server-token")),
        ("the tenant's token", Some(t.control_token.as_str())),
    ] {
        let c = host_ctl(&host, token);
        let (status, msg) = refused(c.create_tenant(&TenantRequest::default()).await);
        assert_eq!(status, 401, "create with {who}: {msg}");
        assert_eq!(refused(c.tenants().await).0, 401, "list with {who}");
        assert_eq!(refused(c.tenant(&t.id).await).0, 401, "show with {who}");
        assert_eq!(
            refused(c.delete_tenant(&t.id).await).0,
            401,
            "delete with {who}"
        );
        // Nor any other route of the server's control plane.
        assert_eq!(refused(c.reset().await).0, 401, "reset with {who}");
    }
    let server = host_ctl(&host, Some(SERVER_TOKEN));
    assert_eq!(
        server.tenants().await.unwrap().len(),
        1,
        "nothing was deleted"
    );
    server.delete_tenant(&t.id).await.unwrap();
    host.shutdown().await;
}

#[tokio::test]
async fn a_tenants_token_opens_its_own_control_plane_only() {
    let host = guarded_host().await;
    let server = host_ctl(&host, Some(SERVER_TOKEN));
    let a = server
        .create_tenant(&TenantRequest::default())
        .await
        .unwrap();
    let b = server
        .create_tenant(&TenantRequest::default())
        .await
        .unwrap();
    let on_b = |token: &str| {
        let s = site1(&b);
        ControlClient::new(&s.url, s.cert_pem.as_deref()).with_token(token)
    };
    let (status, msg) = refused(on_b(&a.control_token).journal().await);
    assert_eq!(status, 401, "tenant A's token on tenant B: {msg}");
    assert!(msg.contains("wrong control token"), "{msg}");
    // The server's token is not a tenant's: a tenant's world is its job's alone.
    assert_eq!(refused(on_b(SERVER_TOKEN).reset().await).0, 401);
    let bare = {
        let s = site1(&b);
        ControlClient::new(&s.url, s.cert_pem.as_deref())
    };
    assert_eq!(refused(bare.state().await).0, 401);
    on_b(&b.control_token).journal().await.unwrap();
    // A tenant's own token on its own listener's /_fake/tenants: it still manages none.
    assert_eq!(refused(on_b(&b.control_token).tenants().await).0, 403);
    host.shutdown().await;
}

#[tokio::test]
async fn tenants_of_an_open_server_still_get_and_need_their_tokens() {
    let host = host().await;
    let t = host_ctl(&host, None)
        .create_tenant(&TenantRequest::default())
        .await
        .unwrap();
    let s = site1(&t);
    let bare = ControlClient::new(&s.url, s.cert_pem.as_deref());
    assert_eq!(refused(bare.journal().await).0, 401);
    s.control().journal().await.unwrap();
    host.shutdown().await;
}
