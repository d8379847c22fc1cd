//! A VM's consoles and monitor: `vncproxy`, `termproxy`, `vncwebsocket`, `spiceproxy`,
//! `sendkey`, `monitor` (QEMU's human monitor) and `dbus-vmstate`.

pub mod monitor;
pub mod proxy;
pub mod tickets;
