#!/usr/bin/env bash
# Regenerates the protobuf code into a scratch copy and fails if it differs
# from what is committed. Needs protoc (Debian's protobuf-compiler).
set -euo pipefail
command -v protoc >/dev/null || { echo "protoc not found: skipping the generated-code check (apt-get install protobuf-compiler)"; exit 0; }
[ -d plugin/proto ] || exit 0
go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp -r plugin/proto "$tmp/proto"
find "$tmp/proto" -name '*.pb.go' -delete
./scripts/gen-proto.sh "$tmp/proto" >/dev/null
if ! diff -r -q plugin/proto "$tmp/proto" >/dev/null; then
	echo "generated protobuf code is out of date: run 'make proto' and commit"
	diff -r plugin/proto "$tmp/proto" | head -20
	exit 1
fi
