//! Unit tests of `FileDisks`' layout and command lines.
#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn directory_storages_use_pves_layout() {
    let d = Path::new("/s");
    let p = |v| volume_path(d, StorageType::Dir, v).unwrap();
    assert_eq!(
        p("100/vm-100-disk-0.qcow2"),
        Path::new("/s/images/100/vm-100-disk-0.qcow2")
    );
    assert_eq!(
        p("100/vm-100-cloudinit.qcow2"),
        Path::new("/s/images/100/vm-100-cloudinit.qcow2")
    );
    assert_eq!(p("iso/ubuntu.img"), Path::new("/s/template/iso/ubuntu.img"));
    assert_eq!(
        p("vztmpl/d.tar.zst"),
        Path::new("/s/template/cache/d.tar.zst")
    );
    assert_eq!(p("import/noble.qcow2"), Path::new("/s/import/noble.qcow2"));
    assert_eq!(p("snippets/user.yaml"), Path::new("/s/snippets/user.yaml"));
    assert_eq!(p("backup/vzdump.vma"), Path::new("/s/dump/vzdump.vma"));
}

#[test]
fn block_storages_are_one_raw_file_per_volume() {
    let d = Path::new("/lvm");
    assert_eq!(
        volume_path(d, StorageType::LvmThin, "vm-100-disk-0").unwrap(),
        Path::new("/lvm/vm-100-disk-0")
    );
    assert_eq!(volume_path(d, StorageType::LvmThin, "a/b"), None);
}

#[test]
fn names_that_leave_the_directory_have_no_path() {
    let d = Path::new("/s");
    for bad in ["snippets/..", "../x", "iso/../../x.iso", "/etc/passwd", ""] {
        assert_eq!(volume_path(d, StorageType::Dir, bad), None, "{bad}");
    }
    assert_eq!(volume_path(d, StorageType::LvmThin, ".."), None);
}

#[test]
fn convert_is_pves_command_line() {
    let a = convert_args(
        Path::new("/s/import/x.qcow2"),
        "qcow2",
        Path::new("/t/vm-1-disk-0"),
        "raw",
        StorageType::LvmThin,
    );
    assert_eq!(
        shown("/usr/bin/qemu-img", &a),
        "/usr/bin/qemu-img convert -p -n -f qcow2 -O raw /s/import/x.qcow2 /t/vm-1-disk-0"
    );
    let z = convert_args(
        Path::new("a"),
        "raw",
        Path::new("b"),
        "raw",
        StorageType::ZfsPool,
    );
    assert_eq!(
        shown("qemu-img", &z),
        "qemu-img convert -p -n -t none -f raw -O raw a b"
    );
    assert_eq!(
        shown("qemu-img", &create_args(Path::new("/v"), "qcow2", 4 << 20)),
        "qemu-img create -q -f qcow2 /v 4194304"
    );
    assert_eq!(
        shown("qemu-img", &resize_args(Path::new("/v"), "raw", 1 << 30)),
        "qemu-img resize -q -f raw /v 1073741824"
    );
    assert_eq!(
        shown(
            "genisoimage",
            &genisoimage_args("cidata", Path::new("/w/c.iso"), Path::new("/w/root"))
        ),
        "genisoimage -quiet -iso-level 3 -J -R -V cidata -o /w/c.iso /w/root"
    );
}

#[test]
fn progress_is_logged_as_pve_prints_it() {
    let out = "    (0.00/100%)\r    (50.00/100%)\r    (100.00/100%)\r\n";
    assert_eq!(
        progress_lines(out, 2 << 30),
        [
            "transferred 0.0 B of 2.0 GiB (0.00%)",
            "transferred 1.0 GiB of 2.0 GiB (50.00%)",
            "transferred 2.0 GiB of 2.0 GiB (100.00%)",
        ]
    );
    assert!(progress_lines("qemu-img: error\n", 1).is_empty());
}
