# yaml.awk: the block-YAML subset cloud-init documents use, flattened to "path=value" lines
# (map keys joined with ".", list items numbered from 0), for the cloud image's reader.
# Handles: nested maps, lists (also at their parent key's indentation), "- key: value" list
# maps, quoted scalars, flow lists [a, b] and flow maps {a: b} (one level), comments, "---",
# and block scalars (| and >, lines joined with a literal \n). Anything else is an error:
# "!error=line N: ..." and exit status 2.

function unquote(v,   q) {
  sub(/^[ \t]+/, "", v); sub(/[ \t]+$/, "", v)
  q = substr(v, 1, 1)
  if (length(v) >= 2 && (q == "'" || q == "\"") && substr(v, length(v), 1) == q) {
    v = substr(v, 2, length(v) - 2)
    if (q == "'") gsub(/''/, "'", v)
    else { gsub(/\\"/, "\"", v); gsub(/\\\\/, "\\", v) }
  }
  return v
}

# The line without its comment: a "#" at the start or after a blank, outside quotes.
function strip_comment(s,   i, c, q, prev) {
  q = ""; prev = " "
  for (i = 1; i <= length(s); i++) {
    c = substr(s, i, 1)
    if (q != "") { if (c == q) q = ""; prev = c; continue }
    if ((c == "'" || c == "\"") && prev ~ /[ \t:\[{,-]/) { q = c; prev = c; continue }
    if (c == "#" && prev ~ /[ \t]/) return substr(s, 1, i - 1)
    prev = c
  }
  return s
}

function emit(path, v,   inner, n, parts, i, k, kv) {
  sub(/^[ \t]+/, "", v); sub(/[ \t]+$/, "", v)
  if (v ~ /^\[.*\]$/) {
    inner = substr(v, 2, length(v) - 2)
    if (inner ~ /^[ \t]*$/) return
    n = split(inner, parts, ",")
    for (i = 1; i <= n; i++) print path "." (i - 1) "=" unquote(parts[i])
    return
  }
  if (v ~ /^\{.*\}$/) {
    inner = substr(v, 2, length(v) - 2)
    n = split(inner, parts, ",")
    for (i = 1; i <= n; i++) {
      kv = index(parts[i], ":")
      if (kv == 0) continue
      k = unquote(substr(parts[i], 1, kv - 1))
      print path "." k "=" unquote(substr(parts[i], kv + 1))
    }
    return
  }
  print path "=" unquote(v)
}

function fail(msg) {
  print "!error=line " NR ": " msg
  failed = 1
  exit 2
}

function join(a, b) { return a == "" ? b : a "." b }

# A "key: value" (or "key:") at indentation ind.
function key_line(ind, rest,   p, key, val, path) {
  p = index(rest, ": ")
  if (p == 0 && rest ~ /:$/) p = length(rest)
  if (p == 0) fail("expected \"key: value\" or a list item, got: " rest)
  key = unquote(substr(rest, 1, p - 1))
  val = substr(rest, p + 1)
  sub(/^[ \t]+/, "", val)
  while (top > 0 && fi[top] >= ind) top--
  path = join(top > 0 ? fp[top] : "", key)
  if (val == "") {
    top++; fi[top] = ind; fk[top] = "key"; fp[top] = path; cnt[top] = 0
  } else if (val ~ /^[|>][-+0-9]*$/) {
    blk = 1; blkpath = path; blkind = ind; blktext = ""; blkfirst = -1
  } else {
    emit(path, val)
  }
}

function flush_block() {
  print blkpath "=" blktext
  blk = 0
}

BEGIN { top = 0; blk = 0; failed = 0 }

{
  line = $0
  sub(/\r$/, "", line)
  if (blk) {
    match(line, /^ */)
    if (line ~ /^[ \t]*$/) { if (blktext != "") blktext = blktext "\\n"; next }
    if (RLENGTH > blkind) {
      if (blkfirst < 0) blkfirst = RLENGTH
      blktext = (blktext == "" ? "" : blktext "\\n") substr(line, blkfirst + 1)
      next
    }
    flush_block()
  }
  if (line ~ /^[ \t]*#/ || line ~ /^[ \t]*$/) next
  if (line ~ /^(---|\.\.\.)([ \t]|$)/) next
  if (line ~ /^\t/) fail("tabs are not allowed for indentation")
  line = strip_comment(line)
  sub(/[ \t]+$/, "", line)
  if (line ~ /^[ \t]*$/) next
  match(line, /^ */)
  ind = RLENGTH
  rest = substr(line, ind + 1)
  if (rest ~ /^-( |$)/) {
    while (top > 0 && (fi[top] > ind || (fi[top] == ind && fk[top] == "item"))) top--
    owner = top > 0 ? fp[top] : ""
    n = cnt[top]; cnt[top] = n + 1
    ipath = join(owner, n)
    rest = substr(rest, 2)
    match(rest, /^ */)
    kind = ind + 1 + RLENGTH
    rest = substr(rest, RLENGTH + 1)
    top++; fi[top] = ind; fk[top] = "item"; fp[top] = ipath; cnt[top] = 0
    if (rest == "") next
    if (rest ~ /^("[^"]*"|'[^']*'|[^"' \[{][^:]*):( |$)/) key_line(kind, rest)
    else emit(ipath, rest)
    next
  }
  key_line(ind, rest)
}

END {
  if (failed) exit 2
  if (blk) flush_block()
}
