#!/usr/bin/env bash
# Prints the Debian mirror this machine's apt configuration takes bookworm's `main` packages from
# (the site of its first such package index, as `apt-get indextargets` lists it), for the recipes
# that fetch Debian sources (share/scripts/kokkos-openmp.sh). The repository names no package host:
# a cluster's machines reach their own mirror, which only their apt configuration knows.
#
# apt lists an index only once its lists are downloaded; where they are not (a fresh container),
# the machine's sources are updated into a private lists folder first, so /var/lib/apt is never
# written (the same isolation as the recipe's own fetch).
#
# Exit codes: 0 the mirror printed on stdout; 3 apt's configuration names no bookworm `main` index
# (or apt-get cannot read it): a message on stderr says what was looked for and how to add one.
# APT_CONFIG is honoured as apt honours it (the tests point it at an empty configuration).
set -euo pipefail

# The site of the first Debian bookworm main package index; extra arguments go to apt-get.
first_site() {
  apt-get "$@" indextargets --format '$(SITE)' 'Identifier: Packages' 'Origin: Debian' 'Codename: bookworm' \
    'Component: main' 2>/dev/null | head -n 1 || true
}

mirror=$(first_site)
if [[ -z $mirror ]]; then
  lists=$(mktemp -d /var/tmp/meshtrain-apt-lists.XXXXXX)
  trap 'rm -rf "$lists"' EXIT
  chmod 755 "$lists"
  mkdir -p "$lists/partial"
  # apt downloads as the unprivileged _apt user where it exists: let it write here.
  if [[ $(id -u) -eq 0 ]] && id _apt >/dev/null 2>&1; then chown -R _apt "$lists"; fi
  apt-get -o "Dir::State::Lists=$lists" -qq update >/dev/null 2>&1 || true
  mirror=$(first_site -o "Dir::State::Lists=$lists")
fi
if [[ -z $mirror ]]; then
  cat >&2 <<'EOF'
debian-mirror: apt's configuration names no package index of Debian bookworm, component main
  (looked for with: apt-get indextargets 'Identifier: Packages' 'Origin: Debian' 'Codename: bookworm'
  'Component: main', after an update of its sources into a private lists folder). Add the site's
  Debian mirror for bookworm main to /etc/apt/sources.list or /etc/apt/sources.list.d/, run
  apt-get update, and run this again.
EOF
  exit 3
fi
echo "$mirror"
