@lab @provisioned
Feature: The cluster under the faults a real one meets
  Each scenario starts from the provisioned 3-node cluster (S1–S6 as in the bring-up feature,
  built once, then restored from its whole-lab snapshot) and injects one fault through the lab:
  a power loss, a network partition, a reboot.

  Background:
    Given a provisioned 3-node cluster on the seed's lab

  Scenario: One node killed — the other two keep quorum and serve writes
    When node03 loses power
    Then node01 and node02 still agree on one leader
    When node01 writes "faults/kill" = "still-writable"
    Then node02 reads "faults/kill" = "still-writable"

  Scenario: The leader partitioned — a new leader is elected, the old one rejoins after link up
    When the leader's lab network link goes down
    Then the other two nodes elect a new leader
    When a node that is not the old leader writes "faults/partition" = "new-leader"
    And the old leader's lab network link comes back up
    Then the cluster has 3 started members and one leader
    And the old leader reads "faults/partition" = "new-leader"

  Scenario: A node rebooted — it rejoins with its data
    When node01 writes "faults/before" = "on-disk"
    And node02 loses power
    And node01 writes "faults/during" = "caught-up"
    And node02 is powered on again from netboot with its disk
    Then node02's first boot rejoined with the data on its disk
    And the cluster has 3 started members and one leader
    And node02 reads "faults/before" = "on-disk"
    And node02 reads "faults/during" = "caught-up"
