//! LXC containers (`/nodes/{node}/lxc`): a container's life from an OS template, the VMID
//! space it shares with VMs, config changes live and pending, snapshots, and PVE's
//! refusals with pve-container's texts.

use serde_json::{Value, json};

use crate::common::*;

pub(crate) const NODE: &str = "ml110-01";
pub(crate) const TEMPLATE: &str = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst";

pub(crate) fn ct(path: &str) -> String {
    format!("/nodes/{NODE}/lxc{path}")
}

/// Start a task-answering request and wait for its task; the task's status.
pub(crate) async fn task(
    f: &Fake,
    api: &Api,
    method: &str,
    path: &str,
    form: &[(&str, &str)],
) -> Value {
    let r = api.send(method, path, form).await;
    assert_eq!(r.status, 200, "{method} {path}: {}", r.body);
    let upid = r.data().as_str().expect("a UPID").to_string();
    assert!(upid.starts_with(&format!("UPID:{NODE}:")), "{upid}");
    wait_task(f, api, NODE, &upid).await
}

pub(crate) async fn create_ct(f: &Fake, api: &Api, form: &[(&str, &str)]) -> Value {
    let mut all = vec![("ostemplate", TEMPLATE)];
    all.extend_from_slice(form);
    task(f, api, "POST", &ct(""), &all).await
}

pub(crate) fn volumes_of(content: &Value, vmid: u64) -> Vec<String> {
    content
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["vmid"] == vmid)
        .map(|v| v["volid"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_container_is_made_from_a_template_runs_and_is_destroyed() {
    let f = start().await;
    let api = f.api("site-1");
    let done = create_ct(
        &f,
        &api,
        &[
            ("vmid", "200"),
            ("hostname", "web-1"),
            ("storage", "local-lvm"),
            ("rootfs", "local-lvm:8"),
            ("mp0", "local-lvm:2,mp=/srv/data"),
            ("net0", "name=eth0,bridge=vmbr0,ip=dhcp"),
            ("memory", "1024"),
            ("cores", "2"),
            ("password", "secret-pw"),
        ],
    )
    .await;
    assert_eq!(done["exitstatus"], "OK", "{done}");
    assert_eq!(done["type"], "vzcreate");
    let log = task_log(&api, NODE, done["upid"].as_str().unwrap()).await;
    assert!(
        log.iter().any(|l| l
            == "extracting archive '/var/lib/vz/template/cache/debian-12-standard_12.7-1_amd64.tar.zst'"),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|l| l == "  Logical volume \"vm-200-disk-0\" created."),
        "{log:#?}"
    );

    let conf = api.get(&ct("/200/config")).await;
    assert_eq!(conf.status, 200, "{}", conf.body);
    let c = conf.data();
    assert_eq!(c["rootfs"], "local-lvm:vm-200-disk-0,size=8G");
    assert_eq!(c["mp0"], "local-lvm:vm-200-disk-1,mp=/srv/data,size=2G");
    let net0 = c["net0"].as_str().unwrap();
    assert!(
        net0.starts_with("name=eth0,bridge=vmbr0,hwaddr=BC:24:11:")
            && net0.ends_with(",ip=dhcp,type=veth"),
        "{net0}"
    );
    assert_eq!(c["hostname"], "web-1");
    assert_eq!(c["memory"], 1024);
    assert_eq!(c["swap"], 512);
    assert_eq!(c["cores"], 2);
    assert_eq!(c["unprivileged"], 1);
    assert_eq!(c["ostype"], "debian");
    assert_eq!(c["arch"], "amd64");
    assert!(
        c.get("password").is_none(),
        "the password is not config: {c}"
    );
    assert_eq!(c["digest"].as_str().unwrap().len(), 40);

    // The volumes are the container's on the storage; the VMID is taken for every kind.
    let content = api
        .get(&format!("/nodes/{NODE}/storage/local-lvm/content"))
        .await;
    assert_eq!(
        volumes_of(content.data(), 200),
        ["local-lvm:vm-200-disk-0", "local-lvm:vm-200-disk-1"]
    );
    let dup = api
        .post(
            &ct(""),
            &[
                ("vmid", "200"),
                ("ostemplate", TEMPLATE),
                ("storage", "local-lvm"),
            ],
        )
        .await;
    assert_eq!(dup.status, 500);
    assert_eq!(dup.message(), "CT 200 already exists on node 'ml110-01'\n");
    let next = api.send("GET", "/cluster/nextid", &[("vmid", "200")]).await;
    assert_eq!(next.status, 400, "{}", next.body);

    // Listed as stopped; started, it runs and has its leased address.
    let list = api.get(&ct("")).await;
    let row = &list.data()[0];
    assert_eq!(row["vmid"], 200);
    assert_eq!(row["status"], "stopped");
    assert_eq!(row["name"], "web-1");
    assert_eq!(row["maxmem"], 1024u64 << 20);
    assert_eq!(row["maxdisk"], 8u64 << 30);
    let refused = api.post(&ct("/200/status/stop"), &[]).await;
    assert_eq!(refused.message(), "CT 200 not running\n");
    let started = task(&f, &api, "POST", &ct("/200/status/start"), &[]).await;
    assert_eq!(started["exitstatus"], "OK");
    assert_eq!(started["type"], "vzstart");
    let again = api.post(&ct("/200/status/start"), &[]).await;
    assert_eq!(again.message(), "CT 200 already running\n");
    let cur = api.get(&ct("/200/status/current")).await;
    assert_eq!(cur.data()["status"], "running");
    assert_eq!(cur.data()["ha"], json!({"managed": 0}));
    assert!(cur.data()["pid"].as_u64().is_some());
    let ifaces = api.get(&ct("/200/interfaces")).await;
    let eth0 = ifaces
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "eth0")
        .cloned()
        .expect("eth0");
    assert_eq!(eth0["inet"], "192.168.11.100/24");
    assert_eq!(
        eth0["hwaddr"].as_str().unwrap(),
        net0.split("hwaddr=").nth(1).unwrap()[..17].to_lowercase()
    );

    // cluster/resources has the container as an `lxc` row.
    let res = api
        .send("GET", "/cluster/resources", &[("type", "vm")])
        .await;
    let row = res
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "lxc/200")
        .cloned()
        .expect("the container's row");
    assert_eq!(row["type"], "lxc");
    assert_eq!(row["node"], NODE);
    assert_eq!(row["status"], "running");
    assert_eq!(row["maxcpu"], 2);

    // A running container is not destroyed; stopped, it goes with its volumes.
    let running = api.send("DELETE", &ct("/200"), &[]).await;
    assert_eq!(
        running.message(),
        "unable to destroy CT 200 - container is running\n"
    );
    let stopped = task(&f, &api, "POST", &ct("/200/status/shutdown"), &[]).await;
    assert_eq!(stopped["type"], "vzshutdown");
    assert_eq!(stopped["exitstatus"], "OK");
    let gone = task(&f, &api, "DELETE", &ct("/200"), &[]).await;
    assert_eq!(gone["type"], "vzdestroy");
    assert_eq!(gone["exitstatus"], "OK");
    let after = api.get(&ct("/200/config")).await;
    assert_eq!(
        after.message(),
        "Configuration file 'nodes/ml110-01/lxc/200.conf' does not exist\n"
    );
    let content = api
        .get(&format!("/nodes/{NODE}/storage/local-lvm/content"))
        .await;
    assert!(volumes_of(content.data(), 200).is_empty());
}

