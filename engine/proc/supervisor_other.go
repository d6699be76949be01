//go:build !linux

package proc

// supervised is false where there is no parent-death signal: Start starts
// commands directly, in a process group of their own.
const supervised = false
