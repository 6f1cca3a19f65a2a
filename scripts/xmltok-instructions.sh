#!/bin/bash
# Instructions per message of the xmltok token codec, per family direction: a measure that,
# unlike MB/s on a shared or virtual machine, gives the same figure on every run (within
# ~2%), for comparing two versions of the models. Only the instructions inside the measured
# loops of TestInstructionHarness (instrEncodeLoop, instrDecodeLoop) are counted, so the
# warm-up and the process around them do not blur small messages. Needs valgrind
# (apt-get install valgrind).
#
#   scripts/xmltok-instructions.sh [family-direction...]   (default: a representative set)
#
# Set PGO=off to compile without cmd/soapgw/default.pgo.
set -euo pipefail
cd "$(dirname "$0")/.."
sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(stress-request fixml-request weather-detailed-response northwind-response charging-request)
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind" >&2; exit 1; }
bin=$(mktemp -d)/xmltok.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -pgo="${PGO:-$PWD/cmd/soapgw/default.pgo}" -o "$bin" ./internal/codec/xmltok/
count() { # set op r
	local fn=instrDecodeLoop
	[ "$2" = enc ] && fn=instrEncodeLoop
	XMLTOK_INSTR_SET=$1 XMLTOK_INSTR_OP=$2 XMLTOK_INSTR_R=$3 GOGC=off GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 \
		valgrind --tool=callgrind --toggle-collect="*xmltok.$fn" --callgrind-out-file=/dev/null \
		"$bin" -test.run '^TestInstructionHarness$' 2>&1 | sed -n 's/.*Collected *: *\([0-9,]*\).*/\1/p' | tr -d ,
}
r=200
printf '%-28s %14s %14s\n' "set" "encode" "decode"
for s in "${sets[@]}"; do
	line=$(printf '%-28s' "$s")
	for op in enc dec; do
		line+=$(printf ' %14d' $(($(count "$s" $op $r) / r)))
	done
	echo "$line"
done
