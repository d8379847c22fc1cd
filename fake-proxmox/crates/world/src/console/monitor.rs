//! QEMU's human monitor (HMP) as `POST …/monitor` reaches it: PVE's permission class per
//! command (qemu-server `HMPPerms`), and the answers of the commands deployers and
//! operators use. Commands that change the guest go through the executor, so a lab guest
//! really pauses, resets or powers down.

use crate::qemu::model::{Power, Vm};
use crate::version::PveVersion;

/// Who may run a command: everyone with access to the monitor, `Sys.Modify` on `/`, or
/// root only.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Needs {
    /// Anyone who may use the monitor (`Sys.Audit` or `Sys.Modify` on the VM).
    Nothing,
    /// `Sys.Modify` on `/`.
    SysModify,
    /// `root@pam` only.
    Root,
}

/// PVE's table of HMP commands and the permission each needs; a command not in it is
/// root-only.
pub fn needs(command: &str) -> Option<Needs> {
    const NONE: &[&str] = &["help", "?", "info"];
    const SYS_MODIFY: &[&str] = &[
        "gpa2hpa",
        "gpa2hva",
        "i",
        "announce_self",
        "backup_cancel",
        "balloon",
        "block_job_cancel",
        "block_job_complete",
        "block_job_pause",
        "block_job_resume",
        "block_job_set_speed",
        "block_resize",
        "block_set_io_throttle",
        "boot_set",
        "calc_dirty_rate",
        "cancel_vcpu_dirty_limit",
        "chardev-send-break",
        "closefd",
        "commit",
        "cont",
        "c",
        "cpu",
        "delvm",
        "eject",
        "exit_preconfig",
        "expire_password",
        "getfd",
        "gva2gpa",
        "loadvm",
        "log",
        "migrate_cancel",
        "migrate_continue",
        "migrate_pause",
        "migrate_set_capability",
        "migrate_set_parameter",
        "migrate_start_postcopy",
        "mouse_button",
        "mouse_move",
        "mouse_set",
        "one-insn-per-tb",
        "print",
        "p",
        "qemu-io",
        "qom-get",
        "qom-list",
        "quit",
        "q",
        "replay_break",
        "replay_delete_break",
        "replay_seek",
        "ringbuf_read",
        "ringbuf_write",
        "savevm",
        "sendkey",
        "set_link",
        "set_password",
        "set_vcpu_dirty_limit",
        "snapshot_blkdev_internal",
        "snapshot_delete_blkdev_internal",
        "stopcapture",
        "stop",
        "s",
        "sum",
        "sync-profile",
        "system_powerdown",
        "system_reset",
        "system_wakeup",
        "trace-event",
        "x",
        "x_colo_lost_heartbeat",
        "xp",
    ];
    const ROOT: &[&str] = &[
        "backup",
        "block_stream",
        "change",
        "chardev-add",
        "chardev-change",
        "chardev-remove",
        "client_migrate_info",
        "device_add",
        "device_del",
        "drive_add",
        "drive_backup",
        "drive_del",
        "drive_mirror",
        "dump-guest-memory",
        "dumpdtb",
        "gdbserver",
        "hostfwd_add",
        "hostfwd_remove",
        "logfile",
        "mce",
        "memsave",
        "migrate",
        "migrate_incoming",
        "migrate_recover",
        "nbd_server_add",
        "nbd_server_remove",
        "nbd_server_start",
        "nbd_server_stop",
        "netdev_add",
        "netdev_del",
        "nmi",
        "o",
        "object_add",
        "object_del",
        "pcie_aer_inject_error",
        "pmemsave",
        "qom-set",
        "savevm-end",
        "savevm-start",
        "screendump",
        "snapshot_blkdev",
        "watchdog_action",
        "wavcapture",
        "xen-event-inject",
        "xen-event-list",
    ];
    if NONE.contains(&command) {
        Some(Needs::Nothing)
    } else if SYS_MODIFY.contains(&command) {
        Some(Needs::SysModify)
    } else if ROOT.contains(&command) {
        Some(Needs::Root)
    } else {
        None
    }
}

