#!/usr/bin/env bash
# Installs what `make test` needs, or stops at once saying what is missing and how to
# install it. Run by `make test` (and so by .ci/run): the README's test command works on a
# fresh Debian machine by itself.
#
#   python3-zeep, python3-spyne  real SOAP stacks (e2e/zeep_test.go), run with /usr/bin/python3
#   python3-suds                 a SOAP 1.1 client that reads a Fault on HTTP 500 only
#                                (e2e/gateway_faults_test.go)
#   prometheus (with promtool)   e2e/prometheus_test.go: dashboard, alert rules, /metrics lint
#   nginx                        the nginx-pair configuration of soapgw bench (internal/bench)
#   iproute2                     ip netns for the link emulator (internal/linkemu)
#   make                         this Makefile
set -euo pipefail

missing_apt=()
/usr/bin/python3 -c 'import zeep, spyne' 2>/dev/null || missing_apt+=(python3-zeep python3-spyne)
/usr/bin/python3 -c 'import suds' 2>/dev/null || missing_apt+=(python3-suds)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing_apt+=(nginx)
command -v ip >/dev/null || missing_apt+=(iproute2)
command -v make >/dev/null || missing_apt+=(make)
missing_prom=()
{ command -v prometheus >/dev/null && command -v promtool >/dev/null; } || missing_prom+=(prometheus)

if [ ${#missing_apt[@]} -eq 0 ] && [ ${#missing_prom[@]} -eq 0 ]; then
  exit 0
fi
all=("${missing_apt[@]}" "${missing_prom[@]}")
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "test-deps: installing ${all[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  if [ ${#missing_apt[@]} -gt 0 ]; then
    apt-get install -y -qq "${missing_apt[@]}" >/dev/null
  fi
  if [ ${#missing_prom[@]} -gt 0 ]; then
    # Without recommends: no node exporter; the test runs its own Prometheus.
    apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  fi
  exit 0
fi
{
  echo "test-deps: the tests need packages that are not installed: ${all[*]}"
  echo "Install them (Debian/Ubuntu) with:"
  echo "  sudo apt-get update"
  [ ${#missing_apt[@]} -eq 0 ] || echo "  sudo apt-get install -y ${missing_apt[*]}"
  [ ${#missing_prom[@]} -eq 0 ] || echo "  sudo apt-get install -y --no-install-recommends prometheus"
  echo "or run \`make test\` as root on Debian, and it installs them itself."
} >&2
exit 1
