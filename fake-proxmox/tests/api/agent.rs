//! Guest agent: PVE's three errors, interfaces with an address from the DHCP pool, and the
//! simulated guest behind exec, files, fsfreeze, passwords, shutdown and suspend.

use crate::common::*;

#[tokio::test]
async fn agent_errors_then_dhcp_address_after_boot() {
    let f = start().await;
    let api = f.api("site-1");
    create_vm(
        &f,
        &api,
        "ml110-01",
        &[("vmid", "150"), ("net0", "virtio,bridge=vmbr0")],
    )
    .await;
    let path = "/nodes/ml110-01/qemu/150/agent/network-get-interfaces";
    let r = api.get(path).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "No QEMU guest agent configured\n");
    api.send("PUT", "/nodes/ml110-01/qemu/150/config", &[("agent", "1")])
        .await;
    let r = api.get(path).await;
    assert_eq!(r.message(), "VM 150 is not running\n");
    let r = api.post("/nodes/ml110-01/qemu/150/status/start", &[]).await;
    wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    let r = api.get(path).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "QEMU guest agent is not running\n");
    // The default scenario boots guests in 25 simulated seconds.
    f.advance(30.0).await;
    let r = api.get(path).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let ifaces = r.data()["result"].as_array().unwrap();
    assert_eq!(ifaces[0]["name"], "lo");
    let eth = &ifaces[1];
    let mac = api.get("/nodes/ml110-01/qemu/150/config").await.data()["net0"]
        .as_str()
        .unwrap()[7..24]
        .to_ascii_lowercase();
    assert_eq!(eth["hardware-address"], mac);
    assert_eq!(eth["ip-addresses"][0]["ip-address"], "192.168.11.100");
    assert_eq!(eth["ip-addresses"][0]["prefix"], 24);
    let cur = api.get("/nodes/ml110-01/qemu/150/status/current").await;
    assert_eq!(cur.data()["agent"], 1);
}

/// A running VM with its agent answering (the default scenario boots in 25 s).
async fn running_vm(f: &Fake, api: &Api, vmid: &str, extra: &[(&str, &str)]) -> String {
    let mut form = vec![("vmid", vmid), ("agent", "1"), ("name", "web1")];
    form.extend_from_slice(extra);
    create_vm(f, api, "ml110-01", &form).await;
    let r = api
        .post(&format!("/nodes/ml110-01/qemu/{vmid}/status/start"), &[])
        .await;
    wait_task(f, api, "ml110-01", r.data().as_str().unwrap()).await;
    f.advance(30.0).await;
    format!("/nodes/ml110-01/qemu/{vmid}/agent")
}

