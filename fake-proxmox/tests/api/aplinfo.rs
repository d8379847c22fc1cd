//! The appliance index (`/nodes/{node}/aplinfo`): the templates a site offers, and their
//! download onto a storage as `pveam download` does it.

use crate::common::*;
use crate::lxc::{NODE, ct, task};

#[tokio::test]
async fn the_appliance_index_lists_templates_and_downloads_one_onto_a_storage() {
    let f = start().await;
    let api = f.api("site-1");
    let index = api.get(&format!("/nodes/{NODE}/aplinfo")).await;
    assert_eq!(index.status, 200, "{}", index.body);
    let ubuntu = index
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["package"] == "ubuntu-24.04-standard")
        .cloned()
        .expect("the built-in index offers Ubuntu 24.04");
    let template = ubuntu["template"].as_str().unwrap().to_string();
    assert_eq!(template, "ubuntu-24.04-standard_24.04-2_amd64.tar.zst");
    assert_eq!(ubuntu["type"], "lxc");
    assert_eq!(
        ubuntu["location"],
        format!("http://download.proxmox.com/images/system/{template}")
    );

    // PVE's refusals: a template the index lacks, a storage without templates.
    let bad = api
        .post(
            &format!("/nodes/{NODE}/aplinfo"),
            &[("storage", "local"), ("template", "nope.tar.zst")],
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.json["errors"]["template"], "no such template");
    let lvm = api
        .post(
            &format!("/nodes/{NODE}/aplinfo"),
            &[("storage", "local-lvm"), ("template", template.as_str())],
        )
        .await;
    assert_eq!(
        lvm.message(),
        "storage 'local-lvm' does not support templates\n"
    );

    // The download is a task; the template then sits on the storage and makes containers.
    let done = task(
        &f,
        &api,
        "POST",
        &format!("/nodes/{NODE}/aplinfo"),
        &[("storage", "local"), ("template", template.as_str())],
    )
    .await;
    assert_eq!(done["type"], "download");
    assert_eq!(done["exitstatus"], "OK", "{done}");
    let log = task_log(&api, NODE, done["upid"].as_str().unwrap()).await;
    assert!(
        log.iter()
            .any(|l| l == "calculating checksum...OK, checksum verified"),
        "{log:#?}"
    );
    let volid = format!("local:vztmpl/{template}");
    let content = api
        .send(
            "GET",
            &format!("/nodes/{NODE}/storage/local/content"),
            &[("content", "vztmpl")],
        )
        .await;
    assert!(
        content
            .data()
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["volid"] == volid.as_str()),
        "{}",
        content.body
    );
    let ct = task(
        &f,
        &api,
        "POST",
        &ct(""),
        &[
            ("vmid", "230"),
            ("ostemplate", volid.as_str()),
            ("storage", "local-lvm"),
        ],
    )
    .await;
    assert_eq!(ct["exitstatus"], "OK", "{ct}");
    assert_eq!(api.get(&ct_path(230)).await.data()["ostype"], "ubuntu");
}

fn ct_path(vmid: u32) -> String {
    ct(&format!("/{vmid}/config"))
}
