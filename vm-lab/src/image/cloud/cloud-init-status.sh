#!/bin/sh
# A stand-in for `cloud-init status [--wait] [--long]` (the image runs a small reader, not
# cloud-init): "done" when the drive was applied, "error" with the reasons otherwise.
# Exit status as cloud-init's: 0 done, 1 error.
[ "$1" = status ] || { echo "this image runs a small cloud-init reader: only 'cloud-init status' exists" >&2; exit 2; }
s=$(cat /run/cloudinit/status 2>/dev/null)
case " $* " in *" --wait "*|*" -w "*)
  while [ -z "$s" ]; do sleep 1; s=$(cat /run/cloudinit/status 2>/dev/null); done ;;
esac
echo "status: ${s:-running}"
case " $* " in *" --long "*|*" -l "*)
  echo "datasource: $(sed -n 's/^datasource //p' /run/cloudinit/plan 2>/dev/null)"
  [ ! -s /run/cloudinit/errors ] || { echo "errors:"; sed 's/^/  - /' /run/cloudinit/errors; } ;;
esac
[ "$s" = error ] && exit 1
exit 0
