@full
Feature: The seed's full rollout: 30 manifests over two sites, planned first
  Seed 000 reviews 30 VM manifests and calls the rollout "deployment ready". The plan reads the
  same manifests and the live API (GETs only) and tells the truth first: three manifests cannot be
  read, CephFS cannot hold VM disks, and both nodes are asked for more vCPUs than they have. The
  fixed copy of the rollout (examples/sankofa-fixed: an RBD storage for the disks, sizes that fit,
  the image as an import volume) deploys all green, in the seed's phase order.

  @fake
  Scenario: the plan of the rollout as written names every problem with true figures
    Given a Proxmox test cluster with the seed's two sites
    And the deployer authenticates with the API token "root@pam!harness"
    And the manifests of "examples/sankofa"
    When the deployer plans the rollout
    Then the plan's verdict is "would-fail"
    And the plan lists these unreadable manifests with their errors:
      | production/large-vm.yaml                 |
      | production/medium-vm.yaml                |
      | production/smom-dbis-138/blockscout.yaml |
    And the plan shows these node figures:
      | node     | new VMs | requested cores | CPU threads | requested memory GiB |
      | ml110-01 | 6       | 12              | 5           | 24                   |
      | r630-01  | 21      | 60              | 50          | 216                  |
    And the plan shows these storage figures:
      | node     | storage   | new VMs | requested GiB | holds VM disks |
      | ml110-01 | local-lvm | 6       | 210           | yes            |
      | r630-01  | local-lvm | 1       | 10            | yes            |
      | r630-01  | ceph-fs   | 20      | 2560          | no             |
    And the plan has an error about "r630-01/ceph-fs"
    And the plan has an error about "ml110-01"
    And no mutating request reached Proxmox

  Scenario: the plan reads the cluster's own figures and creates nothing
    Given a Proxmox test cluster with the seed's two sites
    And the deployer authenticates with the API token "root@pam!harness"
    And the cloud image is placed for import as "local:import/ubuntu-22.04-cloud.qcow2" on every node
    And a VM manifest "sentry-03" on node "r630-01" at "site-2"
    And a VM manifest "rpc-node-01" on node "r630-01" at "site-2" with:
      | storage | ceph-fs |
    When the deployer plans the rollout
    Then the plan's verdict is "would-fail"
    And the plan shows the figures the cluster reports for node "r630-01"
    And the plan shows 2 new VMs asking for 4 cores and 8 GiB on node "r630-01"
    And the plan has an error about "ceph-fs"
    And no mutating request reached Proxmox

  @fake
  Scenario: the plan checks every request it would send against the site's own API schema
    The deployer's own rules let a storage id end in "-"; PVE's volume ids do not. The plan builds
    the very requests the rollout would send and validates them against the site's release, so the
    create's refusal shows up with PVE's text before anything is sent.
    Given a Proxmox test cluster with the seed's two sites
    And the deployer authenticates with the API token "root@pam!harness"
    And the cloud image is placed for import as "local:import/ubuntu-22.04-cloud.qcow2" on every node
    And a VM manifest "sentry-03" on node "r630-01" at "site-2" with:
      | storage | lvm- |
    When the deployer plans the rollout
    Then the plan's verdict is "would-fail"
    And the plan says PVE 9.1 would refuse "POST /nodes/{node}/qemu" for VM "sentry-03": parameter "scsi0", PVE's message mentioning "unable to parse volume ID 'lvm-:0'"
    And no mutating request reached Proxmox

  @fake
  Scenario: the rollout as written - what fits is deployed, the VMs on CephFS fail fast naming the storage
    Given a Proxmox test cluster with the seed's two sites
    And the deployer authenticates with the API token "root@pam!harness"
    And the cloud image is placed for import as "local:import/ubuntu-22.04-cloud.qcow2" on every node
    And the manifests of "examples/sankofa"
    And the deployer runs with a concurrency of 8
    When the deployer runs
    Then 7 VMs are ready and 20 failed
    And every VM on storage "ceph-fs" failed with reason "StorageNotForImages" after 1 attempt
    And the status lists the 3 unreadable manifests
    And the journal shows exactly 7 "POST" "/nodes/*/qemu"

  @fake
  Scenario: the fixed rollout is all green, in the seed's phase order
    Given a Proxmox test cluster with the scenario "examples/sankofa-fixed/scenario.yaml"
    And the deployer authenticates with the API token "root@pam!harness"
    And the manifests of "examples/sankofa-fixed"
    And the deployer runs with a concurrency of 8
    When the deployer plans the rollout
    Then the plan's verdict is not "would-fail"
    When the deployer runs
    Then all 30 VMs are ready with VMIDs distinct on each site and an IP address
    And every VM whose manifest has userData got it in its guest
    And the VMs were created in the seed's phase order: critical, high, medium, blockchain, test
    And within the blockchain phase the groups were created in order: validators, sentries, rpc, services
    And "email-server" was created after "dns-primary" was running

  Scenario: the fixed rollout, scaled down to what a test cluster holds, is all green in the seed's phase order
    Given a Proxmox test cluster with the seed's two sites
    And the deployer authenticates with the API token "root@pam!harness"
    And the cloud image is placed for import as "local:import/ubuntu-22.04-cloud.qcow2" on every node
    And the manifests of "examples/sankofa-fixed" scaled down to 1 vCPU, 512Mi and 10Gi on local-lvm
    And the deployer runs with a concurrency of 8
    When the deployer runs
    Then all 30 VMs are ready with VMIDs distinct on each site and an IP address
    And the VMs were created in the seed's phase order: critical, high, medium, blockchain, test
    And within the blockchain phase the groups were created in order: validators, sentries, rpc, services
    And "email-server" was created after "dns-primary" was running

  Scenario Outline: the seed's <group> as written: <name> on <storage> ends <outcome>
    Given a Proxmox test cluster with the seed's two sites
    And the deployer authenticates with the API token "root@pam!harness"
    And the cloud image is placed for import as "local:import/ubuntu-22.04-cloud.qcow2" on every node
    And a VM manifest "<name>" on node "<node>" at "<site>" with:
      | cpu     | <cpu>     |
      | memory  | <memory>  |
      | disk    | 20Gi      |
      | storage | <storage> |
    When the deployer runs
    Then VM "<name>" ends <outcome>

    Examples: validators (3 cores, 12 GiB each)
      | group      | name         | node    | site   | cpu | memory | storage | outcome                        |
      | validators | validator-01 | r630-01 | site-2 | 3   | 12Gi   | ceph-fs | failed with StorageNotForImages |
      | validators | validator-02 | r630-01 | site-2 | 3   | 12Gi   | ceph-fs | failed with StorageNotForImages |
      | validators | validator-03 | r630-01 | site-2 | 3   | 12Gi   | ceph-fs | failed with StorageNotForImages |
      | validators | validator-04 | r630-01 | site-2 | 3   | 12Gi   | ceph-fs | failed with StorageNotForImages |

    Examples: sentries (01-02 on ml110-01 local-lvm, 03-04 on r630-01 ceph-fs)
      | group    | name      | node     | site   | cpu | memory | storage   | outcome                        |
      | sentries | sentry-01 | ml110-01 | site-1 | 2   | 4Gi    | local-lvm | ready                          |
      | sentries | sentry-02 | ml110-01 | site-1 | 2   | 4Gi    | local-lvm | ready                          |
      | sentries | sentry-03 | r630-01  | site-2 | 2   | 4Gi    | ceph-fs   | failed with StorageNotForImages |
      | sentries | sentry-04 | r630-01  | site-2 | 2   | 4Gi    | ceph-fs   | failed with StorageNotForImages |

    Examples: RPC nodes
      | group | name        | node    | site   | cpu | memory | storage | outcome                        |
      | rpc   | rpc-node-01 | r630-01 | site-2 | 2   | 4Gi    | ceph-fs | failed with StorageNotForImages |
      | rpc   | rpc-node-02 | r630-01 | site-2 | 2   | 4Gi    | ceph-fs | failed with StorageNotForImages |
      | rpc   | rpc-node-03 | r630-01 | site-2 | 2   | 4Gi    | ceph-fs | failed with StorageNotForImages |
      | rpc   | rpc-node-04 | r630-01 | site-2 | 2   | 4Gi    | ceph-fs | failed with StorageNotForImages |

    Examples: services
      | group    | name       | node    | site   | cpu | memory | storage | outcome                        |
      | services | management | r630-01 | site-2 | 2   | 4Gi    | ceph-fs | failed with StorageNotForImages |
      | services | monitoring | r630-01 | site-2 | 2   | 4Gi    | ceph-fs | failed with StorageNotForImages |
      | services | services   | r630-01 | site-2 | 2   | 4Gi    | ceph-fs | failed with StorageNotForImages |

  Scenario Outline: the same <group> VM with its disk moved to local-lvm deploys
    Given a Proxmox test cluster with the seed's two sites
    And the deployer authenticates with the API token "root@pam!harness"
    And the cloud image is placed for import as "local:import/ubuntu-22.04-cloud.qcow2" on every node
    And a VM manifest "<name>" on node "r630-01" at "site-2" with:
      | cpu     | <cpu>     |
      | memory  | <memory>  |
      | storage | local-lvm |
    When the deployer runs
    Then VM "<name>" ends ready
    And VM "<name>" is "running" with an IP address from the guest agent

    Examples:
      | group      | name         | cpu | memory |
      | validators | validator-01 | 3   | 12Gi   |
      | sentries   | sentry-03    | 2   | 4Gi    |
      | rpc        | rpc-node-01  | 2   | 4Gi    |
      | services   | monitoring   | 2   | 4Gi    |