#[tokio::test]
async fn create_refuses_what_pve_refuses() {
    let f = start().await;
    let api = f.api("site-1");
    // The default storage `local` holds no container directories.
    let r = api
        .post(&ct(""), &[("vmid", "201"), ("ostemplate", TEMPLATE)])
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json["errors"]["storage"],
        "storage 'local' does not support container directories"
    );
    // An ISO is not a template.
    let r = api
        .post(
            &ct(""),
            &[
                ("vmid", "201"),
                ("ostemplate", "local:iso/ubuntu-22.04-cloud.img"),
                ("storage", "local-lvm"),
            ],
        )
        .await;
    assert_eq!(
        r.message(),
        "unable to use volume local:iso/ubuntu-22.04-cloud.img - content type needs to be 'vztmpl'\n"
    );
    // A template that is not there fails the task, and leaves no container.
    let t = create_ct(&f, &api, &[("vmid", "201"), ("storage", "local-lvm")]).await;
    assert_eq!(t["exitstatus"], "OK", "the real template works: {t}");
    let missing = task(
        &f,
        &api,
        "POST",
        &ct(""),
        &[
            ("vmid", "202"),
            ("ostemplate", "local:vztmpl/nope-1.0_amd64.tar.zst"),
            ("storage", "local-lvm"),
        ],
    )
    .await;
    assert_eq!(
        missing["exitstatus"],
        "unable to create CT 202 - can't find file 'local:vztmpl/nope-1.0_amd64.tar.zst'"
    );
    assert_eq!(api.get(&ct("/202/config")).await.status, 500);
    // Mount points need a rootfs.
    let r = api
        .post(
            &ct(""),
            &[
                ("vmid", "203"),
                ("ostemplate", TEMPLATE),
                ("mp0", "local-lvm:1,mp=/x"),
            ],
        )
        .await;
    assert_eq!(
        r.message(),
        "mount points configured, but 'rootfs' not set - aborting\n"
    );

    // A user with VM.Allocate but no Sys.Modify: no privileged container, no feature but
    // nesting, no bind mount.
    let user = api.new_user("ops@pve").await;
    api.grant("/", "PVEVMAdmin", "ops@pve").await;
    api.grant("/storage", "PVEDatastoreUser", "ops@pve").await;
    let base = [
        ("vmid", "204"),
        ("ostemplate", TEMPLATE),
        ("storage", "local-lvm"),
    ];
    let with = |extra: (&'static str, &'static str)| {
        let mut v = base.to_vec();
        v.push(extra);
        v
    };
    let r = user.post(&ct(""), &with(("unprivileged", "0"))).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.message(), "Permission check failed (/, Sys.Modify)\n");
    let r = user.post(&ct(""), &with(("features", "keyctl=1"))).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        r.message(),
        "Permission check failed (changing feature flags (except nesting) is only allowed for root@pam)\n"
    );
    let r = user
        .post(&ct(""), &with(("mp0", "/srv/share,mp=/share")))
        .await;
    assert_eq!(
        r.message(),
        "Permission check failed (mount point type bind is only allowed for root@pam)\n"
    );
    let nesting = user.post(&ct(""), &with(("features", "nesting=1"))).await;
    assert_eq!(
        nesting.status, 200,
        "nesting needs VM.Allocate only: {}",
        nesting.body
    );
}

