#!/usr/bin/env bash
# The dashboard's charting library, uPlot (MIT), is vendored (the page is served with no CDN, under a
# Content-Security-Policy that allows only its own scripts). This re-fetches the pinned version from the
# npm registry and checks the bytes against consumers/dashboard/vendor/SHA256SUMS:
#   scripts/vendor-charts.sh            fetch, check the fetched files and the vendored ones against the sums
#   scripts/vendor-charts.sh --update   fetch, check the fetched files against the sums, copy them in
# To move to another version: set VERSION, run with --update-sums (writes the new sums), review the diff.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=1.6.32
VENDOR=$PWD/consumers/dashboard/vendor
mode=${1:-check}
case "$mode" in check|--update|--update-sums) ;; *)
  echo "usage: scripts/vendor-charts.sh [--update | --update-sums]" >&2; exit 2 ;;
esac

command -v npm >/dev/null || { echo "error: npm is needed to fetch uplot@$VERSION" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# npm pack checks the tarball against the registry's integrity hash (sha512) as it downloads it.
(cd "$work" && npm pack --silent "uplot@$VERSION" >/dev/null && tar xzf "uplot-$VERSION.tgz")
mkdir -p "$work/files"
cp "$work/package/dist/uPlot.iife.min.js" "$work/package/dist/uPlot.min.css" "$work/files/"
cp "$work/package/LICENSE" "$work/files/uPlot.LICENSE"
grep -q "(v$VERSION)" "$work/files/uPlot.iife.min.js" || { echo "error: not uPlot v$VERSION" >&2; exit 1; }

case "$mode" in
  --update-sums)
    (cd "$work/files" && sha256sum uPlot.iife.min.js uPlot.min.css uPlot.LICENSE) > "$VENDOR/SHA256SUMS"
    cp "$work/files/"* "$VENDOR/"
    echo "vendored uplot@$VERSION and wrote new sums: review git diff consumers/dashboard/vendor"
    ;;
  --update)
    (cd "$work/files" && sha256sum --check --quiet "$VENDOR/SHA256SUMS")
    cp "$work/files/"* "$VENDOR/"
    echo "vendored uplot@$VERSION: the npm bytes match $VENDOR/SHA256SUMS"
    ;;
  check)
    (cd "$work/files" && sha256sum --check --quiet "$VENDOR/SHA256SUMS")
    (cd "$VENDOR" && sha256sum --check --quiet SHA256SUMS)
    echo "ok: uplot@$VERSION from npm and the vendored files match $VENDOR/SHA256SUMS"
    ;;
esac
