//! `rehearse --stack` killed in the middle (SIGTERM, as a CI timeout sends it, once its guests
//! run) leaves nothing behind: no QEMU, no process of the lab's namespace, no file in its
//! temporary directory. (Run to its end, the same code forms the cluster: the `@stack` features.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vm_lab::namespace::{alive, pids_mentioning};

#[test]
fn a_killed_stack_rehearsal_leaves_no_guest_and_no_file() {
    let tmp = tempfile::tempdir().unwrap();
    let own_tmp = tmp.path().join("tmp");
    std::fs::create_dir_all(&own_tmp).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_provision-harness"))
        .args(["rehearse", "--stack", "--no-html"])
        .env("TMPDIR", &own_tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("provision-harness runs");
    // Wait until its guests run (QEMU processes whose command lines name its directory).
    let start = Instant::now();
    let qemus = loop {
        let qemus: Vec<u32> = pids_mentioning(&own_tmp)
            .into_iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.starts_with("qemu-system"))
            })
            .collect();
        if qemus.len() >= 3 {
            break qemus;
        }
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            panic!("rehearse --stack ended ({st}) before its guests ran:\n{err}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "no three guests within 600 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143), "{status}");
    let end = Instant::now();
    while (qemus.iter().any(|p| alive(*p)) || !pids_mentioning(&own_tmp).is_empty())
        && end.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !qemus.iter().any(|p| alive(*p)),
        "a guest outlived the killed rehearsal"
    );
    assert_eq!(pids_mentioning(&own_tmp), Vec::<u32>::new());
    let left: Vec<_> = std::fs::read_dir(&own_tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
