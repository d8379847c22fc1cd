Feature: One rollout on every PVE release teams run: 7.4, 8.4 and 9.1
  A fleet runs several releases at once. The same manifest goes to a site of each release, and
  each site validates its own release's whole API. Where a release lacks what the rollout needs,
  the difference is written here: PVE 7.4 has `import-from` (since 7.2) but cannot take an
  `import` volume as its source (since 8.3), so there the VM fails before anything is created,
  and the plan says so first.

  Background:
    Given a Proxmox test cluster with the seed's two sites
    And the deployer authenticates with the API token "root@pam!harness"
    And the cloud image is placed for import as "local:import/ubuntu-22.04-cloud.qcow2" on every node

  @fake
  Scenario Outline: on a PVE <release> site the seed's VM runs with its user-data and reports its address
    Given site "site-1" runs PVE version "<release>"
    And a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1"
    When the deployer plans the rollout
    Then the plan's verdict is not "would-fail"
    When the deployer runs
    Then VM "nginx-proxy-vm" is "running" with an IP address from the guest agent
    And every VM whose manifest has userData got it in its guest

    Examples:
      | release |
      | 8.4     |
      | 9.1     |

  @fake
  Scenario: on a PVE 7.4 site an import volume cannot be the import source: planned, then refused before any create
    Given site "site-1" runs PVE version "7.4"
    And a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1"
    When the deployer plans the rollout
    Then the plan's verdict is "would-fail"
    And the plan has an error mentioning "PVE 8.3+"
    When the deployer runs
    Then VM "nginx-proxy-vm" failed with reason "ImportNotSupported"
    And the error of VM "nginx-proxy-vm" mentions "PVE 8.3+"
    And the journal shows exactly 0 "POST" "/nodes/*/qemu"
