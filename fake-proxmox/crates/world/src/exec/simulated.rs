//! The simulated executor: no process. A start draws a pid from the site's seeded random
//! source; the guest agent answers once the site's boot delay has passed on its clock.

use rand::Rng;
use serde_json::Value;

use super::{AgentCall, Executor, Host};
use crate::qemu::model::{Power, Vm};

/// The executor without real guests: starts, stops and agent calls are decided by the
/// model and the simulated guest OS alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct Simulated;

/// QEMU is gone: no pid, no agent.
fn gone(vm: &mut Vm) {
    vm.power = Power::Stopped;
    vm.pid = None;
    vm.agent_ready_at = None;
    vm.guest.power_cycle();
}

impl Executor for Simulated {
    fn start(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String> {
        let pid = host.rng.random_range(2_000..4_000_000);
        vm.power = Power::Running;
        vm.started_at = host.now;
        vm.pid = Some(pid);
        vm.agent_ready_at = Some(host.now + host.boot_delay_secs);
        vm.guest.power_cycle();
        Ok(())
    }

    fn start_from_state(
        &self,
        vm: &mut Vm,
        _vmstate: &str,
        host: &mut Host<'_>,
    ) -> Result<(), String> {
        let pid = host.rng.random_range(2_000..4_000_000);
        vm.power = Power::Running;
        vm.started_at = host.now;
        vm.pid = Some(pid);
        vm.agent_ready_at = Some(host.now);
        Ok(())
    }

    fn stop(&self, vm: &mut Vm, _host: &mut Host<'_>) -> Result<(), String> {
        gone(vm);
        Ok(())
    }

    fn shutdown(&self, vm: &mut Vm, _host: &mut Host<'_>) -> Result<(), String> {
        gone(vm);
        Ok(())
    }

    fn reset(&self, vm: &mut Vm, host: &mut Host<'_>) -> Result<(), String> {
        vm.power = Power::Running;
        vm.agent_ready_at = Some(host.now + host.boot_delay_secs);
        vm.guest.power_cycle();
        Ok(())
    }

    fn suspend(&self, vm: &mut Vm, _host: &mut Host<'_>) -> Result<(), String> {
        vm.power = Power::Paused;
        Ok(())
    }

    fn resume(&self, vm: &mut Vm, _host: &mut Host<'_>) -> Result<(), String> {
        vm.power = Power::Running;
        Ok(())
    }

    fn agent_ready(&self, vm: &Vm, now: f64) -> bool {
        vm.agent_ready_at.is_some_and(|t| t <= now)
    }

    fn agent(&self, call: &mut AgentCall<'_>) -> Result<Value, String> {
        Ok(super::guest::answer(call))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;

    fn vm() -> Vm {
        Vm::stopped(100, "pve", BTreeMap::new(), None)
    }

    #[test]
    fn agent_answers_after_the_boot_delay_until_qemu_stops() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut host = Host {
            rng: &mut rng,
            boot_delay_secs: 20.0,
            now: 100.0,
            bridges: &[],
        };
        let mut v = vm();
        assert!(Simulated.start(&mut v, &mut host).is_ok());
        assert!(v.pid.is_some());
        assert!(!Simulated.agent_ready(&v, 119.0));
        assert!(Simulated.agent_ready(&v, 120.0));
        assert!(Simulated.stop(&mut v, &mut host).is_ok());
        assert_eq!((v.power, v.pid), (Power::Stopped, None));
        assert!(!Simulated.agent_ready(&v, 130.0));
    }
}
