#!/usr/bin/env bash
# Checks the packaging where no Docker engine runs: docker-compose.yml against the Compose
# specification (Debian's docker-compose 1.29 validates a file offline, `config -q`),
# config/prometheus.yml and the alerting rules it loads (config/alerts.yml) with promtool
# (Debian's prometheus package), and runs the rules' unit tests (test/docs/alerts.test.yml). Installs
# the two packages where they are missing. Exits non-zero when a check fails.
# What the schema cannot see (services, ports, variables, mounted paths, the Dockerfile) is
# checked by test/e2e/packaging.test.ts.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[packaging] %s\n' "$*"; }

missing=()
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v promtool >/dev/null || missing+=(prometheus)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then log "need root to install ${missing[*]}"; exit 1; fi
  log "installing ${missing[*]}"
  # Only the tools are wanted: no recommended docker.io, and no daemon started by the
  # packages' init scripts (policy-rc.d 101 = "do not start", unless the machine has its own).
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

status=0

log "docker-compose.yml: $(docker-compose version --short) validating against the Compose specification"
if docker-compose --file docker-compose.yml config --quiet; then
  log "docker-compose.yml: valid"
else
  log "docker-compose.yml: INVALID"; status=1
fi
# The postgres profile's services are validated only when the profile is on.
if [ "$(docker-compose --file docker-compose.yml --profile postgres config --services | grep -cE '^(postgres|leaf-pg)$')" = 2 ] &&
  docker-compose --file docker-compose.yml --profile postgres config --quiet; then
  log "docker-compose.yml --profile postgres: valid"
else
  log "docker-compose.yml --profile postgres: INVALID"; status=1
fi

log "config/prometheus.yml: $(promtool --version 2>&1 | head -n 1)"
if promtool check config config/prometheus.yml; then
  log "config/prometheus.yml: valid"
else
  log "config/prometheus.yml: INVALID"; status=1
fi

log "config/alerts.yml: promtool check rules, then its unit tests (test/docs/alerts.test.yml)"
if promtool check rules config/alerts.yml && promtool test rules test/docs/alerts.test.yml; then
  log "config/alerts.yml: valid, unit tests pass"
else
  log "config/alerts.yml: INVALID or a unit test FAILED"; status=1
fi

exit "$status"
