@lab @provisioned
Feature: The cluster on a network that partitions, slows down and cuts one way
  Faults on single links of the lab's multicast L2, set at run time inside the guests (traffic
  control and netem on each node's lab interface) and proven by what the guests measure: ping
  round trips, lost pings, and each guest's own count of the echo requests it received.
  Each scenario starts from the provisioned 3-node cluster restored from its snapshot.

  Background:
    Given a provisioned 3-node cluster on the seed's lab

  Scenario: A minority partitioned while the majority's own link is slow
    When the lab network is partitioned: node03 | node01,node02
    And every packet between node01 and node02 is delayed by 100 ms
    Then a ping from node01 to node02 takes at least 200 ms
    And node03 cannot reach node01 over the lab network
    And node01 and node02 still agree on one leader
    When node01 writes "net/minority" = "majority-wins"
    Then node02 reads "net/minority" = "majority-wins"
    And node03, cut off from the majority, cannot serve a read of "net/minority"
    When the lab network heals
    Then the cluster has 3 started members and one leader
    And node03 reads "net/minority" = "majority-wins"

  Scenario: The leader cut off one way — it hears the others, they do not hear it
    When the leader's packets stop reaching the other nodes
    Then the old leader still hears the other nodes, and they do not hear it
    And the other two nodes elect a new leader
    When a node that is not the old leader writes "net/one-way" = "new-leader"
    And the lab network heals
    Then the cluster has 3 started members and one leader
    And the old leader reads "net/one-way" = "new-leader"
