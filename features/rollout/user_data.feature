Feature: userData reaches the guest: each manifest's cloud-config is written as a snippet and named in cicustom
  The seed's VMs boot Ubuntu's cloud image, which has cloud-init but not qemu-guest-agent: their
  userData installs and starts the agent. PVE's API cannot upload snippets, so the deployer writes
  the user-data onto the site's snippets share (a storage with snippets content it has mounted) and
  names it in the VM's cicustom; PVE reads it into the cloud-init drive at every start, and
  cloud-init in the guest applies it. A VM whose userData never arrives still starts, but its
  packages are missing and its agent never reports an address.

  Background:
    Given a Proxmox test cluster with the seed's two sites
    And the deployer authenticates with the API token "root@pam!harness"
    And the cloud image is placed for import as "local:import/ubuntu-22.04-cloud.qcow2" on every node

  @fake
  Scenario: each VM's cloud-config is applied in its guest, whose agent then reports the address
    Given a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1"
    And a VM manifest "sentry-03" on node "r630-01" at "site-2"
    When the deployer runs
    Then VM "nginx-proxy-vm" is "running" with an IP address from the guest agent
    And VM "sentry-03" is "running" with an IP address from the guest agent
    And every VM whose manifest has userData got it in its guest

  @fake
  Scenario: the manifest's SSH keys still reach the guest when a custom user snippet replaces PVE's user-data
    Given a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1" with:
      | sshKeys | ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOps ops@example |
    When the deployer runs
    Then VM "nginx-proxy-vm" is "running" with an IP address from the guest agent
    And VM "nginx-proxy-vm"'s guest has the manifest's SSH key for user "admin"

  @fake
  Scenario: user-data that never starts the agent leaves a running VM without an address
    Given a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1" with:
      | userData | #cloud-config\npackages:\n  - curl\n |
    When the deployer runs
    Then VM "nginx-proxy-vm" runs but its guest agent never answers
    And every VM whose manifest has userData got it in its guest

  @fake
  Scenario: without a storage that holds snippets the VM fails before anything is made, naming why
    Given no storage of site "site-1" holds snippets
    And a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1"
    When the deployer runs
    Then VM "nginx-proxy-vm" failed with reason "UserDataUndeliverable"
    And the error of VM "nginx-proxy-vm" mentions "has no snippets share"
    And VM "nginx-proxy-vm" was attempted at most 1 time
    And the journal shows exactly 0 "POST" "/nodes/*/qemu"
