@stack
Feature: Containers in the whole stack: one cluster across VMs and a container, all made through the PVE API
  A team runs part of its cluster in LXC containers: seed 002's node03 is a `kind: ProxmoxContainer`
  made from vm-lab's container template, which carries the same etcd the VMs' golden image bakes
  in. The team uploads the template to the site's `local` storage through PVE's upload route;
  the deployer makes node01 and node02 (real QEMU guests) and node03 (a real Linux container on
  the same bridge) through the PVE API of a lab-backed fake-proxmox. The cluster provisioner then
  forms one cluster across them: node03 is reached over SSH like the VMs (the fake's
  `…/lxc/{vmid}/guest` route names how, and its console), its files go into its root file system,
  and every restart of it is `POST …/lxc/{vmid}/status/reboot`. The member starts at every boot
  of the container from `/etc/rc.local`, which the template's init runs as Debian's
  `rc-local.service` does, its output on the container's console.

  Scenario: Two VMs and a container: the deployer makes them, one cluster forms across them
    Given the PhotonCloud manifests for the lab-backed site, node03 as a container
    And the team uploads the container template through the PVE API
    When the deployer rolls them out
    Then every guest is running with the address its manifest asked for, as PVE reports it
    And node03 runs as a container
    And node03's console says "CT-READY hostname=node03 addrs=192.168.100.13/24"
    When the cluster provisioner takes over on the deployer's VMs
    Then the cluster has 3 started members and one leader
    And every member speaks only TLS on its client and peer ports and asks clients for a certificate
    And the PVE API restarted node03 with 1 container reboot
    And node03's console says "cluster-boot: node03 first boot, bootstrapping cluster photoncloud"
    When node03 writes "photoncloud/ct" = "from-a-container"
    Then node01 reads "photoncloud/ct" = "from-a-container"
    When node02 writes "photoncloud/vm" = "from-a-vm"
    Then node03 reads "photoncloud/vm" = "from-a-vm"
    When node03's container is rebooted through the PVE API
    Then the cluster has 3 started members and one leader
    And the PVE API restarted node03 with 2 container reboots
    And node03's console says "cluster-boot: node03 rejoins with the data on its disk"
    And node03 reads "photoncloud/ct" = "from-a-container"

  Scenario: A deployer that creates a container without its SSH keys: it runs, refuses SSH, the cluster step names it
    Given the PhotonCloud manifests for the lab-backed site, node03 as a container
    And only node03's manifest
    And the team uploads the container template through the PVE API
    And the deployer has the bug "container-without-ssh-keys"
    When the deployer rolls them out
    Then every guest is running with the address its manifest asked for, as PVE reports it
    When the cluster provisioner is attempted on the deployer's VMs
    Then the cluster step fails naming node03 and "Permission denied"

  Scenario: A wrong prefix and gateway in a container's ip=: it applies them, nobody reaches it, its console says what it applied
    Given the PhotonCloud manifests for the lab-backed site, node03 as a container
    And only node03's manifest
    And node03's manifest asks for the address "192.168.100.13/30" with the gateway "192.168.100.254"
    And the team uploads the container template through the PVE API
    When the deployer rolls them out
    Then every guest is running with the address its manifest asked for, as PVE reports it
    When the cluster provisioner is attempted on the deployer's VMs
    Then the cluster step fails naming node03 and "addrs=192.168.100.13/30"