#[tokio::test]
async fn config_changes_apply_live_or_wait_for_the_next_start() {
    let f = start().await;
    let api = f.api("site-1");
    let done = create_ct(
        &f,
        &api,
        &[
            ("vmid", "210"),
            ("storage", "local-lvm"),
            ("net0", "name=eth0,bridge=vmbr0,ip=dhcp"),
        ],
    )
    .await;
    assert_eq!(done["exitstatus"], "OK");
    // Stopped: applied at once.
    let r = api
        .send(
            "PUT",
            &ct("/210/config"),
            &[("memory", "2048"), ("onboot", "1")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.data(), &Value::Null);
    let c = api.get(&ct("/210/config")).await;
    assert_eq!(c.data()["memory"], 2048);
    assert_eq!(c.data()["onboot"], 1);
    // Required and read-only options stay.
    let r = api
        .send("PUT", &ct("/210/config"), &[("delete", "rootfs")])
        .await;
    assert_eq!(r.message(), "unable to delete required option 'rootfs'\n");
    let r = api
        .send("PUT", &ct("/210/config"), &[("unprivileged", "0")])
        .await;
    assert_eq!(
        r.message(),
        "unable to modify read-only option: 'unprivileged'\n"
    );
    // A stale digest is refused.
    let r = api
        .send(
            "PUT",
            &ct("/210/config"),
            &[
                ("cores", "2"),
                ("digest", "0000000000000000000000000000000000000000"),
            ],
        )
        .await;
    assert_eq!(
        r.message(),
        "detected modified configuration - file changed by other user? Try again.\n"
    );

    // Running: memory and hostname change now, the DNS settings at the next start.
    task(&f, &api, "POST", &ct("/210/status/start"), &[]).await;
    let r = api
        .send(
            "PUT",
            &ct("/210/config"),
            &[
                ("memory", "1024"),
                ("hostname", "renamed"),
                ("nameserver", "192.0.2.53"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let current = api
        .send("GET", &ct("/210/config"), &[("current", "1")])
        .await;
    assert_eq!(current.data()["memory"], 1024);
    assert_eq!(current.data()["hostname"], "renamed");
    assert!(
        current.data().get("nameserver").is_none(),
        "{}",
        current.body
    );
    let with_pending = api.get(&ct("/210/config")).await;
    assert_eq!(with_pending.data()["nameserver"], "192.0.2.53");
    let pending = api.get(&ct("/210/pending")).await;
    let ns = pending
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["key"] == "nameserver")
        .cloned()
        .unwrap();
    assert_eq!(ns, json!({"key": "nameserver", "pending": "192.0.2.53"}));
    task(&f, &api, "POST", &ct("/210/status/reboot"), &[]).await;
    let after = api
        .send("GET", &ct("/210/config"), &[("current", "1")])
        .await;
    assert_eq!(after.data()["nameserver"], "192.0.2.53");

    // A mount point grows, never shrinks.
    let r = api
        .send(
            "PUT",
            &ct("/210/resize"),
            &[("disk", "rootfs"), ("size", "2G")],
        )
        .await;
    assert_eq!(r.message(), "unable to shrink disk size\n");
    let grown = task(
        &f,
        &api,
        "PUT",
        &ct("/210/resize"),
        &[("disk", "rootfs"), ("size", "+2G")],
    )
    .await;
    assert_eq!(grown["exitstatus"], "OK");
    let c = api.get(&ct("/210/config")).await;
    assert_eq!(c.data()["rootfs"], "local-lvm:vm-210-disk-0,size=6G");
}

#[tokio::test]
async fn snapshots_are_taken_rolled_back_and_deleted() {
    let f = start().await;
    let api = f.api("site-1");
    create_ct(&f, &api, &[("vmid", "220"), ("storage", "local-lvm")]).await;
    let snap = task(
        &f,
        &api,
        "POST",
        &ct("/220/snapshot"),
        &[("snapname", "before"), ("description", "first")],
    )
    .await;
    assert_eq!(snap["type"], "vzsnapshot");
    assert_eq!(snap["exitstatus"], "OK");
    let again = task(
        &f,
        &api,
        "POST",
        &ct("/220/snapshot"),
        &[("snapname", "before")],
    )
    .await;
    assert_eq!(again["exitstatus"], "snapshot name 'before' already used");
    api.send("PUT", &ct("/220/config"), &[("memory", "4096")])
        .await;
    let list = api.get(&ct("/220/snapshot")).await;
    let names: Vec<&str> = list
        .data()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["before", "current"]);
    assert_eq!(list.data()[1]["parent"], "before");
    let sconf = api.get(&ct("/220/snapshot/before/config")).await;
    assert_eq!(sconf.data()["memory"], 512);
    assert_eq!(sconf.data()["description"], "first");
    let back = task(&f, &api, "POST", &ct("/220/snapshot/before/rollback"), &[]).await;
    assert_eq!(back["type"], "vzrollback");
    assert_eq!(back["exitstatus"], "OK");
    let c = api.get(&ct("/220/config")).await;
    assert_eq!(c.data()["memory"], 512);
    assert_eq!(c.data()["parent"], "before");
    let del = task(&f, &api, "DELETE", &ct("/220/snapshot/before"), &[]).await;
    assert_eq!(del["type"], "vzdelsnapshot");
    assert_eq!(del["exitstatus"], "OK");
    let c = api.get(&ct("/220/config")).await;
    assert!(c.data().get("parent").is_none(), "{}", c.body);

    // A template cannot start; its volumes become base volumes.
    let t = task(&f, &api, "POST", &ct("/220/template"), &[]).await;
    assert_eq!(t["exitstatus"], "OK");
    let c = api.get(&ct("/220/config")).await;
    assert_eq!(c.data()["template"], 1);
    assert_eq!(c.data()["rootfs"], "local-lvm:base-220-disk-0,size=4G");
    let start = task(&f, &api, "POST", &ct("/220/status/start"), &[]).await;
    assert_eq!(
        start["exitstatus"],
        "you can't start a CT if it's a template"
    );
}

#[tokio::test]
async fn vms_and_containers_share_one_vmid_space() {
    let f = start().await;
    let api = f.api("site-1");
    let vm = create_vm(&f, &api, NODE, &[("vmid", "100"), ("memory", "512")]).await;
    assert_eq!(vm["exitstatus"], "OK");
    let r = api
        .post(
            &ct(""),
            &[
                ("vmid", "100"),
                ("ostemplate", TEMPLATE),
                ("storage", "local-lvm"),
            ],
        )
        .await;
    assert_eq!(r.message(), "VM 100 already exists on node 'ml110-01'\n");
    create_ct(&f, &api, &[("vmid", "101"), ("storage", "local-lvm")]).await;
    let next = api.get("/cluster/nextid").await;
    assert_eq!(next.data(), "102");
    let qemu_list = api.get(&format!("/nodes/{NODE}/qemu")).await;
    assert_eq!(qemu_list.data().as_array().unwrap().len(), 1);
    let lxc_list = api.get(&ct("")).await;
    assert_eq!(lxc_list.data().as_array().unwrap().len(), 1);
}
