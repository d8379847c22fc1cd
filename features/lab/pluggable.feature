@lab
Feature: A user's own provisioning command in place of the built-in provisioner
  The user's command gets the lab's node endpoints, SSH key and the staged configs (see the
  book's docs/src/cluster.md for the contract) and must leave every node's disk ready for its
  next boot; the harness then restarts the nodes and validates the cluster as usual.

  Scenario: The example shell provisioner brings the cluster up
    Given the seed's lab of 3 nodes booted by direct kernel netboot
    And the user's provisioning command is "sh examples/photoncloud-t036/provision.sh"
    When the provisioner generates the cluster CA and the node certificates
    And the provisioner writes every node's cluster-config.json and hosts mapping
    And the nodes are provisioned over SSH and restarted from netboot with their disks
    Then every node's first boot started etcd from its disk
    And the cluster has 3 started members and one leader
    When node03 writes "pluggable/key" = "user-provisioned"
    Then node01 reads "pluggable/key" = "user-provisioned"

  @reuses-lab
  Scenario: A failing user command fails the bring-up with its own output
    Given the seed's lab of 3 nodes booted by direct kernel netboot
    And the user's provisioning command is "echo 'disko: /dev/sdz: no such disk' >&2; exit 3"
    When the provisioner generates the cluster CA and the node certificates
    And the provisioner writes every node's cluster-config.json and hosts mapping
    And the provisioning is attempted
    Then bring-up stops with an error naming "exited with 3" and "disko: /dev/sdz: no such disk"
    And no node's disk was touched
