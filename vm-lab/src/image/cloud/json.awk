# json.awk: a JSON document flattened to "path=value" lines (object keys joined with ".",
# array items numbered from 0; null is left out), for the cloud image's config-drive reader.
# Malformed input: "!error=offset N: ..." and exit status 2.

function fail(msg) {
  if (!failed) print "!error=offset " pos ": " msg
  failed = 1
  pos = n + 1
}

function ws() {
  while (pos <= n && substr(buf, pos, 1) ~ /[ \t\r\n]/) pos++
}

function join(a, b) { return a == "" ? b : a "." b }

function str(   c, r) {
  if (substr(buf, pos, 1) != "\"") { fail("expected a string"); return "" }
  pos++
  r = ""
  while (pos <= n) {
    c = substr(buf, pos, 1)
    pos++
    if (c == "\"") return r
    if (c == "\\") {
      c = substr(buf, pos, 1)
      pos++
      if (c == "n") r = r "\\n"
      else if (c == "t") r = r "\t"
      else if (c == "r" || c == "b" || c == "f") r = r
      else if (c == "u") { r = r "?"; pos += 4 }
      else r = r c
      continue
    }
    r = r c
  }
  fail("unterminated string")
  return r
}

function value(path,   c, lit) {
  ws()
  if (failed) return
  c = substr(buf, pos, 1)
  if (c == "{") { object(path); return }
  if (c == "[") { array(path); return }
  if (c == "\"") { lit = str(); if (!failed) print path "=" lit; return }
  lit = substr(buf, pos)
  if (match(lit, /^(true|false|null|-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?)/)) {
    lit = substr(lit, 1, RLENGTH)
    pos += RLENGTH
    if (lit != "null") print path "=" lit
    return
  }
  fail("unexpected " (c == "" ? "end of input" : "\"" c "\""))
}

function object(path,   k, c) {
  pos++
  ws()
  if (substr(buf, pos, 1) == "}") { pos++; return }
  while (!failed) {
    ws()
    k = str()
    ws()
    if (substr(buf, pos, 1) != ":") { fail("expected \":\""); return }
    pos++
    value(join(path, k))
    ws()
    c = substr(buf, pos, 1)
    pos++
    if (c == "}") return
    if (c != ",") { fail("expected \",\" or \"}\""); return }
  }
}

function array(path,   i, c) {
  pos++
  ws()
  if (substr(buf, pos, 1) == "]") { pos++; return }
  i = 0
  while (!failed) {
    value(join(path, i))
    i++
    ws()
    c = substr(buf, pos, 1)
    pos++
    if (c == "]") return
    if (c != ",") { fail("expected \",\" or \"]\""); return }
  }
}

{ buf = buf $0 "\n" }

END {
  n = length(buf)
  pos = 1
  failed = 0
  ws()
  if (pos > n) fail("empty document")
  else value("")
  ws()
  if (!failed && pos <= n) fail("trailing data")
  if (failed) exit 2
}
