#!/bin/sh
# Smoke test: start server.py on a free port, run client.py and onewayclient.py
# directly, check their JSON and what the one-way operation recorded.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
TMP=$(mktemp -d)
SRV_PID=
cleanup() { [ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT INT TERM

"$PY" "$HERE/server.py" --host 127.0.0.1 --port 0 --record "$TMP/notify.jsonl" >"$TMP/server.out" 2>"$TMP/server.err" &
SRV_PID=$!
PORT=
for _ in $(seq 1 100); do   # up to 10 s
  PORT=$(sed -n 's/^READY \([0-9][0-9]*\)$/\1/p' "$TMP/server.out")
  [ -n "$PORT" ] && break
  kill -0 "$SRV_PID" 2>/dev/null || break
  sleep 0.1
done
[ -n "$PORT" ] || { echo "selftest: server did not become READY" >&2; cat "$TMP/server.err" >&2; exit 1; }

"$PY" "$HERE/client.py" --wsdl "http://127.0.0.1:$PORT/?wsdl" >"$TMP/client.json" 2>"$TMP/client.err"
RC=$?
[ "$RC" -eq 0 ] || { echo "selftest: client.py exit $RC" >&2; cat "$TMP/client.err" "$TMP/server.err" >&2; exit 1; }

"$PY" - "$TMP/client.json" <<'PYEOF' || { cat "$TMP/server.err" >&2; exit 1; }
import json, sys
r = json.load(open(sys.argv[1]))["results"]
ok = True
def check(cond, what):
    global ok
    if not cond:
        ok = False
        print("selftest: FAIL:", what, file=sys.stderr)
check(r["echo_non_ascii"] == {"result": "Grüße, 東京, Ελλάδα, emoji 🚀"}, "non-ASCII echo")
check(r["echo_empty"] == {"result": None}, "empty echo (zeep maps <x></x> to None)")
check(r["echo_100k"]["result"]["equals_input"] is True and r["echo_100k"]["result"]["len"] == 102400, "100K echo")
check(r["add"] == {"result": 42}, "add(2,40)")
e = r["calendar_entries"]["result"]
check(len(e) == 1000 and e[0]["slot"] == 0 and e[999]["slot"] == 999
      and e[0]["start"] == "2024-01-01T08:00:00+00:00", "calendar_entries(1000)")
check(r["fail"] == {"fault": {"code": "soap11env:Client.Rejected", "message": "soapgw e2e"}}, "fault")
sys.exit(0 if ok else 1)
PYEOF
"$PY" "$HERE/onewayclient.py" --wsdl "http://127.0.0.1:$PORT/?wsdl" --calls 3 >"$TMP/oneway.json" 2>"$TMP/oneway.err"
RC=$?
[ "$RC" -eq 0 ] || { echo "selftest: onewayclient.py exit $RC" >&2; cat "$TMP/oneway.err" "$TMP/server.err" >&2; exit 1; }

"$PY" - "$TMP/oneway.json" "$TMP/notify.jsonl" <<'PYEOF' || { cat "$TMP/server.err" >&2; exit 1; }
import json, sys
r = json.load(open(sys.argv[1]))
rec = [json.loads(l) for l in open(sys.argv[2])]
ok = True
def check(cond, what):
    global ok
    if not cond:
        ok = False
        print("selftest: FAIL:", what, file=sys.stderr)
check(r["notify_output_in_wsdl"] is False, "notify is one-way in the WSDL")
check([n["result"] for n in r["notify"]] == [None] * 3, "zeep returns None for notify")
check([n["status"] for n in r["notify"]] == [200] * 3, "spyne answers notify 200 (an empty notifyResponse)")
check(rec == [n["text"] for n in r["notify"]], "notify recorded each text once, in order")
check(r["echo"]["result"] == r["echo"]["text"] and r["echo"]["status"] == 200, "echo")
sys.exit(0 if ok else 1)
PYEOF
echo "selftest: OK (port $PORT)"
