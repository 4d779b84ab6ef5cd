// Package nodekit runs a production management node of any set of
// services: the one way to turn services into a program that is safe to
// run, as refnode serve does.
package nodekit
