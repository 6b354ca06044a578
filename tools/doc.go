// Package tools pins the development tools of the Coffer workspace through Go tool directives
// (see go.mod). The wrapper modules under testbin/ build the binaries of the local cluster; they
// stay outside go.work because their replace blocks would conflict with the workspace.
package tools
