@auth
Feature: Authentication to the Proxmox API
  The seed's deployer put its API token in a PVEAuthCookie cookie. Real PVE reads that cookie as a
  ticket, so every call is refused. Tokens go in the Authorization header; passwords get a ticket,
  and writes made with a ticket carry the CSRF token.

  Background:
    Given a Proxmox test cluster with the seed's two sites
    And the cloud image is placed for import as "local:import/ubuntu-22.04-cloud.qcow2" on every node

  Scenario: the API token in the Authorization header is accepted
    Given the deployer authenticates with the API token "root@pam!harness"
    And a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1"
    When the deployer runs
    Then every API request carried the token "root@pam!harness" in the Authorization header
    And VM "nginx-proxy-vm" is ready with a VMID

  Scenario: the API token sent as a PVEAuthCookie cookie, as the seed's deployer did, is refused
    When a client sends "GET" "/nodes/ml110-01/status" with the token "root@pam!harness" as a PVEAuthCookie cookie
    Then the answer is 401 "Authentication failed!"
    And the journal records that request as a token sent in a cookie
    When a client sends "GET" "/nodes/ml110-01/status" with the token "root@pam!harness" in the Authorization header
    Then the answer is 200

  Scenario: a password gets a ticket, and writes carry the CSRF token
    Given the deployer authenticates as "root@pam" with the password "harness"
    And a VM manifest "dns-primary" on node "ml110-01" at "site-1" with:
      | disk | 50Gi |
    When the deployer runs
    Then VM "dns-primary" is ready with a VMID
    And the journal shows a "POST" "/access/ticket" answered 200 before any other request
    And every later API request carried the ticket of "root@pam"
    And no request was refused for a missing CSRF token

  Scenario: a write with a ticket but without the CSRF token is refused
    When a client logs in as "root@pam" with the password "harness" and sends "POST" "/nodes/ml110-01/qemu" without the CSRF token
    Then the answer is 401 "Permission denied - invalid csrf token"

  Scenario: a wrong token secret fails fast with the cause
    Given the deployer authenticates with the API token "root@pam!harness" and the secret "00000000-0000-0000-0000-000000000000"
    And a VM manifest "nginx-proxy-vm" on node "ml110-01" at "site-1"
    When the deployer runs
    Then VM "nginx-proxy-vm" failed with reason "AuthRefused"
    And the error of VM "nginx-proxy-vm" mentions "401"
    And VM "nginx-proxy-vm" was attempted at most 1 time
    And no mutating request reached Proxmox
