//! vm-lab: a rootless QEMU lab driver.
