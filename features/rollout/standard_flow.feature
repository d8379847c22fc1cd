@flow
Feature: The standard deployment flow for one VM (seed 000, steps 1-14)
  The seed's controller takes one ProxmoxVM manifest through validation, authentication, site
  resolution, a node health check, a bridge check, image resolution, a VMID from nextid, the
  create call, the import, the status update and the monitoring of state and IP. Each of those
  steps must be visible in what the deployer sent and in the status it reports.

  Background:
    Given a Proxmox test cluster with the seed's two sites
    And the deployer authenticates with the API token "root@pam!harness"
    And the cloud image is placed for import as "local:import/ubuntu-22.04-cloud.qcow2" on every node

  Scenario: nginx-proxy-vm goes from manifest to a running VM with an IP
    Given a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1"
    When the deployer runs
    Then VM "nginx-proxy-vm" is ready with a VMID
    And VM "nginx-proxy-vm" is "running" with an IP address from the guest agent
    And every API request carried the token "root@pam!harness" in the Authorization header
    And the journal shows these requests in order:
      | method | path                                                  |
      | GET    | /nodes/ml110-01/status                                |
      | GET    | /nodes/ml110-01/network                               |
      | GET    | /nodes/ml110-01/storage                               |
      | GET    | /cluster/nextid                                       |
      | POST   | /nodes/ml110-01/qemu                                  |
      | GET    | /nodes/ml110-01/tasks/*/status                        |
      | POST   | /nodes/ml110-01/qemu/*/status/start                   |
      | GET    | /nodes/ml110-01/qemu/*/status/current                 |
      | GET    | /nodes/ml110-01/qemu/*/agent/network-get-interfaces   |
    And the VM was created with these parameters:
      | name      | nginx-proxy-vm                                      |
      | cores     | 2                                                   |
      | memory    | 4096                                                |
      | net0      | virtio,bridge=vmbr0                                 |
      | scsi0     | local-lvm:0,import-from=local:import/ubuntu-22.04-cloud.qcow2 |
      | ide2      | local-lvm:cloudinit                                 |
      | ciuser    | admin                                               |
      | ipconfig0 | ip=dhcp                                             |
      | agent     | 1                                                   |
      | ostype    | l26                                                 |
      | boot      | order=scsi0                                         |
    And the create request used the VMID that nextid returned
    And no request went to the non-existent "importdisk" route
    And every task the deployer started was awaited until it stopped
    And the fake holds exactly one VM named "nginx-proxy-vm" on "ml110-01" with a 20 GiB disk

  Scenario: the Cloudflare tunnel VM lands on the second site
    Given a VM manifest "cloudflare-tunnel-vm" on node "r630-01" at "site-2" with:
      | disk | 10Gi |
    When the deployer runs
    Then VM "cloudflare-tunnel-vm" is ready with a VMID
    And VM "cloudflare-tunnel-vm" is "running" with an IP address from the guest agent

  @fake
  Scenario: the seed's image as written, an ISO-type volume, cannot be imported through the API
    Given the image "local:import/ubuntu-22.04-cloud.qcow2" is missing on node "ml110-01"
    And a VM manifest "basic-vm" on node "ml110-01" at "site-1" with:
      | image | local:iso/ubuntu-22.04-cloud.img |
    When the deployer runs
    Then VM "basic-vm" failed with reason "ImageMissing"
    And the error of VM "basic-vm" mentions "import-from only takes 'images' or 'import' volumes"
    And no mutating request reached Proxmox

  Scenario: an invalid spec is refused before anything is sent to Proxmox
    Given a VM manifest "bad-vm" on node "ml110-01" at "site-1" with:
      | cpu    | 0      |
      | memory | 64Mi   |
    When the deployer runs
    Then VM "bad-vm" failed with reason "InvalidSpec"
    And VM "bad-vm" was attempted at most 1 time
    And no mutating request reached Proxmox
