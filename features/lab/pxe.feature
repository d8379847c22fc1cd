@lab
Feature: The same bring-up with the nodes booted through PXE
  The seed deferred PXE ("QEMU initrd compatibility bug"). Here the nodes' firmware PXE-boots
  through iPXE from QEMU's built-in TFTP server, and the bring-up runs unchanged.

  Scenario: PXE-booted nodes form the validated cluster
    Given the seed's lab of 3 nodes booted through PXE
    Then every node booted through iPXE
    And every node answers over SSH as itself with the lab's baked-in key
    When the provisioner generates the cluster CA and the node certificates
    And the provisioner writes every node's cluster-config.json and hosts mapping
    And the nodes are provisioned over SSH and restarted from netboot with their disks
    Then every node's first boot started etcd from its disk
    And the cluster has 3 started members and one leader
    And every member reports healthy
    When node02 writes "pxe/key" = "booted-through-pxe"
    Then node01 reads "pxe/key" = "booted-through-pxe"
