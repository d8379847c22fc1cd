#!/bin/sh
# HARNESS_DEPLOYER_CMD adapter for the provision-harness CLI (see docs/src/external-deployer.md).
set -e
action="$1"
case "$action" in
  plan) set -- plan ;;
  *) set -- "$action" --state "$HARNESS_STATE_DIR/state.json" ;;
esac
exec "${PROVISION_HARNESS_BIN:-provision-harness}" "$@" \
  --provider-config "$HARNESS_PROVIDER_CONFIG" --manifests "$HARNESS_MANIFESTS_DIR" --json
