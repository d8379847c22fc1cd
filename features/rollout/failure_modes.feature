@failures
Feature: The seed's six potential issues, each with its mitigation
  Seed 000 lists six ways a VM's deployment goes wrong and what the provider does about each.
  Retryable causes are retried with exponential backoff until the cause goes away; the others fail
  fast, clean up what was created, and say why.

  Background:
    Given a Proxmox test cluster with the seed's two sites
    And the deployer authenticates with the API token "root@pam!harness"
    And the cloud image is placed for import as "local:import/ubuntu-22.04-cloud.qcow2" on every node
    And a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1"

  @fake
  Scenario: Issue 1 - image not found: retried, and succeeds once the image is uploaded
    Given the image "local:import/ubuntu-22.04-cloud.qcow2" is missing on node "ml110-01"
    When the deployer starts in the background
    And the journal shows at least 2 "GET" "/nodes/ml110-01/storage/local/content"
    And the image "local:import/ubuntu-22.04-cloud.qcow2" is uploaded to node "ml110-01"
    And the background run finishes
    Then VM "nginx-proxy-vm" is ready with a VMID
    And VM "nginx-proxy-vm" was attempted at least 3 times
    And the journal shows exactly 1 "POST" "/nodes/ml110-01/qemu"

  Scenario: Issue 2 - network bridge missing: fails fast, never retried
    Given a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1" with:
      | network | vmbr7 |
    When the deployer runs
    Then VM "nginx-proxy-vm" failed with reason "BridgeMissing"
    And the error of VM "nginx-proxy-vm" mentions "network bridge 'vmbr7' does not exist on node ml110-01"
    And VM "nginx-proxy-vm" was attempted at most 1 time
    And the journal shows exactly 1 "GET" "/nodes/ml110-01/network"
    And no mutating request reached Proxmox

  @fake
  Scenario: Issue 3 - node unhealthy: backoff, and success when the node returns
    Given node "ml110-01" is offline
    When the deployer starts in the background
    And the journal shows at least 4 failed "GET" "/nodes/ml110-01/status"
    And node "ml110-01" comes back online
    And the background run finishes
    Then VM "nginx-proxy-vm" is ready with a VMID
    And the waits between the failed health checks of "ml110-01" grew
    And the journal shows exactly 1 "POST" "/nodes/ml110-01/qemu"

  @fake
  Scenario: Issue 3, site-wide - the site does not answer when the rollout starts: retried, then success
    Given the first 3 requests "GET" "/version" to "site-1" fail with 595 "Connection refused"
    When the deployer runs
    Then VM "nginx-proxy-vm" is ready with a VMID
    And the journal shows exactly 1 "POST" "/nodes/ml110-01/qemu"

  @fake
  Scenario: Issue 4 - disk import not supported by an older PVE: the VM is cleaned up and the error says why
    Given site "site-1" runs PVE version "7.1"
    When the deployer runs
    Then VM "nginx-proxy-vm" failed with reason "ImportNotSupported"
    And the error of VM "nginx-proxy-vm" mentions "import"
    And VM "nginx-proxy-vm" was attempted at most 1 time
    And the fake holds no VM named "nginx-proxy-vm"
    And no request went to the non-existent "importdisk" route

  @fake
  Scenario: Issue 4, planned - the plan checks the create against PVE 7.1's schema before any call
    Given site "site-1" runs PVE version "7.1"
    When the deployer plans the rollout
    Then the plan's verdict is "would-fail"
    And the plan says PVE 7.1 would refuse "POST /nodes/{node}/qemu" for VM "nginx-proxy-vm": parameter "scsi0", PVE's message mentioning "import-from"
    And no mutating request reached Proxmox

  @fake
  Scenario: Issue 5 - resource exhaustion: retried, and succeeds once resources are freed
    Given node "ml110-01" has no free memory to start VMs
    When the deployer starts in the background
    And the journal shows at least 2 failed "POST" "/nodes/ml110-01/qemu/*/status/start"
    And memory is freed on node "ml110-01"
    And the background run finishes
    Then VM "nginx-proxy-vm" is ready with a VMID
    And VM "nginx-proxy-vm" is "running" with an IP address from the guest agent
    And the journal shows exactly 1 "POST" "/nodes/ml110-01/qemu"

  @fake
  Scenario: Issue 6 - storage full: a clear error that names the storage
    Given storage "local-lvm" on node "ml110-01" is full
    When the deployer runs
    Then VM "nginx-proxy-vm" failed with reason "StorageFull"
    And the error of VM "nginx-proxy-vm" mentions "storage 'local-lvm' on node ml110-01 is full"
    And the fake holds no VM named "nginx-proxy-vm"

  @fake
  Scenario: Issue 6, transient - a create task that runs out of space once leaves nothing behind, and the retry succeeds
    Given the next "qmcreate" task on node "ml110-01" fails with "unable to create VM 100 - lvcreate 'pve/vm-100-disk-0' error:   Volume group \"pve\" has insufficient free space (10 extents): 5120 required."
    When the deployer runs
    Then VM "nginx-proxy-vm" is ready with a VMID
    And VM "nginx-proxy-vm" was attempted at least 2 times
    And the journal shows exactly 2 "POST" "/nodes/ml110-01/qemu"
    And the fake holds exactly one VM named "nginx-proxy-vm" on "ml110-01" with a 20 GiB disk
    And every disk volume on node "ml110-01" belongs to an existing VM

  @fake
  Scenario: a VM that cannot start fails fast, and the VM the deployer created for it is removed
    Given the next "qmstart" task on node "ml110-01" fails with "start failed: QEMU exited with code 1"
    When the deployer runs
    Then VM "nginx-proxy-vm" failed with reason "ApiError"
    And the error of VM "nginx-proxy-vm" mentions "QEMU exited with code 1"
    And VM "nginx-proxy-vm" was attempted at most 1 time
    And the journal shows exactly 1 "POST" "/nodes/ml110-01/qemu"
    And every disk volume on node "ml110-01" belongs to an existing VM
