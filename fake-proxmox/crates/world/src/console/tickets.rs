//! PVE's short-lived tickets (`PVEVNC:<HEX time>::<signature>`), valid from 20 s before to
//! 40 s after they were made and bound to a user, a path and a port; VNC passwords.

use rand::Rng;

use crate::access::model::Access;

/// PVE checks a short-lived ticket's age against this window (seconds).
const EARLIEST: f64 = -20.0;
const LATEST: f64 = 40.0;

fn secret(userid: &str, path: &str, port: Option<u16>) -> String {
    match port {
        Some(p) => format!("{userid}:{path}:{p}"),
        None => format!("{userid}:{path}"),
    }
}

/// A short-lived ticket `<prefix>:<HEX time>::<signature>` (e.g. `PVEVNC`) made at `now`,
/// bound to `userid`, `path` and, when given, `port`.
pub fn assemble(
    access: &Access,
    prefix: &str,
    userid: &str,
    path: &str,
    port: Option<u16>,
    now: f64,
) -> String {
    let plain = format!("{prefix}:{:08X}", now.max(0.0) as u64);
    let sig = access.sign(&format!("{plain}:{}", secret(userid, path, port)));
    format!("{plain}::{sig}")
}

/// Whether `ticket` was made by [`assemble`] for these and is still valid. A VNC ticket
/// may carry the 8-character VNC password in front (`PASSWORD:PVEVNC:…`).
pub fn verify(
    access: &Access,
    prefix: &str,
    ticket: &str,
    userid: &str,
    path: &str,
    port: Option<u16>,
    now: f64,
) -> bool {
    let ticket = match ticket.get(9..) {
        Some(rest) if ticket.as_bytes().get(8) == Some(&b':') && rest.starts_with(prefix) => rest,
        _ => ticket,
    };
    let Some((plain, sig)) = ticket.split_once("::") else {
        return false;
    };
    let Some(ts) = plain
        .strip_prefix(prefix)
        .and_then(|r| r.strip_prefix(':'))
        .filter(|ts| ts.len() == 8)
        .and_then(|ts| u64::from_str_radix(ts, 16).ok())
    else {
        return false;
    };
    let age = now - ts as f64;
    (EARLIEST..=LATEST).contains(&age)
        && access.sign(&format!("{plain}:{}", secret(userid, path, port))) == sig
}

/// PVE's VNC password: 8 printable ASCII characters (`!` to `~`).
pub fn vnc_password(rng: &mut impl Rng) -> String {
    (0..8)
        .map(|_| char::from(rng.random_range(b'!'..=b'~')))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_is_bound_to_user_path_port_and_time() {
        let a = Access::new([7; 32]);
        let t = assemble(&a, "PVEVNC", "root@pam", "/vms/100", Some(5900), 1000.0);
        assert!(t.starts_with("PVEVNC:000003E8::"));
        assert!(verify(
            &a,
            "PVEVNC",
            &t,
            "root@pam",
            "/vms/100",
            Some(5900),
            1030.0
        ));
        let pw = format!("abcdefgh:{t}");
        assert!(verify(
            &a,
            "PVEVNC",
            &pw,
            "root@pam",
            "/vms/100",
            Some(5900),
            1000.0
        ));
        assert!(!verify(
            &a,
            "PVEVNC",
            &t,
            "root@pam",
            "/vms/100",
            Some(5901),
            1000.0
        ));
        assert!(!verify(
            &a,
            "PVEVNC",
            &t,
            "joe@pve",
            "/vms/100",
            Some(5900),
            1000.0
        ));
        assert!(!verify(
            &a,
            "PVEVNC",
            &t,
            "root@pam",
            "/vms/101",
            Some(5900),
            1000.0
        ));
        assert!(!verify(
            &a,
            "PVEVNC",
            &t,
            "root@pam",
            "/vms/100",
            Some(5900),
            1041.0
        ));
        assert!(!verify(
            &a,
            "PVETUNNEL",
            &t,
            "root@pam",
            "/vms/100",
            Some(5900),
            1000.0
        ));
    }
}
