// Package e2e holds the end-to-end test of following an apt archive: a
// kernel published in a signed apt archive on loopback, its driver cell
// built and pushed to a registry by one cycle, and a VM booted from a
// kpreload image that installs the kernel with apt and comes up on it with
// its driver bound (TestFollowE2E). It has no code outside its tests.
package e2e