/// What a command does to the guest, for the caller to carry out through the executor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Effect {
    /// Nothing to do.
    None,
    /// `stop`: pause the guest.
    Pause,
    /// `cont`: resume a paused guest.
    Resume,
    /// `system_reset`: hard reset.
    Reset,
    /// `system_powerdown`: ACPI power button.
    Powerdown,
    /// `quit`: QEMU exits, the VM stops.
    Quit,
}

/// QEMU's key names (`QKeyCode`) that `sendkey` takes, besides `0xNN` codes.
const KEYS: &[&str] = &[
    "unmapped",
    "shift",
    "shift_r",
    "alt",
    "alt_r",
    "ctrl",
    "ctrl_r",
    "menu",
    "esc",
    "1",
    "2",
    "3",
    "4",
    "5",
    "6",
    "7",
    "8",
    "9",
    "0",
    "minus",
    "equal",
    "backspace",
    "tab",
    "q",
    "w",
    "e",
    "r",
    "t",
    "y",
    "u",
    "i",
    "o",
    "p",
    "bracket_left",
    "bracket_right",
    "ret",
    "a",
    "s",
    "d",
    "f",
    "g",
    "h",
    "j",
    "k",
    "l",
    "semicolon",
    "apostrophe",
    "grave_accent",
    "backslash",
    "z",
    "x",
    "c",
    "v",
    "b",
    "n",
    "m",
    "comma",
    "dot",
    "slash",
    "asterisk",
    "spc",
    "caps_lock",
    "f1",
    "f2",
    "f3",
    "f4",
    "f5",
    "f6",
    "f7",
    "f8",
    "f9",
    "f10",
    "num_lock",
    "scroll_lock",
    "kp_divide",
    "kp_multiply",
    "kp_subtract",
    "kp_add",
    "kp_enter",
    "kp_decimal",
    "sysrq",
    "kp_0",
    "kp_1",
    "kp_2",
    "kp_3",
    "kp_4",
    "kp_5",
    "kp_6",
    "kp_7",
    "kp_8",
    "kp_9",
    "less",
    "f11",
    "f12",
    "print",
    "home",
    "pgup",
    "pgdn",
    "end",
    "left",
    "up",
    "down",
    "right",
    "insert",
    "delete",
    "stop",
    "again",
    "props",
    "undo",
    "front",
    "copy",
    "open",
    "paste",
    "find",
    "cut",
    "lf",
    "help",
    "meta_l",
    "meta_r",
    "compose",
    "pause",
    "ro",
    "hiragana",
    "henkan",
    "yen",
    "muhenkan",
    "katakanahiragana",
    "kp_comma",
    "kp_equals",
    "power",
    "sleep",
    "wake",
    "audionext",
    "audioprev",
    "audiostop",
    "audioplay",
    "audiomute",
    "volumeup",
    "volumedown",
    "mediaselect",
    "mail",
    "calculator",
    "computer",
    "ac_home",
    "ac_back",
    "ac_forward",
    "ac_refresh",
    "ac_bookmarks",
    "lang1",
    "lang2",
    "f13",
    "f14",
    "f15",
    "f16",
    "f17",
    "f18",
    "f19",
    "f20",
    "f21",
    "f22",
    "f23",
    "f24",
];

/// HMP's `sendkey` check of a `ctrl-alt-delete` combination: `""` when every key is known,
/// else QEMU's complaint naming the first unknown one.
pub fn sendkey_error(keys: &str) -> String {
    for key in keys.split('-') {
        let hex = key
            .strip_prefix("0x")
            .is_some_and(|h| !h.is_empty() && u32::from_str_radix(h, 16).is_ok());
        if !hex && !KEYS.contains(&key) {
            return format!("invalid parameter: {key}\n");
        }
    }
    String::new()
}