#[tokio::test]
async fn a_post_provisioning_script_runs_with_its_exit_code_and_output() {
    let f = start().await;
    let api = f.api("site-1");
    let agent = running_vm(&f, &api, "151", &[]).await;
    let script = "#!/bin/sh\nset -e\nAPP_DIR=/opt/app\necho \"provisioning $(hostname)\"\n\
                  mkdir -p \"$APP_DIR\"\ncloud-init status --wait\n\
                  if [ ! -f \"$APP_DIR/ready\" ]; then\n  echo done > \"$APP_DIR/ready\"\nfi\nexit 3\n";
    let r = api
        .post(
            &format!("{agent}/file-write"),
            &[("file", "/root/provision.sh"), ("content", script)],
        )
        .await;
    assert_eq!((r.status, r.data().is_null()), (200, true), "{}", r.body);
    // The deployer scripted how long cloud-init takes in this guest.
    f.ctl("site-1")
        .guest_setup(
            "ml110-01",
            151,
            &serde_json::from_value(serde_json::json!({"commands": [{
                "command": ["cloud-init", "status", "--wait"],
                "out": "status: done\n", "secs": 20.0
            }]}))
            .unwrap(),
        )
        .await
        .unwrap();
    let r = api
        .post(
            &format!("{agent}/exec"),
            &[("command", "/bin/sh"), ("command", "/root/provision.sh")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let pid = r.data()["pid"].as_i64().unwrap();
    let status = format!("{agent}/exec-status");
    let pid_s = pid.to_string();
    let r = api.send("GET", &status, &[("pid", &pid_s)]).await;
    assert_eq!(r.data(), &serde_json::json!({"exited": 0}), "{}", r.body);
    f.advance(21.0).await;
    let r = api.send("GET", &status, &[("pid", &pid_s)]).await;
    assert_eq!(r.data()["exited"], 1, "{}", r.body);
    assert_eq!(r.data()["exitcode"], 3);
    assert_eq!(r.data()["out-data"], "provisioning web1\nstatus: done\n");
    assert!(r.data().get("err-data").is_none());
    // qemu-ga forgets a pid once it has reported its exit.
    let r = api.send("GET", &status, &[("pid", &pid_s)]).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.message(), "Agent error: Invalid parameter 'pid'\n");
    // The script's effects are in the guest's file system.
    let r = api
        .send(
            "GET",
            &format!("{agent}/file-read"),
            &[("file", "/opt/app/ready")],
        )
        .await;
    assert_eq!(r.data()["content"], "done\n", "{}", r.body);
}

#[tokio::test]
async fn exec_failures_read_as_the_guest_reports_them() {
    let f = start().await;
    let api = f.api("site-1");
    let agent = running_vm(&f, &api, "152", &[]).await;
    let r = api
        .post(&format!("{agent}/exec"), &[("command", "terraform-helper")])
        .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "Agent error: Guest agent command failed, error was 'Failed to execute child process \
         “terraform-helper” (No such file or directory)'\n"
    );
    let r = api
        .post(
            &format!("{agent}/exec"),
            &[("command", "sh"), ("command", "-c"), ("command", "nope")],
        )
        .await;
    let pid = r.data()["pid"].as_i64().unwrap().to_string();
    let r = api
        .send("GET", &format!("{agent}/exec-status"), &[("pid", &pid)])
        .await;
    assert_eq!(r.data()["err-data"], "sh: 1: nope: not found\n");
    // stdin through input-data.
    let r = api
        .post(
            &format!("{agent}/exec"),
            &[("command", "cat"), ("input-data", "hello guest")],
        )
        .await;
    let pid = r.data()["pid"].as_i64().unwrap().to_string();
    let r = api
        .send("GET", &format!("{agent}/exec-status"), &[("pid", &pid)])
        .await;
    assert_eq!(
        (r.data()["exitcode"].as_i64(), r.data()["out-data"].as_str()),
        (Some(0), Some("hello guest"))
    );
    let long = "x".repeat(65537);
    let r = api
        .post(
            &format!("{agent}/exec"),
            &[("command", "cat"), ("input-data", &long)],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json["errors"]["input-data"].is_string(), "{}", r.body);
}

