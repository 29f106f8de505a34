// Package check tests deploy/kubernetes: every manifest decodes strictly
// into its typed Kubernetes object, and the objects agree with each other,
// with the troupe binary's flags, and with the certificates certs.sh
// issues. It is its own module so that the project's go.mod does not
// carry the Kubernetes API; it builds troupe from the main module.
//
//	cd deploy/kubernetes/check && go vet ./... && go test ./...
package check