/// The monitor's answer to `line` on a running VM, and what it does to the guest.
pub fn run(vm: &Vm, line: &str, qemu_version: &str) -> (String, Effect) {
    let mut words = line.split_whitespace();
    let cmd = words.next().unwrap_or_default();
    let args: Vec<&str> = words.collect();
    let status = match vm.power {
        Power::Paused => "paused",
        Power::IoError => "paused (io-error)",
        _ => "running",
    };
    match (cmd, args.as_slice()) {
        ("info", ["status"]) => (format!("VM status: {status}\r\n"), Effect::None),
        ("info", ["version"]) => (format!("{qemu_version}\r\n"), Effect::None),
        ("info", ["name"]) => (format!("{}\r\n", vm.name()), Effect::None),
        ("info", ["kvm"]) => ("kvm support: enabled\r\n".into(), Effect::None),
        ("info", ["uuid"]) => {
            let uuid = vm
                .config
                .get("smbios1")
                .and_then(|s| crate::qemu::model::find_prop(s, "uuid", "uuid"))
                .unwrap_or("00000000-0000-0000-0000-000000000000");
            (format!("{uuid}\r\n"), Effect::None)
        }
        ("info", ["cpus"]) => {
            let mut out = String::new();
            for i in 0..vm.cpus() {
                let mark = if i == 0 { "*" } else { " " };
                out.push_str(&format!("{mark}CPU #{i}: thread_id={}\r\n", vm.pid.unwrap_or(0) + i + 1));
            }
            (out, Effect::None)
        }
        ("info", []) => (
            "info balloon  -- show balloon information\r\ninfo block  -- show info of one block device or all block devices\r\ninfo cpus  -- show infos for each CPU\r\ninfo kvm  -- show KVM information\r\ninfo name  -- show the current VM name\r\ninfo status  -- show the current VM status (running|paused)\r\ninfo uuid  -- show the current VM UUID\r\ninfo version  -- show the version of QEMU\r\n".into(),
            Effect::None,
        ),
        ("info", [what, ..]) => (
            format!("unknown command: 'info {what}'\r\n"),
            Effect::None,
        ),
        ("help" | "?", _) => (
            "cont|c  -- resume emulation\r\ninfo [subcommand]  -- show various information about the system state\r\nsendkey keys [hold_ms] -- send keys to the VM\r\nstop|s  -- stop emulation\r\nsystem_powerdown  -- send system power down event\r\nsystem_reset  -- reset the system\r\nquit|q  -- quit the emulator\r\n".into(),
            Effect::None,
        ),
        ("stop" | "s", []) => (String::new(), Effect::Pause),
        ("cont" | "c", []) => (String::new(), Effect::Resume),
        ("system_reset", []) => (String::new(), Effect::Reset),
        ("system_powerdown", []) => (String::new(), Effect::Powerdown),
        ("quit" | "q", []) => (String::new(), Effect::Quit),
        ("sendkey", [keys, ..]) => (sendkey_error(keys), Effect::None),
        (c, _) if needs(c).is_some() => (
            format!("{c}: the fake's monitor does not emulate this command\r\n"),
            Effect::None,
        ),
        (c, _) => (format!("unknown command: '{c}'\r\n"), Effect::None),
    }
}

/// What HMP's `info version` prints for a PVE release: the QEMU it runs (the package
/// suffix pve-qemu-kvm adds is left out).
pub fn qemu_version(v: PveVersion) -> &'static str {
    crate::qemu::status::qemu_of(v).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_classes_are_pves() {
        assert_eq!(needs("info"), Some(Needs::Nothing));
        assert_eq!(needs("stop"), Some(Needs::SysModify));
        assert_eq!(needs("device_add"), Some(Needs::Root));
        assert_eq!(needs("frobnicate"), None);
    }

    #[test]
    fn sendkey_names_the_first_unknown_key() {
        assert_eq!(sendkey_error("ctrl-alt-delete"), "");
        assert_eq!(sendkey_error("0x1d"), "");
        assert_eq!(sendkey_error("ctrl-banana"), "invalid parameter: banana\n");
    }
}
