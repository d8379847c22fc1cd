@lab @provisioned
Feature: Clock faults against a cluster with mutual TLS
  The cluster's certificates are valid from one day before they were made until a year after.
  A node whose wall clock is two years ahead sees every certificate as expired; a node set
  three days back sees them as not yet valid. Raft itself keeps time with the guests' monotonic
  clocks, which a wall-clock change does not move. The scenario starts from the provisioned
  cluster restored from its snapshot.

  Scenario: One node far in the future, another before its certificates are valid
    Given a provisioned 3-node cluster on the seed's lab
    When node03's clock is set 730 days ahead
    And node02's clock is set 3 days back
    Then node03's clock reads 730 days ahead of the host's
    And a new TLS session from node02 to node01's etcd fails: the certificate "is not yet valid"
    And a new TLS session from node03 to node01's etcd fails: the certificate "has expired"
    And a new TLS session from node01 to node01's etcd succeeds
    When every node's clock is set back to the host's
    Then the cluster has 3 started members and one leader
    When node02 writes "clock/back" = "in-time"
    Then node03 reads "clock/back" = "in-time"
