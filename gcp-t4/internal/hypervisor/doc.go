// Package hypervisor is the kata remote-hypervisor protocol that the kata
// shim speaks to the cloud-api-adaptor over ttrpc on a unix socket.
//
// kata's own Go package for it is not on the module proxy, so the protocol
// is defined here again, wire-compatible with kata's hypervisor.proto, and
// the Go code is generated with protoc-gen-go and containerd's
// protoc-gen-go-ttrpc. Edit hypervisor.proto, then run go generate; the
// generated files are committed, and `make lint`
// (scripts/lint/check-generated.sh) fails when they are stale.
package hypervisor

//go:generate ./generate.sh
