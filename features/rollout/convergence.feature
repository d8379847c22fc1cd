@convergence
Feature: Convergence - re-runs, interrupted runs, concurrent creators, monitoring and destroy
  A controller reconciles again and again. Running the deployer a second time must change nothing;
  a run killed half-way must resume without creating a second VM; VMIDs from nextid are not
  reservations, so concurrent creators must survive the race; monitoring follows the VM's state
  and its IP from the guest agent; destroy removes what the rollout created.

  Background:
    Given a Proxmox test cluster with the seed's two sites
    And the deployer authenticates with the API token "root@pam!harness"
    And the cloud image is placed for import as "local:import/ubuntu-22.04-cloud.qcow2" on every node

  Scenario: a re-run changes nothing
    Given a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1"
    And a VM manifest "cloudflare-tunnel-vm" on node "r630-01" at "site-2"
    And the deployer has run once and every VM is ready
    When the deployer runs again
    Then every VM is ready with the same VMID as before
    And no mutating request reached Proxmox during the last run
    And the fake holds exactly one VM named "nginx-proxy-vm" on "ml110-01" with a 20 GiB disk

  @fake
  Scenario: a run killed right after the create call resumes with no duplicate
    Given a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1"
    And the fake's clock stands still until a step lets it run
    When the deployer is killed right after it sends "POST" "/nodes/ml110-01/qemu"
    Then the killed run's create on "ml110-01" is still running
    When the deployer starts in the background
    And the background run has sent "GET" "/cluster/resources"
    And the fake's clock runs again
    And the background run finishes
    Then VM "nginx-proxy-vm" is ready with a VMID
    And the journal shows exactly 1 "POST" "/nodes/ml110-01/qemu"
    And the fake holds exactly one VM named "nginx-proxy-vm" on "ml110-01" with a 20 GiB disk
    And the fake holds exactly 1 VM on "ml110-01"

  @fake
  Scenario: a run killed while the disk is being imported resumes with no duplicate
    Given a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1"
    And the fake's clock stands still until a step lets it run
    When the deployer is killed right after it sends "GET" "/nodes/ml110-01/tasks/*/status"
    Then the killed run's create on "ml110-01" is still running
    When the deployer starts in the background
    And the background run has sent "GET" "/cluster/resources"
    And the fake's clock runs again
    And the background run finishes
    Then VM "nginx-proxy-vm" is ready with a VMID
    And the journal shows exactly 1 "POST" "/nodes/ml110-01/qemu"
    And the fake holds exactly one VM named "nginx-proxy-vm" on "ml110-01" with a 20 GiB disk
    And the fake holds exactly 1 VM on "ml110-01"

  @fake
  Scenario: two deployers racing for the same VMID both succeed with distinct VMIDs
    Given a VM manifest "sentry-01" on node "ml110-01" at "site-1"
    And a second deployer with its own state and a VM manifest "sentry-02" on node "ml110-01" at "site-1"
    And every create call on "ml110-01" takes 800 ms to arrive
    When both deployers run at the same time
    Then VM "sentry-01" is ready with a VMID
    And VM "sentry-02" of the second deployer is ready with a VMID
    And the two VMs have distinct VMIDs
    And the journal shows at least 1 "POST" "/nodes/ml110-01/qemu" refused because the VMID already exists
    And the fake holds exactly one VM named "sentry-01" on "ml110-01" with a 20 GiB disk
    And the fake holds exactly one VM named "sentry-02" on "ml110-01" with a 20 GiB disk

  Scenario: monitoring follows the VM's state and reads its IP from the guest agent
    Given a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1"
    And the deployer has run once and every VM is ready
    Then VM "nginx-proxy-vm" is "running" with an IP address from the guest agent
    And the IP address of VM "nginx-proxy-vm" is the one the fake's guest agent reports
    When VM "nginx-proxy-vm" is stopped outside the deployer
    And the deployer checks the status
    Then VM "nginx-proxy-vm" is in state "stopped"
    And no mutating request reached Proxmox during the last run
    When VM "nginx-proxy-vm" is started outside the deployer
    And the deployer checks the status
    Then VM "nginx-proxy-vm" is in state "running"

  Scenario: destroy removes what the rollout created, disks included
    Given a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1"
    And a VM manifest "cloudflare-tunnel-vm" on node "r630-01" at "site-2"
    And the deployer has run once and every VM is ready
    When the deployer destroys the rollout
    Then the fake holds no VM named "nginx-proxy-vm"
    And the fake holds no VM named "cloudflare-tunnel-vm"
    And every VM delete request asked to purge
    And the fake holds no disk volume of the destroyed VMs

  Scenario: a re-run keeps the VM and its VMID, and destroy removes it (runs on a real PVE too)
    Given a VM manifest "cloudflare-tunnel-vm" on node "r630-01" at "site-2"
    And the deployer has run once and every VM is ready
    When the deployer runs again
    Then every VM is ready with the same VMID as before
    And the cluster holds exactly one VM named "cloudflare-tunnel-vm" on "r630-01" with a 20 GiB disk
    When the deployer destroys the rollout
    Then the cluster holds no VM named "cloudflare-tunnel-vm"
    And the cluster holds no disk volume of the destroyed VMs

  @fake
  Scenario: a run killed right after the create call and resumed still owns its VM, so destroy removes it
    Given a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1"
    And the fake's clock stands still until a step lets it run
    When the deployer is killed right after it sends "POST" "/nodes/ml110-01/qemu"
    Then the killed run's create on "ml110-01" is still running
    When the fake's clock runs again
    And the deployer runs again
    Then VM "nginx-proxy-vm" is ready with a VMID
    When the deployer destroys the rollout
    Then the fake holds no VM named "nginx-proxy-vm"
    And the fake holds no disk volume of the destroyed VMs
