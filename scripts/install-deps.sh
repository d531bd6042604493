#!/usr/bin/env bash
# Installs the Debian packages listed in deps/debian-packages.txt that are
# missing. Quiet when everything is present; needs root (or sudo) otherwise.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
list="${1:-$here/deps/debian-packages.txt}"
missing=()
while read -r pkg _; do
  [[ -z "$pkg" || "$pkg" == \#* ]] && continue
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done < "$list"
[[ ${#missing[@]} -eq 0 ]] && exit 0
echo "install-deps: installing ${missing[*]}" >&2
sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
