#!/usr/bin/env bash
# Generates Go code for every .proto under the given root (default plugin/proto),
# writing it next to its .proto file (paths=source_relative).
set -euo pipefail
root=${1:-plugin/proto}
export PATH="$(go env GOPATH)/bin:$PATH"
mapfile -t files < <(cd "$root" && find . -name '*.proto' | sed 's|^\./||' | sort)
[ ${#files[@]} -gt 0 ] || { echo "no .proto files under $root"; exit 0; }
(cd "$root" && protoc -I . \
	--go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative \
	"${files[@]}")
