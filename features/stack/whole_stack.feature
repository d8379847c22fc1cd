@stack
Feature: The whole stack: ProxmoxVM manifests to a quorate cluster, through the PVE API, on real guests
  The deployer makes seed 002's three PhotonCloud nodes through the PVE API of a lab-backed
  fake-proxmox: every VM is a real QEMU guest that boots the project's cloud image (imported with
  import-from, the cluster's packages baked in) and applies its cloud-init drive. The cluster
  provisioner then takes over on those VMs: certificates, node configs with the hosts mapping,
  files onto each VM's persistent disk over SSH, and a restart through the PVE API; a cloud-init
  per-boot script starts the member. Every later power change goes through the PVE API too.
  The scenarios tagged @reuses-lab share the guests: each @leaves-cluster-formed one hands its
  formed cluster to the next (and a sharded run keeps them on one shard).

  @leaves-cluster-formed @reuses-lab
  Scenario: The deployer makes the cluster's VMs and the cluster forms on them
    Given the PhotonCloud manifests for the lab-backed site
    When the deployer rolls them out
    Then every VM is running with the address its manifest asked for, as its guest agent reports it
    When the cluster provisioner takes over on the deployer's VMs
    Then the cluster has 3 started members and one leader
    And every member speaks only TLS on its client and peer ports and asks clients for a certificate
    And every member reports healthy
    When node01 writes "photoncloud/stack" = "formed"
    Then node03 reads "photoncloud/stack" = "formed"
    When node02 writes "photoncloud/scratch" = "gone-soon"
    And node03 deletes "photoncloud/scratch"
    Then node01 finds no "photoncloud/scratch"
    When every VM is rebooted through the PVE API
    Then the cluster has 3 started members and one leader
    And node02 reads "photoncloud/stack" = "formed"

  @leaves-cluster-formed @reuses-lab
  Scenario: Day 2 through the API: the leader's VM stopped, a new leader, the old one back
    Given the cluster formed on the deployer's VMs
    When the leader's VM is stopped through the PVE API
    Then the other two elect a new leader
    When a running member writes "photoncloud/day2" = "while-one-was-down"
    And the old leader's VM is started through the PVE API
    Then the cluster has 3 started members and one leader
    And the old leader reads "photoncloud/day2" = "while-one-was-down"

  @reuses-lab
  Scenario: Day 2: a VM destroyed through the API and re-created by a re-run of the deployer joins again from an empty disk
    Given the cluster formed on the deployer's VMs
    When node01 writes "photoncloud/before-replace" = "kept"
    And node03's VM is destroyed through the PVE API
    Then the other two keep a leader without node03
    When the deployer rolls them out again
    Then every VM is running with the address its manifest asked for, as its guest agent reports it
    And node03 is a new VM with an empty disk, reached at its old address
    When the cluster provisioner replaces node03's member
    Then the cluster has 3 started members and one leader
    And node03 reads "photoncloud/before-replace" = "kept"

  Scenario: A manifest without SSH keys: the guest boots, refuses SSH, and the cluster step names it
    Given the PhotonCloud manifests for the lab-backed site
    And node03's manifest carries no SSH keys
    When the deployer rolls them out
    Then every VM is running with the address its manifest asked for, as its guest agent reports it
    When the cluster provisioner is attempted on the deployer's VMs
    Then the cluster step fails naming node03 and "Permission denied"

  Scenario: A wrong netmask and gateway in ipconfig0: the guest applies them, its peers cannot reach it, its console says why
    Given the PhotonCloud manifests for the lab-backed site
    And node02's manifest asks for the address "192.168.100.12/30" with the gateway "192.168.100.254"
    When the deployer rolls them out
    Then every VM is running with the address its manifest asked for, as its guest agent reports it
    When the cluster provisioner is attempted on the deployer's VMs
    Then the cluster step fails naming node02 and "addrs=eth0=192.168.100.12/30"

  Scenario: A deployer that leaves the guest agent off: the VM runs, its address never comes, the deploy says why
    Given the PhotonCloud manifests for the lab-backed site
    And only node01's manifest
    And the deployer has the bug "no-guest-agent"
    And the deployer waits at most 60 s for a VM's address
    When the deployer rolls them out
    Then the deployer reports node01 running without an address, because "No QEMU guest agent configured"

  Scenario: A deployer that leaves the SCSI controller to PVE's default: the guest boots without its disk, the cluster step says so
    Given the PhotonCloud manifests for the lab-backed site
    And only node01's manifest
    And the deployer has the bug "default-scsi-controller"
    When the deployer rolls them out
    Then every VM is running with the address its manifest asked for, as its guest agent reports it
    When the cluster provisioner is attempted on the deployer's VMs
    Then the cluster step fails naming node01 and "/data is not mounted"
    And node01's console says "did not appear: its bus may lack a driver"

  Scenario: A deployer whose boot order names no bootable disk: the VM runs, the firmware finds nothing to boot, its console says so
    Given the PhotonCloud manifests for the lab-backed site
    And only node01's manifest
    And the deployer has the bug "boots-from-cloudinit-drive"
    And the deployer waits at most 45 s for a VM's address
    When the deployer rolls them out
    Then the deployer reports node01 running without an address, because "QEMU guest agent is not running"
    And node01's console says "No bootable device."

  Scenario: Two VMs given the same static address: the second guest finds it taken and keeps off it
    Given the PhotonCloud manifests for the lab-backed site
    And node03's manifest asks for the address "192.168.100.12/24" with the gateway "192.168.100.1"
    And the deployer waits at most 60 s for a VM's address
    When the deployer rolls out only node02, then all of them
    Then the deployer reports node03 running without an address, because "no IPv4 address"
    And node03's console says "address 192.168.100.12 is already in use by"

  Scenario: The same rollout on DHCP: the cluster forms on whatever addresses the guest agents report
    Given the PhotonCloud manifests for the lab-backed site
    And every manifest asks for an address from DHCP
    When the deployer rolls them out
    Then every VM is running with a distinct address from vmbr0's DHCP pool, as its guest agent reports it
    When the cluster provisioner takes over on the deployer's VMs
    Then the cluster has 3 started members and one leader
    When node02 writes "photoncloud/dhcp" = "leased"
    Then node01 reads "photoncloud/dhcp" = "leased"
