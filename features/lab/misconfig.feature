@lab
Feature: The seed's own misconfigurations fail early, naming the cause
  Seed 002 lost its first boot to certificate files named differently from what
  cluster-config.json expects, nearly lost its Raft bootstrap to peer hostnames with no hosts
  mapping (no DNS in the lab), and spent hours on nodes it could not reach over SSH. Each is
  caught before a node is touched, with a message that names the file, hostname or node.
  The first two never write a disk, so they share one booted lab (tag reuses-lab); each
  still checks that no node's disk was touched.

  @reuses-lab
  Scenario: Certificate files under the seed's original names
    Given the seed's lab of 3 nodes booted by direct kernel netboot
    And the certificates will be written under the seed's original names ca-cert.pem, cert.pem and key.pem
    When the provisioner generates the cluster CA and the node certificates
    And the provisioner prepares every node's configuration
    Then bring-up stops with an error naming "node01: TLS files" and "ca.crt does not exist"
    And the error lists the misnamed files "ca-cert.pem, cert.pem, key.pem"
    And no node's disk was touched

  @reuses-lab
  Scenario: Hosts mapping missing — a peer hostname does not resolve
    Given the seed's lab of 3 nodes booted by direct kernel netboot
    And the hosts mappings will list only localhost
    When the provisioner generates the cluster CA and the node certificates
    And the provisioner prepares every node's configuration
    Then bring-up stops with an error naming "node01: node config" and "peer hostname node02 does not resolve"
    And no node's disk was touched

  Scenario: A node booted without the SSH key
    Given the seed's lab of 3 nodes booted by direct kernel netboot
    And node02 holds no authorized SSH key
    When the provisioner checks SSH access to every node
    Then bring-up stops with an error naming "node02: transport" and "does not accept the lab's SSH key"
    And no node's disk was touched
