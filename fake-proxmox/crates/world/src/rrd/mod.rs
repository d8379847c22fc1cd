//! `rrddata` and `rrd`: the time series PVE's status daemon records every 10 s for each
//! guest (VMs and containers alike, in `pve-vm-9.0` files) and storage, read back at a timeframe's resolution. The fake keeps no samples: it derives
//! each row from what the model knows (when the guest was made and started, its size, the
//! simulated load rates `status/current` reports), which is what a recorded series would hold.

pub mod series;
