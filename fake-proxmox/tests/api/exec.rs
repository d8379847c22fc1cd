//! The execution seam from outside: a fake started with an executor of the caller's.

use std::sync::Arc;

use fake_proxmox::exec::{AgentCall, Executor, Host, Simulated};
use fake_proxmox::qemu::model::Vm;
use fake_proxmox::{ClockMode, FakeProxmox};
use serde_json::Value;

use crate::common::*;

const NO_KVM: &str = "kvm: failed to initialize KVM: No such file or directory";

/// Runs like `Simulated`, except that no guest ever starts.
#[derive(Debug)]
struct NoKvm;

impl Executor for NoKvm {
    fn start(&self, _vm: &mut Vm, _host: &mut Host<'_>) -> Result<(), String> {
        Err(NO_KVM.into())
    }
    fn start_from_state(&self, _vm: &mut Vm, _s: &str, _host: &mut Host<'_>) -> Result<(), String> {
        Err(NO_KVM.into())
    }
    fn stop(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String> {
        Simulated.stop(vm, host)
    }
    fn shutdown(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String> {
        Simulated.shutdown(vm, host)
    }
    fn reset(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String> {
        Simulated.reset(vm, host)
    }
    fn suspend(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String> {
        Simulated.suspend(vm, host)
    }
    fn resume(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String> {
        Simulated.resume(vm, host)
    }
    fn agent_ready(&self, vm: &Vm, now: f64) -> bool {
        Simulated.agent_ready(vm, now)
    }
    fn agent(&self, call: &mut AgentCall<'_>) -> Result<Value, String> {
        Simulated.agent(call)
    }
}

async fn start_fails(f: &Fake) {
    let api = f.api("site-1");
    let st = create_vm(f, &api, "ml110-01", &[("vmid", "100"), ("memory", "512")]).await;
    assert_eq!(st["exitstatus"], "OK");
    let r = api.post("/nodes/ml110-01/qemu/100/status/start", &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let upid = r.data().as_str().unwrap().to_string();
    let st = wait_task(f, &api, "ml110-01", &upid).await;
    assert_eq!(st["exitstatus"], NO_KVM);
    let cur = api.get("/nodes/ml110-01/qemu/100/status/current").await;
    assert_eq!(cur.data()["status"], "stopped");
}

#[tokio::test]
async fn another_executor_runs_the_vms_and_survives_a_reset() {
    let fake = FakeProxmox::builder()
        .auth_failure_delay(false)
        .clock(ClockMode::Stepped)
        .executor(Arc::new(NoKvm))
        .start()
        .await
        .expect("fake starts");
    let f = Fake { fake };
    start_fails(&f).await;
    f.ctl("site-1").reset().await.unwrap();
    start_fails(&f).await;
}
