// Package svcx is the plumbing of a service.Node that only the SDK's own
// packages use: package servicetest pauses a node's handlers through it,
// package dashboard tells a leave from an eviction.
// Package service installs its hooks when it is initialized.
package svcx

import "context"

// SetGate makes every handler of node (a *service.Node) call gate once
// the node's checks passed (it serves, its lease holds, it owns the
// resource), just before the service's handler runs; nil removes it. A
// gate that blocks stands for a process paused at that instant: the
// handler runs once it returns, with what the node decided before. An
// error from gate fails the message with it instead. Set by package
// service.
var SetGate func(node any, gate func(ctx context.Context) error)

// SaidGoodbye reports whether member's last life, as node (a
// *service.Node) saw it, ended in a goodbye (an orderly leave) rather
// than an eviction. Set by package service.
var SaidGoodbye func(node any, member string) bool
