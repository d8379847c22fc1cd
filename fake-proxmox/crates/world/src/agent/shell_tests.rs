#![allow(clippy::unwrap_used)]

use super::*;

fn run(os: &mut GuestOs, argv: &[&str]) -> Result<Outcome, String> {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    spawn(os, "web1", &argv, b"")
}

fn guest() -> GuestOs {
    let mut g = GuestOs::default();
    g.seed("web1", &Default::default());
    g
}

#[test]
fn a_shell_line_with_redirects_and_lists() {
    let mut g = guest();
    let o = run(
        &mut g,
        &[
            "sh",
            "-c",
            "echo a > /tmp/f && echo b >> /tmp/f; cat /tmp/f | grep b",
        ],
    )
    .unwrap();
    assert_eq!((o.exitcode, o.out.as_slice()), (0, b"b\n".as_slice()));
    assert_eq!(g.files["/tmp/f"], b"a\nb\n");
    let o = run(&mut g, &["sh", "-c", "false || echo 'fell back'"]).unwrap();
    assert_eq!(o.out, b"fell back\n");
}

#[test]
fn unknown_programs_fail_the_spawn_or_exit_127_in_sh() {
    let mut g = guest();
    assert_eq!(
        run(&mut g, &["nope"]).unwrap_err(),
        "Failed to execute child process “nope” (No such file or directory)"
    );
    let o = run(&mut g, &["/bin/sh", "-c", "nope --x"]).unwrap();
    assert_eq!(
        (o.exitcode, o.err.as_slice()),
        (127, b"sh: 1: nope: not found\n".as_slice())
    );
}

#[test]
fn a_written_script_runs_through_sh_or_once_executable() {
    let mut g = guest();
    g.files.insert(
        "/root/setup.sh".into(),
        b"#!/bin/sh\nset -e\necho start\nmkdir -p /opt/app\nmissing-tool\necho never\n".to_vec(),
    );
    let o = run(&mut g, &["/bin/sh", "/root/setup.sh"]).unwrap();
    assert_eq!(o.exitcode, 127);
    assert_eq!(o.out, b"start\n");
    assert_eq!(o.err, b"/root/setup.sh: 5: missing-tool: not found\n");
    assert!(g.is_dir("/opt/app"));
    assert_eq!(
        run(&mut g, &["/root/setup.sh"]).unwrap_err(),
        "Failed to execute child process “/root/setup.sh” (Permission denied)"
    );
    run(&mut g, &["chmod", "+x", "/root/setup.sh"]).unwrap();
    assert_eq!(run(&mut g, &["/root/setup.sh"]).unwrap().exitcode, 127);
}

#[test]
fn a_script_running_itself_stops_at_the_fork_limit() {
    let mut g = guest();
    g.files
        .insert("/root/loop.sh".into(), b"sh /root/loop.sh\n".to_vec());
    let o = run(&mut g, &["sh", "/root/loop.sh"]).unwrap();
    assert_eq!(o.exitcode, 2);
    assert!(String::from_utf8_lossy(&o.err).ends_with("Cannot fork\n"));
}

#[test]
fn variables_status_and_substitution_expand_when_the_command_runs() {
    let mut g = guest();
    let o = run(
        &mut g,
        &[
            "sh",
            "-c",
            "APP=/opt/app; mkdir -p $APP; false; echo \"rc=$? host=$(hostname)\" > \"${APP}/info\"; echo '$APP'",
        ],
    )
    .unwrap();
    assert_eq!(o.out, b"$APP\n");
    assert_eq!(g.files["/opt/app/info"], b"rc=1 host=web1\n");
}

#[test]
fn if_and_for_over_several_lines() {
    let mut g = guest();
    let script = "set -e\nfor d in a b; do\n  mkdir -p /srv/$d\ndone\n\
                  if [ -d /srv/b ]; then\n  echo has b\nelif true; then\n  echo no\nelse\n  echo never\nfi\n\
                  cd /srv && touch a/marker\nif grep -q x /etc/hostname; then echo x; fi\necho end\n";
    g.files
        .insert("/root/s.sh".into(), script.as_bytes().to_vec());
    let o = run(&mut g, &["bash", "/root/s.sh"]).unwrap();
    assert_eq!(String::from_utf8_lossy(&o.out), "has b\nend\n");
    assert_eq!(o.exitcode, 0);
    assert!(g.files.contains_key("/srv/a/marker"));
    let o = run(&mut g, &["sh", "-c", "if true; then echo x"]).unwrap();
    assert_eq!(
        (o.exitcode, String::from_utf8_lossy(&o.err).into_owned()),
        (
            2,
            "sh: 1: Syntax error: end of file unexpected (expecting \"fi\")\n".into()
        )
    );
}

#[test]
fn sleep_takes_simulated_time_and_exit_ends_the_script() {
    let mut g = guest();
    let o = run(&mut g, &["bash", "-c", "sleep 5; exit 3; echo no"]).unwrap();
    assert_eq!((o.exitcode, o.secs, o.out.len()), (3, 5.0, 0));
}

#[test]
fn a_script_that_forks_itself_over_and_over_is_cut_off() {
    let mut g = guest();
    g.files.insert(
        "/root/bomb.sh".into(),
        b"sh /root/bomb.sh; sh /root/bomb.sh; sh /root/bomb.sh\n".to_vec(),
    );
    let t = std::time::Instant::now();
    let o = run(&mut g, &["sh", "/root/bomb.sh"]).unwrap();
    assert!(String::from_utf8_lossy(&o.err).contains("Cannot fork"));
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(400))]

    /// Whatever a caller sends, the simulated guest answers (no panic, bounded output).
    #[test]
    fn any_script_runs_to_an_answer(
        script in "[a-z0-9 $(){};|&<>'\"\\\\\n=?!#./-]{0,80}",
        text in "\\PC{0,40}",
    ) {
        let mut g = guest();
        for s in [&script, &text] {
            let o = run(&mut g, &["sh", "-c", s]);
            if let Ok(o) = o {
                proptest::prop_assert!(o.out.len() <= STREAM_CAP);
            }
        }
    }
}
