#!/usr/bin/env bash
# Builds Tideline's images with no registry but Debian's, PyPI and Maven Central:
#   1. the base: Debian bookworm from Debian's own packages (mmdebstrap), imported and tagged
#      localhost/tideline-base:bookworm (once; `--rebase` makes it again);
#   2. docker/Dockerfile's targets kafka, airflow and postgres, tagged localhost/tideline-<target>:<version>
#      and :latest (the version is the wheel's, plugins/tideline/__init__.py).
# ENGINE=docker uses Docker instead of podman. Unchanged layers are reused: after a code change
# only the wheel and what follows it are built again.
set -euo pipefail
cd "$(dirname "$0")/.."
ENGINE="${ENGINE:-podman}"
BASE=localhost/tideline-base:bookworm
VERSION="$(sed -nE 's/^__version__ = "([^"]+)"/\1/p' plugins/tideline/__init__.py)"
if [[ "${1:-}" == "--rebase" ]] || ! "$ENGINE" image inspect "$BASE" >/dev/null 2>&1; then
  tar="$(mktemp -d)/base.tar"
  echo "== base image: mmdebstrap --variant=minbase bookworm -> $BASE"
  mmdebstrap --quiet --variant=minbase bookworm "$tar"
  "$ENGINE" import --quiet "$tar" "$BASE" >/dev/null
  rm -rf "$(dirname "$tar")"
fi
# the CAs this host trusts beyond Debian's own (EXTRA_CA_CERTS=file.pem names others): the builds
# reach PyPI and Maven Central through whatever this host reaches them through
ca_dir=docker/build-ca
rm -f "$ca_dir"/*.crt
python3 - "$ca_dir" "${EXTRA_CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}" <<'PY'
import glob, re, sys
from pathlib import Path
pem = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", re.S)
debian = {c for f in glob.glob("/usr/share/ca-certificates/**/*.crt", recursive=True) for c in pem.findall(Path(f).read_text())}
extra = [c for c in pem.findall(Path(sys.argv[2]).read_text()) if c not in debian]
for i, cert in enumerate(extra):
    Path(sys.argv[1], f"build-{i}.crt").write_text(cert + "\n")
print(f"== {len(extra)} CA certificate(s) beyond Debian's from {sys.argv[2]}")
PY
for target in postgres kafka airflow; do
  echo "== image tideline-$target:$VERSION"
  "$ENGINE" build --quiet --build-arg "BASE=$BASE" --target "$target" \
    -f docker/Dockerfile -t "localhost/tideline-$target:$VERSION" -t "localhost/tideline-$target:latest" . >/dev/null
done
