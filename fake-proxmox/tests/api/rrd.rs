//! `rrddata` and `rrd` for VMs and storages: PVE's timeframes, rows that carry figures only
//! from when the VM existed, running figures only while it ran, and rrdtool's refusals.

use crate::common::*;

fn figure(row: &serde_json::Value, key: &str) -> Option<f64> {
    row.get(key).and_then(serde_json::Value::as_f64)
}

#[tokio::test]
async fn a_vms_series_shows_when_it_was_made_and_when_it_ran() {
    let f = start().await;
    let api = f.api("site-1");
    // Rows before the VM existed hold only `time`.
    f.advance(600.0).await;
    create_vm(
        &f,
        &api,
        "ml110-01",
        &[
            ("vmid", "170"),
            ("memory", "3072"),
            ("net0", "virtio,bridge=vmbr0"),
        ],
    )
    .await;
    f.advance(600.0).await;
    let r = api.post("/nodes/ml110-01/qemu/170/status/start", &[]).await;
    wait_task(&f, &api, "ml110-01", r.data().as_str().unwrap()).await;
    f.advance(600.0).await;

    let path = "/nodes/ml110-01/qemu/170/rrddata";
    let r = api.send("GET", path, &[("timeframe", "hour")]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let rows = r.data().as_array().unwrap();
    // PVE 9: one-minute rows, an hour of them (the newest dropped while still empty).
    assert!((59..=60).contains(&rows.len()), "{}", rows.len());
    let times: Vec<u64> = rows.iter().map(|r| r["time"].as_u64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[1] - w[0] == 60));
    assert!(times.iter().all(|t| t % 60 == 0));

    let before: Vec<_> = rows
        .iter()
        .filter(|r| r.as_object().unwrap().len() == 1)
        .collect();
    let stopped: Vec<_> = rows
        .iter()
        .filter(|r| figure(r, "maxmem").is_some() && figure(r, "cpu") == Some(0.0))
        .collect();
    let ran: Vec<_> = rows
        .iter()
        .filter(|r| figure(r, "cpu").is_some_and(|c| c > 0.0))
        .collect();
    assert!(
        before.len() >= 25,
        "rows before the create: {}",
        before.len()
    );
    assert!(stopped.len() >= 8, "rows while stopped: {}", stopped.len());
    assert!(ran.len() >= 8, "rows while running: {}", ran.len());
    // In that order: made, then stopped, then running.
    let first = |v: &Vec<&serde_json::Value>| v.first().unwrap()["time"].as_u64().unwrap();
    assert!(first(&before) < first(&stopped) && first(&stopped) < first(&ran));
    let last = ran.last().unwrap();
    assert_eq!(figure(last, "maxmem"), Some(3072.0 * 1024.0 * 1024.0));
    assert!(figure(last, "mem").unwrap() > 0.0);
    assert!(figure(last, "netin").unwrap() > 0.0);
    assert_eq!(figure(stopped[0], "netin"), Some(0.0));
    for k in [
        "memhost",
        "pressurecpusome",
        "diskread",
        "diskwrite",
        "maxdisk",
    ] {
        assert!(last.get(k).is_some(), "{k} missing in {last}");
    }

    // MAX: a row's peak.
    let r = api
        .send("GET", path, &[("timeframe", "day"), ("cf", "MAX")])
        .await;
    assert_eq!(r.status, 200);
    assert!((1439..=1440).contains(&r.data().as_array().unwrap().len()));

    let r = api.send("GET", path, &[("timeframe", "fortnight")]).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = api
        .send(
            "GET",
            "/nodes/ml110-01/qemu/999/rrddata",
            &[("timeframe", "hour")],
        )
        .await;
    assert_eq!(r.status, 500);
}

#[tokio::test]
async fn rrd_names_pves_png_file_and_refuses_unknown_sources() {
    let f = start().await;
    let api = f.api("site-1");
    create_vm(&f, &api, "ml110-01", &[("vmid", "171")]).await;
    let path = "/nodes/ml110-01/qemu/171/rrd";
    let r = api
        .send("GET", path, &[("timeframe", "hour"), ("ds", "cpu,mem")])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.data()["filename"],
        "/var/lib/rrdcached/db/pve-vm-9.0/171_cpu_mem.png"
    );
    let r = api
        .send("GET", path, &[("timeframe", "hour"), ("ds", "cpu,bogus")])
        .await;
    assert_eq!(
        r.message(),
        "RRD error: No DS called 'bogus' in '/var/lib/rrdcached/db/pve-vm-9.0/171'\n"
    );
    let r = api
        .send(
            "GET",
            path,
            &[("timeframe", "hour"), ("ds", "cpu,mem,disk")],
        )
        .await;
    assert_eq!(r.message(), "fixme: no color definition\n");
}

#[tokio::test]
async fn a_storages_series_carries_its_size_and_use() {
    let f = start().await;
    let api = f.api("site-1");
    let st = api.get("/nodes/ml110-01/storage/local-lvm/status").await;
    let (total, used) = (
        st.data()["total"].as_f64().unwrap(),
        st.data()["used"].as_f64().unwrap(),
    );
    let r = api
        .send(
            "GET",
            "/nodes/ml110-01/storage/local-lvm/rrddata",
            &[("timeframe", "week")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let rows = r.data().as_array().unwrap();
    assert_eq!(rows.len(), 336);
    assert_eq!(rows[0]["time"].as_u64().unwrap() % 1800, 0);
    assert_eq!(figure(&rows[10], "total"), Some(total));
    assert_eq!(figure(&rows[10], "used"), Some(used));
    let r = api
        .send(
            "GET",
            "/nodes/ml110-01/storage/nope/rrddata",
            &[("timeframe", "week")],
        )
        .await;
    assert_eq!(r.message(), "storage 'nope' does not exist\n");
    let r = api
        .send(
            "GET",
            "/nodes/ml110-01/storage/local-lvm/rrd",
            &[("timeframe", "hour"), ("ds", "used")],
        )
        .await;
    assert_eq!(
        r.data()["filename"],
        "/var/lib/rrdcached/db/pve-storage-9.0/ml110-01/local-lvm_used.png"
    );
}
