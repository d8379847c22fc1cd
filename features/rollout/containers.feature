@containers
Feature: LXC containers beside the VMs (kind: ProxmoxContainer)
  Teams roll out containers through the same API as VMs: a ProxmoxContainer manifest has the
  ProxmoxVM shape, its image is an OS template (a vztmpl volume) and its disk the root
  filesystem. Containers share the VMID space, the nodes and the storages with VMs; PVE makes
  them in one create call (no import, no cloud-init drive) and reports their addresses itself.

  Background:
    Given a Proxmox test cluster with the seed's two sites
    And the deployer authenticates with the API token "root@pam!harness"
    And the cloud image is placed for import as "local:import/ubuntu-22.04-cloud.qcow2" on every node

  Scenario: a container goes from manifest to a running container with an address
    Given a container manifest "cache-1" on node "ml110-01" at "site-1"
    When the deployer runs
    Then VM "cache-1" is ready with a VMID
    And the journal shows these requests in order:
      | method | path                                        |
      | GET    | /nodes/ml110-01/status                      |
      | GET    | /nodes/ml110-01/network                     |
      | GET    | /nodes/ml110-01/storage                     |
      | GET    | /nodes/ml110-01/storage/local/content       |
      | GET    | /cluster/nextid                             |
      | POST   | /nodes/ml110-01/lxc                         |
      | GET    | /nodes/ml110-01/tasks/*/status              |
      | POST   | /nodes/ml110-01/lxc/*/status/start          |
      | GET    | /nodes/ml110-01/lxc/*/status/current        |
      | GET    | /nodes/ml110-01/lxc/*/interfaces            |
    And the container was created with these parameters:
      | hostname     | cache-1                                               |
      | ostemplate   | local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst  |
      | rootfs       | local-lvm:8                                           |
      | cores        | 1                                                     |
      | memory       | 512                                                   |
      | net0         | name=eth0,bridge=vmbr0,ip=dhcp                        |
      | unprivileged | 1                                                     |
    And every task the deployer started was awaited until it stopped

  Scenario: VMs and containers share one VMID space
    Given a VM manifest "web-1" on node "ml110-01" at "site-1"
    And a container manifest "cache-1" on node "ml110-01" at "site-1"
    And a container manifest "resolver-1" on node "r630-01" at "site-2" with:
      | disk | 4Gi |
    When the deployer runs
    Then all 3 VMs are ready with VMIDs distinct on each site and an IP address

  Scenario: the seed's rollout shape with containers deploys in phase order
    Given the manifests of "examples/sankofa-containers"
    When the deployer runs
    Then all 5 VMs are ready with VMIDs distinct on each site and an IP address
    And the VMs were created in the seed's phase order: critical, high, medium
    And "redis-cache-ct" was created after "nginx-proxy-vm" was running

  Scenario: a re-run changes nothing, and destroy removes the containers with their volumes
    Given a container manifest "cache-1" on node "ml110-01" at "site-1"
    And the deployer has run once and every VM is ready
    When the deployer runs again
    Then every VM is ready with the same VMID as before
    And no mutating request reached Proxmox during the last run
    When the deployer destroys the rollout
    Then the fake holds no VM named "cache-1"
    And the fake holds no disk volume of the destroyed VMs

  Scenario: a template the node does not have fails the container, and nothing is created
    Given a container manifest "cache-1" on node "ml110-01" at "site-1" with:
      | image | local:vztmpl/alpine-3.20-default_20240908_amd64.tar.xz |
    When the deployer runs
    Then VM "cache-1" failed with reason "ImageMissing"
    And the journal shows exactly 0 "POST" "/nodes/ml110-01/lxc"

  Scenario: a storage that cannot hold container root filesystems fails fast
    Given a container manifest "cache-1" on node "ml110-01" at "site-1" with:
      | storage | local |
    When the deployer runs
    Then VM "cache-1" failed with reason "StorageNotForContainers"
    And VM "cache-1" was attempted at most 1 time

  Scenario: a container manifest that carries cloud-init user data is refused before any call
    Given a container manifest "cache-1" on node "ml110-01" at "site-1" with:
      | userData | #cloud-config |
    When the deployer runs
    Then VM "cache-1" failed with reason "InvalidSpec"
    And the error of VM "cache-1" mentions "a container has no cloud-init"
    And no mutating request reached Proxmox
