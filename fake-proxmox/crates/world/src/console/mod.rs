//! A guest's consoles (a VM's and a container's: `vncproxy`, `termproxy`, `vncwebsocket`,
//! `spiceproxy`) and a VM's monitor: `sendkey`, `monitor` (QEMU's human monitor) and
//! `dbus-vmstate`.

pub mod monitor;
pub mod proxy;
pub mod tickets;