#[tokio::test]
async fn files_round_trip_plain_and_base64_within_pves_limits() {
    let f = start().await;
    let api = f.api("site-1");
    let agent = running_vm(&f, &api, "153", &[]).await;
    let read = |file: &'static str, extra: Vec<(&'static str, &'static str)>| {
        let api = api.clone();
        let path = format!("{agent}/file-read");
        async move {
            let mut q = vec![("file", file)];
            q.extend(extra);
            api.send("GET", &path, &q).await
        }
    };
    let write = format!("{agent}/file-write");
    let r = api
        .post(&write, &[("file", "/etc/motd"), ("content", "Welcome\n")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = read("/etc/motd", vec![]).await;
    assert_eq!(
        r.data(),
        &serde_json::json!({"content": "Welcome\n", "bytes-read": 8})
    );
    // encode=0: the caller sends base64 itself.
    let r = api
        .post(
            &write,
            &[("file", "/tmp/b"), ("content", "AAEC/w=="), ("encode", "0")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api
        .post(
            &write,
            &[
                ("file", "/tmp/c"),
                ("content", "not base64!"),
                ("encode", "0"),
            ],
        )
        .await;
    assert_eq!(
        r.message(),
        "Agent error: Base64 data contains invalid characters\n"
    );
    let r = read("/tmp/b", vec![("decode", "0")]).await;
    assert_eq!(r.data()["content"], "AAEC/w==");
    assert_eq!(r.data()["bytes-read"], 4);
    // A count short of the end, and an offset.
    let r = read("/etc/motd", vec![("count", "3"), ("offset", "2")]).await;
    assert_eq!(r.data()["content"], "lco");
    assert_eq!(r.data()["truncated"], 1);
    // PVE's limits are schema limits: 400 before any agent call.
    let big = "a".repeat(61441);
    let r = api
        .post(&write, &[("file", "/tmp/x"), ("content", &big)])
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.json["errors"]["content"],
        "value may only be 61440 characters long"
    );
    let r = read("/etc/motd", vec![("count", "16777217")]).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = read("/etc/nope", vec![]).await;
    assert_eq!(r.status, 500);
    assert_eq!(
        r.message(),
        "Agent error: failed to open file '/etc/nope' (mode: 'r'): No such file or directory\n"
    );
    let r = api
        .post(&write, &[("file", "/no/such/dir/f"), ("content", "x")])
        .await;
    assert_eq!(
        r.message(),
        "Agent error: failed to open file '/no/such/dir/f' (mode: 'wb'): No such file or directory\n"
    );
}

#[tokio::test]
async fn agent_calls_on_a_vm_without_agent_or_stopped_die_as_pve() {
    let f = start().await;
    let api = f.api("site-1");
    create_vm(&f, &api, "ml110-01", &[("vmid", "154")]).await;
    let agent = "/nodes/ml110-01/qemu/154/agent";
    let r = api
        .post(&format!("{agent}/exec"), &[("command", "true")])
        .await;
    assert_eq!(r.message(), "No QEMU guest agent configured\n");
    api.send("PUT", "/nodes/ml110-01/qemu/154/config", &[("agent", "1")])
        .await;
    let r = api
        .send(
            "GET",
            &format!("{agent}/file-read"),
            &[("file", "/etc/hostname")],
        )
        .await;
    assert_eq!(r.message(), "VM 154 is not running\n");
    let r = api.post(&format!("{agent}/fsfreeze-status"), &[]).await;
    assert_eq!(r.message(), "VM 154 is not running\n");
    let r = api.post("/nodes/ml110-01/qemu/154/status/start", &[]).await;
    wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    let r = api.post(&format!("{agent}/shutdown"), &[]).await;
    assert_eq!(r.message(), "QEMU guest agent is not running\n");
    // The index lists every command without asking the guest.
    let r = api.get(agent).await;
    assert_eq!(r.data().as_array().unwrap().len(), 25);
}

#[tokio::test]
async fn fsfreeze_freezes_blocks_other_commands_and_thaws() {
    let f = start().await;
    let api = f.api("site-1");
    let agent = running_vm(&f, &api, "155", &[]).await;
    let status = format!("{agent}/fsfreeze-status");
    assert_eq!(api.post(&status, &[]).await.data()["result"], "thawed");
    let r = api.post(&format!("{agent}/fsfreeze-freeze"), &[]).await;
    assert_eq!(r.data()["result"], 1, "{}", r.body);
    assert_eq!(api.post(&status, &[]).await.data()["result"], "frozen");
    // qemu-ga refuses most commands while frozen; PVE hands the error on.
    let r = api.post(&format!("{agent}/fstrim"), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.data()["result"]["error"]["desc"],
        "Command guest-fstrim has been disabled: the agent is in frozen state"
    );
    let r = api
        .post(&format!("{agent}/exec"), &[("command", "true")])
        .await;
    assert_eq!(
        r.message(),
        "Agent error: Command guest-exec has been disabled: the agent is in frozen state\n"
    );
    let info = api.get(&format!("{agent}/info")).await;
    let enabled = |name: &str| {
        info.data()["result"]["supported_commands"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["enabled"].clone())
    };
    assert_eq!(enabled("guest-exec"), Some(serde_json::json!(false)));
    assert_eq!(
        enabled("guest-fsfreeze-thaw"),
        Some(serde_json::json!(true))
    );
    let r = api.post(&format!("{agent}/fsfreeze-thaw"), &[]).await;
    assert_eq!(r.data()["result"], 1);
    assert_eq!(api.post(&status, &[]).await.data()["result"], "thawed");
    let r = api.post(&format!("{agent}/fstrim"), &[]).await;
    assert_eq!(r.data()["result"]["paths"][0]["path"], "/");
}

#[tokio::test]
async fn an_agent_shutdown_powers_the_vm_off_and_suspend_needs_s3() {
    let f = start().await;
    let api = f.api("site-1");
    let agent = running_vm(&f, &api, "156", &[]).await;
    let r = api.post(&format!("{agent}/suspend-ram"), &[]).await;
    assert_eq!(
        r.data()["result"]["error"]["desc"],
        "the requested suspend mode is not supported by the guest",
        "{}",
        r.body
    );
    let r = api
        .post(
            &format!("{agent}/set-user-password"),
            &[("username", "ubuntu"), ("password", "s3cret!")],
        )
        .await;
    assert_eq!(r.data(), &serde_json::json!({"result": {}}), "{}", r.body);
    let r = api
        .post(
            &format!("{agent}/set-user-password"),
            &[("username", "nobody-here"), ("password", "s3cret!")],
        )
        .await;
    assert_eq!(
        r.message(),
        "Agent error: child process has failed to set user password\n"
    );
    let state = f.ctl("site-1").guest_state("ml110-01", 156).await.unwrap();
    assert_eq!(state["passwords"]["ubuntu"]["password"], "s3cret!");
    // A change that waits for the next start (vCPUs are not hot-plugged by default).
    let r = api
        .send("PUT", "/nodes/ml110-01/qemu/156/config", &[("cores", "2")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = api.post(&format!("{agent}/shutdown"), &[]).await;
    assert_eq!(r.data(), &serde_json::json!({"result": null}), "{}", r.body);
    let cur = api.get("/nodes/ml110-01/qemu/156/status/current").await;
    assert_eq!(cur.data()["status"], "stopped");
    // A guest that powered itself off leaves pending changes pending (`qm cleanup`).
    let pending = api.get("/nodes/ml110-01/qemu/156/pending").await;
    let cores = pending
        .data()
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == "cores");
    assert_eq!(
        cores.map(|e| e["pending"].clone()),
        Some(serde_json::json!(2)),
        "{}",
        pending.body
    );
    let r = api.post(&format!("{agent}/ping"), &[]).await;
    assert_eq!(r.message(), "VM 156 is not running\n");
}

#[tokio::test]
async fn suspend_to_ram_with_s3_enabled_stops_the_agent_answering() {
    let f = start().await;
    let api = f.api("site-1");
    let agent = running_vm(&f, &api, "157", &[("machine", "q35,enable-s3=1")]).await;
    let r = api.post(&format!("{agent}/suspend-ram"), &[]).await;
    assert_eq!(r.data(), &serde_json::json!({"result": null}), "{}", r.body);
    let r = api.post(&format!("{agent}/ping"), &[]).await;
    assert_eq!(r.message(), "QEMU guest agent is not running\n");
}

#[tokio::test]
async fn a_scenario_scripts_every_guest_of_its_site() {
    let mut scenario = fake_proxmox::Scenario::embedded_default();
    scenario.sites[0].guest = serde_json::from_value(serde_json::json!({
        "commands": [{"command": ["/usr/bin/systemctl", "is-active", "app"],
                      "exitcode": 3, "out": "inactive\n"}],
        "files": {"/etc/app/app.conf": "port=8080\n"},
    }))
    .unwrap();
    let f = start_with(scenario, fake_proxmox::ClockMode::Stepped).await;
    let api = f.api("site-1");
    let agent = running_vm(&f, &api, "158", &[]).await;
    let r = api
        .send(
            "GET",
            &format!("{agent}/file-read"),
            &[("file", "/etc/app/app.conf")],
        )
        .await;
    assert_eq!(r.data()["content"], "port=8080\n", "{}", r.body);
    // Matched by program name inside a shell too.
    let r = api
        .post(
            &format!("{agent}/exec"),
            &[
                ("command", "sh"),
                ("command", "-c"),
                ("command", "systemctl is-active app || echo 'not yet'"),
            ],
        )
        .await;
    let pid = r.data()["pid"].as_i64().unwrap().to_string();
    let r = api
        .send("GET", &format!("{agent}/exec-status"), &[("pid", &pid)])
        .await;
    assert_eq!(r.data()["out-data"], "inactive\nnot yet\n", "{}", r.body);
    assert_eq!(r.data()["exitcode"], 0);
    // A process killed by a signal reports the signal, no exit code.
    f.ctl("site-1")
        .guest_setup(
            "ml110-01",
            158,
            &serde_json::from_value(serde_json::json!({"commands": [{
                "command": ["/opt/app/migrate"], "signal": 9, "err": "Killed\n"
            }]}))
            .unwrap(),
        )
        .await
        .unwrap();
    let r = api
        .post(&format!("{agent}/exec"), &[("command", "/opt/app/migrate")])
        .await;
    let pid = r.data()["pid"].as_i64().unwrap().to_string();
    let r = api
        .send("GET", &format!("{agent}/exec-status"), &[("pid", &pid)])
        .await;
    assert_eq!(
        r.data(),
        &serde_json::json!({"exited": 1, "signal": 9, "err-data": "Killed\n"})
    );
}

#[tokio::test]
async fn each_agent_route_asks_for_its_own_privilege() {
    let mut scenario = fake_proxmox::Scenario::embedded_default();
    scenario.sites[0].users.push(
        serde_json::from_value(serde_json::json!({"userid": "ops@pve", "password": "opspw"}))
            .unwrap(),
    );
    let f = start_with(scenario, fake_proxmox::ClockMode::Stepped).await;
    let api = f.api("site-1");
    // PVE 9.1's PVEVMUser holds the file and freeze privileges too: a role without them.
    let role = api
        .post(
            "/access/roles",
            &[
                ("roleid", "AgentAudit"),
                ("privs", "VM.Audit,VM.GuestAgent.Audit,VM.PowerMgmt"),
            ],
        )
        .await;
    assert_eq!(role.status, 200, "{}", role.body);
    let acl = api
        .send(
            "PUT",
            "/access/acl",
            &[
                ("path", "/vms"),
                ("roles", "AgentAudit"),
                ("users", "ops@pve"),
            ],
        )
        .await;
    assert_eq!(acl.status, 200, "{}", acl.body);
    let agent = running_vm(&f, &api, "159", &[]).await;
    let ops = api.login("ops@pve", "opspw").await;
    let r = ops
        .post(&format!("{agent}/exec"), &[("command", "id")])
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(
        r.message(),
        "Permission check failed (/vms/159, VM.GuestAgent.Unrestricted)\n"
    );
    let r = ops.post(&format!("{agent}/fsfreeze-freeze"), &[]).await;
    assert_eq!(
        r.message(),
        "Permission check failed (/vms/159, VM.GuestAgent.FileSystemMgmt|VM.GuestAgent.Unrestricted)\n"
    );
    let r = ops
        .send(
            "GET",
            &format!("{agent}/file-read"),
            &[("file", "/etc/hostname")],
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.body);
    // The role has VM.GuestAgent.Audit and VM.PowerMgmt.
    let r = ops.post(&format!("{agent}/fsfreeze-status"), &[]).await;
    assert_eq!(r.data()["result"], "thawed", "{}", r.body);
    let r = ops.post(&format!("{agent}/shutdown"), &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
}
