@lab
Feature: Seed 002 (T036) — a 3-node cluster brought up in QEMU VMs, S1 to S6
  The seed set out to validate a 3-node cluster deployment in VMs before touching hardware,
  and stalled at S5. Here every step runs: the lab's VMs on a multicast L2, netbooted with an
  SSH key baked in; a CA and node certificates; node configs with a hosts mapping; provisioning
  onto each node's disk over SSH with a first boot from that disk; and an etcd (Raft) cluster
  with mutual TLS validated as the seed's S6 asks.

  # Tagged kills-lab-mutants: the lab self-test (tests/harness_selftest_lab.rs) runs it against
  # each broken variant of the provisioner, and it must fail with every one of them.
  @kills-lab-mutants
  Scenario: Netboot to a validated 3-member cluster that keeps its data across a full restart
    # S1 VM infrastructure
    Given the seed's lab of 3 nodes booted by direct kernel netboot
    Then every node reaches every other node over the lab network
    # S2 network access
    And every node answers over SSH as itself with the lab's baked-in key
    # S3 TLS
    When the provisioner generates the cluster CA and the node certificates
    Then every node's secrets are ca.crt and nodeNN.crt with mode 0644 and nodeNN.key with mode 0400
    And every node certificate is signed by the cluster CA and names the node's hostname and address
    # S4 node configuration
    When the provisioner writes every node's cluster-config.json and hosts mapping
    Then every node's cluster-config.json names its peers by hostname with bootstrap on
    And every node's hosts mapping resolves all 3 hostnames
    # S5 provisioning
    When the nodes are provisioned over SSH and restarted from netboot with their disks
    Then every node's first boot started etcd from its disk
    # S6 validation
    And every member speaks only TLS on its client and peer ports and asks clients for a certificate
    And the cluster has 3 started members and one leader
    And every member reports healthy
    And every node's Prometheus metrics endpoint reports a leader
    When node01 writes "t036/acceptance" = "crud-ok"
    Then node03 reads "t036/acceptance" = "crud-ok"
    When node02 deletes "t036/acceptance"
    Then node01 finds no "t036/acceptance"
    When node02 writes "t036/persist" = "survives-restart"
    And all three nodes are restarted from netboot with their disks
    Then every node's first boot rejoined with the data on its disk
    And the cluster has 3 started members and one leader
    And node03 reads "t036/persist" = "survives-restart"
